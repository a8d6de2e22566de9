"""Chart functions: plan dicts in, plotly figures out; the numbers drawn are the plan's numbers."""

from __future__ import annotations

import pandas as pd
import pytest

import engine
from dashboard import analysis, charts
from tests.factories import tutorial, with_changes

GIB = 1024**3


def _plan(cfg: dict) -> dict:
    return engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))


def test_memory_bars_show_use_against_capacity():
    plan = _plan(tutorial())
    fig = charts.memory_bars(plan)
    used = [t for t in fig.data if t.name == "used"]
    caps = [t for t in fig.data if t.name == "usable capacity"]
    assert len(used) == 2 and len(caps) == 2  # HBM and DDR panels
    assert list(used[0].y) == pytest.approx([r["hbm_bytes"] / GIB for r in plan["ranks"]])
    assert list(caps[0].y) == pytest.approx([r["hbm_cap_bytes"] / GIB for r in plan["ranks"]])
    over = dict(plan, ranks=[dict(r, hbm_bytes=r["hbm_cap_bytes"] * 2) for r in plan["ranks"]])
    assert set(charts.memory_bars(over).data[1].marker.color) == {charts.OVER_COLOR}


def test_cpu_plans_draw_only_ddr():
    plan = _plan(with_changes(tutorial(), compute_device="cpu"))
    fig = charts.memory_bars(plan)
    assert [t.name for t in fig.data] == ["usable capacity", "used"]
    assert fig.layout.annotations[0].text == "DDR per rank (GiB)"


def test_cost_stacks_add_up_to_each_rank_and_mark_the_lower_bound():
    plan = _plan(tutorial())
    fig = charts.cost_stacked(plan)
    bars = [t for t in fig.data if t.type == "bar"]
    stacked = [sum(t.y[i] for t in bars) for i in range(len(plan["ranks"]))]
    assert stacked == pytest.approx([r["cost_ms"] for r in plan["ranks"]])
    assert fig.layout.barmode == "stack"
    assert fig.layout.shapes[0].y0 == pytest.approx(plan["lower_bound_ms"])
    assert fig.data[-1].name == f"lower bound {plan['lower_bound_ms']:.4g} ms"


def test_heatmap_rows_and_empty_cells():
    cfg = tutorial()
    plan = _plan(cfg)
    m = analysis.table_rank_matrix(plan, cfg)
    fig = charts.heatmap(m, "cost_ms", [1, 0])
    assert list(fig.data[0].y) == [m.tables[1], m.tables[0]]
    z = fig.data[0].z
    assert len(z) == 2 and len(z[0]) == 2
    placed = plan["plan"][m.tables[1]]["ranks"][0]
    assert z[0][placed] == pytest.approx(m.values["cost_ms"][1, placed]) and z[0][1 - placed] is None


def test_compare_and_measured_figures():
    frame = pd.DataFrame({"plan": ["a", "a", "b", "b"], "rank": [0, 1, 0, 1], "cost_ms": [1, 2, 3, 4],
                          "hbm_bytes": [GIB, GIB, 2 * GIB, 0], "ddr_bytes": [0] * 4})
    fig = charts.compare_ranks(frame, "hbm_bytes", "HBM")
    assert [t.name for t in fig.data] == ["a", "b"] and list(fig.data[1].y) == [2.0, 0.0]
    meas = pd.DataFrame({"rank": [0, 1], "estimated_ms": [1.0, 1.0], "measured_ms": [1.5, None]})
    fig = charts.measured_vs_estimated(meas)
    assert [t.name for t in fig.data] == ["estimated", "measured"]
