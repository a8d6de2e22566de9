"""Plans that cannot be are refused exactly: tiling with no gap or overlap for row, column and grid splits,
shapes that match the sharding type, no repeated data-parallel rank, no empty shard but a row split's tail."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ConfigError, evaluate, parse_config, parse_plan
from engine.geometry import row_split
from engine.tiling import tiling_problem
from tests.factories import EXAMPLES, tutorial

CFG = parse_config(tutorial())


def plan_of(sharding_type: str) -> dict:
    from engine import plan

    return json.loads(json.dumps({n: {"sharding_type": tp.sharding_type.value, "compute_kernel":
                                      tp.compute_kernel.value, "ranks": list(tp.ranks),
                                      "shards": None if tp.shards is None else
                                      [{"offsets": list(s.offsets), "sizes": list(s.sizes), "rank": s.rank}
                                       for s in tp.shards]}
                                  for n, tp in plan(parse_config(tutorial(sharding_type))).tables.items()}))


def refused(data: dict, *words: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse_plan(data, CFG)
    for w in words:
        assert w in str(e.value)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_four_shards_right_area_two_overlapping_one_region_uncovered():
    data = plan_of("table_wise")
    data["large_table_0"] = {"sharding_type": "column_wise", "compute_kernel": "fused", "ranks": [0, 1, 0, 1],
                             "shards": [{"offsets": [0, 0], "sizes": [4096, 16], "rank": 0},
                                        {"offsets": [0, 16], "sizes": [4096, 16], "rank": 1},
                                        {"offsets": [0, 16], "sizes": [4096, 16], "rank": 0},  # overlaps the 2nd
                                        {"offsets": [0, 48], "sizes": [4096, 16], "rank": 1}]}  # 32..47 uncovered
    refused(data, "plan.large_table_0.shards", "do not tile the table exactly", "columns 32..47")


def test_overlap_in_a_row_split_names_both_shards():
    data = plan_of("row_wise")
    shards = data["large_table_0"]["shards"]
    shards[1]["offsets"] = [2000, 0]
    shards[1]["sizes"] = [2096, 64]
    shards[0]["sizes"] = [2048, 64]
    refused(data, "shard 1 overlaps shard 0")


def test_gap_in_a_row_split():
    data = plan_of("row_wise")
    data["large_table_0"]["shards"][0]["sizes"] = [2000, 64]
    refused(data, "rows 2000..2047 of columns 0..63 are not covered")


@pytest.mark.parametrize("ranks,words", [([0, 0], "lists rank 0 twice"), ([0] * 1000, "lists 1,000 ranks"),
                                         ([2], "from 0 to 1"), ([], "non-empty")])
def test_data_parallel_ranks_once_each_inside_the_world(ranks, words):
    data = plan_of("data_parallel")
    data["large_table_0"]["ranks"] = ranks
    refused(data, "plan.large_table_0.ranks", words)


def test_data_parallel_copy_is_charged_once_per_rank():
    stats = evaluate(CFG, parse_plan(plan_of("data_parallel"), CFG))
    weights = sum(t.weight_bytes for t in CFG.tables)
    assert all(r.hbm_bytes < 2 * weights for r in stats.ranks)


@pytest.mark.parametrize("sharding_type,shard,words", [
    ("column_wise", {"offsets": [0, 64], "sizes": [4096, 0], "rank": 0}, "is empty"),
    ("table_wise", {"offsets": [0, 0], "sizes": [0, 0], "rank": 1}, "one shard, got 2"),
    ("row_wise", {"offsets": [0, 0], "sizes": [0, 64], "rank": 1}, "is empty"),
])
def test_empty_shards_are_refused(sharding_type, shard, words):
    data = plan_of(sharding_type)
    data["large_table_0"]["shards"].append(shard)
    refused(data, words)


def test_a_row_splits_empty_tail_is_torchrecs_and_accepted():
    cfg = parse_config({"tables": [{"name": "t", "num_embeddings": 5, "embedding_dim": 8}],
                        "topology": {"world_size": 4}})
    sizes = row_split(5, 4)
    assert list(sizes) == [2, 2, 1, 0]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    shards = [{"offsets": [int(o), 0], "sizes": [int(s), 8], "rank": r} for r, (o, s) in enumerate(zip(starts, sizes))]
    parsed = parse_plan({"t": {"sharding_type": "row_wise", "compute_kernel": "fused", "shards": shards}}, cfg)
    assert len(parsed["t"].shards) == 4


@pytest.mark.parametrize("sharding_type,shard,words", [
    ("row_wise", {"offsets": [0, 0], "sizes": [2048, 32], "rank": 0}, "hold whole rows"),
    ("column_wise", {"offsets": [0, 0], "sizes": [2048, 32], "rank": 0}, "hold whole columns"),
])
def test_shards_have_the_shape_of_their_sharding_type(sharding_type, shard, words):
    data = plan_of(sharding_type)
    data["large_table_0"]["shards"][0] = shard
    refused(data, "plan.large_table_0.shards[0]", words)


def test_offsets_past_the_table_and_huge_numbers_are_one_line():
    data = plan_of("row_wise")
    data["large_table_0"]["shards"][0]["offsets"] = [10**30, 0]
    refused(data, "plan.large_table_0.shards[0].offsets[0]", "from 0 to 4,096", "1e+30")


# ---- the tiling check itself, on random grids ----------------------------------------------------


@st.composite
def grids(draw):
    """A random exact grid tiling: row cuts x column cuts, each cell one shard."""
    rows, cols = draw(st.integers(1, 60)), draw(st.integers(1, 60))
    rc = sorted(draw(st.sets(st.integers(1, rows - 1), max_size=5))) if rows > 1 else []
    cc = sorted(draw(st.sets(st.integers(1, cols - 1), max_size=5))) if cols > 1 else []
    r_edges, c_edges = [0, *rc, rows], [0, *cc, cols]
    cells = [((r_edges[i], c_edges[j]), (r_edges[i + 1] - r_edges[i], c_edges[j + 1] - c_edges[j]))
             for i in range(len(r_edges) - 1) for j in range(len(c_edges) - 1)]
    order = draw(st.permutations(range(len(cells))))
    return rows, cols, [cells[k] for k in order]


def _arrays(cells):
    return np.array([c[0] for c in cells], dtype=np.int64), np.array([c[1] for c in cells], dtype=np.int64)


def _covers_exactly(rows, cols, cells) -> bool:
    grid = np.zeros((rows, cols), dtype=int)
    for (r, c), (h, w) in cells:
        grid[r:r + h, c:c + w] += 1
    return bool((grid == 1).all()) and all(r + h <= rows and c + w <= cols for (r, c), (h, w) in cells)


@settings(max_examples=300, deadline=None)
@given(grids())
def test_exact_grids_are_accepted(g):
    rows, cols, cells = g
    assert tiling_problem(*_arrays(cells), rows, cols) is None


@settings(max_examples=400, deadline=None)
@given(grids(), st.data())
def test_the_check_agrees_with_painting_every_cell(g, data):
    """Move, grow or shrink one shard: the check refuses exactly when painting the cells finds a gap/overlap."""
    rows, cols, cells = g
    k = data.draw(st.integers(0, len(cells) - 1))
    (r, c), (h, w) = cells[k]
    dr, dc, dh, dw = (data.draw(st.integers(-3, 3)) for _ in range(4))
    cells[k] = ((max(0, r + dr), max(0, c + dc)), (max(1, h + dh), max(1, w + dw)))
    problem = tiling_problem(*_arrays(cells), rows, cols)
    assert (problem is None) == _covers_exactly(rows, cols, cells), problem


def test_examples_still_read():
    for name in ("table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "data_parallel"):
        cfg = parse_config(json.loads((EXAMPLES / f"tutorial_{name}.json").read_text()))
        assert parse_plan(plan_of(name), cfg)


def test_a_rank_of_a_plan_file_reads_as_rank_stats() -> None:
    """engine.read_rank_stats: what plan_to_dict writes reads back; a figure the file lacks is 0; the memory parts
    flat (memory_<part>) or nested ("memory": {...}); none: None."""
    from engine.planfile import MEMORY_PREFIX, PERF_KEYS, read_rank_stats

    assert PERF_KEYS["fwd_compute"] == "fwd_compute_ms" and len(PERF_KEYS) == 6
    bare = read_rank_stats({"rank": 3, "hbm_bytes": True, "fwd_compute_ms": 1.5})
    assert (bare.rank, bare.hbm_bytes, bare.perf.fwd_compute, bare.memory) == (3, 0, 1.5, None)
    flat = read_rank_stats({"rank": 0, f"{MEMORY_PREFIX}weights_bytes": 7})
    nested = read_rank_stats({"rank": 0, "memory": {"weights_bytes": 7}})
    assert flat.memory == nested.memory and flat.memory.weights_bytes == 7 and flat.memory.peak_bytes == 0
