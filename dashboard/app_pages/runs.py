"""Runs: start a kernel dry-run or a validation run of a saved plan (the `python -m db dryrun|validate` a user
would type), on generated ids or an uploaded sample of real ids, follow its progress and log, cancel it, and see
per rank what it measured (a step, and the rank's own embedding work) over what was estimated for the device it
ran on, the slowest rank's error, which ids it used, with a flag and what to do when a ratio leaves 0.8-1.25.
"""

from datetime import datetime, timezone

import pandas as pd
import streamlit as st

import engine
from dashboard.plans import analysis, charts, measured, run_ids

from dashboard.serve import runner
from dashboard.tables import importers

from dashboard.ui import services, state, views, workspace
from dashboard.text import count_text, md
from db.store import StoreError

POLL_S = 1.0
LOG_LINES = 80


def pick_plan(store):
    plans = store.list_plans()
    if not plans:
        st.info("Runs measure saved plans: save one on Save & share first.", icon=":material/info:")
        st.page_link("app_pages/save_share.py", label="Go to Save & share", icon=":material/share:")
        st.stop()
    tokens = [p.token for p in plans]
    saved = state.saved_token()
    # plain text: a picker's options are not markdown
    labels = {p.token: f"{p.label or p.token[:8]} · {count_text(p.num_tables, 'table')} on {count_text(p.world_size, 'rank')}" for p in plans}
    return st.selectbox("Plan", tokens, index=tokens.index(saved) if saved in tokens else 0, key="runs_plan",
                        format_func=labels.get)


IDS = {"generated": "Generated from the config", "sample": "A sample of real ids"}


def uploaded_ids(up, config) -> str | None:
    """The stored path of the uploaded sample (run_ids.store_sample), or None with its one-line error shown."""
    if up is None:
        st.error("Ids: upload a sample file (.parquet, .csv or .npz) above, or pick generated ids.",
                 icon=":material/error:")
        return None
    path, error = run_ids.store_sample(config, up.getvalue(), up.name)
    if error is not None:
        st.error(f"Not started: {md(error)}", icon=":material/error:")
        return None
    return str(path)


def start_form(store, plan_rec, expanded: bool) -> None:
    with st.expander("Start a run", expanded=expanded, icon=":material/play_circle:"):
        c1, c2, c3, c4, c5 = st.columns([3, 1, 1, 1, 1], vertical_alignment="bottom")
        kind = c1.radio("Run", list(runner.KINDS), format_func=runner.KINDS.get, key="runs_kind")
        device = c2.selectbox("Device", ["cpu", "cuda"], key="runs_device")
        iters = c3.number_input("Timed steps", 1, 1000, 10, key="runs_iters")
        source = st.radio("Ids", list(IDS), format_func=IDS.get, key="runs_ids", horizontal=True,
                          help="generated: a seeded stream of fresh ids every step, drawn as the config's id "
                               "distribution says; a sample: each step takes the next rows of a file of real "
                               "training ids (one column per feature)")
        dist = c4.selectbox("Id distribution", ["config", "uniform", "zipf"], key="runs_distribution",
                            disabled=kind != "dryrun" or source != "generated",
                            help="config: each table's zipf exponent (uniform where unset); every step draws "
                                 "fresh ids")
        scale = c5.number_input("Scale rows", 0.0001, 1.0, 1.0, format="%.4f", key="runs_scale_rows",
                                disabled=kind != "dryrun",
                                help="shrink every table to rows x this, so big plans fit this machine (changes "
                                     "what is measured)")
        up = None
        if source == "sample":
            up = st.file_uploader(f"A sample of ids (.parquet, .csv, .npz; up to "
                                  f"{engine.human_bytes(importers.MAX_SAMPLE_BYTES)}): one column per feature, a list "
                                  "of ids per cell; kept in the data directory for the run",
                                  type=list(importers.SAMPLE_SUFFIXES), key="runs_sample")
        reason = runner.unavailable_reason(kind)
        if reason:
            st.warning(f"{runner.KINDS[kind]} is not available: {md(reason)}.", icon=":material/block:")
        if st.button("Start", type="primary", key="runs_start", disabled=bool(reason), icon=":material/play_arrow:"):
            extra = {"scale_rows": scale} if kind == "dryrun" else {}
            if source == "sample":
                extra["ids"] = uploaded_ids(up, services.saved_result(plan_rec).config)
                if extra["ids"] is None:
                    return
            elif kind == "dryrun":
                extra["distribution"] = dist
            try:
                run_id = runner.start(store, plan_rec.token, kind, runner.Options(device=device, iters=int(iters),
                                                                                  extra=extra))
            except (RuntimeError, StoreError, OSError) as e:
                st.error(f"Not started: {md(e)}", icon=":material/error:")
                return
            state.add_run(run_id)
            state.set_widget("runs_pick", run_id)
            ahead = runner.ahead(run_id)
            state.flash(f"Started run {run_id}." if ahead is None else f"Queued run {run_id}: it starts when a "
                        f"run slot is free ({workspace.place_in_line(ahead, 'run')}).")
            st.rerun()


def _when(t) -> str:
    return t.strftime("%H:%M:%S") if t else ""


def runs_table(runs) -> None:
    frame = pd.DataFrame([{"run": r.id, "kind": str(r.kind), "backend": (r.device_info or {}).get("backend", r.backend),
                           "device": r.device,
                           "status": str(r.status), "ids": run_ids.ids_text(r.device_info) if r.status.finished
                           else "", "started (UTC)": _when(r.started_at),
                           "ended (UTC)": _when(r.ended_at)} for r in reversed(runs)])
    st.dataframe(frame, hide_index=True, key="runs_table", height=min(38 + 35 * len(frame), 250))


def _elapsed(rec) -> str:
    if not rec.started_at:
        return "not started"
    end = rec.ended_at or datetime.now(timezone.utc)
    return f"{max((end - rec.started_at).total_seconds(), 0):.0f} s"  # the store hands out aware UTC times


def run_detail(store, run_id: int, plan_rec) -> None:
    rec = store.get_run(run_id)
    live = not rec.status.finished

    @st.fragment(run_every=POLL_S if live else None)
    def body() -> None:
        now = store.get_run(run_id)
        if live and now.status.finished:
            st.rerun()  # the whole page: stop polling, show the results
        status_line(now)
        if not now.status.finished and st.button("Cancel run", key="runs_cancel", icon=":material/stop:"):
            runner.cancel(store, run_id)
            st.rerun()
        if not now.status.finished:
            log_box(now)

    body()
    if rec.status.finished:
        results(store, rec, plan_rec)
        with st.expander("Log"):
            log_box(rec)


def log_box(rec) -> None:
    st.code("\n".join((rec.log or "").splitlines()[-LOG_LINES:]) or "(no output yet)", language=None,
            height=260, wrap_lines=True)


def _waiting(rec) -> str:
    """A queued run's place in this server's line for runs ('' when this server does not hold it)."""
    ahead = runner.ahead(rec.id) if str(rec.status) == "queued" else None
    if ahead is None:
        return ""
    n = runner.RUNS.size
    return (f"waiting for a free run slot, {workspace.place_in_line(ahead, 'run')} (this server measures "
            f"{n} run{'s' if n != 1 else ''} at a time, so runs do not measure each other)")


def status_line(rec) -> None:
    text = (f"Run {rec.id} ({md(rec.kind)}, {md(rec.backend)} on {md(rec.device)}): **{md(rec.status)}** · "
            f"{_waiting(rec) or _elapsed(rec)}")
    if not rec.status.finished:
        frac = analysis.run_progress(rec.log)
        if frac is None:
            st.info(text + " · the log below grows as it works", icon=":material/progress_activity:")
        else:
            st.progress(frac, text=text)
    elif str(rec.status) == "succeeded":
        st.success(text, icon=":material/check_circle:")
    elif str(rec.status) == "failed":
        st.error(f"{text}: {md(rec.error or 'no error message')}", icon=":material/error:")
    else:
        st.warning(text, icon=":material/cancel:")


def results(store, rec, plan_rec) -> None:
    """Measured over estimated per rank (the run's own estimates, priced for the device it measured)."""
    metrics = store.metrics(rec.id)
    if not metrics:
        return
    info = rec.device_info or {}
    device = str(info.get("estimated_device") or rec.device)
    typed = services.saved_result(plan_rec)
    planned_for = typed.config.topology.compute_device.value
    frame = measured.run_frame(typed.plan, metrics, str(rec.kind), same_device=planned_for == device)
    views.run_verdict(frame, "runs")
    st.markdown(f"{md(measured.slowest_line(frame, str(rec.kind), device))}  \nIds: {md(run_ids.ids_text(info))}")
    flags = measured.flags(frame, str(rec.kind), device)
    views.run_flags(flags, device, "runs")
    if not flags and measured.span(frame, "time_ratio"):
        st.success("Every ratio is within 0.8x-1.25x: the estimates hold for this run.", icon=":material/verified:")
    st.caption(f"This run's estimates: priced for {md(device)}, the device it measured, by "
               f"{md(measured.profile(typed.config, plan_rec.settings, device))}.")
    for note in info.get("notes") or []:
        st.caption(f"Note: {md(note)}")
    left, right = st.columns(2)
    left.plotly_chart(charts.ratio_bars(frame), key="runs_ratio_chart")
    right.plotly_chart(charts.measured_vs_estimated(frame), key="runs_measured_chart")
    st.dataframe(measured.rank_table(frame), hide_index=True, key="runs_ranks")
    st.caption("measured: a step (a dry-run: its kernels); embedding work: the rank's own lookups, backward and "
               "optimizer inside it (validation runs), not synchronised away; estimated: for the device it measured.")
    with st.expander("Every metric of this run"):
        st.dataframe(analysis.metrics_table(metrics), hide_index=True, key="runs_metrics")


st.title("Runs")
views.show_flash()
store = services.store()
token = pick_plan(store)
plan_rec = store.get_plan(token)
views.calibrated_note(plan_rec.settings, services.saved_result(plan_rec).config)
runs = store.runs_for_plan(token)
start_form(store, plan_rec, expanded=not runs)
if not runs:
    st.caption("No runs of this plan yet.")
    st.stop()
runs_table(runs)
ids = [r.id for r in reversed(runs)]
if state.widget("runs_pick") not in ids:
    state.forget_widgets(["runs_pick"])
run_id = st.selectbox("Show run", ids, key="runs_pick")
run_detail(store, run_id, plan_rec)
