"""The one module touching st.session_state: the workspace's config and its undo history, the calibration its
bandwidths come from, the grid's base rows, the current plan and the one before it, the background planning job, the
first view's guide, the last saved token, the plans picked for comparison, the pages' background jobs and their
results (Compare's TorchRec plan, What-if's sweep and re-plan), inputs kept across pages, and one-shot messages.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Optional

import streamlit as st

import engine
from dashboard.plans import calibration as calib
from dashboard.plans.current import CurrentPlan, PlanJob, full_key, full_topology, pop_history, push_history, same_plan
from dashboard.plans.current import config_key  # noqa: F401  (the pages call state.config_key)
from dashboard.tables import grid, presets, row_checks

CONFIG = "ws_config"
BULK_DELETE = "ws_bulk_delete"  # a bulk delete waiting for its confirmation: the rows' positions and names
HISTORY = "ws_history"  # earlier workspace configs, newest last: (what the edit was, zlib'd canonical JSON)
MAX_HISTORY = 20  # edits an undo can go back
GRID_BASE = "ws_grid_base"
GRID_ISSUES = "ws_grid_issues"
PLAN = "ws_plan"
PREVIOUS_PLAN = "ws_previous_plan"
PLAN_JOB = "ws_plan_job"
GUIDE = "ws_guide"  # the first view's guide: the config key it was opened on, or DONE
GUIDE_DONE = "done"
SAVED = "ws_saved_token"
EXTRA_PLANS = "ws_extra_plans"
FLASH = "ws_flash"
RUNS = "ws_runs"
CALIBRATION = "ws_calibration"
PENDING_PREFIX = "ws_pending_"
KEPT = "ws_kept"  # inputs' values kept across pages: Save & share's author and config name, Compare's picks
TORCHREC_JOB = "compare_torchrec_job"  # Compare: TorchRec's planner on a picked plan's config, in the background
SWEEP_JOB, SWEEP_RESULT = "whatif_sweep_job", "whatif_sweep_result"  # What-if: the capacity sweep, its points
REPLAN_RESULT = "whatif_replan_result"  # What-if: the last re-plan from a saved plan
MEASURE_JOB, MEASURE_RESULT = "topology_measure_job", "topology_measure_result"  # Topology: measure-tables here
SCRATCH = "ws_scratch_plan"  # the working view: the plan from scratch asked for beside the re-plan on screen
LAST_EDIT = "ws_last_edit"  # the working view: the plan on screen when the newest edit landed

TABLES_GRID = "tables_grid"
CONSTRAINTS_GRID = "tables_constraints_grid"
TOPOLOGY_PREFIX = "topology_"
TOPOLOGY_HOSTS = "topology_hosts"  # the Topology page's hosts input (not a topology field: world / local world)
WORKLOAD = "workload_measured"  # Workload: the last sample measured: (config key, name, its figures)
WORKLOAD_TASK = "workload_task"  # Workload: the sample being measured in a worker process
WORKLOAD_CHANGES = "workload_changes"  # Workload: what the last "Apply to tables" changed (a frame)


# ---- the config ---------------------------------------------------------------------------------


def config() -> dict:
    if CONFIG not in st.session_state:
        st.session_state[CONFIG] = full_topology(presets.tutorial())
    return st.session_state[CONFIG]


def topology() -> dict:
    return config().get("topology") or {}


def set_config(cfg: dict, reset_widgets: bool = True, edit: str = "replace the tables") -> None:
    """Replace the workspace config (`edit` says how, for undo); the grid and topology widgets start again
    from it."""
    new = full_topology(copy.deepcopy(cfg))
    _remember(new, edit)
    st.session_state[CONFIG] = new
    if reset_widgets:
        _restart_widgets(new)


def _restart_widgets(cfg: dict) -> None:
    st.session_state.pop(GRID_BASE, None)
    st.session_state.pop(GRID_ISSUES, None)
    forget_widgets([TABLES_GRID, CONSTRAINTS_GRID, *topology_widget_keys()])


def update_config(cfg: dict, edit: str = "a grid edit") -> None:
    """The config as the widgets now show it (no widget reset)."""
    old = st.session_state.get(CONFIG)
    if old is not None and cfg != old and not grid.only_written_out(old, cfg):
        _remember(cfg, edit)
    st.session_state[CONFIG] = cfg


def set_topology(topo: dict, reset_widgets: bool = True, edit: str = "a topology edit") -> None:
    """Replace the topology; reset_widgets: the Topology page's inputs show it from the next run on. They are on
    screen when a button there calls this, so they are handed the new values: forgetting their state would leave
    the browser showing, and sending back, the old ones."""
    cfg = dict(config())
    cfg["topology"] = dict(topo)
    _remember(cfg, edit)
    st.session_state[CONFIG] = cfg
    if reset_widgets:
        _topology_inputs_show(topo)


def _topology_inputs_show(topo: dict) -> None:
    form = presets.topology_form(topo)
    for f in engine.TOPOLOGY_FIELDS:
        set_pending(f"{TOPOLOGY_PREFIX}{f}", form[f])


def bulk_delete_request() -> Optional[dict]:
    """The bulk delete waiting for its confirmation: {"positions": [...], "names": [...]}, or None."""
    return st.session_state.get(BULK_DELETE)


def set_bulk_delete_request(request: Optional[dict]) -> None:
    if request is None:
        st.session_state.pop(BULK_DELETE, None)
    else:
        st.session_state[BULK_DELETE] = request


# ---- undo ---------------------------------------------------------------------------------------


def _remember(new: dict, edit: str) -> None:
    """Keep the config `new` replaces (when it differs) as the newest undo step, at most MAX_HISTORY of them."""
    old = st.session_state.get(CONFIG)
    if old is not None and old != new:
        push_history(st.session_state.setdefault(HISTORY, []), edit, old, MAX_HISTORY)


def undo_steps() -> list[str]:
    """The edits undo can take back, newest first."""
    return [edit for edit, _ in reversed(st.session_state.get(HISTORY) or [])]


def undo() -> Optional[str]:
    """Put back the config from before the newest edit (every widget then shows it); returns what was undone,
    or None when there is nothing to undo."""
    step = pop_history(st.session_state.get(HISTORY) or [])
    if step is None:
        return None
    edit, cfg = step
    st.session_state[CONFIG] = cfg
    _restart_widgets(cfg)
    try:
        _topology_inputs_show(cfg.get("topology") or {})
        set_pending(TOPOLOGY_HOSTS, presets.topology_form(cfg.get("topology") or {})["hosts"])
    except (TypeError, ValueError, KeyError):  # a topology the inputs cannot show: they start from their defaults
        pass
    return edit


def apply_topology_pending() -> None:
    """Call before drawing the Topology page's inputs: they take the values set_topology left them."""
    for key in topology_widget_keys():
        apply_pending(key)


def calibration() -> Optional[engine.Calibration]:
    """The calibration the workspace's bandwidths are the fit of (kept in the session as its as_dict()); dropped
    for good once they no longer are (a bandwidth edited by hand, a preset, another device kind, another
    config)."""
    kept = st.session_state.get(CALIBRATION)
    cal = calib.read(kept)
    if kept is not None and not calib.holds(cal, topology()):
        st.session_state.pop(CALIBRATION, None)
        return None
    return cal


def set_calibration(cal: Optional[engine.Calibration]) -> None:
    """Mark the workspace's bandwidths as this calibration's fit (None: not calibrated)."""
    if cal is None:
        st.session_state.pop(CALIBRATION, None)
    else:
        st.session_state[CALIBRATION] = cal.as_dict()


def topology_widget_keys() -> list[str]:
    """The Topology page's inputs, one per topology field (not its preset pickers)."""
    return [f"{TOPOLOGY_PREFIX}{f}" for f in engine.TOPOLOGY_FIELDS]


# ---- widgets ------------------------------------------------------------------------------------


def widget(key: str, default: Any = None) -> Any:
    return st.session_state.get(key, default)


def has_widget(key: str) -> bool:
    return key in st.session_state


def forget_widgets(keys: Iterable[str]) -> None:
    """Drop widget state so the widgets start again from their (new) default values."""
    for k in list(keys):
        st.session_state.pop(k, None)


def set_widget(key: str, value: Any) -> None:
    """Set a widget's value before it is drawn in this run (e.g. a preset filling inputs)."""
    st.session_state[key] = value


def kept(key: str, default: Any = None) -> Any:
    """The value widget `key` had when a run last drew it (remember), to draw it with again: Streamlit forgets a
    widget's state once a run does not draw it, so a visit to another page would reset it."""
    return st.session_state.get(KEPT, {}).get(key, default)


def remember(key: str, value: Any) -> None:
    """Keep widget `key`'s value (as drawn in this run) beyond this page: kept(key) gives it back."""
    st.session_state.setdefault(KEPT, {})[key] = copy.deepcopy(value)


def set_pending(key: str, value: Any) -> None:
    """A value for widget `key` to take on the next run (a widget drawn in this run cannot be set)."""
    st.session_state[f"{PENDING_PREFIX}{key}"] = value


def apply_pending(key: str) -> None:
    """Call before drawing widget `key`: gives it the value set_pending left for it, if any."""
    pending = f"{PENDING_PREFIX}{key}"
    if pending in st.session_state:
        st.session_state[key] = st.session_state.pop(pending)


# ---- the grid's base rows -----------------------------------------------------------------------


def grid_base() -> tuple[list[dict], list[str]]:
    """Rows the table editors were drawn from, and their issue column (issues and notes). A fresh editor (first
    visit, or back from another page, whose run dropped the editors' state) starts from the current config."""
    if GRID_BASE not in st.session_state or not (has_widget(TABLES_GRID) or has_widget(CONSTRAINTS_GRID)):
        rows = grid.config_to_rows(config())
        issues, _ = row_checks.row_issues(rows, topology())
        st.session_state[GRID_BASE] = rows
        st.session_state[GRID_ISSUES] = row_checks.issue_column(issues, row_checks.row_notes(rows))
    return st.session_state[GRID_BASE], st.session_state[GRID_ISSUES]


def set_grid_base(rows: list[dict], issues: list[str]) -> None:
    """New base rows (after an add, delete, bulk edit or a change of issues); the editors restart."""
    st.session_state[GRID_BASE] = rows
    st.session_state[GRID_ISSUES] = issues
    forget_widgets([TABLES_GRID, CONSTRAINTS_GRID])


# ---- plans --------------------------------------------------------------------------------------


def plan() -> Optional[CurrentPlan]:
    return st.session_state.get(PLAN)


def set_plan(p: Optional[CurrentPlan]) -> None:
    """Make `p` the current plan; the plan it replaces becomes the previous one (what changed since)."""
    old = st.session_state.get(PLAN)
    if old is not None and p is not None and not same_plan(old, p):
        st.session_state[PREVIOUS_PLAN] = old
    st.session_state[PLAN] = p


def previous_plan() -> Optional[CurrentPlan]:
    """The plan the current one replaced (for another config, or another planner)."""
    return st.session_state.get(PREVIOUS_PLAN)


def current_plan() -> Optional[CurrentPlan]:
    """The current plan only when it was made for the workspace config as it is now (else None)."""
    p = plan()
    return p if p is not None and p.matches(config()) else None


def plan_job() -> Optional[PlanJob]:
    return st.session_state.get(PLAN_JOB)


def set_plan_job(job: Optional[PlanJob]) -> None:
    if job is None:
        st.session_state.pop(PLAN_JOB, None)
    else:
        st.session_state[PLAN_JOB] = job


# ---- the first view's guide ---------------------------------------------------------------------


def guide_open() -> bool:
    """True on a first view: the workspace still holds the config it opened with, nothing was saved or shown on
    the Plan page and the guide was not dismissed. Once closed it stays closed."""
    if st.session_state.get(GUIDE) == GUIDE_DONE:
        return False
    key = full_key(config())
    if st.session_state.setdefault(GUIDE, key) != key:
        close_guide()
        return False
    return True


def close_guide() -> None:
    st.session_state[GUIDE] = GUIDE_DONE


def mark_saved(token: str, label: str) -> None:
    st.session_state[SAVED] = token
    p = plan()
    if p is not None:
        p.token, p.label = token, label


def saved_token() -> Optional[str]:
    return st.session_state.get(SAVED)


def extra_plans() -> dict[str, dict]:
    """Unsaved plans offered on the Compare page (TorchRec's baseline): label -> {"plan": engine.Plan, "config":
    engine.Config, "settings"}."""
    return st.session_state.setdefault(EXTRA_PLANS, {})


def add_extra_plan(label: str, plan: engine.Plan, config: engine.Config, settings: Optional[dict] = None) -> None:
    extra_plans()[label] = {"plan": plan, "config": config, "settings": dict(settings or {})}


def my_runs() -> list[int]:
    return st.session_state.setdefault(RUNS, [])


def add_run(run_id: int) -> None:
    runs = my_runs()
    if run_id not in runs:
        runs.append(run_id)


# ---- the pages' background jobs and their results -------------------------------------------------------


PAGE_VALUES = {  # what each holds
    TORCHREC_JOB: 'Compare\'s running baseline: {"job": jobs.Job, "config", "settings", "name", "label"}',
    SWEEP_JOB: 'What-if\'s running sweep: {"job": jobs.Job, "points", "key": its config\'s key}',
    SWEEP_RESULT: 'What-if\'s last sweep: {"points"} or {"error"}, and "key", its config\'s key',
    MEASURE_JOB: 'Topology\'s running measure-tables: {"job": jobs.Job, "dry_runs", "tables", "key"}',
    MEASURE_RESULT: 'Topology\'s last measurement: {"file": the bytes measure-tables wrote, "name"} or {"error"}',
    REPLAN_RESULT: "What-if's last re-plan: its summary, plan, config, where from, the byte limit, its config's key",
    SCRATCH: 'the headline\'s plan from scratch: {"for": the config key of the re-plan on screen, "result"}',
    LAST_EDIT: 'the newest edit: {"before": the plan on screen then, "streak": edits in a row that left it as it was}',
    WORKLOAD_TASK: 'Workload\'s sample in the works: {"task": planpool.Task, "name", "bytes", "file_id", "key"}',
}


def page_value(key: str) -> Optional[dict]:
    """A page's background job or result (a key of PAGE_VALUES), or None."""
    if key not in PAGE_VALUES:
        raise KeyError(key)
    return st.session_state.get(key)


def set_page_value(key: str, value: Optional[dict]) -> None:
    """Keep a page's background job or result (a key of PAGE_VALUES); None forgets it."""
    if key not in PAGE_VALUES:
        raise KeyError(key)
    if value is None:
        st.session_state.pop(key, None)
    else:
        st.session_state[key] = value


# ---- one-shot messages --------------------------------------------------------------------------


def flash(message: str, kind: str = "success") -> None:
    """A message shown once, on the next run (after st.rerun). It is markdown: user text in it goes through
    dashboard.text.md."""
    st.session_state[FLASH] = (kind, message)


def pop_flash() -> Optional[tuple[str, str]]:
    return st.session_state.pop(FLASH, None)


def workload() -> Optional[tuple[str, str, dict]]:
    """The Workload page's last measured sample: (the config key it was measured for, its name, its figures)."""
    return st.session_state.get(WORKLOAD)


def set_workload(measured: Optional[tuple[str, str, dict]]) -> None:
    st.session_state[WORKLOAD] = measured


def workload_changes() -> Any:
    return st.session_state.get(WORKLOAD_CHANGES)


def set_workload_changes(frame: Any) -> None:
    st.session_state[WORKLOAD_CHANGES] = frame
