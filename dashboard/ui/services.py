"""The app's shared resources and cached computations: the Store (one per database URL), planning with our
engine in the server's worker processes (dashboard.serve.planpool; remembered by config JSON), TorchRec's planner as a
background job, saved plans parsed once, the table-by-rank matrix of a plan, and the calibration fitted to the
stored validation runs of a device kind (cached briefly).

Plans are the engine's typed objects (engine.Plan, engine.Config: frozen dataclasses), parsed once and handed
out as the same objects on every rerun and to every session (st.cache_resource: no copy per call). Nothing in
the dashboard mutates them; a changed plan is a new object (dataclasses.replace).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import pickle
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

import engine
from dashboard.plans import figure_cache, plan_files, table_matrix
from dashboard import lru
from dashboard.serve import housekeeping, jobs, planpool, planwork, priority, runner
from dashboard.tables import row_checks

OURS, TORCHREC = "ours", "torchrec"
PLANNERS = {OURS: "Ours (engine)", TORCHREC: "TorchRec's EmbeddingShardingPlanner (baseline)"}
DEFAULT_EFFORT = 10_000  # the search's work budget here (the CLI's is 50,000): 1,000 tables replan in about a second
SAFETY_STOP_S = 60.0  # the planner's wall-clock safety stop; a plan it cut says so in its notes
PLAN_CACHE_ENTRIES = 16  # plans (and refusals) kept by this server: a 1,000-table plan is a few MB
SAVED_CACHE_ENTRIES = 32  # saved plans parsed into typed objects (Compare, Runs, a shared link)
MATRIX_ENTRIES = 32  # table-by-rank matrices, by the plan object they were computed for
CALIBRATION_TTL_S = 15  # fitting reads every stored run; new runs show up within this long (or on "Fit again")


def planner_key(name: str) -> str:
    """Our key for a plan's planner field ("engine" -> ours); other planners keep their name."""
    return OURS if name in (OURS, "engine") else name


def planner_label(name: str) -> str:
    return PLANNERS.get(planner_key(name), name)


def planner_short(name: str) -> str:
    return {OURS: "ours", TORCHREC: "TorchRec"}.get(planner_key(name), name)


class PlannerUnavailable(Exception):
    """TorchRec's planner cannot be imported here; the message says what to install."""


@st.cache_resource(show_spinner=False)
def _store(url: str, data_dir: str):  # both are the cache key: another URL or data dir, another Store
    from db.store import Store

    store = Store(url or None)
    store.upgrade()
    return store


_frozen = False


def freeze_startup_objects() -> None:
    """Once per process, after the app's imports: their objects (Streamlit, pandas, plotly: over 100,000) leave
    the garbage collector's generations. A full collection otherwise walks them every time, a tenth of a second
    while holding the interpreter, and planning a thousand tables triggers several. (Garbage is collected first:
    frozen objects are never collected.)"""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


def streamlit_sessions() -> Optional[int]:
    """Sessions this Streamlit server holds (connected or not yet forgotten); None outside a server.

    Streamlit forgets a disconnected session once its TTL passed, but only when it next writes its session
    storage (a visitor comes or goes): this asks its event loop to drop the expired ones now, so a server that
    everyone left gives their memory back too. (Streamlit 1.x has no public API for either: without these
    internals the count is None and nothing is swept.)"""
    try:
        from streamlit.runtime import Runtime

        runtime = Runtime.instance()
        mgr = runtime._session_mgr
        cache = getattr(getattr(mgr, "_session_storage", None), "_cache", None)
        loop = runtime._async_objs.eventloop if runtime._async_objs is not None else None
        if cache is not None and hasattr(cache, "expire") and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(cache.expire)  # the storage is the event loop's: never touched from here
        return mgr.num_sessions()
    except Exception:  # noqa: BLE001 - no runtime (tests, scripts) or another Streamlit: no count
        return None


@st.cache_resource(show_spinner=False)
def start_housekeeping() -> housekeeping.Janitor:
    """Once per server: the thread that gives a closed session's memory back to the system."""
    return housekeeping.Janitor(streamlit_sessions, when_empty=(
        _OUTCOMES.clear, _MATRICES.clear, _DIGESTS.clear, figure_cache.clear, table_matrix.clear_table_scores,
        row_checks.clear_row_checks)).start()


def _where() -> tuple[str, str]:
    return os.environ.get("DATABASE_URL", "").strip(), os.environ.get("PLANNER_DATA_DIR", "").strip()


def store():
    """The Store for DATABASE_URL (or the SQLite file in PLANNER_DATA_DIR), upgraded once per URL."""
    return _store(*_where())


PlanResult, PlanOutcome, ReplanOutcome = planwork.PlanResult, planwork.PlanOutcome, planwork.ReplanOutcome

# ---- planning in the worker processes (dashboard.serve.planpool), never in a page's thread ----------------------

SHOW_WAIT_AFTER_S = 0.3  # a plan that takes longer shows its elapsed time where the page waits for it
WAIT_POLL_S = 0.1


def settings_problems() -> list[str]:
    """What is wrong with the server's settings from the environment (PLANNER_WORKERS, PLANNER_JOBS, PLANNER_RUNS,
    PLANNER_WORKER_NICE), each a line that names the variable and the fix; empty when they are fine. The app shows
    them and starts nothing."""
    problems = []
    for check in (priority.default_size, jobs.heavy_size, runner.runs_size, priority.worker_nice):
        try:
            check()
        except ValueError as e:
            problems.append(str(e))
    return problems


@st.cache_resource(show_spinner=False)
def pool() -> planpool.Pool:
    """The server's worker processes (one per core), shared by every session; one is started at once."""
    p = planpool.Pool()
    p.prestart(1)
    return p


_OUTCOMES = lru.Lru(PLAN_CACHE_ENTRIES)  # finished outcomes, successes and refusals alike, of every session


def _owner() -> str:
    """This browser session (each has at most one plan and one re-plan in the works)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else f"thread-{threading.get_ident()}"


def in_pool(name: str, args: tuple, key, kind: str, what: Callable[[], str], on_done=None, box=None):
    """Run a named task (planwork.TASKS) in the pool and wait for it here, showing its elapsed time once it takes
    longer than SHOW_WAIT_AFTER_S (in `box`, an st.empty() the caller then fills with the result, else in a
    placeholder of its own, emptied at the end). A new run of this session's page (the user edited again) stops the
    wait where it redraws the time; the task goes on, and is cancelled when this session asks for another of its
    kind (superseded) or joined when it asks for the same. Raises planpool.TaskFailed or TaskCancelled."""
    task = pool().submit(name, args, key, kind, _owner(), on_done)
    if not task.wait(SHOW_WAIT_AFTER_S):
        slot, text = box if box is not None else st.empty(), what()  # a count may parse the config: only if shown
        while not task.wait(WAIT_POLL_S):
            slot.caption(f":material/hourglass_top: {text}: {task.elapsed_s:.1f} s")
        if box is None:
            slot.empty()
    return task.result()


def plan_outcome(config_json: str, effort: int = DEFAULT_EFFORT, box=None) -> PlanOutcome:
    """Our planner's plan of the config (JSON text) from scratch, or why there is none, made in a worker process and
    remembered (the same key gives the same objects: never mutate them). `box`: where the wait shows (in_pool)."""
    key = (hashlib.sha256(config_json.encode()).hexdigest(), effort)
    return _outcome("plan", (config_json, effort, SAFETY_STOP_S), key, box,
                    lambda: f"Planning {_count_tables(config_json)} tables with our planner")


def edit_outcome(config_json: str, on_screen: engine.Plan, effort: int = DEFAULT_EFFORT, box=None) -> PlanOutcome:
    """The working view's plan of an edited config: re-planned from the plan on screen (planwork.replan_edit; from
    scratch where that fails, the outcome says why), in a worker process, remembered by the config and that plan."""
    key = (hashlib.sha256(config_json.encode()).hexdigest(), effort, "from", plan_digest(on_screen))
    return _outcome("replan_edit", (config_json, on_screen, effort, SAFETY_STOP_S), key, box,
                    lambda: f"Re-planning {_count_tables(config_json)} tables from the plan on screen")


def _outcome(task: str, args: tuple, key: tuple, box, what: Callable[[], str]) -> PlanOutcome:
    hit = _OUTCOMES.get(key)
    if hit is not None:
        return hit
    try:  # kind "plan" for both: this session's next plan of either kind supersedes the last
        return in_pool(task, args, (task, *key), "plan", what, lambda out: _OUTCOMES.put(key, out), box)
    except planpool.TaskFailed as e:
        return PlanOutcome(problem=f"the planner failed: {e}")
    except planpool.TaskCancelled:
        return PlanOutcome(problem="the plan was cancelled (a newer edit asked for another)")


def _count_tables(config_json: str) -> str:
    try:
        return f"{len(json.loads(config_json).get('tables') or []):,}"
    except (ValueError, AttributeError, TypeError):
        return "the"


def plan_config(config_json: str, planner: str = OURS, effort: int = DEFAULT_EFFORT) -> PlanResult:
    """plan_outcome's plan; raises engine.EngineError (its one line) when there is none. Our planner only:
    TorchRec's runs as a background job (start_torchrec_plan)."""
    if planner != OURS:
        raise ValueError(f"plan_config plans with our planner only, not {planner!r}")
    outcome = plan_outcome(config_json, effort)
    if outcome.result is None:
        raise engine.EngineError(outcome.problem)
    return outcome.result


def replan_outcome(config: dict, old_plan: dict, from_token: str, max_move_bytes: Optional[int],
                   effort: int = DEFAULT_EFFORT) -> ReplanOutcome:
    """A re-plan of the config from a saved plan, in a worker process (this session's next re-plan supersedes
    it)."""
    config_json = json.dumps(config, sort_keys=True)
    key = ("replan", hashlib.sha256(config_json.encode()).hexdigest(), from_token, max_move_bytes, effort)
    try:
        return in_pool("replan", (config_json, old_plan, max_move_bytes, effort, SAFETY_STOP_S), key, "replan",
                       lambda: f"Re-planning {len(config.get('tables') or []):,} tables")
    except planpool.TaskFailed as e:
        return ReplanOutcome(problem=f"the re-planner failed: {e}")
    except planpool.TaskCancelled:
        return ReplanOutcome(problem="the re-plan was cancelled (a newer request asked for another)")


def start_workload(config_json: str, data: bytes, suffix: str, name: str) -> planpool.Task:
    """An uploaded sample measured in a worker process (dashboard.serve.workloadwork.measure_task), not waited for:
    the page polls the task. This session's earlier measuring task is superseded (cancelled) by this one."""
    digest = hashlib.sha256(config_json.encode())
    digest.update(data)
    key = ("workload", digest.hexdigest(), suffix, name)
    return pool().submit("workload", (config_json, data, suffix, name), key, "workload", _owner())


def cancel_task(task: planpool.Task) -> None:
    """Cancel a pool task for everyone (its worker is ended if it runs)."""
    pool().cancel(task)


# ---- TorchRec's planner in the background (it can take a minute on 1,000 tables) ----------------

ROOT = Path(__file__).resolve().parents[2]
JOB_CONFIG, JOB_PLAN = "config.json", "plan.json"


def heavy_job(args: list[str], workdir: Path, label: str) -> jobs.Job:
    """`python ARGS` in another process, this repository importable, niced below the server (priority.worker_nice),
    once a slot of the server's heavy jobs (jobs.HEAVY) is free: TorchRec's planner, a sweep, measure-tables."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return jobs.Job([sys.executable, *args], workdir, label=label, cwd=ROOT, env=env, slots=jobs.HEAVY,
                    nice=priority.worker_nice())


def start_torchrec_plan(config: dict | engine.Config) -> jobs.Job:
    """`python -m engine torchrec-plan` on the config (written to a file of the job's own folder) in another
    process; the plan JSON comes back in a file of that folder (torchrec_result). A heavy job: it waits for a slot
    of jobs.HEAVY (QUEUED) while the server runs as many as it has cores for."""
    workdir = Path(tempfile.mkdtemp(prefix="planner-torchrec-"))
    if isinstance(config, engine.Config):
        config = engine.config_to_dict(config)
    engine.write_json_file(workdir / JOB_CONFIG, config, indent=None)
    return heavy_job(["-m", "engine", "torchrec-plan", str(workdir / JOB_CONFIG), "--out", str(workdir / JOB_PLAN)],
                     workdir, PLANNERS[TORCHREC])


def torchrec_result(job: jobs.Job, config: dict | engine.Config) -> PlanResult:
    """The finished job's plan, parsed with its config (a dict is parsed here); raises engine.EngineError
    (engine.ConfigError among them) with its one-line error."""
    if job.state is not jobs.JobState.DONE:
        raise engine.EngineError(job.error_line())
    try:
        plan = json.loads(job.text(JOB_PLAN))
    except ValueError:
        raise engine.EngineError("TorchRec's planner wrote no plan") from None
    cfg = config if isinstance(config, engine.Config) else engine.parse_config(config)
    return PlanResult(engine.read_plan_file(plan, cfg), cfg)


# ---- saved plans, parsed once -------------------------------------------------------------------


def saved_result(rec) -> PlanResult:
    """A saved plan (db PlanRecord: dicts) as typed objects, parsed once per plan (its token and save time are
    the key: a saved plan never changes). Raises engine.ConfigError when it does not parse."""
    return _saved_result(rec.token, str(rec.created_at), *_where(), _rec=rec)


@st.cache_resource(max_entries=SAVED_CACHE_ENTRIES, show_spinner=False)
def _saved_result(token: str, created_at: str, url: str, data_dir: str, _rec) -> PlanResult:
    plan, cfg = plan_files.parse(_rec.plan, _rec.config)
    return PlanResult(plan, cfg)


# ---- the table-by-rank matrix, by plan object ----------------------------------------------------


class _ByIdentity:
    """A small LRU cache keyed by the identity of the objects a value was computed from (typed plans are shared,
    never mutated, and hashing their content costs as much as the work). It holds those objects, so their ids
    stay theirs while they are in it."""

    def __init__(self, entries: int) -> None:
        self._lru = lru.Lru(entries)

    def get(self, objs: tuple, compute):
        key = tuple(id(o) for o in objs)
        hit = self._lru.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], objs)):
            return hit[1]
        value = compute()
        self._lru.put(key, (objs, value))
        return value

    def clear(self) -> None:
        self._lru.clear()


_MATRICES = _ByIdentity(MATRIX_ENTRIES)
_DIGESTS = _ByIdentity(PLAN_CACHE_ENTRIES)


def plan_digest(plan: engine.Plan) -> str:
    """What a re-plan from `plan` depends on (its placements and slowest rank) as a short key, worked out once per
    plan object."""
    return _DIGESTS.get((plan,), lambda: hashlib.sha256(pickle.dumps((plan.tables, plan.max_rank_cost_ms),
                                                                     protocol=4)).hexdigest())


def table_rank_matrix(plan: engine.Plan, config: engine.Config) -> table_matrix.TableRankMatrix:
    """table_matrix.table_rank_matrix, computed once per plan object (shared, read-only arrays)."""
    return _MATRICES.get((plan, config), lambda: table_matrix.table_rank_matrix(plan, config))


@dataclass(frozen=True)
class FittedCalibration:
    """The calibration of a device kind from the stored runs, or why there is none."""

    calibration: engine.Calibration | None
    no_runs: bool = False  # no succeeded validation run on that device carries the numbers to fit
    problem: str = ""  # one line: the fit or the database failed


def calibration(device: str, device_name: str = "") -> FittedCalibration:
    """engine.fit_calibration over the succeeded validation runs on `device` in this app's database."""
    return _calibration(device, device_name.strip(), *_where())


@st.cache_data(ttl=CALIBRATION_TTL_S, max_entries=16, show_spinner=False)
def _calibration(device: str, device_name: str, url: str, data_dir: str) -> FittedCalibration:
    from db.calibration import observations_from_store
    from db.store import StoreError
    try:
        kind = engine.Device(device)
        obs = observations_from_store(_store(url, data_dir), kind, device_name or None)
        if not obs:
            return FittedCalibration(None, no_runs=True)
        return FittedCalibration(engine.fit_calibration(obs, kind, device_name or None))
    except (StoreError, engine.EngineError) as e:  # their messages are written for people
        return FittedCalibration(None, problem=(str(e).splitlines() or [type(e).__name__])[0])
    except Exception as e:  # noqa: BLE001 - the page shows one line for whatever went wrong, never a traceback
        return FittedCalibration(None, problem=f"{type(e).__name__}: {e}".splitlines()[0])


def clear_calibration() -> None:
    _calibration.clear()
