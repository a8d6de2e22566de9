"""Any plan scored by TorchRec 1.8's own estimator (engine.torchrec_costs.torchrec_rank_costs): TorchRec's plans get
exactly the per-rank figures its planner balanced, ours get a figure for every rank, and where the two estimators
agree (docs/estimator.md) so do the scores."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from bench.suite import synthetic
from engine.types import ComputeKernel, Shard, ShardingType, TablePlan
from tests.factories import EXAMPLES, tutorial

pytest.importorskip("torchrec")

from torchrec.distributed.planner.types import Stats  # noqa: E402

from engine.torchrec_compat import (  # noqa: E402
    from_sharding_plan,
    torchrec_plan,
    torchrec_sharding_plan,
)
from engine.torchrec_costs import torchrec_rank_costs  # noqa: E402

CONFIGS = {  # small, so that TorchRec's planner runs in seconds here
    "tutorial": lambda: tutorial(),
    "synthetic cuda 12x4": lambda: synthetic(12, 4, seed=2, max_rows=2e5, local_world_size=2),
    "synthetic cpu 10x4": lambda: synthetic(10, 4, seed=3, max_rows=1e5, batch_size=128, device="cpu"),
}


class RankPerf(Stats):
    """TorchRec's planner's own per-rank figure for its chosen plan: the shards' Perf.total summed per rank, the
    sum its GreedyPerfPartitioner balances (device.perf += shard.perf)."""

    def __init__(self) -> None:
        self.per_rank: np.ndarray | None = None

    def log(self, sharding_plan, topology, batch_size, storage_reservation, num_proposals, num_plans, run_time,
            best_plan, constraints=None, sharders=None, enumerator=None, debug=False, debug_stats=None) -> None:
        self.per_rank = np.zeros(len(topology.devices))
        for so in best_plan:
            for shard in so.shards:
                self.per_rank[shard.rank] += shard.perf.total


@pytest.mark.parametrize("name", list(CONFIGS))
def test_torchrecs_plan_scores_as_torchrecs_planner_priced_it(name):
    cfg = engine.parse_config(CONFIGS[name]())
    seen = RankPerf()
    tables = from_sharding_plan(cfg, torchrec_sharding_plan(cfg, stats=[seen]))
    plan = torchrec_plan(cfg)
    assert plan.tables == tables  # the planner is deterministic: torchrec_plan's plan is the one seen
    costs = torchrec_rank_costs(cfg, plan)
    assert seen.per_rank is not None and seen.per_rank.max() > 0
    np.testing.assert_allclose(costs, seen.per_rank, rtol=1e-9, atol=0)


@pytest.mark.parametrize("name", [p.stem for p in sorted(EXAMPLES.glob("tutorial*.json"))] + list(CONFIGS)[1:])
def test_our_plan_is_priced_for_every_table_and_rank(name):
    data = CONFIGS[name]() if name in CONFIGS else tutorial(name.removeprefix("tutorial").lstrip("_") or None)
    cfg = engine.parse_config(data)
    plan = engine.plan(cfg)
    costs = torchrec_rank_costs(cfg, plan)
    assert costs.shape == (cfg.topology.world_size,)
    assert np.isfinite(costs).all() and (costs >= 0).all() and costs.max() > 0
    # torchrec_rank_costs refuses a plan with a table it cannot price; each rank holding a piece pays for it
    holding = {s.rank for tp in plan.tables.values() for s in (tp.shards or ()) if s.sizes[0] * s.sizes[1]}
    holding |= {r for tp in plan.tables.values() if tp.shards is None for r in tp.ranks}
    assert all(costs[r] > 0 for r in holding)


def table_wise_config() -> engine.Config:
    data = synthetic(10, 4, seed=5, max_rows=5e5, local_world_size=2)  # two hosts
    for c in data["constraints"].values():
        c["sharding_types"] = ["table_wise"]
    return engine.parse_config(data)


@pytest.mark.parametrize("cfg", [engine.parse_config(tutorial("table_wise")), table_wise_config()],
                         ids=["tutorial", "synthetic 2 hosts"])
def test_table_wise_plans_cost_the_same_under_both_estimators(cfg):
    """CUDA, unweighted, sgd, table_wise: no deliberate difference applies (docs/estimator.md), so each rank's
    TorchRec score is ours less the input distribution, which TorchRec's Perf.total leaves out."""
    plan = engine.plan(cfg)
    assert {tp.sharding_type for tp in plan.tables.values()} == {ShardingType.TABLE_WISE}
    ours = np.array([r.perf.total - r.perf.input_dist_comms for r in plan.ranks])
    assert all(r.perf.input_dist_comms > 0 for r in plan.ranks if r.num_shards)
    np.testing.assert_allclose(torchrec_rank_costs(cfg, plan), ours, rtol=1e-9, atol=0)


def test_a_split_torchrec_does_not_enumerate_is_refused_naming_the_table():
    cfg = engine.parse_config(tutorial("column_wise"))
    plan = dict(engine.plan(cfg).tables)
    rows = cfg.table("large_table_1").num_embeddings
    plan["large_table_1"] = TablePlan(ShardingType.COLUMN_WISE, ComputeKernel.FUSED, (0, 1),
                                      (Shard((0, 0), (rows, 48), 0), Shard((0, 48), (rows, 16), 1)))
    with pytest.raises(engine.PlanningError, match="large_table_1") as e:
        torchrec_rank_costs(cfg, plan)
    assert e.value.tables == ("large_table_1",) and "What would help" in str(e.value)


def test_a_kernel_the_sharder_does_not_offer_is_refused_naming_the_table():
    cfg = engine.parse_config(CONFIGS["synthetic cpu 10x4"]())
    plan = dict(engine.plan(cfg).tables)
    plan["t3"] = TablePlan(ShardingType.TABLE_WISE, ComputeKernel.FUSED_UVM, (1,),
                           (Shard((0, 0), (cfg.table("t3").num_embeddings, cfg.table("t3").embedding_dim), 1),))
    with pytest.raises(engine.PlanningError, match="'t3'.*does not offer it on cpu"):
        torchrec_rank_costs(cfg, plan)
