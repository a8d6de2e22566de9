"""A saved plan opened from its share link (?plan=TOKEN), read-only, with the runs that measured it and the
latest one's measured figures beside the estimates; an unknown token says so."""

import pandas as pd
import streamlit as st

from dashboard.plans import calibration as calib
from dashboard.plans import charts, measured
from dashboard.ui import services, state, views
from dashboard.ui.state import CurrentPlan
from dashboard.text import count_text, md
from db.store import StoreError


def open_in_workspace(rec, typed: services.PlanResult) -> None:
    state.set_config(rec.config, edit=f"open the shared plan's config ({rec.label or rec.token[:8]})")
    state.set_calibration(calib.of_settings(rec.settings))  # kept only while the config holds the fit
    state.set_plan(CurrentPlan(plan=typed.plan, config=typed.config, planner=services.planner_key(rec.planner),
                               settings=dict(rec.settings), token=rec.token, label=rec.label,
                               source_key=state.config_key(state.config())))  # as set_config keeps it
    st.query_params.clear()
    st.rerun()


def _when(t) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") if t else ""


def runs_section(store, rec, typed: services.PlanResult) -> None:
    """The plan's runs, and what its latest finished run measured against the estimates (read-only: the
    calibration it may call for is offered in the workspace, on Runs)."""
    st.subheader("Runs and measured figures", divider="gray")
    runs = store.runs_for_plan(rec.token)
    if not runs:
        st.caption("No run has measured this plan yet.")
        return
    st.dataframe(pd.DataFrame([{"run": r.id, "kind": str(r.kind), "backend": (r.device_info or {}).get(
        "backend", r.backend), "device": r.device, "status": str(r.status), "started (UTC)": _when(r.started_at),
        "ended (UTC)": _when(r.ended_at)} for r in reversed(runs)]), hide_index=True, key="shared_runs",
        height=min(38 + 35 * len(runs), 250))
    run = measured.latest_run(runs)
    metrics = store.metrics(run.id) if run is not None else []
    if not metrics:
        st.caption("No finished run of this plan reported measurements yet.")
        return
    device = measured.run_device(run)
    frame = measured.run_frame(typed.plan, metrics, str(run.kind), measured.same_device(typed.config, run))
    st.markdown(f"**Run {run.id}** ({md(run.kind)} on {md(device)}, {md(run.status)}): measured over estimated, "
                "per rank")
    views.run_verdict(frame, "shared")
    for f in sorted(measured.flags(frame, str(run.kind), device), key=lambda f: f.what != "shards"):
        (st.error if f.what == "shards" else st.warning)(md(f.text), icon=":material/warning:")
    st.caption(f"The run's estimates: priced for {md(device)}, the device it measured, by "
               f"{md(measured.profile(typed.config, rec.settings, device))}.")
    left, right = st.columns(2)
    left.plotly_chart(charts.ratio_bars(frame), key="shared_ratio_chart")
    right.plotly_chart(charts.measured_vs_estimated(frame), key="shared_measured_chart")
    st.dataframe(measured.rank_table(frame), hide_index=True, key="shared_measured")


def leave() -> None:
    st.query_params.clear()
    st.rerun()


token = str(st.query_params.get("plan", "")).strip()
try:
    store = services.store()
    record = store.get_plan(token) if token else None
except StoreError as e:  # a malformed token is just an unknown one; anything else (no database) is shown
    record, problem = None, None if str(e).startswith("token:") else str(e)
else:
    problem = None

if record is None:
    st.title("Shared plan")
    st.error(md(problem) if problem else f"No saved plan has the token '{md(token)}' in this database: the link "
             "may be mistyped, or the plan was saved in another database.", icon=":material/link_off:")
    if st.button("Open the planning workspace", key="shared_leave"):
        leave()
    st.stop()

typed = services.saved_result(record)
st.title(md(record.label) if record.label else "Shared plan")
who = f" by {md(record.author)}" if record.author else ""
st.caption(f"Read-only · planned by {md(services.planner_label(record.planner))} · config "
           f"'{md(record.config_name)}' v{record.config_version} · {count_text(len(typed.plan.tables), 'table')} on "
           f"{md(typed.config.topology.world_size)} ranks · saved {record.created_at:%Y-%m-%d %H:%M} UTC{who}")
views.calibrated_note(record.settings, typed.config)
if st.button("Open a copy in my workspace", key="shared_open", icon=":material/edit:",
             help="edit the tables, replan and save under a new link; this shared plan stays as it is"):
    open_in_workspace(record, typed)
views.plan_view(typed.plan, typed.config, "shared")
runs_section(store, record, typed)
st.subheader("Take it away", divider="gray")
views.downloads(typed.plan, typed.config, "shared", record.label)
