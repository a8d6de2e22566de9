"""The tutorial case: 2 tables of 4096x64 and 2 of 1024x64, SUM pooling, world size 2, one sharding type at
a time, must give exactly the plans the TorchRec tutorial prints."""

import pytest

from engine import parse_config, plan, torchrec_format
from engine.types import ShardingType
from tests.engine.tutorial_plans import TUTORIAL_PLANS
from tests.factories import SHARDING_TYPES, tutorial


def planned(sharding_type):
    cfg = parse_config(tutorial(sharding_type))
    return cfg, plan(cfg)


def shards(p, name):
    return [(list(s.offsets), list(s.sizes), s.rank) for s in p.tables[name].shards]


@pytest.mark.parametrize("sharding_type", sorted(TUTORIAL_PLANS))
def test_torchrec_text_equals_the_tutorial(sharding_type):
    cfg, p = planned(sharding_type)
    # The tutorial predates TorchRec's kernel rename: batched_fused is today's fused, batched_dense is dense.
    text = torchrec_format(p, cfg).replace("'fused'", "'batched_fused'").replace("'dense'", "'batched_dense'")
    assert text == "".join(TUTORIAL_PLANS[sharding_type])


def test_table_wise_puts_one_large_and_one_small_table_on_each_rank():
    _, p = planned("table_wise")
    assert {n: tp.ranks for n, tp in p.tables.items()} == {
        "large_table_0": (0,), "large_table_1": (1,), "small_table_0": (0,), "small_table_1": (1,)}
    assert shards(p, "large_table_0") == [([0, 0], [4096, 64], 0)]
    assert p.ranks[0].cost_ms == pytest.approx(p.ranks[1].cost_ms)


@pytest.mark.parametrize("sharding_type", ["row_wise", "table_row_wise"])
def test_row_splits_give_row_halves(sharding_type):
    _, p = planned(sharding_type)
    for i in range(2):
        assert shards(p, f"large_table_{i}") == [([0, 0], [2048, 64], 0), ([2048, 0], [2048, 64], 1)]
        assert shards(p, f"small_table_{i}") == [([0, 0], [512, 64], 0), ([512, 0], [512, 64], 1)]
        assert p.tables[f"large_table_{i}"].sharding_type.value == sharding_type


@pytest.mark.parametrize("sharding_type", ["column_wise", "table_column_wise"])
def test_column_splits_with_min_partition_32_give_two_halves(sharding_type):
    _, p = planned(sharding_type)
    for name, rows in [("large_table_0", 4096), ("large_table_1", 4096), ("small_table_0", 1024)]:
        assert shards(p, name) == [([0, 0], [rows, 32], 0), ([0, 32], [rows, 32], 1)]


def test_data_parallel_puts_every_table_on_both_ranks_without_shards():
    _, p = planned("data_parallel")
    for tp in p.tables.values():
        assert tp.sharding_type is ShardingType.DATA_PARALLEL
        assert tp.ranks == (0, 1) and tp.shards is None
        assert tp.compute_kernel.value == "dense"


@pytest.mark.parametrize("sharding_type", SHARDING_TYPES)
def test_every_tutorial_plan_keeps_both_ranks_equally_loaded(sharding_type):
    _, p = planned(sharding_type)
    assert p.ranks[0].cost_ms == pytest.approx(p.ranks[1].cost_ms)
    assert p.ranks[0].hbm_bytes == p.ranks[1].hbm_bytes > 0
    assert p.max_rank_cost_ms >= p.lower_bound_ms * (1 - 1e-9)


def test_free_choice_on_the_tutorial_reaches_the_lower_bound():
    cfg = parse_config(tutorial())
    p = plan(cfg)
    assert p.max_rank_cost_ms == pytest.approx(p.lower_bound_ms)
