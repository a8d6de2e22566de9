"""Plan: run our planner (or TorchRec's, as a baseline) on the workspace config, then see the plan:
per-table sharding, memory and cost per rank, the heatmap, why the slowest rank is slow, and downloads.
"""

import streamlit as st

import engine
from dashboard import services, state, views
from dashboard.state import CurrentPlan
from dashboard.text import md


def run_planner(config: dict, planner: str, effort: int) -> None:
    """Plan with a progress bar; a result replaces the current plan, an error is shown in one line."""
    n, w = len(config.get("tables") or []), md((config.get("topology") or {}).get("world_size", "?"))
    key = state.config_key(config)
    bar = st.progress(10, text=f"Planning {n} tables on {w} ranks with {services.PLANNERS[planner]}")
    try:
        result = services.plan_config(key, planner, effort)  # checks the config first (engine.ConfigError)
    except engine.ConfigError as e:
        bar.empty()
        st.error(f"The config has a problem: {md(e)}. Fix it on Tables & constraints or Topology.",
                 icon=":material/error:")
        return
    except (engine.EngineError, services.PlannerUnavailable) as e:
        bar.empty()
        st.error(f"No plan: {md(e)}", icon=":material/error:")
        return
    settings = {"planner": planner, "effort": effort}
    cal = state.calibration()
    if cal is not None:  # the config's bandwidths are this fit: the plan's estimates are calibrated
        settings["calibration"] = cal
    secs = result.plan.get("planning_seconds") or 0.0
    bar.progress(100, text=f"Planned {n} tables on {w} ranks in {secs:.2f} s ({services.PLANNERS[planner]})")
    state.set_plan(CurrentPlan(plan=result.plan, config=result.config, planner=planner, settings=settings,
                               source_key=key))


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


st.title("Plan")
config = state.config()
planner, effort, auto, go = controls()
current = state.plan()
stale = current is None or not current.matches(config) or current.planner != planner
if go or (auto and stale and planner == services.OURS):
    run_planner(config, planner, effort)
    current = state.plan()
if current is not None and not current.matches(config):
    st.warning("The config changed since this plan was made: the plan below is for the earlier config.",
               icon=":material/update:")

if current is None:
    st.info("No plan yet: press Plan.", icon=":material/info:")
else:
    where = f"saved as '{md(current.label)}'" if current.token else "not saved yet"
    st.caption(f"Plan by {md(services.planner_label(current.planner))} · {len(current.plan['plan'])} tables · "
               f"{where}")
    views.calibrated_note(current.settings, current.config)
    views.plan_view(current.plan, current.config, "plan")
    st.subheader("Take it away", divider="gray")
    views.downloads(current.plan, current.config, "plan", current.label)
    st.page_link("app_pages/save_share.py", label="Save it and get a share link", icon=":material/share:")
