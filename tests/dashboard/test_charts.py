"""Chart functions: plans (engine.Plan, built here from plan dicts) in, plotly figures out; the numbers drawn are
the plan's numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import engine
from dashboard.plans import analysis, charts, table_matrix
from dashboard.text import ms_text, short_name
from tests.dashboard.helpers import typed, typed_config
from tests.factories import tutorial, with_changes

GIB = 1024**3
MIB = 1024**2


def _plan(cfg: dict) -> dict:
    return engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))


def _without_parts(plan: dict) -> dict:
    """The plan as files without engine.memory's parts carry it."""
    return dict(plan, ranks=[{k: v for k, v in r.items() if not k.startswith("memory_")} for r in plan["ranks"]])


def test_memory_bars_show_use_against_capacity():
    plan = _without_parts(_plan(tutorial()))
    fig = charts.memory_bars(typed(plan))
    used = [t for t in fig.data if t.name == "used"]
    caps = [t for t in fig.data if t.name == "usable capacity"]
    assert len(used) == 2 and len(caps) == 2  # HBM and DDR panels
    assert list(used[0].y) == pytest.approx([r["hbm_bytes"] / GIB for r in plan["ranks"]])
    assert list(caps[0].y) == pytest.approx([r["hbm_cap_bytes"] / GIB for r in plan["ranks"]])
    over = dict(plan, ranks=[dict(r, hbm_bytes=r["hbm_cap_bytes"] * 2) for r in plan["ranks"]])
    assert set(charts.memory_bars(typed(over)).data[1].marker.color) == {charts.OVER_COLOR}


def test_cpu_plans_draw_only_ddr():
    plan = _plan(with_changes(tutorial(), compute_device="cpu"))
    assert [t.name for t in charts.memory_bars(typed(_without_parts(plan))).data] == ["usable capacity", "used"]
    fig = charts.memory_bars(typed(plan))
    assert [t.name for t in fig.data][:2] == ["usable capacity", "weights"]  # the step's peak, part by part
    assert fig.layout.annotations[0].text.startswith("DDR per rank (GiB)<br><sup>least headroom")


def test_cost_stacks_add_up_to_each_rank_and_mark_the_lower_bound():
    plan = _plan(tutorial())
    fig = charts.cost_stacked(typed(plan))
    bars = [t for t in fig.data if t.type == "bar"]
    stacked = [sum(t.y[i] for t in bars) for i in range(len(plan["ranks"]))]
    assert stacked == pytest.approx([r["cost_ms"] for r in plan["ranks"]])
    assert fig.layout.barmode == "stack"
    assert fig.layout.shapes[0].y0 == pytest.approx(plan["lower_bound_ms"])
    assert fig.data[-1].name == f"lower bound {ms_text(plan['lower_bound_ms'])}"  # 3 significant digits


def test_cost_stacks_name_the_fixed_step_table_pieces_and_working_set_and_still_add_up():
    raw = with_changes(tutorial(), compute_device="cpu", batch_size=8192)
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "step_ms": 0.3, "launch_ms": 0.01,
                                  "piece_ms": 0.05}
    plan = engine.plan(engine.parse_config(raw))
    fig = charts.cost_stacked(plan)
    bars = {t.name: list(t.y) for t in fig.data if t.type == "bar"}
    assert bars["fixed step"] == pytest.approx([r.fixed_step_ms for r in plan.ranks])
    assert bars["table pieces"] == pytest.approx([r.pieces_ms for r in plan.ranks])
    assert bars["working set beyond the caches"] == pytest.approx([r.workset_ms for r in plan.ranks])
    assert all(v > 0 for name in ("fixed step", "table pieces", "working set beyond the caches") for v in bars[name])
    stacked = [sum(values[i] for values in bars.values()) for i in range(len(plan.ranks))]
    assert stacked == pytest.approx([r.cost_ms for r in plan.ranks])  # taken out of the compute, not added to it
    assert bars["forward compute"] == pytest.approx([r.perf.fwd_compute - (r.fixed_step_ms + r.pieces_ms
                                                                          + r.workset_ms) / 3 for r in plan.ranks])
    story = " ".join(analysis.bottleneck(plan))
    worst = plan.ranks[plan.bottleneck_rank]
    assert f"Its table pieces cost {ms_text(worst.pieces_ms)}" in story
    assert f"and the fixed step {ms_text(worst.fixed_step_ms)}" in story


def test_heatmap_rows_and_empty_cells():
    cfg = tutorial()
    plan = _plan(cfg)
    m = table_matrix.table_rank_matrix(typed(plan, cfg), typed_config(cfg))
    fig = charts.heatmap(m, "cost_ms", [1, 0])
    assert list(fig.data[0].y) == [m.tables[1], m.tables[0]]
    z = fig.data[0].z
    assert len(z) == 2 and len(z[0]) == 2
    placed = plan["plan"][m.tables[1]]["ranks"][0]
    assert z[0][placed] == pytest.approx(m.values["cost_ms"][1, placed]) and z[0][1 - placed] is None


def test_heatmap_colours_span_the_data_and_long_names_are_cut():
    """Every cell 0.00273 ms: the scale runs 0 to 0.00273 (plotly's own ran 0.5 past a single value, so every cell
    looked empty); the lightest colour is a tint, not the white of an empty cell; a long name is cut to its start
    and end on the axis and stays whole in the hover."""
    long = "user_embedding_table_for_the_" + "very_" * 8 + "long_ids"
    values = np.array([[0.00273, 0.0], [0.00273, 0.00273]])
    m = table_matrix.TableRankMatrix(tables=[long, "t<b>"], ranks=[0, 1],
                                 values={k: values for k in table_matrix.MATRIX_METRICS})
    heat = charts.heatmap(m, "cost_ms").data[0]
    assert heat.zmin == 0 and heat.zmax == pytest.approx(0.00273)
    assert heat.z[0][1] is None and heat.colorscale[0][1] not in ("rgb(247,251,255)", "white", "#ffffff")
    assert list(heat.y) == [long, "t&lt;b&gt;"]  # the hover's %{y}: whole, escaped
    layout = charts.heatmap(m, "cost_ms").layout.yaxis
    assert list(layout.tickvals) == list(heat.y)
    assert list(layout.ticktext) == [short_name(long, charts.HEATMAP_NAME_CHARS), "t&lt;b&gt;"]
    assert len(layout.ticktext[0]) == charts.HEATMAP_NAME_CHARS < len(long)
    empty = table_matrix.TableRankMatrix(tables=["t"], ranks=[0], values={k: np.zeros((1, 1))
                                                                      for k in table_matrix.MATRIX_METRICS})
    assert charts.heatmap(empty, "cost_ms").data[0].zmax is None  # nothing to span: plotly's default
    mib = table_matrix.TableRankMatrix(tables=["t"], ranks=[0], values={"hbm_bytes": np.array([[3.0 * MIB]])})
    heat = charts.heatmap(mib, "hbm_bytes").data[0]  # bytes in the unit of the largest cell
    assert heat.colorbar.title.text == "MiB" and [list(r) for r in heat.z] == [[3.0]]
    assert heat.hovertemplate.endswith(" MiB<extra></extra>")


def test_compare_and_measured_figures():
    frame = pd.DataFrame({"plan": ["a", "a", "b", "b"], "rank": [0, 1, 0, 1], "cost_ms": [1, 2, 3, 4],
                          "hbm_bytes": [GIB, GIB, 2 * GIB, 0], "ddr_bytes": [0] * 4})
    fig = charts.compare_ranks(frame, "hbm_bytes", "HBM")
    assert [t.name for t in fig.data] == ["a", "b"] and list(fig.data[1].y) == [2.0, 0.0]
    assert fig.layout.yaxis.title.text == "GiB"
    # the tutorial's 2.84 MiB peaks read in MiB, not as 0.0025 GiB (walked at 1280x720)
    small = frame.assign(hbm_bytes=[2.84 * MIB, 2.84 * MIB, 3 * MIB, 0])
    fig = charts.compare_ranks(small, "hbm_bytes", "HBM")
    assert fig.layout.yaxis.title.text == "MiB" and list(fig.data[1].y) == [3.0, 0.0]
    assert charts.byte_scale(512.0) == (1024.0, "KiB") and charts.byte_scale(GIB) == (GIB, "GiB")
    meas = pd.DataFrame({"rank": [0, 1], "estimated_ms": [1.0, 1.0], "measured_ms": [1.5, None],
                         "estimated_bytes": [MIB, MIB], "measured_bytes": [2 * MIB, 3 * MIB]})
    fig = charts.measured_vs_estimated(meas)
    assert [t.name for t in fig.data] == ["estimated", "measured"] * 2  # time, then memory
    assert list(fig.data[1].y) == [1.5, None] and list(fig.data[3].y) == [2.0, 3.0]


def test_ratio_bars_mark_ranks_outside_the_band():
    frame = pd.DataFrame({"rank": [0, 1], "time_ratio": [44.0, 1.1], "memory_ratio": [9.2, None]})
    fig = charts.ratio_bars(frame)
    time, memory = fig.data
    assert list(time.y) == [44.0, 1.1] and list(time.text) == ["44x", "1.10x"]
    assert list(time.marker.color) == [charts.OVER_COLOR, charts.USED_COLOR]
    assert list(memory.y) == [9.2, None] and fig.layout.yaxis.type == "log"
    band = fig.layout.shapes[0]
    assert (band.y0, band.y1) == (0.8, 1.25)
    two = charts.ratio_bars(pd.concat([frame.assign(plan="a <b>"), frame.assign(plan="b")]))
    assert [t.name for t in two.data][:2] == ["a &lt;b&gt;", "b"]


def test_memory_bars_say_the_headroom_and_stack_the_parts():
    plan = _plan(tutorial())
    title = charts.memory_bars(typed(plan)).layout.annotations[0].text
    assert title.startswith("HBM per rank (GiB)<br><sup>least headroom ") and "(rank " in title
    assert any(k.startswith("memory_") for k in plan["ranks"][0])  # engine.memory's parts, flat in the plan file
    fig = charts.memory_bars(typed(plan))
    assert len({a.font.size for a in fig.layout.annotations}) == 1  # the HBM and DDR titles alike (walk, 1280x720)
    names = [t.name for t in fig.data]
    assert names[0] == "usable capacity" and names[-2:] == ["usable capacity", "used"] and "weights" in names
    parts = [t for t in fig.data[1:-2]]
    peaks = [r["memory_peak_hbm_bytes"] / GIB for r in plan["ranks"]]
    assert [p.base[0] + p.y[0] for p in parts][-1] == pytest.approx(peaks[0])  # the parts stack up to the peak
    assert list(parts[1].base) == pytest.approx(list(parts[0].y))


def test_compare_ranks_puts_measured_times_beside_each_plans_bars():
    a, b = _plan(tutorial()), _plan(tutorial("row_wise"))
    frame = analysis.compare_frame({"A": typed(a), "B": typed(b)})
    measured = pd.DataFrame({"plan": ["B", "B"], "rank": [0, 1], "measured_ms": [0.5, 0.75]})
    fig = charts.compare_ranks(frame, "cost_ms", "cost", measured)
    assert [t.type for t in fig.data] == ["bar", "bar", "scatter"]
    diamonds = fig.data[2]
    assert diamonds.name == "B, measured" and list(diamonds.y) == [0.5, 0.75]
    assert diamonds.marker.color == fig.data[1].marker.color and diamonds.offsetgroup == fig.data[1].offsetgroup


def test_rank_deltas_colour_the_better_plan_green():
    frame = pd.DataFrame({"rank": [0, 1, 2], "B - A ms": [-1.0, 2.0, 0.0], "B - A ms %": [-10.0, 20.0, 0.0],
                          "B - A MiB": [5.0, None, -5.0], "B - A MiB %": [1.0, None, -1.0]})
    fig = charts.rank_deltas(frame, "B - A <b>x</b>")
    time, memory = fig.data
    assert list(time.y) == [-1.0, 2.0, 0.0] and [c[0] for c in time.customdata] == [-10.0, 20.0, 0.0]
    assert [c[1] for c in time.customdata] == ["A 0 / B 0", "A 1 / B 1", "A 2 / B 2"]
    assert list(time.marker.color) == [charts.BETTER_COLOR, charts.OVER_COLOR, charts.CAP_COLOR]
    assert list(memory.y) == [5.0, None, -5.0]
    assert list(memory.marker.color) == [charts.OVER_COLOR, charts.CAP_COLOR, charts.BETTER_COLOR]
    assert fig.layout.title.text == "B - A &lt;b&gt;x&lt;/b&gt;"


def test_rank_deltas_name_the_b_rank_each_a_rank_became():
    frame = pd.DataFrame({"rank": pd.array([0, 1, None], dtype="Int64"), "B rank": pd.array([1, 0, 2], dtype="Int64"),
                          "B - A ms": [0.5, -0.5, None], "B - A MiB": [0.0, 0.0, None]})
    fig = charts.rank_deltas(frame, "t")
    assert list(fig.data[0].x) == ["0", "1", "B 2"]
    assert [c[1] for c in fig.data[0].customdata] == ["A 0 / B 1", "A 1 / B 0", "B 2"]


@pytest.mark.parametrize("cfg", [tutorial(), with_changes(tutorial(), compute_device="cpu"),
                                 with_changes(tutorial(), world_size=1, local_world_size=1),
                                 with_changes(tutorial(), hbm_cap=4 * MIB)],
                         ids=["gpu", "cpu", "one rank", "tight hbm"])
def test_the_plan_figures_written_as_specs_pass_plotly_validation_unchanged(cfg):
    """memory_bars, cost_stacked and heatmap are built from their specs without plotly's validation (the cost of
    building them). Validated here: plotly raises on a property it does not know or a value it refuses, and would
    change (coerce) nothing."""
    import json

    import plotly.graph_objects as go

    raw = _plan(cfg)
    plan = typed(raw, cfg)
    matrix = table_matrix.table_rank_matrix(plan, typed_config(cfg))
    figures = [charts.memory_bars(plan), charts.memory_bars(typed(_without_parts(raw))), charts.cost_stacked(plan)]
    figures += [charts.heatmap(matrix, metric, [0, 2]) for metric in table_matrix.MATRIX_METRICS]
    for fig in figures:
        spec = json.loads(fig.to_json())
        assert json.loads(go.Figure(spec).to_json()) == spec


def _key_value(ssd_cap: int | None = None) -> tuple[dict, engine.Plan, engine.Config]:
    """The tutorial with large_table_0 row-wise on the key_value kernel (its table on SSD, a cache in HBM)."""
    cfg = tutorial() if ssd_cap is None else with_changes(tutorial(), ssd_cap=ssd_cap)
    cfg["constraints"] = {"large_table_0": {"compute_kernels": ["key_value"], "sharding_types": ["row_wise"]}}
    raw = _plan(cfg)
    return raw, typed(raw, cfg), typed_config(cfg)


def test_an_ssd_panel_shows_where_a_rank_holds_ssd_bytes():
    """key_value's backing store per rank (engine.ssd_by_rank) in front of each rank's SSD, as a third panel; plans
    without SSD bytes keep their two panels, and the figure passes plotly's validation unchanged."""
    import json

    import plotly.graph_objects as go

    _, plan, config = _key_value(ssd_cap=4 * MIB)
    ssd = analysis.ssd_use(plan, config)
    per_rank = (2048 * 64 * 4 + np.ceil(2048 * (4 + 0.2 * 16)))  # half the rows each, TorchRec's SSD formula
    assert ssd.used == (per_rank, per_rank) and ssd.cap == (4 * MIB, 4 * MIB)
    fig = charts.memory_bars(plan, ssd=ssd)
    used = [t for t in fig.data if t.name == "used" and t.xaxis == "x3"]
    caps = [t for t in fig.data if t.name == "usable capacity" and t.xaxis == "x3"]
    assert list(used[0].y) == pytest.approx([per_rank / GIB] * 2) and list(caps[0].y) == pytest.approx([4 / 1024] * 2)
    assert fig.layout.annotations[2].text == "SSD (GiB)<br><sup>3.49 MiB free (rank 0)</sup>"  # a third of the width
    assert fig.layout.annotations[0].text.startswith("HBM (GiB)<br><sup>")
    assert [a.x for a in fig.layout.annotations] == [0.0, 0.373, 0.747]
    spec = json.loads(fig.to_json())
    assert json.loads(go.Figure(spec).to_json()) == spec
    plain = typed(_plan(tutorial()), tutorial())
    assert analysis.ssd_use(plain, typed_config(tutorial())) is None
    assert len(charts.memory_bars(plain).layout.annotations) == 2


def test_the_hbm_panel_stacks_only_what_the_gpu_holds():
    """A table on a UVM kernel keeps its weights and optimizer state in host memory: the HBM panel's parts add up
    to each rank's HBM peak (they used to add up to HBM and DDR together, far above the capacity), the host-memory
    panel's bar is the DDR peak; a plan file written before the split keeps its sums and no part goes negative."""
    cfg = with_changes(tutorial(), optimizer="rowwise_adagrad")
    cfg["constraints"] = {t["name"]: {"sharding_types": ["table_wise"],
                                      "compute_kernels": ["fused_uvm"] if i % 2 else ["fused"]}
                          for i, t in enumerate(cfg["tables"])}
    raw = _plan(cfg)
    plan = typed(raw, cfg)
    assert any(r.memory.peak_ddr_bytes for r in plan.ranks)  # some weights live in host memory
    hbm, ddr = analysis.memory_parts(plan, "hbm"), analysis.memory_parts(plan, "ddr")
    for i, r in enumerate(plan.ranks):
        assert sum(v[i] for v in hbm.values()) == pytest.approx(r.memory.peak_hbm_bytes)
        assert sum(v[i] for v in ddr.values()) == pytest.approx(r.memory.peak_ddr_bytes)
    fig = charts.memory_bars(plan)
    stacked = [t for t in fig.data if t.xaxis == "x" and t.name != "usable capacity"]
    tops = [sum(t.y[i] for t in stacked) for i in range(len(plan.ranks))]
    assert tops == pytest.approx([r.memory.peak_hbm_bytes / GIB for r in plan.ranks])
    assert list(next(t for t in fig.data if t.name == "used").y) == pytest.approx(
        [r.memory.peak_ddr_bytes / GIB for r in plan.ranks])
    old = dict(raw, ranks=[{k: v for k, v in r.items() if k != "memory_ddr_weights_bytes"} for r in raw["ranks"]])
    old_hbm = analysis.memory_parts(typed(old, cfg), "hbm")
    assert all(v >= 0 for vs in old_hbm.values() for v in vs)
    for i, r in enumerate(plan.ranks):
        assert sum(v[i] for v in old_hbm.values()) == pytest.approx(r.memory.peak_hbm_bytes)


def _hover_numbers(fig) -> list[str]:
    """Every number format in the figure's hover templates ('%{y:,.3r}' gives ',.3r')."""
    import re

    return [f for t in fig.data for f in re.findall(r"%\{[^}:]+:([^}]+)\}", t.hovertemplate or "")]


def test_hover_numbers_have_three_significant_digits_and_bytes_read_as_gib_or_mib():
    """Issue 28 item 7: hovers said '%{y:.4g}' (0.005468, 1.234e+04); times now to 3 significant digits in plain
    decimals, thousands separated (plotly's d3 spelling of dashboard.text.sig_text), bytes as engine.human_bytes
    writes them."""
    from dashboard.text import D3_SIG, D3_SIGNED

    plan = typed(_plan(tutorial()))
    matrix = table_matrix.table_rank_matrix(plan, typed_config(tutorial()))
    frame = analysis.compare_frame({"A": plan, "B": plan})
    meas = pd.DataFrame({"rank": [0, 1], "estimated_ms": [1.0, 1.0], "measured_ms": [1.5, None],
                         "estimated_bytes": [MIB, MIB], "measured_bytes": [2 * MIB, 3 * MIB]})
    deltas = pd.DataFrame({"rank": [0, 1], "B - A ms": [-1.0, 2.0], "B - A MiB": [5.0, None]})
    figures = [charts.memory_bars(plan), charts.cost_stacked(plan), charts.heatmap(matrix, "cost_ms"),
               charts.compare_ranks(frame, "cost_ms", "cost", pd.DataFrame({"plan": ["B"], "rank": [0],
                                                                           "measured_ms": [0.5]})),
               charts.measured_vs_estimated(meas), charts.rank_deltas(deltas, "t"),
               charts.ratio_bars(pd.DataFrame({"rank": [0], "time_ratio": [2.0], "memory_ratio": [1.0]}))]
    formats = [f for fig in figures for f in _hover_numbers(fig)]
    assert set(formats) == {D3_SIG, D3_SIGNED, ".1f", "+.1f"}  # the last two: shares in %
    hbm = charts.memory_bars(plan)
    weights = next(t for t in hbm.data if t.name == "weights")
    assert list(weights.customdata) == [engine.human_bytes(v) for v in analysis.memory_parts(plan, "hbm")["weights"]]
    assert "GiB" not in weights.hovertemplate and "MiB" in weights.customdata[0]  # 1 MiB, not 0.000977 GiB


def test_every_legend_sits_at_the_figures_bottom_below_the_axis_title():
    """Issue 28 item 7: under the plot at y=-0.22 the cost chart's six-row legend covered its 'rank' title at
    1280x720; at the figure's bottom (yref container) plotly keeps a margin for it (tests/e2e/test_fit_finish.py
    looks at the boxes in Chromium)."""
    plan = typed(_plan(tutorial()))
    for fig in (charts.memory_bars(plan), charts.cost_stacked(plan),
                charts.compare_ranks(analysis.compare_frame({"A": plan}), "cost_ms", "cost")):
        assert (fig.layout.legend.yref, fig.layout.legend.y, fig.layout.legend.yanchor) == ("container", 0, "bottom")
