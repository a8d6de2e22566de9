"""engine.stats against a direct count: every statistic of a generated sample recomputed here in plain Python
from the file as pyarrow reads it (a naive OrderedDict LRU for the miss curve)."""

from __future__ import annotations

import math
from collections import Counter, OrderedDict

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine import atomicfile
from engine.config import parse_config
from engine.planfile import parse_plan
from engine.stats.compute import workload_stats
from engine.stats.sample import SampleError
from engine.stats.counts import IdCounter
from engine.stats.generate import to_bytes
from engine.stats.lru import cache_sizes
from engine.stats.replay import Background, ExactReplay, bucket_counts, bucket_table

CONFIG = {
    "tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 16, "feature_names": ["a", "b"]},
               {"name": "t1", "num_embeddings": 50, "embedding_dim": 8, "feature_names": ["c"]},
               {"name": "t2", "num_embeddings": 200, "embedding_dim": 8, "feature_names": ["d"],
                "data_type": "fp16"}],
    "topology": {"world_size": 2, "local_world_size": 2, "batch_size": 32},
}
PLAN = {"plan": {
    "t0": {"sharding_type": "row_wise", "compute_kernel": "fused", "ranks": [0, 1],
           "shards": [{"offsets": [0, 0], "sizes": [500, 16], "rank": 0},
                      {"offsets": [500, 0], "sizes": [500, 16], "rank": 1}]},
    "t1": {"sharding_type": "data_parallel", "compute_kernel": "dense", "ranks": [0, 1], "shards": None},
    "t2": {"sharding_type": "column_wise", "compute_kernel": "fused", "ranks": [0, 1],
           "shards": [{"offsets": [0, 0], "sizes": [200, 4], "rank": 0},
                      {"offsets": [0, 4], "sizes": [200, 4], "rank": 1}]}}}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    cfg = parse_config(CONFIG)
    path = tmp_path_factory.mktemp("stats") / "sample.parquet"
    atomicfile.write_bytes(path, to_bytes(cfg, 2000, seed=7, fmt="parquet"))
    columns = pq.read_table(path).to_pydict()
    return cfg, path, columns


def nearest(values: list, q: float):
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def reference_feature(cells: list[list[int]]) -> dict:
    lengths = [len(c) for c in cells]
    ids = [i for c in cells for i in c]
    counts = Counter(ids)
    freq = sorted(counts.values(), reverse=True)
    k = max(1, math.ceil(0.01 * len(freq)))
    ranks = sorted({int(r) for r in np.round(np.geomspace(1, len(freq), min(256, len(freq))))})
    xs = [math.log(r) for r in ranks]
    ys = [math.log(freq[r - 1]) for r in ranks]
    xm, ym = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - xm) * (y - ym) for x, y in zip(xs, ys)) / sum((x - xm) ** 2 for x in xs)
    rmse = math.sqrt(sum((y - ym - slope * (x - xm)) ** 2 for x, y in zip(xs, ys)) / len(xs))
    return {"samples": len(cells), "ids": len(ids), "pooling_factor": len(ids) / len(cells),
            "pooling_p50": nearest(lengths, 0.5), "pooling_p99": nearest(lengths, 0.99), "max_pooling": max(lengths),
            "empty_share": lengths.count(0) / len(cells), "unique_ids": len(counts),
            "top_1pct_share": sum(freq[:k]) / len(ids), "zipf_exponent": -slope, "zipf_fit_error": rmse}


def table_lookups(columns: dict, table: dict) -> list[list[int]]:
    """Each sample's rows of the table: its features' ids in order, folded by num_embeddings."""
    n = table["num_embeddings"]
    return [[i % n for f in table["feature_names"] for i in columns[f][s]] for s in range(len(columns["a"]))]


def lru_misses(seq: list[int], size: int) -> int:
    cache: OrderedDict = OrderedDict()
    misses = 0
    for x in seq:
        if x in cache:
            cache.move_to_end(x)
        else:
            misses += 1
            cache[x] = None
            if len(cache) > size:
                cache.popitem(last=False)
    return misses


def test_every_feature_statistic_is_the_direct_count(sample):
    cfg, path, columns = sample
    got = workload_stats(cfg, path)["features"]
    for f in ("a", "b", "c", "d"):
        ref = reference_feature(columns[f])
        assert got[f].keys() == ref.keys()
        for key, value in ref.items():
            assert got[f][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (f, key)
    assert got["a"]["empty_share"] > 0 and got["a"]["zipf_exponent"] > 0.5  # a Zipf feature with empty bags
    assert got["b"]["zipf_exponent"] < 0.5  # a uniform one


def test_every_table_statistic_and_the_exact_miss_curve_are_the_direct_count(sample):
    cfg, path, columns = sample
    got = workload_stats(cfg, path)["tables"]
    for table in CONFIG["tables"]:
        per_sample = table_lookups(columns, table)
        seq = [r for s in per_sample for r in s]
        t = got[table["name"]]
        raw = [i for f in table["feature_names"] for c in columns[f] for i in c]
        assert t["lookups"] == len(seq) and t["unique_rows"] == len(set(seq))
        assert t["folded_ids"] == sum(i >= table["num_embeddings"] for i in raw) > 0
        batches = [len({r for s in per_sample[b:b + 32] for r in s}) for b in range(0, 2000 - 31, 32)]
        assert t["unique_rows_per_batch"] == {"batch_size": 32, "batches": len(batches), "partial": False,
                                              "mean": pytest.approx(sum(batches) / len(batches)),
                                              "p99": nearest(batches, 0.99)}
        assert t["miss_ratio_method"] == {"method": "exact"}
        sizes = [p["cache_rows"] for p in t["miss_ratio_curve"]]
        assert sizes == cache_sizes(table["num_embeddings"]) and len(sizes) >= 12
        assert sizes[0] == math.ceil(table["num_embeddings"] / 1000) and sizes[-1] == table["num_embeddings"]
        for point in t["miss_ratio_curve"]:
            assert point["lru_miss_rate"] == lru_misses(seq, point["cache_rows"]) / len(seq)


def test_working_set_per_rank_is_the_direct_count(sample):
    cfg, path, columns = sample
    plan = parse_plan(PLAN, cfg)
    ws = workload_stats(cfg, path, plan=plan)["working_set"]
    step = 2 * 32
    steps = 2000 // step
    lookups = {t["name"]: table_lookups(columns, t) for t in CONFIG["tables"]}
    expect = {0: [0.0] * steps, 1: [0.0] * steps}
    for s in range(steps):
        rows0 = {r for sample_rows in lookups["t0"][s * step:(s + 1) * step] for r in sample_rows}
        expect[0][s] += sum(r < 500 for r in rows0) * 16 * 4
        expect[1][s] += sum(r >= 500 for r in rows0) * 16 * 4
        rows2 = {r for sample_rows in lookups["t2"][s * step:(s + 1) * step] for r in sample_rows}
        for rank in (0, 1):
            expect[rank][s] += len(rows2) * 4 * 2  # fp16: 2 bytes, 4 columns per shard
            local = lookups["t1"][s * step + rank * 32:s * step + (rank + 1) * 32]
            expect[rank][s] += len({r for sample_rows in local for r in sample_rows}) * 8 * 4
    assert ws["steps"] == steps and ws["step_samples"] == step
    for r in ws["per_rank"]:
        v = expect[r["rank"]]
        assert r["mean_bytes"] == pytest.approx(sum(v) / steps)
        assert r["p99_bytes"] == nearest(v, 0.99) and r["max_bytes"] == max(v)


def naive_distances(rows: list[int]) -> list[int]:
    """The LRU stack distance of every lookup that repeats a row, by a list kept as the LRU stack."""
    stack: list[int] = []
    out = []
    for x in rows:
        if x in stack:
            out.append(len(stack) - 1 - stack.index(x))
            stack.remove(x)
        stack.append(x)
    return out


@pytest.mark.parametrize("sizes", [[1, 2, 3, 5, 8, 13, 21, 34, 55, 89], list(range(1, 120)), [40], [7, 7, 9]])
def test_bucket_counts_are_the_histogram_of_naive_distances(sizes):
    """bucket_counts settles most lookups after a few bits (the pruning): whatever the sizes (log-spaced, every
    size, one, repeated), its counts per bucket are those of the distances counted one by one."""
    rng = np.random.default_rng(len(sizes))
    for n in (1, 2, 9, 600, 5000):
        rows = np.where(rng.random(n) < 0.5, np.minimum(rng.zipf(1.2, n), 150), rng.integers(0, 150, n))
        order = np.argsort(rows, kind="stable")
        prev = np.full(n, -1)
        same = rows[order][1:] == rows[order][:-1]
        prev[order[1:][same]] = order[:-1][same]
        hit = np.flatnonzero(prev >= 0)
        sz = np.asarray(sizes)
        window = hit - prev[hit] - 1
        for limit in (10**9, int(window.max(initial=0))):  # every size, or only those a window reaches
            got = bucket_counts(prev[hit], window, bucket_table(sz, limit))
            want = np.bincount(np.searchsorted(sz, naive_distances(rows.tolist()), side="right"),
                               minlength=sz.size + 1)
            assert got.tolist() == want[: got.size].tolist() and want[got.size:].sum() == 0, (n, limit)


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 64, 1000, 1 << 22])
def test_the_streamed_exact_replay_is_a_brute_force_lru_whatever_the_chunks(chunk, dense, background):
    """ExactReplay replays chunk by chunk (the past kept as the LRU stack only): its misses at every size are an
    OrderedDict LRU's, on skewed and uniform rows, however the lookups are cut when added; rows kept by row
    (dense: below num_rows) or by a number given at first sight (large row numbers); replayed in the caller's
    thread or in a Background one."""
    rng = np.random.default_rng(chunk)
    for n, rows_max in ((0, 5), (1, 5), (40, 3), (700, 60), (3000, 400)):
        hot = np.minimum(rng.zipf(1.3, n), rows_max) - 1
        rows = np.where(rng.random(n) < 0.5, hot, rng.integers(0, rows_max, n)) * (1 if dense else 2**35)
        sizes = cache_sizes(rows_max)
        replay = ExactReplay(sizes, chunk, num_rows=rows_max if dense else None,
                             background=Background() if background else None)
        cuts = np.sort(rng.integers(0, n + 1, 6))
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, n]):
            replay.add(rows[a:b])
        seq = rows.tolist()
        assert replay.misses() == [lru_misses(seq, c) for c in sizes], (n, rows_max)
        assert [p["lru_miss_rate"] for p in replay.curve()] == [lru_misses(seq, c) / n if n else 0.0 for c in sizes]


def test_a_bad_row_past_the_first_chunks_stops_the_replay_thread(tmp_path):
    """The exact replay runs in a thread behind the reading: a sample refused at row 140,000 (a negative id, in
    the third chunk read, after millions of lookups were handed to the thread) raises its one line, and no replay
    thread is left running."""
    import threading

    import pyarrow as pa

    cfg = parse_config(CONFIG)
    rows, per = 150_000, 16
    offsets = pa.array(np.arange(0, rows * per + 1, per, dtype=np.int32))
    columns = {}
    for k, f in enumerate(["a", "b", "c", "d"]):
        values = (np.arange(rows * per, dtype=np.int64) * 7 + k) % 900
        if f == "b":
            values[140_000 * per] = -3
        columns[f] = pa.ListArray.from_arrays(offsets, pa.array(values))
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(SampleError, match=r"feature 'b' row 140,000: id -3 is negative"):
        workload_stats(cfg, path)
    assert not [t for t in threading.enumerate() if t.name == "lru-replay"]
    bg = Background()
    bg.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bg.wait()
    bg.wait()  # the error is raised once


def test_sampled_curve_says_so_and_is_within_two_points_of_the_exact_one(tmp_path):
    data = {"tables": [{"name": "big", "num_embeddings": 200_000, "embedding_dim": 8,
                        "feature_names": ["f0", "f1", "f2", "f3"]}], "topology": {"world_size": 1, "batch_size": 256}}
    cfg = parse_config(data)
    path = tmp_path / "s.parquet"
    atomicfile.write_bytes(path, to_bytes(cfg, 30_000, seed=11, fmt="parquet"))
    exact = workload_stats(cfg, path)["tables"]["big"]
    sampled = workload_stats(cfg, path, budget=100_000)["tables"]["big"]
    method = sampled["miss_ratio_method"]
    assert exact["miss_ratio_method"] == {"method": "exact"}
    assert method["method"] == "shards" and method["sampling_rate"] == 1 / 16
    assert 0 < method["error_bound"] < 0.1 and method["lookups_replayed"] <= 100_000
    assert exact["lookups"] > 800_000
    gaps = [abs(a["lru_miss_rate"] - b["lru_miss_rate"])
            for a, b in zip(exact["miss_ratio_curve"], sampled["miss_ratio_curve"])]
    assert max(gaps) <= min(0.02, method["error_bound"]), gaps
    assert {k: v for k, v in sampled.items() if not k.startswith("miss")} == \
        {k: v for k, v in exact.items() if not k.startswith("miss")}


@pytest.mark.parametrize("sizes, dense", [
    # dense; then an id past 16 times the ids read: sparse; past DENSE_MAX: sparse for good
    ([(1000, 5000), (2**20, 3000), (2**62, 2000), (50, 4000)], [True, False, False, False]),
    # dense, grown
    ([(100, 5000), (3000, 5000), (9000, 5000)], [True, True, True]),
    # a few ids over a large table: sparse; once enough ids are read, dense
    ([(2**22, 10), (2**22, 1000), (2**22, 3 * 10**6)], [False, False, True]),
])
def test_id_counter_counts_small_and_huge_ids_over_chunks(sizes, dense):
    rng = np.random.default_rng(5)
    counter, ref = IdCounter(), Counter()
    chunks = [rng.integers(0, top, n) for top, n in sizes] + [np.zeros(0, np.int64)]
    modes = []
    for c in chunks * 2:
        counter.add(c)
        ref.update(c.tolist())
        modes.append(counter.dense is not None)
    assert modes[:len(sizes)] == dense
    assert counter.dense is None or counter.dense.nbytes <= 64 * counter.total  # at most 64 bytes per id read
    ids, counts = counter.result()
    assert dict(zip(ids.tolist(), counts.tolist())) == ref and ids.tolist() == sorted(ref)


def test_the_files_bound_on_ids_is_read_before_the_file(sample, tmp_path):
    """ids_bound: a Parquet footer counts each feature's ids plus one slot per empty list; an NPZ its values; a CSV
    does not tell. A dotted feature name is matched whole. The sampled replay is skipped only under this bound."""
    import pyarrow as pa

    from engine.stats.sample import ids_bound

    cfg, path, columns = sample
    features = ("a", "b", "c", "d")
    bound = ids_bound(path, features)
    assert bound == {f: sum(len(c) or 1 for c in columns[f]) for f in features}
    for fmt in ("npz", "csv"):
        other = tmp_path / f"s.{fmt}"
        atomicfile.write_bytes(other, to_bytes(cfg, 2000, seed=7, fmt=fmt))
        got = ids_bound(other, features)
        assert got == ({f: sum(len(c) for c in columns[f]) for f in features} if fmt == "npz" else None)
    dotted = tmp_path / "dotted.parquet"
    pq.write_table(pa.table({"user.id": pa.array([[1, 2], [], [3]], pa.list_(pa.int64())),
                             "user": pa.array([[4], [5], [6]], pa.list_(pa.int64()))}), dotted)
    assert ids_bound(dotted, ("user.id", "user")) == {"user.id": 4, "user": 3}
