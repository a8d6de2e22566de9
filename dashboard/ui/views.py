"""Pieces of UI more than one page draws: a plan (numbers, the slowest rank explained, charts, per-table
sharding, heatmap) and its downloads. UI only: numbers come from dashboard.plans.analysis, figures from charts; plans
are the engine's typed objects (engine.Plan, engine.Config), never mutated.
"""

from __future__ import annotations

import re

import streamlit as st

import engine
from dashboard.plans import analysis, exports, figure_cache, headline, measured, table_matrix, table_text
from dashboard.ui import services, state, workspace
from dashboard.plans import calibration as calib
from dashboard.tables import grid
from dashboard.text import md, ms_text, sig_text

HEATMAP_DEFAULT_ROWS = 40
MAX_CACHE_NOTES = 50  # notes listed under the per-table frame; the Plan JSON has each
MAX_NAMED_TABLES = 8  # tables a cache note names, then how many more
TABLE_FRAME_HEIGHT_PX = 320  # at most: fewer tables get a frame as tall as their rows (grid.grid_height)
# the four download buttons' columns, by the length of their labels: 'ShardingPlan Python snippet' was cut to
# 'ShardingPlan Python ...' in a quarter of the row at 1280x720
DOWNLOAD_WIDTHS = (2, 2.4, 3, 3.4)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "plan"


def workspace_headline() -> None:
    """Call right after st.title on an editing page: the headline of the config's plan is drawn there once the
    page has run (dashboard.ui.workspace), with the first view's guide under it."""
    workspace.headline_slot()


def show_flash() -> None:
    """The one-shot message an action left before rerunning (markdown: its user text went through
    dashboard.text.md): a toast, or a box for errors and warnings."""
    message = state.pop_flash()
    if message is None:
        return
    kind, text = message
    if kind == "error":
        st.error(text, icon=":material/error:")
    elif kind == "warning":
        st.warning(text, icon=":material/update:")
    else:
        st.toast(text, icon=":material/check_circle:")


def calibrated_note(settings: dict | None, config: engine.Config | None = None) -> None:
    """Which constants priced a plan: a calibration (fitted to measured validation runs) when its settings
    carry one, else (given its config) TorchRec's default constants or the config's own bandwidths."""
    cal = calib.of_settings(settings)
    if cal is not None:
        st.info(f"{md(calib.note(cal))}: the bandwidths were fitted to measured validation runs.",
                icon=":material/tune:")
    elif config is not None:
        st.caption(f"Estimates priced by {md(measured.profile(config, settings))} (calibrate them from measured "
                   "validation runs: Topology's Calibration, or a run's flag on Runs).")


def bound_help(plan: engine.Plan) -> str:
    """What the 'Vs lower bound' figure is, or why a plan has none: our planner's plans carry the bound, re-plans
    from the plan on screen too (engine.planner.plan_lower_bound_ms); TorchRec's planner has none."""
    if plan.lower_bound_ms:
        if any(n.startswith("lower bound: the tables' measured costs spread evenly") for n in plan.notes):
            return ("slowest rank over a bound no plan can beat; with tables measured alone the bound leaves out what "
                    "a rank's tables cost each other, so it is loose")
        return "slowest rank over a bound no plan can beat"
    if plan.planner == "engine":
        return "this plan carries no bound (a plan file written without one): Plan from scratch gives one"
    return "TorchRec's plans carry no bound"


def plan_metrics(plan: engine.Plan) -> None:
    imb = analysis.imbalance(plan)
    kind = analysis.device_memory(plan)
    peak = max((analysis.peak_bytes(r, kind) for r in plan.ranks), default=0)
    room = analysis.headroom(plan, kind)
    secs = plan.planning_seconds
    cols = st.columns(5)
    cols[0].metric("Slowest rank", ms_text(imb.max_ms), help=f"rank {imb.bottleneck_rank}, per training step"
                   + (f"; planned in {sig_text(secs)} s" if secs is not None else ""))
    cols[1].metric("Imbalance (max/mean)", f"{imb.ratio:.3f}x")
    vs = imb.vs_lower_bound
    cols[2].metric("Vs lower bound", f"{vs:.3f}x" if vs else "n/a", help=bound_help(plan))
    cols[3].metric(f"Peak {kind.upper()} of a rank", engine.human_bytes(peak))
    if room is None:
        cols[4].metric("Tightest headroom", "n/a")
    else:
        over = room.free_bytes < 0  # said under the figure: "698.11 MiB over" does not fit a fifth of the row
        fits = headline.headline(plan).fits  # the engine's verdict: the device holds every rank's step
        cols[4].metric("Tightest headroom", engine.human_bytes(room.free_bytes) if not over else
                       f"-{engine.human_bytes(-room.free_bytes)}",
                       delta=None if not over else "into the reservation" if fits else "over capacity",
                       delta_color="orange" if fits else "red", delta_arrow="off",
                       help=f"rank {room.rank}: usable {kind.upper()} {engine.human_bytes(room.cap_bytes)} less its "
                            "estimated peak in a training step"
                            + ("; below zero the step's buffers use part of the memory kept for the dense model, "
                               "which the device still holds" if over and fits else ""))


def plan_view(plan: engine.Plan, config: engine.Config, prefix: str) -> None:
    """Everything about one plan; `prefix` keeps widget keys unique per page."""
    group = headline.group_text(config)  # 2D: the ranks drawn are one group's
    if group:
        st.markdown(f":blue-badge[:material/grid_view: 2D] The plan is {group}: every group holds all the tables, "
                    "and their weights are all-reduced across groups after each step (in the backward comms).")
    plan_metrics(plan)  # the headline first: the browser shows it while the rest is computed
    left, right = st.columns(2)  # figures and frames built once per plan (dashboard.plans.figure_cache), not per rerun
    devices = engine.rank_device_names(config.topology)  # a mixed fleet's ranks are labelled with their device
    devices = devices if devices is not None and len(devices) == len(plan.ranks) else None
    left.plotly_chart(figure_cache.memory_bars(plan, config, devices, group), key=f"{prefix}_memory_chart")
    right.plotly_chart(figure_cache.cost_stacked(plan, devices, group), key=f"{prefix}_cost_chart")
    matrix = services.table_rank_matrix(plan, config)
    with st.container(border=True):
        imb = analysis.imbalance(plan)
        st.markdown(f"**What makes rank {imb.bottleneck_rank} the slowest**")
        lines = analysis.bottleneck(plan, matrix, pressure=engine.prices_pressure(config.topology))
        st.markdown("\n".join(f"- {md(line)}" for line in lines))
    if plan.notes:
        with st.expander(f"Planner notes ({len(plan.notes)})"):
            st.markdown("\n".join(f"- {md(n)}" for n in plan.notes))
    tab_tables, tab_heat = st.tabs(["Per-table sharding", "Table-by-rank heatmap"])
    with tab_tables:
        frame = figure_cache.table_frame(plan, config)
        st.dataframe(frame, hide_index=True, key=f"{prefix}_tables_frame",
                     height=min(TABLE_FRAME_HEIGHT_PX, grid.grid_height(len(plan.tables), False)),
                     column_config=table_columns(frame))
        notes = analysis.cache_notes(plan)
        if notes:
            cache_notes(notes)
    with tab_heat:
        heatmap(matrix, prefix)


def table_columns(frame) -> dict:
    """The per-table frame's columns, each as wide as its longest cell (issue 28: on 1,000 tables 'fused_uvm_caching'
    and the cache column were cut at 1440 and 1280 px), the lists of ranks and shards at most so wide that every
    column is in view in the 818 px the frame has at 1280x720; rows with thousands separators (7,275,445)."""
    out = {c: st.column_config.TextColumn(width=table_text.column_px(frame, c, max_px=LIST_COLUMN_PX.get(c, 320)),
                                          help=CACHE_HELP if c == "cache" else None)
           for c in frame.columns if c != "rows"}
    out["rows"] = st.column_config.NumberColumn(format="localized",
                                                width=table_text.column_px(frame, "rows", lambda v: f"{v:,}"))
    return out


LIST_COLUMN_PX = {"ranks": 80, "shards": 140}  # '0, 1, 2, 3', '1 x [7275445, 256]'; longer lists are cut
CACHE_HELP = "a UVM cache's load factor (the share of the table's rows it holds) and where it comes from: why it is " \
             "that size is under the table"


def cache_notes(notes: list[tuple[str, list[str]]]) -> None:
    """Why each UVM cache is the size it is: each note once, with the tables it is about (a sentence per table does
    not fit the frame's cache column)."""
    cached = sum(len(names) for _, names in notes)
    with st.expander(f"Why each cache is that size ({cached:,} table{'' if cached == 1 else 's'} with a UVM cache)",
                     icon=":material/memory:"):
        for note, names in notes[:MAX_CACHE_NOTES]:
            listed = ", ".join(md(n) for n in names[:MAX_NAMED_TABLES])
            more = f" and {len(names) - MAX_NAMED_TABLES:,} more" if len(names) > MAX_NAMED_TABLES else ""
            st.markdown(f"- **{listed}{more}**: {md(note)}")
        if len(notes) > MAX_CACHE_NOTES:
            st.caption(f"{len(notes) - MAX_CACHE_NOTES:,} more notes are in the Plan JSON (each table's cache_note).")


@st.fragment
def heatmap(matrix: table_matrix.TableRankMatrix, prefix: str) -> None:
    """The heatmap and its two inputs, a fragment: changing the metric or the rows shown redraws this part only,
    not the page's other charts, frames and downloads."""
    n = len(matrix.tables)
    c1, c2 = st.columns([2, 1])
    metric = c1.radio("Heatmap of", list(table_matrix.MATRIX_METRICS), horizontal=True, key=f"{prefix}_heat_metric",
                      format_func=table_matrix.MATRIX_METRICS.get)
    shown = n
    if n > HEATMAP_DEFAULT_ROWS:
        shown = int(c2.number_input("Heaviest tables shown", 1, n, HEATMAP_DEFAULT_ROWS, key=f"{prefix}_heat_rows"))
    rows = table_matrix.heaviest_tables(matrix, metric, shown)
    st.plotly_chart(figure_cache.heatmap(matrix, metric, rows), key=f"{prefix}_heatmap")


@st.fragment
def downloads(plan: engine.Plan, config: engine.Config, prefix: str, label: str = "") -> None:
    """Plan JSON, config JSON, TorchRec's text form and the ShardingPlan snippet (each built when clicked: the
    dict forms are made then, engine.plan_to_dict / engine.config_to_dict). A fragment: typing the module path
    reruns the downloads only, not the plan's charts and tables above."""
    name = _slug(label or plan.planner or "plan")
    module_path = st.text_input("Module path of the EmbeddingBagCollection in your model", "",
                                key=f"{prefix}_module_path", placeholder="e.g. sparse_arch.embedding_bag_collection",
                                help="the key of the ShardingPlan; empty when DMP wraps the EBC itself")
    c1, c2, c3, c4 = st.columns(DOWNLOAD_WIDTHS)
    c1.download_button("Plan JSON", lambda: exports.plan_json(plan), f"{name}.plan.json", "application/json",
                       key=f"{prefix}_dl_plan", on_click="ignore", icon=":material/download:")
    c2.download_button("Config JSON", lambda: exports.config_json(config), f"{name}.config.json",
                       "application/json", key=f"{prefix}_dl_config", on_click="ignore", icon=":material/download:")
    c3.download_button("TorchRec-format text", lambda: exports.torchrec_text(plan, config, module_path),
                       f"{name}.torchrec.txt", "text/plain", key=f"{prefix}_dl_torchrec", on_click="ignore",
                       icon=":material/download:")
    c4.download_button("ShardingPlan Python snippet",
                       lambda: exports.python_snippet(plan, config, module_path, what=label),
                       f"{name}_sharding_plan.py", "text/x-python", key=f"{prefix}_dl_snippet", on_click="ignore",
                       icon=":material/download:")


# ---- measured against estimated (Runs and Compare) ---------------------------------------------


def run_verdict(frame, prefix: str) -> None:
    """Measured over estimated (lowest to highest over the ranks) for time and peak memory, and the shards."""
    c1, c2, c3 = st.columns(3)
    band = f"{measured.RATIO_LOW}x-{measured.RATIO_HIGH}x"
    c1.metric("Time, measured / estimated", measured.span_text(measured.span(frame, "time_ratio")),
              help=f"per rank, lowest to highest; the estimate holds within {band}", border=True)
    # 'Peak memory, measured / estimated' was cut to 'Peak memory, measured / estima...' at 1280x720
    c2.metric("Memory, measured / estimated", measured.span_text(measured.span(frame, "memory_ratio")),
              help=f"the step's peak memory, per rank, lowest to highest; the estimate holds within {band}",
              border=True)
    c3.metric("Shards match the plan", measured.shards_text(frame), border=True,
              help="each rank compared the pieces it held with the plan's (validation runs)")


def run_flags(flags: list, device: str, prefix: str) -> None:
    """Each flag with what to do; the one-click calibration when time is off."""
    for f in sorted(flags, key=lambda f: f.what != "shards"):
        show = st.error if f.what == "shards" else st.warning
        show(md(f.text), icon=":material/error:" if f.what == "shards" else ":material/warning:")
        if f.calibrate:
            calibrate_action(device, f"{prefix}_calibrate")


def calibrate_action(device: str, key: str) -> None:
    """One click: the bandwidths fitted to the stored validation runs on `device` go into the workspace."""
    fitted = services.calibration(device)
    if fitted.problem:
        st.caption(f"No calibration: {md(fitted.problem)}")
        return
    if fitted.no_runs:
        st.caption(f"No succeeded validation run on {md(device)} is recorded to calibrate from: start one above "
                   "(a dry-run times the kernels only; calibration fits validation runs).")
        return
    cal = fitted.calibration
    n = cal.n_runs
    if not cal.patch and not calib.profile_text(cal):
        st.caption(f"The {n} validation run{'' if n == 1 else 's'} on {md(device)} determine no bandwidth or fixed "
                   "cost yet: record runs of other plans (see the Topology page's Calibration).")
        return
    if st.button(f"Calibrate {md(device)} estimates from these runs ({n} run{'' if n == 1 else 's'})", key=key,
                 type="primary", icon=":material/tune:",
                 help=f"puts the bandwidths and fixed costs fitted to every succeeded validation run on "
                      f"{md(device)} ({md(calib.r2_text(cal))}) in the workspace topology, as the Topology page's "
                      "Calibration does; plans made after it say so"):
        use_calibration(cal)


def use_calibration(cal: engine.Calibration) -> None:
    topology = state.topology()
    was = topology.get("compute_device") or "cuda"
    device = cal.device.value
    try:
        calibrated = calib.calibrated_topology({**topology, "compute_device": device}, cal)
    except engine.ConfigError as e:
        st.error(f"Cannot use this calibration: {md(e)}", icon=":material/error:")
        return
    state.set_topology(calibrated)
    state.set_calibration(cal)
    moved = f"; the topology now plans for {md(device)} (was {md(was)})" if was != device else ""
    state.flash(f"{md(calib.note(cal))}{moved}. Replan to use it.")
    st.rerun()
