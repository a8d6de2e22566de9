"""dashboard.plans.plan_deltas: headline and per-rank differences (absolute, %, the better plan), measured beside the
estimates, device memory per rank (DDR for CPU plans) and the config's lower bound for plans without one."""

from __future__ import annotations

import pandas as pd
import pytest

import engine
from dashboard.plans import plan_deltas
from dashboard.plans.measured import ratio_text, run_frame
from tests.dashboard.helpers import typed
from tests.factories import tutorial, with_changes
from dashboard.text import ms_text


def _plan(cfg: dict) -> dict:
    return engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))


@pytest.fixture(scope="module")
def two():
    return _plan(tutorial()), _plan(tutorial("row_wise"))


def test_headlines_side_by_side_with_the_better_plan(two):
    a, b = two
    frame = plan_deltas.headline_frame(typed(a), typed(b)).set_index("headline")
    slow = frame.loc["slowest rank"]
    assert slow["A"] == ms_text(a["max_rank_cost_ms"]) and slow["B"] == ms_text(b["max_rank_cost_ms"])
    assert slow["B - A"] == "+" + ms_text(b["max_rank_cost_ms"] - a["max_rank_cost_ms"])
    assert slow["B - A %"] == pytest.approx((b["max_rank_cost_ms"] / a["max_rank_cost_ms"] - 1) * 100)
    assert slow["better"] == "A"
    assert frame.loc["imbalance (max/mean)", "better"] == "same"
    assert pd.isna(frame.loc["imbalance (max/mean)", "B - A %"])  # blank beside "same", not "+0.0%"
    assert frame.loc["lower bound", "better"] == ""  # a bound is no plan's merit
    assert "peak HBM of a rank" in frame.index
    flipped = plan_deltas.headline_frame(typed(b), typed(a)).set_index("headline")
    assert flipped.loc["slowest rank", "better"] == "B" and flipped.loc["slowest rank", "B - A"].startswith("-")
    assert plan_deltas.verdict(plan_deltas.headline_frame(typed(a), typed(b))).startswith("A is better on")


def test_figures_that_read_the_same_are_the_same_plan_for_plan():
    """Issue 28: 1.105x against 1.105x is a tie, not a win shaded for A with '+2.562e-06 ms' beside it."""
    x = plan_deltas.Figure("imbalance (max/mean)", "x")
    ms = plan_deltas.Figure("slowest rank", "ms")
    assert plan_deltas.better(x, 1.1051, 1.1052) == "same" and plan_deltas.change_text(1.1051, 1.1052, "x") == "same"
    assert plan_deltas.better(ms, 0.0054681, 0.0054683) == "same"
    assert plan_deltas.change_text(0.0054681, 0.0054683, "ms") == "same"
    assert plan_deltas.better(ms, 0.005468, 0.005478) == "A"  # shown apart: 0.005468 vs 0.005478 ms
    assert plan_deltas.change_text(0.005468, 0.005478, "ms") == "+0.0000100 ms"  # never 1e-05


def test_more_headroom_is_better():
    h = plan_deltas.Figure("least headroom of a rank", "bytes", lower_is_better=False)
    assert plan_deltas.better(h, 10.0, 20.0) == "B" and plan_deltas.better(h, 20.0, 10.0) == "A"
    assert plan_deltas.better(h, None, 10.0) == "" and plan_deltas.percent(0.0, 1.0) is None


def test_measured_rows_and_columns_where_a_run_measured_the_plan(two):
    a, b = two
    frame = run_frame(typed(b), [(0, "measured_ms", 0.02, "ms"), (1, "measured_ms", 0.03, "ms")], "validation", True)
    head = plan_deltas.headline_frame(typed(a), typed(b), None, frame).set_index("headline")
    assert head.loc["slowest rank, measured", "B"] == "0.0300 ms" and head.loc["slowest rank, measured", "A"] == "n/a"
    ratio = 0.03 / b["ranks"][1]["cost_ms"]
    assert head.loc["measured / estimated (that rank)", "B"] == ratio_text(ratio)
    ranks = plan_deltas.rank_frame(typed(a), typed(b), None, frame)
    assert ranks["B measured ms"].tolist() == [0.02, 0.03] and "A measured ms" not in ranks
    assert ranks["B measured / est."].tolist() == pytest.approx([0.02 / b["ranks"][0]["cost_ms"], ratio])


def test_rank_by_rank_absolute_and_percent(two):
    a, b = two
    ranks = plan_deltas.rank_frame(typed(a), typed(b))
    assert ranks["rank"].tolist() == [0, 1]
    assert ranks["B - A ms"].tolist() == pytest.approx([rb["cost_ms"] - ra["cost_ms"]
                                                         for ra, rb in zip(a["ranks"], b["ranks"])])
    assert ranks["B - A ms %"].tolist() == pytest.approx([(rb["cost_ms"] / ra["cost_ms"] - 1) * 100
                                                           for ra, rb in zip(a["ranks"], b["ranks"])])
    assert ranks["faster"].tolist() == ["A", "A"]
    wider = plan_deltas.rank_frame(typed(a), typed(_plan(with_changes(tutorial(), world_size=4, local_world_size=4))))
    assert wider["B rank"].tolist() == [0, 1, 2, 3] and wider["rank"].tolist()[:2] == [0, 1]
    assert pd.isna(wider["rank"][3]) and pd.isna(wider["A ms"][3]) and wider["faster"][3] == ""


def test_cpu_plans_are_compared_on_ddr():
    cpu = _plan(with_changes(tutorial(), compute_device="cpu"))
    frame = plan_deltas.memory_frame({"cpu": typed(cpu), "gpu": typed(_plan(tutorial()))})
    assert set(frame[frame["plan"] == "cpu"]["kind"]) == {"ddr"}
    assert frame[frame["plan"] == "cpu"]["memory_bytes"].tolist() == [r["memory_peak_ddr_bytes"] for r in cpu["ranks"]]
    assert frame[frame["plan"] == "cpu"]["memory_bytes"].gt(0).all()
    assert plan_deltas.memory_kind({"cpu": typed(cpu)}) == "DDR"
    assert plan_deltas.memory_kind({"cpu": typed(cpu), "gpu": typed(_plan(tutorial()))}) == "device memory"


def test_a_plan_without_a_bound_gets_its_configs(two):
    a, _ = two
    a, bare = typed(a), typed(dict(a, lower_bound_ms=None))
    bounded = plan_deltas.with_bound(bare, 0.004)
    assert bounded.lower_bound_ms == 0.004 and bare.lower_bound_ms is None
    assert plan_deltas.with_bound(a, 99.0) is a and plan_deltas.with_bound(bare, None) is bare


def test_ranks_are_paired_as_the_renumbering_says(two):
    a, b = two
    ranks = plan_deltas.rank_frame(typed(a), typed(b), sigma=[1, 0])
    assert ranks["rank"].tolist() == [0, 1] and ranks["B rank"].tolist() == [1, 0]
    assert ranks["B ms"].tolist() == [b["ranks"][1]["cost_ms"], b["ranks"][0]["cost_ms"]]
    # A's rank 1 pairs with none; B's rank 0 stands alone
    one = plan_deltas.rank_frame(typed(a), typed(b), sigma=[1, -1])
    assert one["rank"].tolist()[:2] == [0, 1] and pd.isna(one["rank"][2]) and one["B rank"].tolist()[2] == 0
    assert pd.isna(one["B ms"][1]) and one["faster"].tolist() == ["A", "", ""]
