"""Pieces of UI more than one page draws: a plan (numbers, the slowest rank explained, charts, per-table
sharding, heatmap) and its downloads. UI only: numbers come from dashboard.analysis, figures from charts.
"""

from __future__ import annotations

import json
import re

import streamlit as st

from dashboard import analysis, charts, exports, services, state
from dashboard import calibration as calib
from dashboard.text import md
from engine.errors import human_bytes

HEATMAP_DEFAULT_ROWS = 40
TABLE_FRAME_HEIGHT_PX = 320


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "plan"


def show_flash() -> None:
    """The one-shot message an action left before rerunning (markdown: its user text went through
    dashboard.text.md): a toast, or an error box for errors."""
    message = state.pop_flash()
    if message is None:
        return
    kind, text = message
    if kind == "error":
        st.error(text, icon=":material/error:")
    else:
        st.toast(text, icon=":material/check_circle:")


def calibrated_note(settings: dict | None) -> None:
    """Says that a plan's estimates come from calibrated bandwidths, when its settings carry a calibration."""
    cal = calib.of_settings(settings)
    if cal is not None:
        st.info(f"{md(calib.note(cal))}: the bandwidths were fitted to measured validation runs.",
                icon=":material/tune:")


def plan_metrics(plan: dict) -> None:
    imb = analysis.imbalance(plan)
    peak = max((r["hbm_bytes"] for r in plan["ranks"]), default=0)
    cols = st.columns(5)
    cols[0].metric("Slowest rank", f"{imb.max_ms:.4g} ms", help=f"rank {imb.bottleneck_rank}, per training step")
    cols[1].metric("Imbalance (max/mean)", f"{imb.ratio:.3f}x")
    vs = imb.vs_lower_bound
    cols[2].metric("Vs lower bound", f"{vs:.3f}x" if vs else "n/a",
                   help="slowest rank over a bound no plan can beat" if vs else "TorchRec's plans carry no bound")
    cols[3].metric("Peak HBM of a rank", human_bytes(peak))
    secs = plan.get("planning_seconds")
    cols[4].metric("Planned in", f"{secs:.2f} s" if secs is not None else "n/a")


def plan_view(plan: dict, config: dict, prefix: str) -> None:
    """Everything about one plan; `prefix` keeps widget keys unique per page."""
    plan_metrics(plan)
    plan_json, config_json = json.dumps(plan, sort_keys=True), json.dumps(config, sort_keys=True)
    matrix = services.table_rank_matrix(plan_json, config_json)
    left, right = st.columns(2)
    left.plotly_chart(charts.memory_bars(plan), key=f"{prefix}_memory_chart")
    right.plotly_chart(charts.cost_stacked(plan), key=f"{prefix}_cost_chart")
    with st.container(border=True):
        imb = analysis.imbalance(plan)
        st.markdown(f"**What makes rank {imb.bottleneck_rank} the slowest**")
        st.markdown("\n".join(f"- {md(line)}" for line in analysis.bottleneck(plan, matrix)))
    if plan.get("notes"):
        with st.expander(f"Planner notes ({len(plan['notes'])})"):
            st.markdown("\n".join(f"- {md(n)}" for n in plan["notes"]))
    tab_tables, tab_heat = st.tabs(["Per-table sharding", "Table-by-rank heatmap"])
    with tab_tables:
        st.dataframe(analysis.table_frame(plan, config), hide_index=True, height=TABLE_FRAME_HEIGHT_PX,
                     key=f"{prefix}_tables_frame")
    with tab_heat:
        heatmap(matrix, prefix)


def heatmap(matrix: analysis.TableRankMatrix, prefix: str) -> None:
    n = len(matrix.tables)
    c1, c2 = st.columns([2, 1])
    metric = c1.radio("Heatmap of", list(analysis.MATRIX_METRICS), horizontal=True, key=f"{prefix}_heat_metric",
                      format_func=analysis.MATRIX_METRICS.get)
    shown = n
    if n > HEATMAP_DEFAULT_ROWS:
        shown = int(c2.number_input("Heaviest tables shown", 1, n, HEATMAP_DEFAULT_ROWS, key=f"{prefix}_heat_rows"))
    rows = analysis.heaviest_tables(matrix, metric, shown)
    st.plotly_chart(charts.heatmap(matrix, metric, rows), key=f"{prefix}_heatmap")


def downloads(plan: dict, config: dict, prefix: str, label: str = "") -> None:
    """Plan JSON, TorchRec's text form and the ShardingPlan snippet (built when clicked)."""
    name = _slug(label or plan.get("planner", "plan"))
    module_path = st.text_input("Module path of the EmbeddingBagCollection in your model", "",
                                key=f"{prefix}_module_path", placeholder="e.g. sparse_arch.embedding_bag_collection",
                                help="the key of the ShardingPlan; empty when DMP wraps the EBC itself")
    c1, c2, c3, c4 = st.columns(4)
    c1.download_button("Plan JSON", exports.plan_json(plan), f"{name}.plan.json", "application/json",
                       key=f"{prefix}_dl_plan", on_click="ignore", icon=":material/download:")
    c2.download_button("Config JSON", exports.config_json(config), f"{name}.config.json", "application/json",
                       key=f"{prefix}_dl_config", on_click="ignore", icon=":material/download:")
    c3.download_button("TorchRec-format text", lambda: exports.torchrec_text(plan, config, module_path),
                       f"{name}.torchrec.txt", "text/plain", key=f"{prefix}_dl_torchrec", on_click="ignore",
                       icon=":material/download:")
    c4.download_button("ShardingPlan Python snippet",
                       lambda: exports.python_snippet(plan, config, module_path, what=label),
                       f"{name}_sharding_plan.py", "text/x-python", key=f"{prefix}_dl_snippet", on_click="ignore",
                       icon=":material/download:")
