"""Plotly figures of plans: pure functions from plan dicts (and frames from dashboard.analysis) to Figures,
so they are tested without Streamlit. Names and labels from users go through dashboard.text.plotly: plotly
reads HTML-like tags in titles, legends, ticks and hover text.
"""

from __future__ import annotations

from typing import Optional

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.analysis import COMPONENT_LABELS, COMPONENTS, MATRIX_METRICS, TableRankMatrix, imbalance
from dashboard.text import plotly_text

GIB = 1024**3
COMPONENT_COLORS = {"fwd_compute_ms": "#4C78A8", "bwd_compute_ms": "#72B7B2", "fwd_comms_ms": "#F58518",
                    "bwd_comms_ms": "#E45756", "input_dist_comms_ms": "#EECA3B", "prefetch_compute_ms": "#B279A2"}
USED_COLOR, CAP_COLOR, OVER_COLOR = "#4C78A8", "#D9DEE5", "#E45756"
MARGIN = dict(l=10, r=10, t=40, b=10)
HEATMAP_ROW_PX = 18


def _layout(fig: go.Figure, title: Optional[str], height: int = 360) -> go.Figure:
    """Title top left, legend in a row under the plot (never over the title)."""
    fig.update_layout(title=dict(text=title, x=0, font=dict(size=15)) if title else None, height=height,
                      margin=MARGIN, template="plotly_white",
                      legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0))
    return fig


def _rank_axis(fig: go.Figure, n: int, **kw) -> None:
    fig.update_xaxes(title_text="rank", type="category", tickmode="auto" if n > 32 else "linear", **kw)


def memory_bars(plan: dict) -> go.Figure:
    """Per-rank HBM and DDR use (GiB) in front of each rank's usable capacity (grey)."""
    ranks = [r["rank"] for r in plan["ranks"]]
    kinds = [k for k in ("hbm", "ddr") if any(r[f"{k}_cap_bytes"] for r in plan["ranks"])] or ["ddr"]
    fig = make_subplots(rows=1, cols=len(kinds), horizontal_spacing=0.12,
                        subplot_titles=[f"{k.upper()} per rank (GiB)" for k in kinds])
    for col, kind in enumerate(kinds, start=1):
        used = [r[f"{kind}_bytes"] / GIB for r in plan["ranks"]]
        cap = [r[f"{kind}_cap_bytes"] / GIB for r in plan["ranks"]]
        colors = [OVER_COLOR if u > c else USED_COLOR for u, c in zip(used, cap)]
        fig.add_trace(go.Bar(x=ranks, y=cap, name="usable capacity", marker_color=CAP_COLOR,
                             showlegend=col == 1, hovertemplate="rank %{x}: %{y:.2f} GiB usable<extra></extra>"),
                      row=1, col=col)
        fig.add_trace(go.Bar(x=ranks, y=used, name="used", marker_color=colors, showlegend=col == 1,
                             customdata=[u / c * 100 if c else 0 for u, c in zip(used, cap)],
                             hovertemplate="rank %{x}: %{y:.3f} GiB used (%{customdata:.1f}%)<extra></extra>"),
                      row=1, col=col)
    fig.update_layout(barmode="overlay", bargap=0.25)
    _rank_axis(fig, len(ranks))
    fig.update_annotations(font_size=15, x=0, xanchor="left", selector=dict(text=f"{kinds[0].upper()} per rank (GiB)"))
    if len(kinds) > 1:
        fig.update_annotations(x=0.56, xanchor="left", selector=dict(text=f"{kinds[1].upper()} per rank (GiB)"))
    return _layout(fig, None)


def cost_stacked(plan: dict) -> go.Figure:
    """Per-rank estimated cost stacked by component, with the lower bound as a dashed line."""
    ranks = [r["rank"] for r in plan["ranks"]]
    fig = go.Figure()
    for comp in COMPONENTS:
        values = [r.get(comp, 0.0) for r in plan["ranks"]]
        if not any(values):
            continue
        fig.add_trace(go.Bar(x=ranks, y=values, name=COMPONENT_LABELS[comp], marker_color=COMPONENT_COLORS[comp],
                             hovertemplate=f"rank %{{x}}: %{{y:.4g}} ms {COMPONENT_LABELS[comp]}<extra></extra>"))
    imb = imbalance(plan)
    if imb.lower_bound_ms:
        fig.add_hline(y=imb.lower_bound_ms, line_dash="dash", line_color="#333")
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(dash="dash", color="#333"),
                                 name=f"lower bound {imb.lower_bound_ms:.4g} ms"))
    if len(ranks) > 1:
        fig.add_annotation(x=imb.bottleneck_rank, y=imb.max_ms, text="slowest", showarrow=True, arrowhead=2, ay=-28)
    fig.update_layout(barmode="stack", bargap=0.25)
    fig.update_yaxes(title_text="ms per step")
    _rank_axis(fig, len(ranks))
    return _layout(fig, "Estimated cost per rank by component")


def heatmap(m: TableRankMatrix, metric: str = "cost_ms", rows: Optional[list[int]] = None) -> go.Figure:
    """Table-by-rank heatmap of one metric of dashboard.analysis.table_rank_matrix; `rows` picks tables."""
    rows = list(range(len(m.tables))) if rows is None else rows
    values = m.values[metric][rows]
    scale = GIB if metric.endswith("_bytes") else 1.0
    unit = "GiB" if scale == GIB else "ms"
    names = [plotly_text(m.tables[i]) for i in rows]
    z = [[v / scale if v else None for v in row] for row in values]
    fig = go.Figure(go.Heatmap(z=z, x=[str(r) for r in m.ranks], y=names, colorscale="Blues", hoverongaps=False,
                               colorbar=dict(title=unit, thickness=12),
                               hovertemplate="%{y} on rank %{x}: %{z:.4g} " + unit + "<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category", tickfont=dict(size=10))
    fig.update_xaxes(title_text="rank", type="category", side="top")
    height = min(max(260, HEATMAP_ROW_PX * len(names) + 110), 4000)
    return _layout(fig, f"Tables by rank: {MATRIX_METRICS[metric]}", height=height)


def compare_ranks(frame: pd.DataFrame, column: str, title: str) -> go.Figure:
    """Grouped bars per rank, one colour per plan, from dashboard.analysis.compare_frame."""
    fig = go.Figure()
    scale = GIB if column.endswith("_bytes") else 1.0
    for label, part in frame.groupby("plan", sort=False):
        fig.add_trace(go.Bar(x=part["rank"], y=part[column] / scale, name=plotly_text(label)))
    fig.update_layout(barmode="group", bargap=0.2)
    fig.update_yaxes(title_text="GiB" if scale == GIB else "ms per step")
    _rank_axis(fig, frame["rank"].nunique() if len(frame) else 0)
    return _layout(fig, plotly_text(title))


def measured_vs_estimated(frame: pd.DataFrame, title: str = "Measured vs estimated per rank") -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Bar(x=frame["rank"], y=frame["estimated_ms"], name="estimated", marker_color="#9DB4CF"))
    fig.add_trace(go.Bar(x=frame["rank"], y=frame["measured_ms"], name="measured", marker_color="#F58518"))
    fig.update_layout(barmode="group", bargap=0.25)
    fig.update_yaxes(title_text="ms per step")
    _rank_axis(fig, len(frame))
    return _layout(fig, plotly_text(title))
