"""Run a validation job to its end: start it, stream its log, enforce the timeout, honour a cancel (from the
caller, a signal, or the sink: db's polls the database), and gather what the ranks measured.
"""

from __future__ import annotations

import codecs
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from engine import atomicfile
from engine.config import config_to_dict, load_config
from engine.errors import EngineError
from engine.evaluate import evaluate
from engine.planfile import load_plan, plan_to_dict
from engine.validate.launch import JobState, Launcher, Phase
from engine.validate.results import Ending, gather
from engine.validate.types import Job, RunStatus, ValidationResult

LOG_FLUSH_S = 1.0
CANCEL_CHECK_S = 1.0


class Sink(Protocol):
    """Where a run reports as it goes: nothing (NullSink), or what a caller outside the engine passes in
    (db.runsink.DbSink records the run in the database; its cancel_requested polls the run's row)."""

    def status(self, status: RunStatus) -> None: ...

    def log(self, text: str) -> None: ...

    def cancel_requested(self) -> bool: ...

    def finish(self, result: ValidationResult) -> None: ...

    def fail(self, error: str) -> None:
        """The run could not be followed to its end (e.g. the launcher raised): record it failed."""


class NullSink:
    def status(self, status: RunStatus) -> None:
        return None

    def log(self, text: str) -> None:
        return None

    def cancel_requested(self) -> bool:
        return False

    def finish(self, result: ValidationResult) -> None:
        return None

    def fail(self, error: str) -> None:
        return None


class Stopped(Exception):
    """SIGTERM arrived while following the job (the dashboard cancels a run this way)."""


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into Stopped in the main thread, so the job is cancelled rather than orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Stopped()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stage(job: Job, config_path: str, plan_path: str) -> None:
    """Copy the config (every default written out) and the plan into out_dir, and write job.json."""
    cfg = load_config(config_path)
    tables = load_plan(plan_path, cfg)
    try:
        job.ranks_dir.mkdir(parents=True, exist_ok=True)
        for old in job.ranks_dir.glob("rank*.json"):
            old.unlink()
        job.log_path.write_bytes(b"")  # a run in a used out-dir starts a fresh log
        atomicfile.write_json(job.config_path, config_to_dict(cfg))
        atomicfile.write_json(job.plan_path, plan_to_dict(evaluate(cfg, tables, planner="file")))
        job.write_spec()
    except OSError as e:
        raise EngineError(f"--out-dir {str(job.out_dir)!r}: cannot write there ({e.strerror or e})") from None


class LogFollower:
    """Reads what the job appended to its log since the last call (a character split across two reads is
    decoded whole)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read_new(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return ""
        self.offset += len(data)
        return self.decoder.decode(data)


def follow(launcher: Launcher, job: Job, timeout_s: float | None = None, sink: Sink | None = None,
           on_state: Callable[[JobState], None] | None = None) -> ValidationResult:
    """Start the prepared job and follow it to its end; always returns a result (failed, cancelled, ...)."""
    sink = sink or NullSink()
    logs = LogFollower(job.log_path)
    started = time.monotonic()
    end = Ending(None)
    with stop_on_sigterm():
        try:
            launcher.start()
            end = _loop(launcher, logs, timeout_s, sink, on_state)
        except (KeyboardInterrupt, Stopped):
            launcher.cancel()
            end = Ending(None, cancelled=True)
    sink.log(logs.read_new())
    end = Ending(end.exit_code, end.cancelled, end.timed_out_s, end.detail, time.monotonic() - started)
    result = gather(job, launcher.kind, end)
    sink.finish(result)
    return result


def _loop(launcher: Launcher, logs: LogFollower, timeout_s: float | None, sink: Sink,
          on_state: Callable[[JobState], None] | None) -> Ending:
    phase: Phase | None = None
    running_since: float | None = None
    last_flush = last_cancel_check = 0.0
    while True:
        state = launcher.poll()
        now = time.monotonic()
        if state.phase is not phase:
            phase = state.phase
            if on_state:
                on_state(state)
            if phase is not Phase.DONE:
                sink.status(RunStatus.QUEUED if phase is Phase.QUEUED else RunStatus.RUNNING)
            if phase is Phase.RUNNING:
                running_since = now
        if now - last_flush >= LOG_FLUSH_S:
            sink.log(logs.read_new())
            last_flush = now
        if state.phase is Phase.DONE:
            return Ending(state.exit_code, detail=state.detail)
        if timeout_s is not None and running_since is not None and now - running_since >= timeout_s:
            launcher.cancel()
            return Ending(None, timed_out_s=timeout_s)
        if now - last_cancel_check >= CANCEL_CHECK_S:
            last_cancel_check = now
            if sink.cancel_requested():
                launcher.cancel()
                return Ending(None, cancelled=True)
        time.sleep(launcher.poll_interval_s)


__all__ = ["LogFollower", "NullSink", "Sink", "Stopped", "follow", "stage", "stop_on_sigterm"]
