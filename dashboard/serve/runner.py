"""Measuring runs from the dashboard: the command a user runs, `python -m db dryrun|validate CONFIG --plan PLAN
--plan-token TOKEN --run-id N --json` (built from db.run_commands, the commands' declared options), started in
the background as a jobs.Job (an argument list, never a shell string; its own process group, ended by SIGTERM
then SIGKILL) on this app's database. The command records the run (db.runsink.record_result); this module
streams its stderr into the run's log, cancels it, and records the end only when the command could not (it
died, or the database stopped taking its updates), through the same function.

Runs pass a gate (`RUNS`, jobs.Slots): one at a time per server unless PLANNER_RUNS says more, so two users'
runs never measure each other on the same cores. A run that waits stays `queued` in the database, its place in
line known here (`ahead`); cancelled then, it never starts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

import engine
from dashboard.serve import jobs, priority
from db.run_commands import RUN_COMMANDS
from db.runsink import record_result

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"dryrun": "Kernel dry-run (this machine, ranks timed in turns)",
         "validation": "Validation run (real ranks with torch.distributed)"}
COMMANDS = {kind: c.name for kind, c in RUN_COMMANDS.items()}  # python -m db COMMAND
LOG_FLUSH_S = 0.5
EXIT_CANCELLED = 130  # what the commands exit with when interrupted
RESULT_LOG_CHARS = 20_000

_LOCK = threading.Lock()
_ACTIVE: dict[int, "Active"] = {}  # started by this server, not yet recorded as ended
_WAITING: dict[int, "Waiting"] = {}  # queued at RUNS


def runs_size() -> int:
    """PLANNER_RUNS when set (a positive integer), else 1: measuring runs that may run at once on this server."""
    return priority.env_count("PLANNER_RUNS", "measuring runs (dry-runs, validation runs) that may run at once",
                              "one at a time, so runs do not measure each other") or 1


def _server_gate() -> jobs.Slots:
    """The server's gate for runs; with a bad PLANNER_RUNS, one (the app refuses to start with the setting's
    message: dashboard.ui.services.settings_problems), so importing this module never fails."""
    try:
        return jobs.Slots(runs_size())
    except ValueError:
        return jobs.Slots(1)


RUNS = _server_gate()


@dataclass
class Options:
    """What the page asks for; flags the command does not accept are left out."""

    device: str = "cpu"
    iters: int = 10
    extra: dict = field(default_factory=dict)  # flag (without --) -> value


@dataclass
class Active:
    job: jobs.Job  # held here until the run's end is recorded (a Job nobody holds is ended)
    workdir: Path
    gate: Optional[jobs.Slots] = None  # released once the run's end is recorded
    cancelled: bool = False


class Waiting:
    """A run queued at its gate: launched (its process started) when its turn comes, unless cancelled first."""

    def __init__(self, store, run_id: int, argv: list[str], workdir: Path, gate: jobs.Slots):
        self.store, self.run_id, self.argv, self.workdir, self.gate = store, run_id, argv, workdir, gate
        self.lock = threading.Lock()
        self.cancelled = False

    def launch(self) -> bool:
        """The gate's call when a slot is free: start the command (True: its watcher releases the slot when
        the run is recorded); False when it was cancelled meanwhile or could not start (recorded failed)."""
        with self.lock:
            with _LOCK:
                _WAITING.pop(self.run_id, None)
            if self.cancelled:
                return False
            try:
                _popen(self.store, self.run_id, self.argv, self.workdir, self.gate)
            except Exception as e:  # noqa: BLE001 - any failure to start is the run's error, never the server's
                _record_unstarted(self.store, self.run_id, engine.RunStatus.FAILED,
                                  f"the run could not start: {type(e).__name__}: {e}")
                return False
            return True


@lru_cache(maxsize=None)
def _load_problem() -> Optional[str]:
    """Why the run commands' module cannot be loaded in this install (None: it can)."""
    try:
        import db.runs_cli  # noqa: F401 - the commands' code: the engine's validation and dry-run
    except Exception as e:  # a command module that fails to import must not break the page
        return f"{type(e).__name__}: {e}"
    return None


def unavailable_reason(kind: str) -> Optional[str]:
    if kind not in RUN_COMMANDS:
        return f"this install has no `python -m db` command for {kind} runs"
    problem = _load_problem()
    return f"`python -m db {COMMANDS[kind]}` cannot be loaded here ({problem})" if problem else None


def build_argv(kind: str, workdir: Path, token: str, run_id: int, opts: Options) -> list[str]:
    """The command line, as a user would type it, of run `run_id` of plan `token` staged in workdir; options the
    command does not take (db.run_commands) are left out."""
    command = RUN_COMMANDS[kind]
    argv = [sys.executable, "-m", "db", command.name, str(workdir / "config.json"),
            "--plan", str(workdir / "plan.json")]
    wanted = {"--plan-token": token, "--run-id": run_id, "--json": None, "--device": opts.device,
              "--iters": opts.iters, "--out-dir": str(workdir / "job"),
              **{f"--{k.replace('_', '-')}": v for k, v in opts.extra.items()}}
    for flag, value in wanted.items():
        if command.takes(flag) and value is not False:
            argv += [flag] if value is None or value is True else [flag, str(value)]
    return argv


def start(store, token: str, kind: str, opts: Options) -> int:
    """Create the run (queued) in the database and launch its command; returns the run id."""
    reason = unavailable_reason(kind)
    if reason:
        raise RuntimeError(reason)
    rec = store.get_plan(token)
    if rec is None:
        raise RuntimeError(f"no saved plan with token {token!r}")
    workdir = Path(tempfile.mkdtemp(prefix="planner-run-"))
    engine.write_json_file(workdir / "config.json", rec.config, indent=None)
    engine.write_json_file(workdir / "plan.json", rec.plan, indent=None)
    default_backend = "auto" if kind == "dryrun" else ("nccl" if opts.device == "cuda" else "gloo")
    backend = str(opts.extra.get("backend", default_backend))
    run_id = store.create_run(token, kind, backend, opts.device)
    launch(store, run_id, build_argv(kind, workdir, token, run_id, opts), workdir)
    return run_id


def child_env(store) -> dict[str, str]:
    """This process's environment, on the Store's database (a relative SQLite path made absolute)."""
    url = store.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:") \
            and not os.path.isabs(url.database):
        url = url.set(database=os.path.abspath(url.database))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path,
            "DATABASE_URL": url.render_as_string(hide_password=False)}


def launch(store, run_id: int, argv: list[str], workdir: Path, gate: Optional[jobs.Slots] = None) -> None:
    """Queue run `run_id` at `gate` (the server's RUNS by default); when its turn comes, argv starts in its own
    process group and a thread streams its stderr into the run's log."""
    gate = RUNS if gate is None else gate
    waiting = Waiting(store, run_id, argv, workdir, gate)
    with _LOCK:
        _WAITING[run_id] = waiting
    if gate.busy >= gate.size:
        store.update_run(run_id, log_append=f"waiting for a free run slot ({gate.size} on this server, "
                                            f"PLANNER_RUNS)\n")
    gate.enter(waiting)


def _popen(store, run_id: int, argv: list[str], workdir: Path, gate: jobs.Slots) -> None:
    """Start the command as a jobs.Job (stdout and stderr in workdir's jobs.STDOUT and jobs.STDERR)."""
    job = jobs.Job(argv, workdir, label=f"run {run_id}", cwd=ROOT, env=child_env(store))
    with _LOCK:
        _ACTIVE[run_id] = Active(job, workdir, gate)
    try:
        store.update_run(run_id, status="running", log_append=f"$ {' '.join(argv[1:])}\n")
    except Exception:  # noqa: BLE001 - the process runs: its watcher records what the database takes, and frees
        pass  # the slot (raising here would free it a second time)
    threading.Thread(target=_watch, args=(store, run_id), daemon=True, name=f"run-{run_id}").start()


def _record_unstarted(store, run_id: int, status: engine.RunStatus, why: str) -> None:
    try:
        record_result(store, run_id, {}, status, why)
        store.update_run(run_id, log_append=why + "\n")
    except Exception:  # noqa: BLE001 - the database went away: nothing more can be recorded
        pass


def _new_lines(path: Path, offset: int, done: bool) -> tuple[str, int]:
    """The whole lines a growing file has past `offset` (all of it once `done`), and the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return "", offset
    if not done:
        data = data[:data.rfind(b"\n") + 1]
    return data.decode("utf-8", errors="replace"), offset + len(data)


def _watch(store, run_id: int) -> None:
    """Move the command's stderr into the log every LOG_FLUSH_S until it exits, then make sure the run ended."""
    active = _ACTIVE[run_id]
    job = active.job
    offset = 0
    try:
        while True:
            done = job.ended is not None
            text, offset = _new_lines(job.path(jobs.STDERR), offset, done)
            if text:
                store.update_run(run_id, log_append=text)
            if done:
                break
            job.wait(LOG_FLUSH_S)
        _finish(store, run_id, active, job.returncode, job.text(jobs.STDERR).splitlines())
    except Exception as e:  # the database went away, or the output is unreadable: record what we can
        try:
            store.update_run(run_id, status="failed", error=f"the run's watcher failed: {type(e).__name__}: {e}")
        except Exception:
            pass
    finally:
        try:
            if active.gate is not None:
                # after the end is recorded (the next run starts on a quiet machine) and before the run stops
                # being active (once a run's wait returns, the next one has started)
                active.gate.release()
        finally:
            with _LOCK:
                _ACTIVE.pop(run_id, None)


def _printed_result(workdir: Path) -> dict:
    try:
        data = json.loads((workdir / jobs.STDOUT).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _finish(store, run_id: int, active: Active, rc: int, err_lines: list[str]) -> None:
    """A run the command left unfinished (killed, cancelled before it could say so, bad input before it opened
    the run, a database that stopped taking its updates) is recorded from what it printed, by record_result:
    cancelled, or its JSON result, or failed with its last stderr line."""
    if store.get_run(run_id).status.finished:
        return
    data = _printed_result(active.workdir)
    if active.cancelled or rc in (EXIT_CANCELLED, -signal.SIGTERM):
        record_result(store, run_id, data, engine.RunStatus.CANCELLED, "cancelled by the user")
        store.update_run(run_id, log_append="cancelled by the user\n")
        return
    last = next((ln.strip() for ln in reversed(err_lines) if ln.strip()), "")
    ok = rc == 0 and bool(data)
    status = None if ok or "status" in data else engine.RunStatus.FAILED
    error = None if ok or data.get("error") else (last or f"exit code {rc}" if rc else "the command printed no result")
    record_result(store, run_id, data, status, error)
    if data.get("log_tail"):
        store.update_run(run_id, log_append=str(data["log_tail"])[-RESULT_LOG_CHARS:])


def cancel(store, run_id: int) -> bool:
    """Stop a run: its process group is ended (jobs.Job.cancel: SIGTERM, then SIGKILL after a grace) if this
    server started it; a run no process of this server holds (the server restarted, or a command line started
    it) is marked cancelled, which a `python -m db validate` following it notices; one waiting for its turn here
    leaves the line and never starts. False if it had already ended."""
    with _LOCK:
        waiting = _WAITING.get(run_id)
    if waiting is not None:
        with waiting.lock:
            unstarted = not waiting.cancelled and run_id in _WAITING
            if unstarted:
                waiting.cancelled = True
                waiting.gate.withdraw(waiting)
                with _LOCK:
                    _WAITING.pop(run_id, None)
        if unstarted:
            _record_unstarted(store, run_id, engine.RunStatus.CANCELLED, "cancelled by the user before it started")
            return True
    with _LOCK:
        active = _ACTIVE.get(run_id)
    if active is not None:
        active.cancelled = True
        active.job.cancel()
        return True
    rec = store.get_run(run_id)
    if rec is None or rec.status.finished:
        return False
    store.update_run(run_id, status="cancelled", log_append="cancelled (no process of this server was running it)\n")
    return True


def is_active(run_id: int) -> bool:
    """Whether this server holds the run: waiting for its turn, or running."""
    with _LOCK:
        return run_id in _ACTIVE or run_id in _WAITING


def ahead(run_id: int) -> Optional[int]:
    """How many runs wait before it at its gate; None when this server holds no waiting run of that id."""
    with _LOCK:
        waiting = _WAITING.get(run_id)
    return None if waiting is None else waiting.gate.ahead(waiting)


def wait(run_id: int, timeout_s: float) -> bool:
    """Wait for a run started here to end (tests, scripts); True if it ended in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_active(run_id):
            return True
        time.sleep(0.05)
    return False
