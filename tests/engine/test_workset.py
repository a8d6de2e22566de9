"""The working-set terms of the CPU estimate: distinct rows a step touches (uniform and Zipf ids, against the
dry-run's own draws), the rank-level price of touching more than the cache holds, and a planner that sees it."""

from __future__ import annotations

import numpy as np
import pytest

from engine import constants as C
from engine import parse_config, plan
from engine.dryrun.workload import _ids
from engine.workset import rank_workset_ms
from engine.evaluate import evaluate
from engine.partition import Placement
from engine.types import ComputeKernel, Shard, ShardingType, TablePlan
from engine.workset import distinct_array, distinct_rows
from tests.factories import hand_option


@pytest.mark.parametrize("rows, ids, s", [(4096, 8192, 1.1), (100_000, 8192, 1.1), (500_000, 32_768, 0.8),
                                          (500_000, 32_768, 1.4), (3_000, 20_000, 0.5), (200_000, 100_000, 1.0),
                                          (50_000, 20_000, 0.0)])
def test_distinct_rows_match_the_dry_runs_draws(rows, ids, s):
    rng = np.random.default_rng(1)
    drawn = np.mean([len(np.unique(_ids(rng, ids, rows, s))) for _ in range(4)])
    assert distinct_rows(ids, rows, s) == pytest.approx(drawn, rel=0.02)


def test_distinct_rows_edges_and_arrays():
    assert distinct_rows(0, 100) == 0.0 and distinct_rows(10, 0) == 0.0
    assert distinct_rows(1e9, 100) == pytest.approx(100.0)
    assert distinct_rows(1e9, 10**6, 1.2) <= 10**6
    assert distinct_rows(1000, 10**6, 2.0) < distinct_rows(1000, 10**6, 1.0) < distinct_rows(1000, 10**6, 0.0)
    got = distinct_array(np.array([100.0, 100.0]), np.array([1000.0, 1000.0]), np.array([0.0, 1.5]))
    assert got[0] == pytest.approx(distinct_rows(100, 1000)) and got[1] == pytest.approx(distinct_rows(100, 1000, 1.5))


def _cpu_config(n=4, rows=150_000, world_size=2, optimizer="adagrad"):
    return parse_config({
        "tables": [{"name": f"t{i}", "num_embeddings": rows, "embedding_dim": 64, "feature_names": [f"f{i}"]}
                   for i in range(n)],
        "constraints": {f"t{i}": {"pooling_factors": [8]} for i in range(n)},
        "topology": {"world_size": world_size, "compute_device": "cpu", "batch_size": 512, "optimizer": optimizer}})


def _on(cfg, ranks):
    return {t.name: TablePlan(ShardingType.TABLE_WISE, ComputeKernel.FUSED, (r,),
                              (Shard((0, 0), (t.num_embeddings, t.embedding_dim), r),))
            for t, r in zip(cfg.tables, ranks)}


def test_crowding_tables_on_a_rank_costs_more_than_their_sum():
    cfg = _cpu_config()
    crowded = evaluate(cfg, _on(cfg, [0, 0, 0, 0]))
    alone = [evaluate(cfg, _on(cfg, [0 if j == i else 1 for j in range(4)])) for i in range(4)]
    one = alone[0].ranks[0]
    assert one.workset_bytes > 0
    assert crowded.ranks[0].workset_bytes == pytest.approx(4 * one.workset_bytes)
    assert crowded.ranks[0].cost_ms > 4 * one.cost_ms  # the knee: the term is not additive
    assert crowded.ranks[0].workset_rows == pytest.approx(4 * one.workset_rows)
    assert crowded.ranks[0].workset_ms == pytest.approx(float(rank_workset_ms(
        np.array([4 * one.workset_bytes]), np.array([4 * one.workset_rows]), cfg.topology)[0]))
    spread = evaluate(cfg, _on(cfg, [0, 1, 0, 1]))
    assert spread.max_rank_cost_ms < crowded.max_rank_cost_ms


def test_gpu_topologies_price_no_working_set():
    raw = {"tables": [{"name": "t", "num_embeddings": 10**6, "embedding_dim": 64, "feature_names": ["f"]}],
           "topology": {"world_size": 1}}
    p = plan(parse_config(raw))
    assert p.ranks[0].workset_bytes == 0 and p.ranks[0].workset_ms == 0
    assert float(rank_workset_ms(np.array([1e12]), np.array([1e9]), parse_config(raw).topology)[0]) == 0.0


def test_the_planner_spreads_working_sets_it_would_otherwise_crowd():
    """Rank 0 is cheaper by shard cost but already touches more than the cache holds; a shard touching many bytes
    goes where its whole cost, working set included, is lowest."""
    cfg = _cpu_config(n=1)
    pl = Placement(cfg.topology)
    assert pl.priced_ws
    big = 8 * 2**20
    near = hand_option(0, [1.0])
    near.est.workset_bytes[:] = C.CPU_WORKSET_KNEE_BYTES + big
    near.est.workset_rows[:] = (C.CPU_WORKSET_KNEE_BYTES + big) / 256  # 256-byte rows
    cheap = hand_option(1, [1.2])
    pl.add(near, np.array([0]))
    pl.add(cheap, np.array([1]))
    assert pl.load[0] > 1.0 + 1e-9  # rank 0's load holds the term
    newcomer = hand_option(2, [0.3])
    newcomer.est.workset_bytes[:] = big
    newcomer.est.workset_rows[:] = big / 256
    after_0 = pl.after(0, 0.3, big, big / 256)
    after_1 = pl.after(1, 0.3, big, big / 256)
    assert after_0 > after_1
    assert int(pl.find_ranks(newcomer)[0]) == 1
    clone = pl.clone()
    clone.remove(0)
    assert clone.load[0] == pytest.approx(0.0, abs=1e-12) and pl.load[0] > 1.0


def test_plans_stay_deterministic_under_the_term():
    cfg = _cpu_config(n=12, rows=120_000, world_size=4)
    a, b = plan(cfg), plan(cfg)
    assert {k: v.ranks for k, v in a.tables.items()} == {k: v.ranks for k, v in b.tables.items()}
    assert a.max_rank_cost_ms == b.max_rank_cost_ms
