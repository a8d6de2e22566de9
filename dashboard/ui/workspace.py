"""The working view's shared parts: the headline strip the editing pages draw under their title (the plan of
the config as edited: slowest rank, against the lower bound, peak memory against capacity, fits, what changed),
the first view's guide, the current plan made from a planner's result, and a background plan job's outcome.
"""

from __future__ import annotations

import json
import threading

import streamlit as st

import engine

from dashboard.plans import headline

from dashboard.serve import jobs

from dashboard.tables import grid, row_checks

from dashboard.ui import services, state
from dashboard.plans.current import same_plan
from dashboard.ui.state import CurrentPlan, PlanJob
from dashboard.text import count_text, md, ms_text

_slot = threading.local()  # each session's script runs in a thread of its own


def make_current(result: services.PlanResult, planner: str, effort: int | None, source_key: str) -> CurrentPlan:
    """A planner's result as the workspace's plan, its settings recorded (the calibration its bandwidths are)."""
    settings: dict = {"planner": planner}
    if effort is not None:
        settings["effort"] = effort
    cal = state.calibration()
    if cal is not None:  # the config's bandwidths are this fit: the plan's estimates are calibrated
        settings["calibration"] = cal.as_dict()
    return CurrentPlan(plan=result.plan, config=result.config, planner=planner, settings=settings,
                       source_key=source_key)


# ---- undo ---------------------------------------------------------------------------------------


def undo() -> None:
    """Take back the newest workspace edit (a button's callback: it runs before the page draws, so every widget
    shows the config as it was)."""
    edit = state.undo()
    if edit is not None:
        state.flash(f"Undid {md(edit)}.")


def undo_button(where, key: str) -> None:
    """An Undo button in `where` (a container), naming the edit it takes back."""
    steps = state.undo_steps()
    tip = (f"Undo {steps[0]} ({len(steps)} edit{'s' if len(steps) != 1 else ''} can be undone, the last "
           f"{state.MAX_HISTORY} are kept)") if steps else "No edit to undo"
    where.button("Undo", key=key, icon=":material/undo:", disabled=not steps, help=md(tip), on_click=undo)


# ---- the headline -------------------------------------------------------------------------------


def headline_slot() -> None:
    """Call right after st.title on an editing page: the headline's place. It is drawn there once the page has
    run (fill_headline, from app.py), from the config as the page's widgets left it."""
    _slot.container = st.container(key="ws_headline_slot")


def drop_headline_slot() -> None:
    _slot.container = None


def fill_headline() -> None:
    """Draw the headline in the place this run's page reserved, if it did (then forget the place)."""
    container = getattr(_slot, "container", None)
    _slot.container = None
    if container is not None:
        with container:
            strip(state.config())
            guide()


def _base_for(current: CurrentPlan | None, config: dict) -> tuple[CurrentPlan | None, str]:
    """The plan on screen to re-plan `config` from after an edit, or None and why `config` is planned from scratch
    (a re-plan from that plan would mean nothing)."""
    if current is None:
        return None, "the first plan of this session"
    if services.planner_key(current.planner) != services.OURS:
        return None, f"the plan on screen is {md(services.planner_short(current.planner))}'s"
    if current.settings.get("effort", services.DEFAULT_EFFORT) != services.DEFAULT_EFFORT:
        return None, "the plan on screen was made with another search effort"
    try:
        earlier = json.loads(current.source_key)
    except ValueError:
        earlier = {}
    if earlier.get("topology") != config.get("topology"):
        return None, "the topology changed"
    names = {t.get("name") for t in config.get("tables") or [] if isinstance(t, dict)}
    if 2 * len(names & current.plan.tables.keys()) < len(names):
        return None, "most tables are new"
    return current, ""


def _plan_for(config: dict, box) -> tuple[CurrentPlan | None, services.PlanOutcome | None]:
    """The current plan when it was made for `config`; else our planner's plan of it, made current when there
    is one (the outcome says why when there is none): re-planned from the plan on screen, so an edit moves little,
    or from scratch where that means nothing (_base_for) or fails. `box`: where a wait for it shows."""
    current = state.plan()
    key = state.config_key(config)
    if current is not None and current.source_key == key:
        return current, None
    base, why = _base_for(current, config)
    if base is None:
        outcome = services.plan_outcome(key, services.DEFAULT_EFFORT, box)
    else:
        outcome = services.edit_outcome(key, base.plan, services.DEFAULT_EFFORT, box)
        why = md(outcome.scratch_why)
    if outcome.result is None:
        return None, outcome
    current = make_current(outcome.result, services.OURS, services.DEFAULT_EFFORT, key)
    current.replanned = outcome.replanned
    if outcome.replanned:
        moved = outcome.moved_bytes or 0
        current.how = ("re-planned from the plan on screen: " +
                       (f"{engine.human_bytes(moved)} moved between ranks" if moved else "nothing moved"))
    else:
        current.how = f"from scratch: {why}"
    state.set_plan(current)
    return current, outcome


def _fix_text(config: dict, problem: str) -> str:
    """What stops the config from planning: the rows (as the grid counts them) or the topology to fix."""
    issues, outside = row_checks.row_issues(grid.config_to_rows(config), config.get("topology") or {})
    bad = sum(1 for t in issues if t)
    parts = []
    if bad:
        parts.append(f"Fix {bad:,} row{'' if bad == 1 else 's'} to plan (see the issue column on Tables & "
                     "constraints)")
    if outside:
        parts.append(f"Fix the topology to plan: {md(outside)}")
    return ". ".join(parts) if parts else f"Fix the config to plan: {md(problem)}"


def strip(config: dict) -> None:
    """The headline of the config's plan, or why there is none; no number of a plan for another config. The figure
    and the change line are one element, drawn once both are worked out, in the place a wait for the plan showed:
    the browser never shows one plan's figure beside another's change line (issue 28 item 10)."""
    with st.container(border=True, key="ws_headline"):
        box = st.empty()
        current, outcome = _plan_for(config, box)
        if current is None:
            if outcome.config_error:
                box.markdown(f":orange-badge[:material/edit: Not planned] {_fix_text(config, outcome.problem)}.")
            elif outcome.refused:
                box.markdown(f":red-badge[:material/block: Does not fit] {md(outcome.reason)} (what would help: "
                             "the Plan page)")
            else:
                box.markdown(f":red-badge[:material/error: No plan] {md(outcome.problem)}")
            return
        box.markdown(f"{headline_text(current)}  \n:small[:gray[{since_text(current)}]]")
        if current.replanned:
            scratch_offer(current)


def headline_text(current: CurrentPlan) -> str:
    """The headline's first line (markdown): fits, the slowest rank, against the lower bound, peak memory."""
    h = headline.headline(current.plan)
    if not h.fits:
        fits = ":red-badge[:material/block: Over capacity]"
    elif h.into_reservation:
        fits = (":orange-badge[:material/warning: Tight] the step's peak reaches into the memory kept for the "
                "dense model ·")
    else:
        fits = ":green-badge[:material/check: Fits]"
    vs = f"**{h.vs_lower_bound:.3f}x** the lower bound" if h.vs_lower_bound else "no lower bound"
    memory = " · ".join(headline.memory_text(m) for m in h.memory)
    return f"{fits} Slowest rank **{ms_text(h.slowest_ms)}** (rank {h.slowest_rank}) · {vs} · {memory}"


def since_text(current: CurrentPlan) -> str:
    """The change line (markdown): who made the plan and how, and what changed since the plan before it."""
    group = headline.group_text(current.config)
    by = f"Plan by {md(services.planner_label(current.planner))}, {count_text(len(current.plan.tables), 'table')} on " \
         + (group if group else count_text(len(current.plan.ranks), 'rank'))
    if current.how:
        by += f", {current.how}"
    change = change_line(current)
    if change is None:
        return f"{by}." if current.how else f"{by}; the first plan of this session."
    return f"{by}. {change}."


def change_line(current: CurrentPlan) -> str | None:
    """What the newest edit did to the plan (markdown): 'Since the last plan: slowest rank A → B ms ...', or, when
    the edit left the plan as it was (a value typed over itself, a constraint the plan already kept), that it was
    planned and nothing changed: without it the strip would read as before and the edit would seem lost. None
    before any change."""
    edit = state.page_value(state.LAST_EDIT)
    if edit is not None and edit["before"] is not None and same_plan(edit["before"], current):
        n = edit["streak"]
        what = "Edit planned" if n == 1 else f"{n:,} edits in a row planned"
        return f"{what}: same plan, slowest rank {ms_text(current.plan.max_rank_cost_ms)} (same)"
    previous = state.previous_plan()
    if previous is None:
        return None
    return f"Since the last plan: {md(headline.change_text(change_of(previous, current)))}"


def note_edit() -> None:
    """An edit of the workspace landed (a grid's on_change, a table tool): keep the plan on screen then, so the strip
    can tell once the edit is planned whether it changed that plan; edits in a row that left it as it was are
    counted, so each one shows."""
    on_screen, last = state.plan(), state.page_value(state.LAST_EDIT)
    kept = last is not None and last["before"] is not None and on_screen is not None and \
        same_plan(last["before"], on_screen)
    state.set_page_value(state.LAST_EDIT, {"before": on_screen, "streak": last["streak"] + 1 if kept else 1})


def scratch_offer(current: CurrentPlan) -> None:
    """Under a re-plan: 'Plan from scratch', one click. It plans the config from scratch and shows the two side by
    side (each one's slowest rank, what switching moves), with the plan from scratch to adopt or leave."""
    asked = state.page_value(state.SCRATCH)
    if asked is None or asked["for"] != current.source_key:
        st.button("Plan from scratch", key="ws_scratch", icon=":material/restart_alt:", on_click=_ask_scratch,
                  args=(current.source_key,),
                  help="plan this config anew, ignoring the plan on screen, and compare: the re-plan above keeps "
                       "what it could where it was")
        return
    if "result" not in asked:
        outcome = services.plan_outcome(current.source_key, services.DEFAULT_EFFORT)
        if outcome.result is None:
            st.caption(f"No plan from scratch: {md(outcome.problem)}")
            return
        asked.update(result=outcome.result, switch=headline.switch(current.config, current.plan, outcome.result.plan))
    with st.container(key="ws_scratch_box"):
        st.markdown(headline.switch_text(asked["switch"]))
        c1, c2, _ = st.columns([1.3, 1.3, 3])
        c1.button("Use the plan from scratch", key="ws_scratch_use", icon=":material/check:", on_click=_use_scratch,
                  args=(current.source_key,), width="stretch")
        c2.button("Keep the re-plan", key="ws_scratch_keep", icon=":material/close:", width="stretch",
                  on_click=state.set_page_value, args=(state.SCRATCH, None))


def _ask_scratch(key: str) -> None:
    state.set_page_value(state.SCRATCH, {"for": key})


def _use_scratch(key: str) -> None:
    """The plan from scratch asked for becomes the current plan (a button's callback, before the page draws)."""
    asked = state.page_value(state.SCRATCH)
    current = state.plan()
    state.set_page_value(state.SCRATCH, None)
    if asked is None or "result" not in asked or current is None or current.source_key != key:
        return
    adopted = make_current(asked["result"], services.OURS, services.DEFAULT_EFFORT, key)
    adopted.how = "from scratch: asked for"
    state.set_plan(adopted)
    state.flash("The plan from scratch is the current plan.")


def change_of(previous: CurrentPlan, current: CurrentPlan) -> headline.Change:
    return headline.change(previous.plan, current.plan)


def guide() -> None:
    """The first view's next steps, until the user edits, plans, saves or dismisses it."""
    if not state.guide_open():
        return
    with st.container(border=True, key="ws_guide"):
        st.markdown("**Start here.** The TorchRec tutorial's 4 tables on 2 GPUs are loaded, and the line above is "
                    "their plan by our planner. Next:\n"
                    "1. Edit a table on **Tables & constraints** (its rows, dim or pooling factor) or the ranks on "
                    "**Topology**: the plan above follows every edit.\n"
                    "2. Open **Plan** for the detail: per-table sharding, memory and cost per rank, why the slowest "
                    "rank is slow, downloads.\n"
                    "3. **Save & share** the plan as a link. **Presets** on Tables & constraints load bigger models.")
        st.button("Got it", key="ws_guide_dismiss", on_click=state.close_guide, icon=":material/check:")


# ---- a planner in the background ----------------------------------------------------------------


def start_torchrec_job(config: dict) -> None:
    """TorchRec's planner on the config, in another process; at most one background plan at a time."""
    if state.plan_job() is not None:
        return
    settings = {"planner": services.TORCHREC}
    cal = state.calibration()
    if cal is not None:
        settings["calibration"] = cal.as_dict()
    state.set_plan_job(PlanJob(services.start_torchrec_plan(config), services.TORCHREC, config,
                               state.config_key(config), settings))


def cancel_job() -> None:
    pj = state.plan_job()
    if pj is None:
        return
    pj.job.close()
    state.set_plan_job(None)
    name = md(services.PLANNERS[pj.planner])
    state.flash(f"Cancelled {name} before it started (it waited {pj.job.queued_s:.0f} s for a free worker)."
                if pj.job.started is None else f"Cancelled {name} after {pj.job.elapsed_s:.0f} s.")


def collect_job() -> None:
    """A background plan that ended: its plan becomes the current one when made for the config as it is now;
    one for an earlier config is offered on Compare only; an error is said in one line."""
    pj = state.plan_job()
    if pj is None or pj.job.live:
        return
    state.set_plan_job(None)
    name, secs = services.PLANNERS[pj.planner], pj.job.elapsed_s
    try:
        result = services.torchrec_result(pj.job, pj.config)  # parses the config: a typed result
    except Exception as e:  # noqa: BLE001 - whatever went wrong is one line on the page
        state.flash(f"{md(name)} gave no plan: {md(str(e).splitlines()[0] if str(e) else type(e).__name__)}",
                    "error")
        return
    finally:
        pj.job.close()
    if pj.source_key == state.config_key(state.config()):
        current = make_current(result, pj.planner, None, pj.source_key)
        current.settings = pj.settings
        state.set_plan(current)
        state.flash(f"{md(name)} finished in {secs:.0f} s: its plan is the current plan.")
    else:
        label = f"TorchRec for an earlier config ({len(result.plan.tables):,} tables)"
        state.add_extra_plan(label, result.plan, result.config, pj.settings)
        state.flash(f"{md(name)} finished in {secs:.0f} s, but for an earlier config: the workspace's config "
                    f"changed since, so it is not the current plan (it is on Compare as '{md(label)}').", "warning")


def job_running_text(pj: PlanJob) -> str:
    n, name = len(pj.config.get("tables") or []), md(services.PLANNERS[pj.planner])
    return job_line(pj.job, f"{name} is planning {n:,} tables in the background", name)


def place_in_line(ahead: int, noun: str = "") -> str:
    """'next in line', or how many wait before it ('3 ahead', '1 run ahead' with noun 'run')."""
    if not ahead:
        return "next in line"
    if noun and ahead != 1:
        noun += "s"
    return f"{ahead:,} {noun} ahead" if noun else f"{ahead:,} ahead"


def job_line(job: jobs.Job, doing: str, who: str) -> str:
    """A background job's first sentence (markdown): `doing` and its elapsed time while it runs; while it waits
    for a slot of the server's heavy jobs (jobs.HEAVY, other sessions' planners and sweeps hold them), `who` waits
    and how many wait before it."""
    if job.state is jobs.JobState.QUEUED:
        return f"{who} is waiting for a free worker: {place_in_line(job.ahead)} (waited {job.queued_s:.0f} s)"
    return f"{doing}: {job.elapsed_s:.0f} s so far"


def job_box(key: str, cancel_key: str, text: str) -> bool:
    """A running background job's line (markdown `text`: its elapsed time, what happens when it ends) and its
    Cancel button, in a bordered box; True when Cancel was clicked. Pages draw it in a polling fragment
    (`st.fragment(run_every=...)`), called only while the job is there: the browser asks for a run of it every
    interval, and Streamlit 1.67 drops the messages of a full run whose script thread ended before they were sent
    when such a run starts a new ScriptRunner ("Ignoring event from non-current ScriptRunner"): the run that a
    click started (Compare's 'Clear all') then never reaches the page, which keeps its old elements."""
    with st.container(border=True, key=key):
        c1, c2 = st.columns([5, 1], vertical_alignment="center")
        c1.markdown(f":material/hourglass_top: {text}")
        return c2.button("Cancel", key=cancel_key, icon=":material/cancel:", width="stretch")
