"""The sets of a few sharding types (engine.typesets) are tried on top of the search over every type, never instead
of part of it: at the same effort, the plan is never slower than the plan of the search over every type alone."""

from __future__ import annotations

import dataclasses

import pytest

import engine
import engine.typesets as typesets
from bench.scale import scale_config
from engine.sweep import candidate_topology
from tests.factories import within_memory


def _point(tables: int, seed: int, device: str, world_size: int):
    """A sweep point of the sweep's own generator, scaled down: 100 tables of 1e3-1e8 rows on `world_size` GPUs
    (published profile: each sharding type a plan uses adds its collectives)."""
    cfg = engine.parse_config(scale_config(tables, 8, seed=seed))
    return dataclasses.replace(cfg, topology=candidate_topology(cfg.topology, device, world_size, 512))


def _every_type_alone(cfg, settings, monkeypatch):
    """The plan of the search over every type at once, with no set of a few types tried."""
    with monkeypatch.context() as m:
        m.setattr(typesets, "MAX_SET", 0)
        return engine.plan(cfg, settings)


@pytest.mark.parametrize("seed, device, world_size", [(0, "a100_40gb", 8), (0, "h200_141gb", 16), (1, "a100_40gb", 8),
                                                     (2, "a100_40gb", 8)])
def test_sets_of_types_never_make_the_plan_slower(seed, device, world_size, monkeypatch):
    """Seed 0 on 8 A100 40GB is memory-tight (98.6% of HBM at the peak): where the sets of types shared the effort
    with the search over every type (86ad59a), the plan took 5.036 ms where that search alone took 4.689 (1.074x)."""
    cfg = _point(100, seed, device, world_size)
    settings = engine.PlannerSettings(effort=3_000)
    plan = engine.plan(cfg, settings)
    alone = _every_type_alone(cfg, settings, monkeypatch)
    assert within_memory(cfg, plan)
    assert plan.max_rank_cost_ms <= alone.max_rank_cost_ms * (1 + 1e-9), (plan.max_rank_cost_ms,
                                                                           alone.max_rank_cost_ms)
    assert plan.lower_bound_ms == alone.lower_bound_ms <= plan.max_rank_cost_ms * (1 + 1e-9)


def test_sets_of_types_still_find_the_faster_plan(monkeypatch):
    """Where a set of a few types is faster (h200 x 16: about 0.85x the search over every type), it still wins, with
    its own share of work on top of the effort."""
    cfg = _point(100, 0, "h200_141gb", 16)
    settings = engine.PlannerSettings(effort=3_000)
    plan = engine.plan(cfg, settings)
    alone = _every_type_alone(cfg, settings, monkeypatch)
    assert plan.max_rank_cost_ms < 0.95 * alone.max_rank_cost_ms
    assert any(n.startswith("sharding types limited to") for n in plan.notes)
