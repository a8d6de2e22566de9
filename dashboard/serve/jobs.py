"""Background jobs: a command run in its own process (and process group) while the page stays usable, with its
elapsed time, a cancel that ends it and every child it started, and its output files in a folder of its own.
The command is an argument list, never a shell string: what the user typed is data in files the command reads.

Heavy jobs (TorchRec's planner, the capacity sweep) pass a gate of slots (`Slots`; the server's is `HEAVY`): at
most `size` of them run at once, the others wait first come, first served, so 20 sessions do not start 20 heavy
processes on a 2-core machine. They run `nice` levels below the server (Job(nice=...); the server passes
PLANNER_WORKER_NICE, as for its planning workers), their session's autogroup too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections import deque
from enum import Enum
from pathlib import Path
from typing import Optional, Protocol, Sequence

from dashboard.serve import priority

STDOUT, STDERR = "stdout.txt", "stderr.txt"
TERM_GRACE_S = 2.0  # after SIGTERM, how long the group has to exit before SIGKILL


class JobState(str, Enum):
    QUEUED = "queued"  # waiting for a slot of its gate: no process yet
    RUNNING = "running"
    DONE = "done"  # exit code 0
    FAILED = "failed"
    CANCELLED = "cancelled"


def _end_group(proc: subprocess.Popen, grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM to the job's process group, SIGKILL to what is left after `grace_s`. The group outlives its
    leader while a child is in it, so the children are ended even when the leader is gone."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return  # no process is left in the group
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(proc.pid):
            time.sleep(0.05)
        if not _group_alive(proc.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class Waiter(Protocol):
    def launch(self) -> bool: ...


class Slots:
    """A gate of `size` slots: at most `size` jobs that pass it run at once; the others wait in a queue, first
    come, first served. A slot passes to the next queued job as soon as its job's process ends or a job is
    cancelled, closed or garbage-collected, from whichever thread freed it. The gate's lock is never held while a
    process starts (each job's own lock is).

    A waiter is anything with `launch() -> bool`, called once when its turn comes: True means it took the slot
    and calls `release()` when it is done with it; False gives the slot straight back (it was cancelled meanwhile,
    or could not start). Jobs (below) and the dashboard's measuring runs (dashboard.serve.runner) wait this way."""

    def __init__(self, size: int):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"a gate has a positive whole number of slots, got {size!r}")
        self.size = size
        self._lock = threading.Lock()
        self._busy = 0  # slots taken: running jobs, and jobs being started
        self._queue: deque[Waiter] = deque()

    @property
    def busy(self) -> int:
        return self._busy

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def enter(self, run: Waiter) -> None:
        """Queue a waiter; it launches at once if a slot is free."""
        with self._lock:
            self._queue.append(run)
        self._pump()

    def ahead(self, run: Waiter) -> int:
        with self._lock:
            try:
                return self._queue.index(run)
            except ValueError:
                return 0

    def withdraw(self, run: Waiter) -> None:
        """A queued waiter leaves the queue (cancelled or dropped); one popped already is stopped by its own
        lock (its launch returns False)."""
        with self._lock:
            try:
                self._queue.remove(run)
            except ValueError:
                pass

    def release(self) -> None:
        with self._lock:
            self._busy -= 1
        self._pump()

    def _pump(self) -> None:
        """Start queued jobs while a slot is free, oldest first."""
        while True:
            with self._lock:
                if self._busy >= self.size or not self._queue:
                    return
                run = self._queue.popleft()
                self._busy += 1
            if not run.launch():  # cancelled meanwhile, or it could not start: its slot is free again
                with self._lock:
                    self._busy -= 1


def heavy_size() -> int:
    """PLANNER_JOBS when set (a positive integer), else the planning pool's size (one per core, or
    PLANNER_WORKERS)."""
    return (priority.env_count("PLANNER_JOBS", "heavy background jobs (TorchRec's planner, capacity sweeps) that "
                               "may run at once", "one per core") or priority.default_size())


def _server_gate() -> Slots:
    """The server's gate; with a bad PLANNER_JOBS or PLANNER_WORKERS, one per core (the app refuses to start with
    the setting's message: dashboard.ui.services.settings_problems), so importing this module never fails."""
    try:
        return Slots(heavy_size())
    except ValueError:
        return Slots(priority.machine_cores())


HEAVY = _server_gate()  # the server's gate for heavy jobs, shared by every session


class _Run:
    """A job's process and what is known of it: held by the job, by its gate's queue while it waits and by the
    reaper thread while it runs (never the Job itself, so a Job nobody holds is collected, and its process ended
    or its place in the queue given up)."""

    def __init__(self, argv: tuple, workdir: Path, cwd: Optional[Path], env: Optional[dict],
                 slots: Optional[Slots], nice: int = 0):
        self.argv, self.workdir, self.cwd, self.env, self.slots, self.nice = argv, workdir, cwd, env, slots, nice
        self.lock = threading.RLock()  # re-entrant: a finalizer may run in the thread that is starting it
        self.asked = time.monotonic()
        self.started: Optional[float] = None  # when the process started (monotonic seconds)
        self.ended: Optional[float] = None  # when it ended, set by the reaper thread (or when it could not start)
        self.proc: Optional[subprocess.Popen] = None
        self.cancelled = False
        self.done = threading.Event()  # ended, or cancelled before it started
        self.reaper: Optional[threading.Thread] = None

    def popen(self) -> None:
        with open(self.workdir / STDOUT, "wb") as out, open(self.workdir / STDERR, "wb") as err:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err, start_new_session=True)
        self.started = time.monotonic()
        self.reaper = threading.Thread(target=self.reap, name=f"job-{self.proc.pid}", daemon=True)
        self.reaper.start()

    def launch(self) -> bool:
        """Start the process of a job its gate let through; False when it was cancelled meanwhile or could not
        start (it failed then, saying why on its stderr), so its slot is free again."""
        with self.lock:
            if self.cancelled:
                return False
            try:
                self.popen()
            except OSError as e:
                (self.workdir / STDERR).write_text(f"error: the job could not start: {e}\n", encoding="utf-8")
                self.ended = time.monotonic()
                self.done.set()
                return False
            if self.cancelled:  # dropped by a finalizer while it started, in this thread
                _end_group(self.proc, 0.0)
        return True

    def reap(self) -> None:
        if self.nice:  # here, not in the starting thread: the kernel may ask it to retry the autogroup's nice
            priority.lower_priority(self.proc.pid, self.nice)
        self.proc.wait()
        self.ended = time.monotonic()
        if self.slots is not None:
            self.slots.release()  # before `done`: once a job's wait returns, the next one has started
        self.done.set()

    def withdraw(self) -> bool:
        """Cancel it if it has not started (True); False when it has a process."""
        with self.lock:
            if self.proc is not None or self.ended is not None:
                return False
            self.cancelled = True
            if self.slots is not None:
                self.slots.withdraw(self)
            self.done.set()
            return True


def _drop(run: _Run) -> None:
    """A Job garbage-collected (or at interpreter exit): its place in the queue is given up, its process ended."""
    if not run.withdraw() and run.proc is not None:
        _end_group(run.proc, 0.0)


class Job:
    """One command running in the background. Its exit is collected by a thread as soon as it happens (a
    finished process never lingers as a zombie, whether or not anyone looks); `cancel()` ends its whole process
    group; `close()` also deletes its folder. Garbage-collected or at interpreter exit, a running job is ended.
    With `slots` (a gate), its process starts only when a slot is free: until then it is QUEUED, `ahead` jobs
    before it; cancelled then, it never starts."""

    def __init__(self, argv: Sequence[str], workdir: Path, label: str = "", cwd: Optional[Path] = None,
                 env: Optional[dict] = None, slots: Optional[Slots] = None, nice: int = 0):
        if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("a job's command is a non-empty list of strings (never a shell string)")
        self.argv = tuple(argv)
        self.workdir = Path(workdir)
        self.label = label
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._run = _Run(self.argv, self.workdir, cwd, env, slots, nice)
        self._finalizer = weakref.finalize(self, _drop, self._run)
        if slots is None:
            self._run.popen()
        else:
            slots.enter(self._run)

    @property
    def pid(self) -> Optional[int]:
        """Its process's id; None until it started."""
        proc = self._run.proc
        return proc.pid if proc is not None else None

    @property
    def started(self) -> Optional[float]:
        """When its process started (monotonic seconds); None while it is queued."""
        return self._run.started

    @property
    def ended(self) -> Optional[float]:
        """When the process ended (monotonic seconds); None while it runs or waits."""
        return self._run.ended

    @property
    def cancelled(self) -> bool:
        return self._run.cancelled

    @property
    def returncode(self) -> Optional[int]:
        proc = self._run.proc
        return proc.returncode if self.ended is not None and proc is not None else None

    @property
    def state(self) -> JobState:
        run = self._run
        if run.cancelled:
            return JobState.CANCELLED
        if run.ended is not None:
            return JobState.DONE if run.proc is not None and run.proc.returncode == 0 else JobState.FAILED
        return JobState.QUEUED if run.proc is None else JobState.RUNNING

    @property
    def running(self) -> bool:
        return self.state is JobState.RUNNING

    @property
    def live(self) -> bool:
        """Not finished yet: queued or running."""
        return self.state in (JobState.QUEUED, JobState.RUNNING)

    @property
    def ahead(self) -> int:
        """How many jobs wait before it in its gate's queue (0 when it is not queued)."""
        run = self._run
        return run.slots.ahead(run) if run.slots is not None and run.proc is None else 0

    @property
    def queued_s(self) -> float:
        """Seconds it waited for a slot (so far, while it waits)."""
        run = self._run
        until = run.started if run.started is not None else run.ended
        return (until if until is not None else time.monotonic()) - run.asked

    @property
    def elapsed_s(self) -> float:
        """Seconds since its process started (0 while it waits)."""
        run = self._run
        if run.started is None:
            return 0.0
        return (run.ended if run.ended is not None else time.monotonic()) - run.started

    def wait(self, timeout_s: Optional[float] = None) -> JobState:
        """Block until the job ended (or `timeout_s` passed), waiting for a slot first if it must; its state then."""
        self._run.done.wait(timeout_s)
        return self.state

    def cancel(self) -> None:
        """End the command and every process it started (its process group), and collect its exit; a queued job
        leaves the queue and never starts."""
        run = self._run
        if run.withdraw():
            return
        with run.lock:
            if run.ended is not None or run.cancelled:
                return
            run.cancelled = True
        _end_group(run.proc)
        run.reaper.join(TERM_GRACE_S + 5)

    def path(self, name: str) -> Path:
        return self.workdir / name

    def text(self, name: str) -> str:
        """A file of the job's folder as text ('' when absent)."""
        try:
            return self.path(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def error_line(self) -> str:
        """The last non-empty line the command wrote to stderr (the engine's CLI: `error: ...`), without the
        `error: ` prefix; or its exit status when it wrote none."""
        lines = [ln.strip() for ln in self.text(STDERR).splitlines() if ln.strip()]
        if lines:
            return lines[-1].removeprefix("error: ")
        code = self.returncode
        return f"it ended by signal {-code}" if code is not None and code < 0 else f"it exited with code {code}"

    def close(self) -> None:
        """Cancel it if it still runs or waits, and delete its folder."""
        self.cancel()
        self._finalizer.detach()
        shutil.rmtree(self.workdir, ignore_errors=True)
