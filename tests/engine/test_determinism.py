"""The same config and settings give the same plan, whatever the machine's speed or load: the search is bounded
by work, and the wall clock is only a safety stop that says so when it fires."""

from __future__ import annotations

import itertools
import json
import re

import pytest

import engine
from bench.suite import synthetic, tight
from engine import planner as planner_module
from engine import work as work_module


def _plan_json(cfg, settings=engine.PlannerSettings()) -> str:
    d = engine.plan_to_dict(engine.plan(cfg, settings))
    d.pop("planning_seconds")  # a measurement, not part of the plan
    return json.dumps(d, sort_keys=True)


class _Clock:
    """perf_counter as a machine of another speed sees it: each call advances `step` seconds."""

    def __init__(self, step: float):
        self.t = itertools.count()
        self.step = step

    def __call__(self) -> float:
        return next(self.t) * self.step


CASES = {
    "synthetic-100x16": synthetic(100, 16, seed=0),
    "tight-100x16": tight(synthetic(100, 16, seed=0), 0.6),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_slow_or_busy_machine_gets_the_same_plan(name, monkeypatch):
    cfg = engine.parse_config(CASES[name])
    settings = engine.PlannerSettings(effort=20_000, time_budget_s=86_400)
    quiet = _plan_json(cfg, settings)
    assert quiet == _plan_json(cfg, settings)  # and again
    for step in (1e-3, 0.5):  # every clock read 1 ms or half a second later: a machine 1,000s of times slower
        monkeypatch.setattr(work_module.time, "perf_counter", _Clock(step))  # the one time module both read
        assert _plan_json(cfg, settings) == quiet


def test_the_seed_and_the_effort_are_the_only_knobs():
    cfg = engine.parse_config(CASES["tight-100x16"])
    base = _plan_json(cfg, engine.PlannerSettings(effort=20_000, seed=0))
    assert base == _plan_json(cfg, engine.PlannerSettings(effort=20_000, seed=0, time_budget_s=3_600))
    assert base != _plan_json(cfg, engine.PlannerSettings(effort=0))  # the search is real: work changes the plan


def test_the_safety_stop_says_when_it_cut_the_search(monkeypatch):
    cfg = engine.parse_config(CASES["tight-100x16"])
    monkeypatch.setattr(work_module.time, "perf_counter", _Clock(1.0))  # the search's clock runs out at once
    p = engine.plan(cfg, engine.PlannerSettings(effort=1_000_000, time_budget_s=5))
    assert any("wall-clock safety stop (5 s)" in n and "depends on the machine" in n for n in p.notes)
    cut = next(n for n in p.notes if "safety stop" in n)
    # the clock advances 1 s a read: the note gives the time the stop was found passed, never the budget alone
    assert re.search(r"found passed (\d+) s into planning after a step of 1 s", cut), cut
    assert int(re.search(r"found passed (\d+) s", cut).group(1)) > 5
    monkeypatch.undo()
    assert not any("safety stop" in n for n in engine.plan(cfg, engine.PlannerSettings(effort=2_000)).notes)


def test_the_safety_stop_bounds_pricing_too(monkeypatch):
    cfg = engine.parse_config(synthetic(600, 8, seed=1))
    monkeypatch.setattr(planner_module.time, "perf_counter", _Clock(60.0))  # the clock is read every 256 tables
    with pytest.raises(engine.PlanningError, match=r"stopped at the time budget \(100 s\) while pricing .*"
                                                   r"\(511 of 600 done; the budget was found passed 120 s into "
                                                   r"planning\).*--time-budget"):
        engine.plan(cfg, engine.PlannerSettings(time_budget_s=100))
