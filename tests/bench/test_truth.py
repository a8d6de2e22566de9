"""The truth benchmark's pure parts: its configs and plans are valid and distinct, the rank correlation and the
plan-order check count what they say (the measuring itself is bench/truth.py's, run by hand: README)."""

import numpy as np
import pytest

import engine
from bench.truth import main
from bench.truth_cases import cases, make_plan
from bench.truth_report import Measured, order_check, spearman


def test_every_case_has_valid_distinct_plans_on_cpu():
    names = [c.name for c in cases()]
    assert len(names) == len(set(names)) >= 6
    assert {c.config["topology"]["world_size"] for c in cases()} == {2, 4}
    for case in cases():
        cfg = engine.parse_config(case.config)
        assert cfg.topology.compute_device is engine.Device.CPU
        plans = [make_plan(case.config, label) for label in case.plans]
        for plan in plans:
            engine.parse_plan(plan, cfg)  # tiles the config exactly
        placements = {str(sorted((n, t["sharding_type"], tuple(t["ranks"])) for n, t in p["plan"].items()))
                      for p in plans}
        assert len(placements) == len(plans), case.name


def test_spearman_ranks_with_ties_and_refuses_constant_input():
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 30.0, 20.0])) == pytest.approx(0.5)
    assert spearman(np.array([1.0, 1.0, 2.0]), np.array([1.0, 1.0, 5.0])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 1.0]), np.array([1.0, 2.0])) is None


def _measured(plan: str, est: float, meas: float) -> Measured:
    m = Measured("c", plan, np.full((2, 2), meas), np.zeros((2, 2)), np.zeros((2, 2)), np.full(2, est / 10),
                 np.zeros(2))
    m.after_step_ms = est
    return m


def test_plan_order_counts_pairs_the_estimate_separates_by_ten_percent():
    items = [_measured("a", 10.0, 5.0), _measured("b", 10.5, 6.0), _measured("c", 12.0, 5.5)]
    total, agree, wrong = order_check(items, before=False)
    assert (total, agree) == (2, 1)  # a < c and b < c are >= 10% apart in the estimate; b < c is measured wrong
    assert len(wrong) == 1 and wrong[0].startswith("c: b est 10.50 < c est 12.00 ms, measured 6.00 vs 5.50")


def test_unknown_case_is_a_one_line_error(capsys):
    assert main(["report", "--configs", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: no case matches --configs; cases: tutorial-2r")
