"""What-if views as pure functions: a capacity sweep's points (`python -m engine sweep --json`) as a Pareto chart
and a table, and a re-plan's figures (`engine.replan.Replan.summary()`) as rows. Tested without Streamlit.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

import engine
from dashboard.plans import plan_deltas
from dashboard.plans.charts import LEGEND
from dashboard.text import ms_text, pct_text, plotly_text, rate_text

DEVICE_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#9D755D")


def parse_mixes(text: str) -> tuple[list[str], str | None]:
    """The What-if sweep's mixed fleets, "8 h100_80gb + 8 a100_80gb; 16 h100_80gb + 16 a100_40gb" (candidates
    separated by semicolons), as the sweep's device names; or none and the first problem in one line."""
    out = []
    for part in (t.strip() for t in text.split(";")):
        if not part:
            continue
        try:
            groups = engine.parse_sweep_mix(part)
        except engine.ConfigError as e:
            return [], f"Mixed fleets: {e.message}"
        if groups is None:
            return [], (f"Mixed fleets: {part[:60]!r} is one accelerator: join two groups or more with +, e.g. "
                        "8 h100_80gb + 8 a100_80gb (a single GPU is picked under Accelerators)")
        out.append(engine.sweep_mix_text(groups))
    return list(dict.fromkeys(out)), None


def point_label(p: dict) -> str:
    group = f", groups of {p['group_size']} (2D)" if p.get("group_size") else ""
    return (f"{p['device_label']}, {p['world_size']} GPUs ({p['hosts']} hosts){group}, batch {p['batch_size']} "
            "per rank")


def sweep_figure(points: list[dict]) -> go.Figure:
    """Estimated step time against GPUs, one marker series per accelerator: filled where the point fits (the
    colour of its border is the device, the fill the fullest rank's HBM at the step's peak), a cross where the
    step outgrows the device, and points nothing fits drawn along the bottom with why in their hover. The
    Pareto front is a line. customdata carries each point's index in `points`."""
    fig = go.Figure()
    steps = [p["step_ms"] for p in points if p["step_ms"]]
    floor = min(steps) / 2 if steps else 1.0
    devices = list(dict.fromkeys(p["device"] for p in points))
    for n, dev in enumerate(devices):
        color = DEVICE_COLORS[n % len(DEVICE_COLORS)]
        mine = [(i, p) for i, p in enumerate(points) if p["device"] == dev]
        label = plotly_text(mine[0][1]["device_label"])
        fits = [(i, p) for i, p in mine if p["fits"]]
        if fits:
            fig.add_trace(go.Scatter(
                x=[p["world_size"] for _, p in fits], y=[p["step_ms"] for _, p in fits], mode="markers+lines",
                name=label, customdata=[i for i, _ in fits], line=dict(color=color, width=1, dash="dot"),
                marker=dict(size=12, color=[min(p["peak_hbm_fraction"] or 0.0, 1.0) for _, p in fits],
                            coloraxis="coloraxis", line=dict(color=color, width=2.5)),
                text=[_hover(p) for _, p in fits],
                hovertemplate="%{text}<extra></extra>"))
        oom = [(i, p) for i, p in mine if p["planned"] and not p["fits"]]
        if oom:
            fig.add_trace(go.Scatter(
                x=[p["world_size"] for _, p in oom], y=[p["step_ms"] for _, p in oom], mode="markers",
                name=f"{label}: step outgrows HBM", customdata=[i for i, _ in oom],
                marker=dict(symbol="x", size=11, color=color),
                text=[_wrap(p["reason"]) for _, p in oom], hovertemplate="%{text}<extra></extra>"))
        no = [(i, p) for i, p in mine if not p["planned"]]
        if no:
            fig.add_trace(go.Scatter(
                x=[p["world_size"] for _, p in no], y=[floor] * len(no), mode="markers",
                name=f"{label}: does not fit", customdata=[i for i, _ in no],
                marker=dict(symbol="triangle-down-open", size=11, color=color),
                text=[_wrap(p["reason"]) for _, p in no], hovertemplate="%{text}<extra></extra>"))
    front = sorted((p for p in points if p["pareto"]), key=lambda p: p["world_size"])
    if front:
        fig.add_trace(go.Scatter(x=[p["world_size"] for p in front], y=[p["step_ms"] for p in front],
                                 mode="lines", name="Pareto front", line=dict(color="#333", width=2),
                                 hoverinfo="skip"))
    fig.update_layout(
        height=460, margin=dict(l=10, r=10, t=40, b=10), template="plotly_white",
        title=dict(text="Estimated step time against GPUs (published figures)", x=0, font=dict(size=15)),
        legend=LEGEND,
        coloraxis=dict(colorscale="YlOrRd", cmin=0.0, cmax=1.0,
                       colorbar=dict(title="peak HBM<br>of usable", tickformat=".0%", len=0.8)))
    sizes = sorted({p["world_size"] for p in points})
    fig.update_xaxes(title_text="GPUs (world size)", type="log", tickvals=sizes, ticktext=[str(s) for s in sizes])
    ys = [floor, *steps]
    ticks = log_ticks(min(ys), max(ys))
    fig.update_yaxes(title_text="slowest rank, ms per step", type="log", tickvals=ticks,
                     ticktext=[f"{v:,g}" for v in ticks])
    return fig


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks from `low` to `high` (one below and above), each labelled in full: plotly's own log ticks
    label 0.5 and 0.05 as a bare '5', which reads as 5 ms."""
    out = []
    for k in range(math.floor(math.log10(low)) - 1, math.floor(math.log10(high)) + 2):
        for m in (1, 2, 5):
            v = float(f"{m}e{k}")
            if low / 2.5 <= v <= high * 2.5:
                out.append(v)
    return out


def _hover(p: dict) -> str:
    """A fitting point's hover text: each line escaped (a device label is data), joined by plotly's line break."""
    lines = [f"{p['device_label']}: {p['world_size']} GPUs, batch {p['batch_size']}",
             f"step {ms_text(p['step_ms'])}, peak HBM {pct_text(p['peak_hbm_fraction'])} of usable"]
    if p["samples_per_s"]:
        lines.append(rate_text(p["samples_per_s"]))
    return "<br>".join(plotly_text(x) for x in lines)


def _wrap(text: str, width: int = 90) -> str:
    """Plotly hover text: `text` escaped, in lines of about `width` characters (at most 8)."""
    words, lines, line = text.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > width and line:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    return "<br>".join(plotly_text(x) for x in lines[:8])


def vs_scratch_text(step_ms: float, scratch_ms: float) -> str:
    """The re-plan's slowest rank against the plan from scratch: '+2.3% vs from scratch', or 'same as from
    scratch' where the two read the same (plan_deltas.shown_same, as Compare judges ties), never '+0.0%'."""
    if not scratch_ms or plan_deltas.shown_same(step_ms, scratch_ms, "ms"):
        return "same as from scratch"
    pct = (step_ms / scratch_ms - 1) * 100
    return f"{pct:+.1f}% vs from scratch" if abs(pct) >= 0.05 else f"{pct:+.2g}% vs from scratch"


# How the sweep table shows its numbers (st.column_config.NumberColumn formats): 3 significant digits with the
# unit, rates with thousands separators (the browser's locale).
POINT_FORMATS = {"step ms": "%.3g ms", "peak HBM, % of usable": "%.3g%%", "samples/s": "localized"}


def points_frame(points: list[dict]) -> pd.DataFrame:
    """The sweep as rows, fitting points first by step time: numbers as they are (sortable), shown with
    POINT_FORMATS."""
    rows = []
    for p in points:
        rows.append({"device": p["device_label"], "GPUs": p["world_size"], "hosts": p["hosts"],
                     **({"group (2D)": f"{p['group_size']} x {p['replicas']} replicas" if p.get("group_size")
                         else "one group"}
                        if any(q.get("group_size") for q in points) else {}),
                     "batch per rank": p["batch_size"],
                     "step ms": p["step_ms"] if p["step_ms"] is not None else math.nan,
                     "peak HBM, % of usable": 100 * p["peak_hbm_fraction"]
                     if p["peak_hbm_fraction"] is not None else math.nan,
                     "samples/s": round(p["samples_per_s"]) if p["fits"] and p["samples_per_s"] else math.nan,
                     "Pareto": "yes" if p["pareto"] else "", "fits": "yes" if p["fits"] else "no",
                     "why not": short_reason(p["reason"])})
    return pd.DataFrame(rows)


def short_reason(reason: str) -> str:
    """A refusal's first clause, for the sweep table's column ('The tables do not fit'): the whole of it, a paragraph
    with what would help, is under the table (refusals)."""
    return reason.split(": ", 1)[0] if reason else ""


def refusals(points: list[dict]) -> list[tuple[str, list[str]]]:
    """Each reason a point does not fit, whole and once, with the points it refused (point_label), in sweep order."""
    by_reason: dict[str, list[str]] = {}
    for p in points:
        if not p["fits"] and p["reason"]:
            by_reason.setdefault(p["reason"], []).append(point_label(p))
    return list(by_reason.items())


def pairs_frame(summary: dict, limit: int = 50) -> pd.DataFrame:
    """A re-plan's bytes moved per rank pair, largest first, in GiB/MiB as read (engine.human_bytes)."""
    pairs = sorted(summary["moved_by_pair"], key=lambda p: (-p["bytes"], p["from"], p["to"]))[:limit]
    return pd.DataFrame([{"from rank": p["from"], "to rank": p["to"], "moved": engine.human_bytes(p["bytes"])}
                         for p in pairs], columns=["from rank", "to rank", "moved"])


def replan_rows(summary: dict) -> pd.DataFrame:
    """The re-plan against the earlier placement kept as it is and a plan from scratch: the slowest rank to 3
    significant digits, the bytes moved in GiB/MiB."""
    def moved(v: float | None) -> str:
        return "n/a" if v is None else engine.human_bytes(v)

    return pd.DataFrame([
        {"plan": "re-plan", "slowest rank": ms_text(summary["step_ms"]), "moved": moved(summary["moved_bytes"])},
        {"plan": "earlier placement kept as it is", "slowest rank": ms_text(summary["kept_step_ms"]),
         "moved": moved(summary["kept_moved_bytes"])},
        {"plan": "from scratch", "slowest rank": ms_text(summary["scratch_step_ms"]),
         "moved": moved(summary["scratch_moved_bytes"])},
    ])
