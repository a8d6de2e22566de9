"""engine.read_old_plan of a typed Plan (the dashboard's plan on screen, handed to a re-plan as it is) reads the
same earlier plan as its plan file does."""

from __future__ import annotations

import pytest

import engine
from bench.suite import criteo_1tb, synthetic
from engine.replan import read_old_plan


@pytest.mark.parametrize("raw", [criteo_1tb(8), synthetic(60, 4, seed=3)], ids=["criteo-8", "synthetic-60"])
def test_a_plan_reads_as_its_plan_file_does(raw):
    plan = engine.plan(engine.parse_config(raw), engine.PlannerSettings(search=False))
    from_file = read_old_plan(engine.plan_to_dict(plan), "plan file")
    assert read_old_plan(plan, "plan on screen") == from_file
    assert len(from_file) == len(plan.tables) and any(o.shards for o in from_file.values())
