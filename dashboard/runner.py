"""Measuring runs in the background: `python -m engine dryrun|validate` as a subprocess (an argument list,
never a shell string) whose stderr streams into the run's log in the database, whose JSON result becomes
per-rank metrics, and which can be cancelled. The Runs page polls the database.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"dryrun": "Kernel dry-run (this machine, ranks one after another)",
         "validation": "Validation run (real ranks with torch.distributed)"}
COMMANDS = {"dryrun": "dryrun", "validation": "validate"}
MEASURED_METRIC = "step_ms"  # db.compare.MEASURED_TIME_METRIC: what Compare reads as the measured time
LOG_FLUSH_S = 0.5
EXIT_CANCELLED = 130  # what the engine's commands exit with when interrupted
UNITS = (("_ms", "ms"), ("_bytes", "bytes"))

_LOCK = threading.Lock()
_ACTIVE: dict[int, "Active"] = {}


@dataclass
class Options:
    """What the page asks for; flags the command does not accept are left out."""

    device: str = "cpu"
    iters: int = 10
    extra: dict = field(default_factory=dict)  # flag (without --) -> value


@dataclass
class Active:
    proc: subprocess.Popen
    workdir: Path
    cancelled: bool = False


@lru_cache(maxsize=None)
def command_flags(kind: str) -> Optional[frozenset[str]]:
    """The flags `python -m engine <command>` accepts, or None when this install has no such command."""
    from engine.cli import build_parser

    sub = next((a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)), None)
    parser = sub.choices.get(COMMANDS[kind]) if sub else None
    if parser is None:
        return None
    return frozenset(s for a in parser._actions for s in a.option_strings)


def unavailable_reason(kind: str) -> Optional[str]:
    try:
        flags = command_flags(kind)
    except Exception as e:  # an extra command module that fails to import must not break the page
        return f"`python -m engine {COMMANDS[kind]}` cannot be loaded here ({type(e).__name__}: {e})"
    if flags is None:
        return f"this install has no `python -m engine {COMMANDS[kind]}` command yet"
    return None


def build_argv(kind: str, config_path: Path, plan_path: Path, opts: Options) -> list[str]:
    flags = command_flags(kind) or frozenset()
    argv = [sys.executable, "-m", "engine", COMMANDS[kind], str(config_path), "--plan", str(plan_path)]
    wanted = {"--json": None, "--device": opts.device, "--iters": opts.iters,
              **{f"--{k.replace('_', '-')}": v for k, v in opts.extra.items()}}
    for flag, value in wanted.items():
        if flag in flags and value is not False:
            argv += [flag] if value is None or value is True else [flag, str(value)]
    return argv


def result_metrics(data: dict) -> tuple[list[tuple[int, str, float, str]], dict]:
    """Per-rank numbers of a run's JSON result as metrics (measured_ms stored as step_ms, true/false as 1/0),
    and the rest (backend, device, notes, top-level numbers) as device info."""
    metrics = []
    for r in data.get("ranks") or []:
        rank = r.get("rank")
        if not isinstance(rank, int):
            continue
        for name, value in r.items():
            if name == "rank" or not isinstance(value, (int, float)):
                continue
            unit = next((u for suffix, u in UNITS if name.endswith(suffix)), "")
            metrics.append((rank, MEASURED_METRIC if name == "measured_ms" else name, float(value), unit))
    info = {k: v for k, v in data.items()
            if k not in ("ranks", "log_tail") and isinstance(v, (str, int, float, bool, list, type(None)))}
    return metrics, info


def start(store, token: str, kind: str, opts: Options) -> int:
    """Create the run in the database and launch its command; returns the run id."""
    reason = unavailable_reason(kind)
    if reason:
        raise RuntimeError(reason)
    rec = store.get_plan(token)
    if rec is None:
        raise RuntimeError(f"no saved plan with token {token!r}")
    workdir = Path(tempfile.mkdtemp(prefix="planner-run-"))
    (workdir / "config.json").write_text(json.dumps(rec.config), encoding="utf-8")
    (workdir / "plan.json").write_text(json.dumps(rec.plan), encoding="utf-8")
    default_backend = "auto" if kind == "dryrun" else ("nccl" if opts.device == "cuda" else "gloo")
    backend = str(opts.extra.get("backend", default_backend))
    run_id = store.create_run(token, kind, backend, opts.device)
    argv = build_argv(kind, workdir / "config.json", workdir / "plan.json", opts)
    launch(store, run_id, argv, workdir)
    return run_id


def launch(store, run_id: int, argv: list[str], workdir: Path) -> None:
    """Start argv in its own process group; a thread streams its stderr into the run's log."""
    stdout = open(workdir / "stdout.txt", "wb")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    stdout.close()
    with _LOCK:
        _ACTIVE[run_id] = Active(proc, workdir)
    store.update_run(run_id, status="running", log_append=f"$ {' '.join(argv[1:])}\n")
    threading.Thread(target=_watch, args=(store, run_id), daemon=True, name=f"run-{run_id}").start()


def _read_lines(pipe, sink: list[str], lock: threading.Lock) -> None:
    for raw in iter(pipe.readline, b""):
        with lock:
            sink.append(raw.decode("utf-8", errors="replace"))


def _watch(store, run_id: int) -> None:
    """Move the command's stderr into the log every LOG_FLUSH_S until it exits, then record the result."""
    active = _ACTIVE[run_id]
    lines: list[str] = []
    lock = threading.Lock()
    reader = threading.Thread(target=_read_lines, args=(active.proc.stderr, lines, lock), daemon=True)
    reader.start()
    flushed = 0
    try:
        while True:
            done = not reader.is_alive()
            with lock:
                pending = lines[flushed:]
            if pending:
                store.update_run(run_id, log_append="".join(pending))
                flushed += len(pending)
            if done:
                break
            reader.join(LOG_FLUSH_S)
        _finish(store, run_id, active, active.proc.wait(), lines)
    except Exception as e:  # the database went away, or the output is unreadable: record what we can
        try:
            store.update_run(run_id, status="failed", error=f"the run's watcher failed: {type(e).__name__}: {e}")
        except Exception:
            pass
    finally:
        with _LOCK:
            _ACTIVE.pop(run_id, None)


def _finish(store, run_id: int, active: Active, rc: int, err_lines: list[str]) -> None:
    """Record how the command ended: its JSON result (printed also when the run itself failed) becomes
    metrics and device info; the status follows the exit code (0 ok, 130 cancelled, else failed)."""
    out = (active.workdir / "stdout.txt").read_text(encoding="utf-8", errors="replace")
    if active.cancelled or rc == EXIT_CANCELLED:
        store.update_run(run_id, status="cancelled", log_append="cancelled by the user\n")
        return
    try:
        data = json.loads(out)
    except json.JSONDecodeError:
        data = None
    data = data if isinstance(data, dict) else {}
    metrics, info = result_metrics(data)
    if metrics:
        store.add_metrics(run_id, metrics)
    if rc != 0 or not data:
        last = next((ln.strip() for ln in reversed(err_lines) if ln.strip()), "")
        error = data.get("error") or last or (f"exit code {rc}" if rc else "the command printed no JSON result")
        store.update_run(run_id, status="failed", error=str(error), device_info=info or None,
                         log_append=(data.get("log_tail") or ("" if data else out))[-20000:] or None)
        return
    store.update_run(run_id, status="succeeded", device_info=info,
                     log_append=f"finished: {len(metrics)} metrics over {len(data.get('ranks') or [])} ranks\n")


def cancel(store, run_id: int) -> bool:
    """Stop a run: its process group is terminated (SIGTERM) if this server started it; a run no process
    of this server holds (the server restarted) is just marked cancelled. False if it had already ended."""
    with _LOCK:
        active = _ACTIVE.get(run_id)
    if active is not None:
        active.cancelled = True
        try:
            os.killpg(active.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        return True
    rec = store.get_run(run_id)
    if rec is None or rec.status.finished:
        return False
    store.update_run(run_id, status="cancelled", log_append="cancelled (no process of this server was running it)\n")
    return True


def is_active(run_id: int) -> bool:
    with _LOCK:
        return run_id in _ACTIVE


def wait(run_id: int, timeout_s: float) -> bool:
    """Wait for a run started here to end (tests, scripts); True if it ended in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_active(run_id):
            return True
        time.sleep(0.05)
    return False
