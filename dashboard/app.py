"""The planning workspace: `streamlit run dashboard/app.py`. Opens on the embedded default (SQLite under
./data or PLANNER_DATA_DIR); DATABASE_URL points it at another database. `?plan=TOKEN` opens a saved
plan read-only.
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:  # `streamlit run` puts only dashboard/ on the path; engine and db sit beside it
    sys.path.insert(0, ROOT)

import streamlit as st  # noqa: E402

from dashboard.plans import calibration as calib  # noqa: E402
from dashboard.serve import jobs  # noqa: E402
from dashboard.ui import keyboard, services, state, views, workspace  # noqa: E402, F401 - views: the pages' imports, before freezing
from dashboard.text import code, count_text, md, ms_text  # noqa: E402
from db.store import StoreError  # noqa: E402

# A file served by the app itself: a material-icon favicon is fetched from fonts.gstatic.com by the browser.
FAVICON = Path(__file__).resolve().parent / "assets" / "favicon.png"
# The menu's default "Get help" and "Report a bug" lead to streamlit.io; "About" says what this is.
MENU_ITEMS = {"Get help": None, "Report a bug": None,
              "About": "Sharding planner: plan, compare and measure TorchRec embedding-table sharding."}

PAGES = {
    "Workspace": [
        st.Page("app_pages/tables.py", title="Tables & constraints", icon=":material/table_chart:", default=True),
        st.Page("app_pages/workload.py", title="Workload", icon=":material/bar_chart:"),
        st.Page("app_pages/topology.py", title="Topology", icon=":material/hub:"),
        st.Page("app_pages/plan.py", title="Plan", icon=":material/insights:"),
        st.Page("app_pages/whatif.py", title="What-if", icon=":material/science:"),
    ],
    "Results": [
        st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page("app_pages/runs.py", title="Runs", icon=":material/play_circle:"),
        st.Page("app_pages/save_share.py", title="Save & share", icon=":material/share:"),
    ],
}
EDITING_PAGES = ("Tables & constraints", "Topology")  # they carry the headline and the first view's guide
SHARED_PAGE = st.Page("app_pages/shared.py", title="Shared plan", icon=":material/visibility:")
# Less empty space above each page, so a page's working area fits a 1280x800 screen; metric values a size at which
# five in a row show whole at 1280 px ("0.00547 ms" was cut to "0.00547..." at Streamlit's 2.25rem); a script's
# empty element (dashboard.ui.keyboard) takes no row; a grid's own toolbar (add row, columns, download, search,
# fullscreen), shown only on mouse hover, shows itself and a focus ring on the button Tab reached.
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"] {padding-top: 3.4rem; padding-bottom: 2rem;}
h1 {font-size: 2rem !important; padding-top: 0 !important;}
[data-testid="stMetricValue"] {font-size: 1.75rem;}
[data-testid="stElementContainer"]:has(> [data-testid="stHtml"] > script:only-child) {display: none;}
[data-testid="stElementToolbar"]:has(:focus-visible) {opacity: 1;}
[data-testid="stBaseButton-elementToolbar"]:focus-visible {box-shadow: 0 0 0 3px rgba(197, 57, 72, 0.5);}
</style>"""


def sidebar(store) -> None:
    cfg = state.config()
    topo = cfg.get("topology") or {}
    with st.sidebar:
        st.markdown("**This session**")
        st.caption(f"{count_text(len(cfg.get('tables') or []), 'table')} · {md(topo.get('world_size', '?'))} ranks · "
                   f"{md(topo.get('compute_device', 'cuda'))}")
        cal = state.calibration()
        if cal is not None:
            st.caption(md(calib.note(cal)))
        p = state.plan()
        if p is None:
            st.caption("No plan yet")
        elif not p.matches(cfg):  # its numbers are another config's: none of them here
            st.caption("No plan of this config yet (the last plan was made for an earlier config)")
        else:
            st.caption(f"Plan: slowest rank {ms_text(p.plan.max_rank_cost_ms)} by "
                       f"{md(services.planner_label(p.planner))}")
            if p.token:
                st.caption(f"Saved as '{md(p.label or p.token[:8])}'")
        job = state.plan_job()
        if job is not None:
            doing = "is waiting for a free worker" if job.job.state is jobs.JobState.QUEUED else "is planning"
            st.caption(f"{md(services.PLANNERS[job.planner])} {doing} in the background (the Plan page shows "
                       "its time and a Cancel)")
        workspace.undo_button(st, "ws_undo")
        st.divider()
        st.caption(f"Database: {code(store.where)}")


def main() -> None:
    st.set_page_config(page_title="Sharding planner", page_icon=str(FAVICON), layout="wide", menu_items=MENU_ITEMS)
    problems = services.settings_problems()  # before anything starts a worker or a job
    for problem in problems:
        st.error(f"The server's settings: {md(problem)}", icon=":material/settings:")
    if problems:
        st.stop()
    services.freeze_startup_objects()
    services.start_housekeeping()
    try:
        store = services.store()
    except StoreError as e:
        st.error(f"Cannot open the database: {md(e)}", icon=":material/database:")
        st.stop()
    st.html(COMPACT_CSS)
    keyboard.popover_tab()
    if "plan" in st.query_params:
        st.navigation([SHARED_PAGE], position="hidden").run()
        return
    page = st.navigation(PAGES)
    if page.title not in EDITING_PAGES:  # the first view's guide has done its job once another page is open
        state.close_guide()
    workspace.collect_job()  # a background plan that ended: its result, before the page shows plans
    try:
        page.run()
    except BaseException:  # st.rerun, st.stop or an error: no headline in this run
        workspace.drop_headline_slot()
        raise
    else:
        workspace.fill_headline()  # in the place the page reserved, from the config its widgets left
    finally:  # drawn after the page, so it shows what the page just did (a new plan, a save)
        sidebar(store)


main()
