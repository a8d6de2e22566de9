"""A saved plan opened from its share link (?plan=TOKEN), read-only; an unknown token says so."""

import streamlit as st

from dashboard import calibration as calib
from dashboard import services, state, views
from dashboard.state import CurrentPlan
from dashboard.text import md
from db.store import StoreError


def open_in_workspace(rec) -> None:
    state.set_config(rec.config)
    state.set_calibration(calib.of_settings(rec.settings))  # kept only while the config holds the fit
    state.set_plan(CurrentPlan(plan=rec.plan, config=rec.config, planner=services.planner_key(rec.planner),
                               settings=dict(rec.settings),
                               token=rec.token, label=rec.label))
    st.query_params.clear()
    st.rerun()


def leave() -> None:
    st.query_params.clear()
    st.rerun()


token = str(st.query_params.get("plan", "")).strip()
try:
    record = services.store().get_plan(token) if token else None
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

st.title(md(record.label) if record.label else "Shared plan")
who = f" by {md(record.author)}" if record.author else ""
st.caption(f"Read-only · planned by {md(services.planner_label(record.planner))} · config "
           f"'{md(record.config_name)}' v{record.config_version} · {len(record.plan['plan'])} tables on "
           f"{md(record.config['topology']['world_size'])} ranks · saved {record.created_at:%Y-%m-%d %H:%M} UTC{who}")
views.calibrated_note(record.settings, record.config)
if st.button("Open a copy in my workspace", key="shared_open", icon=":material/edit:",
             help="edit the tables, replan and save under a new link; this shared plan stays as it is"):
    open_in_workspace(record)
views.plan_view(record.plan, record.config, "shared")
st.subheader("Take it away", divider="gray")
views.downloads(record.plan, record.config, "shared", record.label)
