"""Issue 14 (server CPU per session): the table-by-rank matrix scored in batches gives each table's numbers alone;
a plan's figures and frames are built once per content and shared; the charts' template is plotly_white's look."""

from __future__ import annotations

import random

import numpy as np
import plotly.io as pio
import pytest

import engine
from dashboard.plans import charts, figure_cache, plan_files, table_matrix
from dashboard.tables import presets

SHARDING = [s.value for s in engine.ShardingType]
KERNELS = ["fused", "fused_uvm", "fused_uvm_caching"]


def _forced(count: int, seed: int, world_size: int, per_host: int) -> engine.Config:
    """Synthetic tables, each forced to a random sharding type (and some to a kernel): every kind of piece."""
    cfg = presets.synthetic(presets.SyntheticSpec(count=count, seed=seed))
    cfg["topology"].update(world_size=world_size, local_world_size=per_host)
    rng = random.Random(seed)
    for t in cfg["tables"]:
        c = cfg["constraints"].setdefault(t["name"], {})
        c["sharding_types"] = [rng.choice(SHARDING)]
        if rng.random() < 0.4:
            c["compute_kernels"] = [rng.choice(KERNELS)]
    return engine.parse_config(cfg)


def _alone(cfg: engine.Config, plan: engine.Plan) -> np.ndarray:
    """Each table scored on a config of that table only (the matrix's definition), as (metrics, tables, ranks)."""
    metrics = list(table_matrix.MATRIX_METRICS)
    out = np.zeros((len(metrics), len(plan.tables), cfg.topology.world_size))
    for i, (name, tp) in enumerate(plan.tables.items()):
        one = engine.Config(tables=(cfg.table(name),), constraints={name: cfg.constraint(name)},
                            topology=cfg.topology)
        for r in engine.evaluate(one, {name: tp}).ranks:
            out[:, i, r.rank] = [getattr(r, m) for m in metrics]
    return out


@pytest.mark.parametrize("seed,world_size,per_host", [(3, 8, 4), (5, 16, 4), (6, 2, 2)])
def test_matrix_scored_in_batches_is_each_table_scored_alone(seed, world_size, per_host):
    cfg = _forced(60, seed, world_size, per_host)
    plan = engine.plan(cfg, engine.PlannerSettings(search=False))
    assert len({tp.sharding_type for tp in plan.tables.values()}) >= 4
    table_matrix._table_alone.cache_clear()
    m = table_matrix.table_rank_matrix(plan, cfg)
    batched = np.stack([m.values[k] for k in table_matrix.MATRIX_METRICS])
    assert np.array_equal(batched, _alone(cfg, plan))  # the same numbers, not merely close
    info = table_matrix._table_alone.cache_info()
    assert info.misses == 60 and info.hits == 0
    table_matrix.table_rank_matrix(plan, cfg)  # again: every table from the cache
    assert table_matrix._table_alone.cache_info().hits == 60


def test_figures_are_built_once_per_plan_content():
    cfg = engine.parse_config(presets.synthetic(presets.SyntheticSpec(count=30, seed=2)))  # 8 ranks
    plan = engine.plan(cfg, engine.PlannerSettings(search=False))
    again, again_cfg = plan_files.parse(engine.plan_to_dict(plan), engine.config_to_dict(cfg))  # a share link's copy
    assert again is not plan
    figure_cache.clear()
    assert figure_cache.memory_bars(again, again_cfg) is figure_cache.memory_bars(plan, cfg)
    assert figure_cache.cost_stacked(again) is figure_cache.cost_stacked(plan)
    assert figure_cache.table_frame(again, again_cfg) is figure_cache.table_frame(plan, cfg)
    m = table_matrix.table_rank_matrix(plan, cfg)
    rows = table_matrix.heaviest_tables(m, "cost_ms", 10)
    assert figure_cache.heatmap(table_matrix.table_rank_matrix(again, again_cfg), "cost_ms", rows) is \
        figure_cache.heatmap(m, "cost_ms", rows)
    assert figure_cache.heatmap(m, "hbm_bytes", rows) is not figure_cache.heatmap(m, "cost_ms", rows)
    four = presets.synthetic(presets.SyntheticSpec(count=30, seed=2))
    four["topology"].update(world_size=4, local_world_size=4)
    other_cfg = engine.parse_config(four)
    other = engine.plan(other_cfg, engine.PlannerSettings(search=False))
    assert figure_cache.memory_bars(other, other_cfg) is not figure_cache.memory_bars(plan, cfg)


def test_charts_look_like_plotly_white():
    cfg = engine.parse_config(presets.synthetic(presets.SyntheticSpec(count=10, seed=1)))
    plan = engine.plan(cfg, engine.PlannerSettings(search=False))
    white = pio.templates["plotly_white"].to_plotly_json()
    for fig in (charts.memory_bars(plan), charts.cost_stacked(plan)):
        spec = fig.to_dict()
        assert spec["layout"]["template"]["layout"] == white["layout"]
        assert set(spec["layout"]["template"]["data"]) == set(charts.TRACE_TYPES)
        assert {t["type"] for t in spec["data"]} <= set(charts.TRACE_TYPES)
        assert all(spec["layout"]["template"]["data"][k] == white["data"][k] for k in charts.TRACE_TYPES)
