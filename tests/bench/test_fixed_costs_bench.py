"""bench.fixed_costs: a survey point compares our plan with real alternatives, and the report says what ran."""

from __future__ import annotations

import argparse

import engine
from bench.fixed_costs import ROOT, markdown, survey_point


def test_survey_point_on_the_tutorial_and_its_report():
    cfg = engine.load_config(ROOT / "examples" / "tutorial.json")
    row = survey_point(cfg, "h100_80gb", 16, 2_000)
    assert row["best_alt"] in ("all data_parallel", "mixed fleet's plan")  # the alternatives were planned
    assert row["ours_ms"] <= row["best_alt_ms"] * (1 + 1e-9)
    assert row["lower_bound_ms"] <= row["ours_ms"]
    args = argparse.Namespace(effort=2_000, torchrec=False)
    text = markdown(args, ["--survey"], [{"config": "tutorial.json", "device": "h100_80gb", "ranks": 16, **row}], {})
    assert "Command: `python -m bench.fixed_costs --survey`" in text
    assert "| tutorial.json | h100_80gb | 16 |" in text and "load average" in text
