"""Plotly figures of plans: pure functions from engine.Plan (and frames from dashboard.plans.analysis) to Figures,
so they are tested without Streamlit. Names and labels from users go through dashboard.text.plotly: plotly
reads HTML-like tags in titles, legends, ticks and hover text.
"""

from __future__ import annotations

from typing import Optional

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

import engine
from dashboard.plans.analysis import (
    COMPONENT_LABELS,
    STACK,
    Headroom,
    SsdUse,
    cap_bytes,
    headroom,
    imbalance,
    memory_parts,
    peak_bytes,
    stack_components,
)
from dashboard.plans.table_matrix import MATRIX_METRICS, TableRankMatrix
from dashboard.plans.measured import RATIO_HIGH, RATIO_LOW, ratio_text
from dashboard.text import D3_SIG, D3_SIGNED, ms_text, plotly_text, short_name

GIB = 1024**3
COMPONENT_COLORS = {"fwd_compute_ms": "#4C78A8", "bwd_compute_ms": "#72B7B2", "fwd_comms_ms": "#F58518",
                    "bwd_comms_ms": "#E45756", "input_dist_comms_ms": "#EECA3B", "prefetch_compute_ms": "#B279A2",
                    "workset_ms": "#9D755D", "fixed_step_ms": "#BAB0AC", "pieces_ms": "#54A24B"}
USED_COLOR, CAP_COLOR, OVER_COLOR = "#4C78A8", "#D9DEE5", "#E45756"
ESTIMATED_COLOR, MEASURED_COLOR, BAND_COLOR = "#9DB4CF", "#F58518", "#E3F1E3"
BETTER_COLOR = "#54A24B"
PART_COLORS = ("#4C78A8", "#72B7B2", "#54A24B", "#EECA3B", "#B279A2", "#FF9DA6", "#9D755D")
PLAN_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#9D755D", "#72B7B2", "#EECA3B", "#FF9DA6")
MIB = 1024**2
MARGIN = dict(l=10, r=10, t=40, b=10)
HEATMAP_ROW_PX = 18
TRACE_TYPES = ("bar", "heatmap", "scatter")  # the only trace types these figures draw
DEVICE_TICKS_MAX = 8  # ranks whose device is written under each tick (at 1440 px wide, 16 overlap)


def _white_template() -> go.layout.Template:
    """plotly's "plotly_white" for the trace types drawn here: its layout and its defaults for bar, heatmap and
    scatter traces (plotly.js takes a trace's defaults from the template's entry for its type only, so the figures
    look the same). The full template carries the defaults of 40-odd other trace types: validating and copying it
    was half the cost of building each figure, and every figure sent it to the browser."""
    white = pio.templates["plotly_white"]
    return go.layout.Template(layout=white.layout, data={t: white.data[t] for t in TRACE_TYPES})


TEMPLATE = _white_template()
_TEMPLATE_SPEC = TEMPLATE.to_plotly_json()  # validated once, here
# The legend in rows at the bottom of the figure, not of the plot: plotly keeps the figure's bottom margin for it,
# so the x axis' title sits above it however many rows it wraps to (under the plot at y=-0.22 it covered "rank"
# at 1280x720, where the cost chart's legend takes six rows).
LEGEND = dict(orientation="h", yref="container", yanchor="bottom", y=0, xanchor="left", x=0)
_PANELS = {1: [[0.0, 1.0]], 2: [[0.0, 0.44], [0.56, 1.0]],  # make_subplots' x domains, horizontal spacing 0.12
           3: [[0.0, 0.253], [0.373, 0.627], [0.747, 1.0]]}
_BLUES = go.Heatmap(colorscale="Blues").colorscale  # the named scale as validation spells it out
# The heatmap's cells: Blues from its light blue on (its near-white quarter dropped), so the smallest cell that holds
# something is never taken for an empty one (those show the white background).
CELL_SCALE = tuple((round((at - 0.25) / 0.75, 4), color) for at, color in _BLUES if at >= 0.25)
HEATMAP_NAME_CHARS = 28  # a row's label (the name in full in its hover): long names no longer take half the width


def _layout(fig: go.Figure, title: Optional[str], height: int = 360) -> go.Figure:
    """Title top left, legend in a row under the plot (never over the title); the template put in last, as the
    validated spec it already is (assigning it to a figure validates and copies it again: 5-10 ms a figure)."""
    fig.update_layout(title=dict(text=title, x=0, font=dict(size=15)) if title else None, height=height,
                      margin=MARGIN, legend=LEGEND)
    layout = fig.layout
    layout._validate = False  # plotly's own switch (BaseFigure(_validate=False)), for this one assignment
    try:
        layout.template = _TEMPLATE_SPEC
    finally:
        layout._validate = True
    return fig


def _rank_axis(fig: go.Figure, n: int, **kw) -> None:
    fig.update_xaxes(title_text="rank", type="category", tickmode="auto" if n > 32 else "linear", **kw)


def _rank_axis_spec(n: int, devices: Optional[list[str]] = None) -> dict:
    """_rank_axis as the axis' spec; on a fleet of named devices (topology.rank_devices) the groups of ranks in the
    title, and each rank's device under its number where there are few ranks."""
    spec = {"title": {"text": "rank"}, "type": "category", "tickmode": "auto" if n > 32 else "linear"}
    if not devices:
        return spec
    spec["title"] = {"text": plotly_text(f"rank ({device_groups_text(devices)})")}
    if n <= DEVICE_TICKS_MAX:  # more ranks' devices under the ticks overlap: the title says them
        spec.update(tickmode="array", tickvals=list(range(n)),
                    ticktext=[f"{r}<br>{plotly_text(d.split('_')[0])}" for r, d in enumerate(devices)])
    return spec


def device_groups_text(devices: list[str]) -> str:
    """Each rank's device as runs of ranks: "0-7 h100_80gb, 8-15 a100_40gb"."""
    runs: list[tuple[int, int, str]] = []
    for r, d in enumerate(devices):
        if runs and runs[-1][2] == d:
            runs[-1] = (runs[-1][0], r, d)
        else:
            runs.append((r, r, d))
    return ", ".join(f"{a}-{b} {d}" if a != b else f"{a} {d}" for a, b, d in runs)


def _spec_figure(data: list[dict], layout: dict, title: Optional[str], height: int = 360) -> go.Figure:
    """A figure from its plotly spec, finished as _layout finishes one, built without plotly's validation: the
    plan pages' figures are written out here from numbers and escaped text (plotly_text), in plotly's own
    property names, and validating them was nine tenths of their cost (10-20 ms a figure, for every plan shown,
    in the server's one interpreter). tests/dashboard/test_charts.py checks each against plotly's validation."""
    layout = {**layout, "height": height, "margin": dict(layout.get("margin", MARGIN)), "legend": dict(LEGEND),
              "template": _TEMPLATE_SPEC}
    if title:
        layout["title"] = {"text": title, "x": 0, "font": {"size": 15}}
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def memory_bars(plan: engine.Plan, devices: Optional[list[str]] = None, group: Optional[str] = None,
                ssd: Optional[SsdUse] = None) -> go.Figure:
    """Per-rank HBM and DDR peak estimates (GiB; the step's peak where the plan has engine.memory's parts, else
    the stored bytes) in front of each rank's usable capacity (grey), each panel titled with its least
    headroom; the first panel (the device's memory) stacked by part when the plan carries the parts; an SSD panel
    where `ssd` (analysis.ssd_use: key_value's backing store) is given. Panels side by side as plotly's
    make_subplots lays them out (horizontal spacing 0.12), written out (_spec_figure)."""
    ranks = [r.rank for r in plan.ranks]
    kinds = [k for k in ("hbm", "ddr") if any(cap_bytes(r, k) for r in plan.ranks)] or ["ddr"]
    kinds += ["ssd"] if ssd is not None else []
    parts = memory_parts(plan, kinds[0])  # the device's own memory, part by part
    layout: dict = {"barmode": "overlay", "bargap": 0.25, "annotations": []}
    data: list[dict] = []
    for col, kind in enumerate(kinds, start=1):
        ax = "" if col == 1 else str(col)
        axes = {"xaxis": f"x{ax}", "yaxis": f"y{ax}"}
        layout[f"xaxis{ax}"] = {"anchor": f"y{ax}", "domain": _PANELS[len(kinds)][col - 1],
                                **_rank_axis_spec(len(ranks), devices)}
        layout[f"yaxis{ax}"] = {"anchor": f"x{ax}", "domain": [0.0, 1.0]}
        layout["annotations"].append({"font": {"size": 13 if ssd is not None else 14},
                                      "showarrow": False,
                                      "text": _memory_title(plan, kind, ssd),
                                      "x": _PANELS[len(kinds)][col - 1][0],
                                      "xanchor": "left", "xref": "paper", "y": 1.0, "yanchor": "bottom",
                                      "yref": "paper"})
        used_b, cap_b = _use(plan, kind, ssd)
        used, cap = [u / GIB for u in used_b], [c / GIB for c in cap_b]
        data.append({"type": "bar", "x": ranks, "y": cap, "name": "usable capacity", "marker": {"color": CAP_COLOR},
                     "showlegend": col == 1, "customdata": [engine.human_bytes(c) for c in cap_b],
                     "hovertemplate": "rank %{x}: %{customdata} usable<extra></extra>", **axes})
        if parts and col == 1:
            data += _stacked_parts(ranks, parts)
            continue
        data.append({"type": "bar", "x": ranks, "y": used, "name": "used",
                     "marker": {"color": [OVER_COLOR if u > c else USED_COLOR for u, c in zip(used, cap)]},
                     "showlegend": col == 1,
                     "customdata": [[u / c * 100 if c else 0, engine.human_bytes(b)]
                                    for u, c, b in zip(used, cap, used_b)],
                     "hovertemplate": "rank %{x}: %{customdata[1]} used (%{customdata[0]:.1f}%)<extra></extra>",
                     **axes})
    if group:  # 2D: the ranks drawn are one group's (headline.group_text), over the panels' own titles
        layout["margin"] = {**MARGIN, "t": MARGIN["t"] + 24}  # a line above the panels' two-line titles
        layout["annotations"].append({"font": {"size": 12}, "showarrow": False, "text": plotly_text(group), "x": 0.0,
                                      "xanchor": "left", "xref": "paper", "y": 1.0, "yanchor": "bottom",
                                      "yshift": 38, "yref": "paper"})
    return _spec_figure(data, layout, None)


def _stacked_parts(ranks: list[int], parts: dict[str, list[float]]) -> list[dict]:
    """One bar per part on the first panel, each starting where the previous ended (overlay mode: explicit
    bases)."""
    base, bars = [0.0] * len(ranks), []
    for i, (name, values) in enumerate(parts.items()):
        y = [v / GIB for v in values]
        bars.append({"type": "bar", "x": ranks, "y": y, "base": base, "name": plotly_text(name),
                     "marker": {"color": PART_COLORS[i % 7]}, "xaxis": "x", "yaxis": "y",
                     "customdata": [engine.human_bytes(v) for v in values],
                     "hovertemplate": f"rank %{{x}}: %{{customdata}} {plotly_text(name)}<extra></extra>"})
        base = [b + v for b, v in zip(base, y)]
    return bars


def _use(plan: engine.Plan, kind: str, ssd: Optional[SsdUse]) -> tuple[list[int], list[int]]:
    """Each rank's bytes used and usable of `kind` ("hbm", "ddr", or "ssd" from `ssd`)."""
    if kind == "ssd":
        return list(ssd.used), list(ssd.cap)
    return [peak_bytes(r, kind) for r in plan.ranks], [cap_bytes(r, kind) for r in plan.ranks]


def _memory_title(plan: engine.Plan, kind: str, ssd: Optional[SsdUse] = None) -> str:
    """'HBM per rank (GiB)' over a smaller line with the tightest headroom (or how far a rank is over)."""
    if kind == "ssd":
        free = [c - u for u, c in zip(ssd.used, ssd.cap)]
        r = min(range(len(free)), key=free.__getitem__)
        h = Headroom(plan.ranks[r].rank, free[r], ssd.cap[r])
    else:
        h = headroom(plan, kind)
    short = ssd is not None  # three panels: a third of the width each, so the short form
    head = f"{kind.upper()} (GiB)" if short else f"{kind.upper()} per rank (GiB)"
    if h is None:
        return head
    over, free = engine.human_bytes(-h.free_bytes), engine.human_bytes(h.free_bytes)
    if h.free_bytes < 0:
        line = f"rank {h.rank}: {over} over" if short else f"rank {h.rank} is {over} over"
    else:
        line = f"{free} free (rank {h.rank})" if short else f"least headroom {free} (rank {h.rank})"
    return f"{head}<br><sup>{line}</sup>"


def cost_stacked(plan: engine.Plan, devices: Optional[list[str]] = None, group: Optional[str] = None) -> go.Figure:
    """Per-rank estimated cost stacked by component, with the lower bound as a dashed line; `devices`: each rank's
    device, labelled on the rank axis; `group`: the 2D group line under the title."""
    ranks = [r.rank for r in plan.ranks]
    per_rank = [stack_components(r) for r in plan.ranks]
    data: list[dict] = []
    for comp in STACK:
        values = [c.get(comp, 0.0) for c in per_rank]
        if not any(values):
            continue
        data.append({"type": "bar", "x": ranks, "y": values, "name": COMPONENT_LABELS[comp],
                     "marker": {"color": COMPONENT_COLORS[comp]},
                     "hovertemplate": f"rank %{{x}}: %{{y:{D3_SIG}}} ms {COMPONENT_LABELS[comp]}<extra></extra>"})
    layout: dict = {"barmode": "stack", "bargap": 0.25, "xaxis": _rank_axis_spec(len(ranks), devices),
                    "yaxis": {"title": {"text": "ms per step"}}}
    imb = imbalance(plan)
    if imb.lower_bound_ms:
        layout["shapes"] = [{"type": "line", "line": {"color": "#333", "dash": "dash"}, "x0": 0, "x1": 1,
                             "xref": "x domain", "y0": imb.lower_bound_ms, "y1": imb.lower_bound_ms, "yref": "y"}]
        data.append({"type": "scatter", "x": [None], "y": [None], "mode": "lines",
                     "line": {"dash": "dash", "color": "#333"}, "name": f"lower bound {ms_text(imb.lower_bound_ms)}"})
    if len(ranks) > 1:
        layout["annotations"] = [{"x": imb.bottleneck_rank, "y": imb.max_ms, "text": "slowest", "showarrow": True,
                                  "arrowhead": 2, "ay": -28}]
    title = "Estimated cost per rank by component"
    return _spec_figure(data, layout, f"{title}<br><sup>{plotly_text(group)}</sup>" if group else title)


def heatmap(m: TableRankMatrix, metric: str = "cost_ms", rows: Optional[list[int]] = None) -> go.Figure:
    """Table-by-rank heatmap of one metric of dashboard.plans.table_matrix.table_rank_matrix; `rows` picks tables."""
    rows = list(range(len(m.tables))) if rows is None else rows
    values = m.values[metric][rows]
    scale, unit = byte_scale(float(values.max(initial=0))) if metric.endswith("_bytes") else (1.0, "ms")
    names = [plotly_text(m.tables[i]) for i in rows]
    z = [[v / scale if v else None for v in row] for row in values.tolist()]
    top = max((v for row in z for v in row if v is not None), default=0.0)
    data = [{"type": "heatmap", "z": z, "x": [str(r) for r in m.ranks], "y": names, "colorscale": CELL_SCALE,
             "xgap": 1, "ygap": 1, "hoverongaps": False,
             "colorbar": {"title": {"text": unit}, "thickness": 12, "tickformat": ".3~g"},
             "hovertemplate": f"%{{y}} on rank %{{x}}: %{{z:{D3_SIG}}} {unit}<extra></extra>"}]
    if top > 0:  # the colours span 0 to the largest cell (plotly's own range runs 0.5 past a single value)
        data[0].update(zmin=0.0, zmax=top)
    layout = {"yaxis": {"autorange": "reversed", "type": "category", "tickfont": {"size": 10}, "tickvals": names,
                        "ticktext": [plotly_text(short_name(m.tables[i], HEATMAP_NAME_CHARS)) for i in rows]},
              "xaxis": {"title": {"text": "rank"}, "type": "category", "side": "top"}}
    height = min(max(260, HEATMAP_ROW_PX * len(names) + 110), 4000)
    return _spec_figure(data, layout, f"Tables by rank: {MATRIX_METRICS[metric]}", height=height)


def byte_scale(largest_bytes: float) -> tuple[float, str]:
    """The unit a chart of byte counts reads in, by its largest value: GiB from 1 GiB, else MiB from 1 MiB, else
    KiB (the tutorial's 2.84 MiB peaks were drawn as 0.0025 GiB)."""
    for scale, unit in ((GIB, "GiB"), (1024.0**2, "MiB")):
        if largest_bytes >= scale:
            return scale, unit
    return 1024.0, "KiB"


def compare_ranks(frame: pd.DataFrame, column: str, title: str, measured: Optional[pd.DataFrame] = None) -> go.Figure:
    """Grouped bars per rank, one colour per plan, from dashboard.plans.analysis.compare_frame (or
    dashboard.plans.plan_deltas.memory_frame); `measured` (plan, rank, measured_ms: plan_deltas.measured_long) adds
    each measured plan's times as diamonds over its bars."""
    fig = go.Figure()
    scale, unit = byte_scale(float(frame[column].max())) if column.endswith("_bytes") and len(frame) else (1.0, "")
    labels = list(dict.fromkeys(frame["plan"]))
    for i, (label, part) in enumerate(frame.groupby("plan", sort=False)):
        fig.add_trace(go.Bar(x=part["rank"], y=part[column] / scale, name=plotly_text(label),
                             marker_color=PLAN_COLORS[i % len(PLAN_COLORS)], offsetgroup=str(i)))
    for label, part in (measured.groupby("plan", sort=False) if measured is not None else ()):
        i = labels.index(label) if label in labels else len(labels)
        fig.add_trace(go.Scatter(x=part["rank"], y=part["measured_ms"], mode="markers", offsetgroup=str(i),
                                 name=f"{plotly_text(label)}, measured", marker=dict(
                                     symbol="diamond", size=9, color=PLAN_COLORS[i % len(PLAN_COLORS)],
                                     line=dict(color="#222", width=1)),
                                 hovertemplate=f"rank %{{x}}: %{{y:{D3_SIG}}} ms measured<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.2, scattermode="group")
    fig.update_yaxes(title_text=unit or "ms per step")
    _rank_axis(fig, frame["rank"].nunique() if len(frame) else 0)
    return _layout(fig, plotly_text(title))


def measured_vs_estimated(frame: pd.DataFrame, title: str = "Measured vs estimated per rank") -> go.Figure:
    """Time (ms) and memory (MiB) per rank, estimated beside measured, from dashboard.plans.measured.run_frame."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=["time (ms per step)", "peak memory (MiB)"])
    for col, (unit, scale) in enumerate((("ms", 1.0), ("bytes", MIB)), start=1):
        for side, color in (("estimated", ESTIMATED_COLOR), ("measured", MEASURED_COLOR)):
            column = f"{side}_{unit}"
            if column not in frame:
                continue
            y = [None if v is None or pd.isna(v) else v / scale for v in frame[column]]
            fig.add_trace(go.Bar(x=frame["rank"], y=y, name=side, marker_color=color, showlegend=col == 1,
                                 hovertemplate=f"rank %{{x}}: %{{y:{D3_SIG}}} {'ms' if col == 1 else 'MiB'} {side}"
                                               "<extra></extra>"), row=1, col=col)
    fig.update_layout(barmode="group", bargap=0.25)
    fig.update_annotations(font_size=13)
    _rank_axis(fig, len(frame))
    return _layout(fig, plotly_text(title))


RATIO_TICKS = (0.01, 0.1, 0.25, 0.5, RATIO_LOW, RATIO_HIGH, 2.0, 4.0, 10.0, 25.0, 100.0, 1000.0, 10000.0)


def _ratio_ticks(frame: pd.DataFrame) -> list[float]:
    """The band's edges and round ratios around the data (a log axis labels every digit otherwise)."""
    values = [float(v) for c in ("time_ratio", "memory_ratio") if c in frame for v in frame[c]
              if v is not None and not pd.isna(v) and v > 0]
    low, high = min(values + [RATIO_LOW]), max(values + [RATIO_HIGH])
    return [t for t in RATIO_TICKS if low / 3 <= t <= high * 3 or t in (RATIO_LOW, RATIO_HIGH)]


def ratio_bars(frame: pd.DataFrame,
               title: str = "Measured / estimated per rank (green: holds)") -> go.Figure:
    """Measured over estimated per rank for time and peak memory, on a log scale, with the 0.8-1.25 band in
    green (the title says so briefly: '(green: 0.8x-1.25x, the estimate holds)' ran past half of a 1280 px page
    into the next chart, and on a second line it covered the panels' titles); bars outside it red (one colour per
    plan instead when the frame has a "plan" column)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=["time", "peak memory"])
    groups = list(frame.groupby("plan", sort=False)) if "plan" in frame else [(None, frame)]
    for col, column in enumerate(("time_ratio", "memory_ratio"), start=1):
        fig.add_hrect(y0=RATIO_LOW, y1=RATIO_HIGH, fillcolor=BAND_COLOR, line_width=0, layer="below", row=1, col=col,
                      exclude_empty_subplots=False)
        fig.add_hline(y=1.0, line_dash="dot", line_color="#666", row=1, col=col, exclude_empty_subplots=False)
        for i, (label, part) in enumerate(groups):
            y = [None if v is None or pd.isna(v) else float(v) for v in part[column]]
            color = (PLAN_COLORS[i % len(PLAN_COLORS)] if label is not None else
                     [USED_COLOR if v is None or RATIO_LOW <= v <= RATIO_HIGH else OVER_COLOR for v in y])
            fig.add_trace(go.Bar(x=part["rank"], y=y, name=plotly_text(label) if label else column.split("_")[0],
                                 marker_color=color, text=[ratio_text(v) if v else "" for v in y],
                                 textposition="outside", showlegend=label is not None and col == 1,
                                 legendgroup=str(label), offsetgroup=str(label),
                                 hovertemplate=f"rank %{{x}}: measured %{{y:{D3_SIG}}}x the estimate<extra></extra>"),
                          row=1, col=col)
    ticks = _ratio_ticks(frame)
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}x" for t in ticks])
    fig.update_yaxes(title_text="measured / estimated", col=1)
    fig.update_layout(barmode="group", bargap=0.3)
    fig.update_annotations(font_size=13)
    _rank_axis(fig, frame["rank"].nunique() if len(frame) else 0)
    return _layout(fig, plotly_text(title))


def rank_deltas(frame: pd.DataFrame, title: str) -> go.Figure:
    """B - A per rank, estimated time (ms) and peak device memory (MiB), from dashboard.plans.plan_deltas.rank_frame
    (x: A's rank; "B n" for B's ranks no A rank pairs with): green where B is lower, red where it is higher."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=["time: B - A (ms per step)", "peak memory: B - A (MiB)"])
    x = [str(a) if not pd.isna(a) else f"B {b}" for a, b in zip(frame["rank"], frame.get("B rank", frame["rank"]))]
    pairs = [f"A {a} / B {b}" if not pd.isna(a) and not pd.isna(b) else f"A {a}" if not pd.isna(a) else f"B {b}"
             for a, b in zip(frame["rank"], frame.get("B rank", frame["rank"]))]
    for col, (column, unit) in enumerate((("B - A ms", "ms"), ("B - A MiB", "MiB")), start=1):
        pct = frame[f"{column} %"] if f"{column} %" in frame else [None] * len(frame)
        y = [None if pd.isna(v) else float(v) for v in frame[column]]
        fig.add_trace(go.Bar(x=x, y=y, showlegend=False,
                             marker_color=[BETTER_COLOR if v is not None and v < 0 else
                                           OVER_COLOR if v is not None and v > 0 else CAP_COLOR for v in y],
                             customdata=[[0.0 if p is None or pd.isna(p) else float(p), r] for p, r in zip(pct, pairs)],
                             hovertemplate=f"rank %{{customdata[1]}}: %{{y:{D3_SIGNED}}} {unit} "
                                           "(%{customdata[0]:+.1f}%)<extra></extra>"),
                      row=1, col=col)
        fig.add_hline(y=0, line_color="#666", line_width=1, row=1, col=col)
    fig.update_layout(bargap=0.25)
    fig.update_annotations(font_size=13)
    _rank_axis(fig, len(frame))
    return _layout(fig, plotly_text(title), height=320)
