"""Plan: run our planner (or TorchRec's, as a baseline, in the background) on the workspace config, then see the
plan: per-table sharding, memory and cost per rank, the heatmap, why the slowest rank is slow, and downloads. A
plan made for an earlier config is never shown as the current one.
"""

import streamlit as st


from dashboard.plans import table_costs as tcosts
from dashboard.ui import services, state, views, workspace
from dashboard.text import count_text, md, ms_text, sig_text

JOB_POLL_S = 1.0


def run_planner(config: dict, effort: int) -> bool:
    """Plan with our planner and a progress bar; a result replaces the current plan, an error is one line
    (False)."""
    n, w = len(config.get("tables") or []), md((config.get("topology") or {}).get("world_size", "?"))
    key = state.config_key(config)
    label = services.PLANNERS[services.OURS]
    bar = st.progress(10, text=f"Planning {count_text(n, 'table')} on {w} ranks with {label}")
    outcome = services.plan_outcome(key, effort)  # checks the config first
    if outcome.result is None:
        bar.empty()
        if outcome.config_error:
            st.error(f"The config has a problem: {md(outcome.problem)}. Fix it on Tables & constraints or Topology.",
                     icon=":material/error:")
        else:
            st.error(f"No plan: {md(outcome.problem)}", icon=":material/error:")
        return False
    secs = outcome.result.plan.planning_seconds or 0.0
    bar.progress(100, text=f"Planned {count_text(n, 'table')} on {w} ranks in {sig_text(secs)} s ({label})")
    state.set_plan(workspace.make_current(outcome.result, services.OURS, effort, key))
    return True


def controls() -> tuple[str, int, bool, bool]:
    c0, c1, c2, c3 = st.columns([1, 4, 1.4, 1.4], vertical_alignment="bottom")
    go = c0.button("Plan", type="primary", key="plan_run", icon=":material/play_arrow:", width="stretch")
    planner = c1.radio("Planner", list(services.PLANNERS), format_func=services.PLANNERS.get, horizontal=True,
                       key="plan_planner")
    effort = c2.number_input("Search effort", 0, 1_000_000, services.DEFAULT_EFFORT, 5_000, key="plan_effort",
                             disabled=planner != services.OURS,
                             help="work units of search after the greedy placement (0: greedy only). The same config "
                                  "and effort give the same plan on any machine: `python -m engine plan --effort N`")
    auto = c3.toggle("Auto-replan", value=True, key="plan_auto",
                     help="replan with our planner whenever the tables or topology change")
    return planner, int(effort), auto, go


@st.fragment(run_every=JOB_POLL_S)
def job_progress() -> None:
    """A background plan's elapsed time and its Cancel, redrawn every second on their own (the rest of the page
    stays usable); when it ends, the whole app runs again and takes the result."""
    pj = state.plan_job()
    if pj is None:
        return
    if not pj.job.live:
        st.rerun()
    if workspace.job_box("plan_job", "plan_job_cancel",
                         f"{workspace.job_running_text(pj)}. The rest of the app stays usable; its plan "
                         "becomes the current one when it finishes (if the config is still the same)."):
        workspace.cancel_job()
        st.rerun()


def previous(p) -> None:
    """A plan of an earlier config, collapsed and labelled as such: never shown as the current one."""
    tables = count_text(len(p.plan.tables), "table")
    with st.expander(f"The last plan, made for an earlier config ({tables}): not this config's", expanded=False,
                     icon=":material/history:"):
        st.caption(f"By {md(services.planner_label(p.planner))}: slowest rank {ms_text(p.plan.max_rank_cost_ms)}. "
                   "Its tables, topology or constraints differ from the workspace's now.")
        views.plan_metrics(p.plan)


def current_view(current) -> None:
    where = f"saved as '{md(current.label)}'" if current.token else "not saved yet"
    how = f"{current.how} · " if current.how else ""  # re-planned from the plan on screen, or from scratch and why
    tables = count_text(len(current.plan.tables), "table")
    st.caption(f"Plan by {md(services.planner_label(current.planner))} · {tables} · {how}{where}")
    change = workspace.change_line(current)
    if change is not None:
        st.caption(change)
    views.calibrated_note(current.settings, current.config)
    measured = tcosts.in_use(state.config())
    if measured:
        st.caption(f"{count_text(measured, 'table')} priced as measured alone on the device, with what they cost each "
                   "other on a rank (Topology: Tables measured on the device).")
    views.plan_view(current.plan, current.config, "plan")
    st.subheader("Take it away", divider="gray")
    views.downloads(current.plan, current.config, "plan", current.label)
    st.page_link("app_pages/save_share.py", label="Save it and get a share link", icon=":material/share:")


st.title("Plan")
views.show_flash()
config = state.config()
planner, effort, auto, go = controls()
current = state.plan()
stale = current is None or not current.matches(config) or current.planner != planner
planned = True
if go and planner == services.TORCHREC:
    workspace.start_torchrec_job(config)
elif go or (auto and stale and planner == services.OURS):
    planned = run_planner(config, effort)
if state.plan_job() is not None:
    job_progress()

current = state.plan()
if current is not None and current.matches(config):
    current_view(current)
else:
    if planned and state.plan_job() is None:
        st.info("No plan of the workspace's config yet: press Plan.", icon=":material/info:")
    if current is not None:
        previous(current)
