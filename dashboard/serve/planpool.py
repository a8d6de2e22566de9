"""Heavy work out of the app server's process: a pool of worker processes, as many as the machine has cores, that
plan configs (dashboard.serve.planwork's named tasks) while the server's threads keep serving pages.

- A task is asked for by name with plain arguments and a key (what it computes); a second request for a key that
  is queued or running joins it instead of planning the same thing twice.
- An owner (a browser session) has at most one live task of a kind: asking for another key of that kind
  supersedes the first, which is cancelled when no other owner waits for it: dropped if queued; if running, it
  may finish within SUPERSEDED_GRACE_S of its start (a new worker's imports cost more than a short plan), else
  its worker is killed (a fresh one replaces it on demand).
- At most `size` tasks run at once; the rest wait in order. A worker is replaced after `max_tasks` tasks or once
  its resident memory passes `max_rss_bytes`, so what planning leaves in memory is given back to the system.
- Workers are `python -m dashboard.serve.planpool` processes fed length-prefixed pickles on stdin/stdout by this server
  only; they end when their stdin closes (the server stopped or retired them).
- Workers run `nice` levels below the server (PLANNER_WORKER_NICE, default 10; priority.lower_priority): when planning
  fills every core, the server's thread still answers pages, websockets and health checks first.
"""

from __future__ import annotations

import itertools
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Hashable, Optional, Sequence

from dashboard.serve import housekeeping, priority

ROOT = Path(__file__).resolve().parents[2]
MAX_TASKS = 200  # tasks a worker runs before it is replaced
MAX_RSS_BYTES = 1536 * 2**20  # a worker that grew past this after a task is replaced
SUPERSEDED_GRACE_S = 1.0  # a superseded task may finish within this of its start: a new worker costs more
_HEADER = struct.Struct(">Q")


class TaskState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # the task raised, or its worker died under it
    CANCELLED = "cancelled"


class TaskFailed(Exception):
    """The task raised in its worker, or the worker ended under it; the message is one line."""


class TaskCancelled(Exception):
    """The task was superseded or cancelled before it finished."""


class Task:
    """One request to the pool: its state, when it was asked for and when it ended, and its value once DONE."""

    def __init__(self, pool: "Pool", name: str, args: tuple, key: Hashable, kind: str, owner: Hashable,
                 on_done: Optional[Callable[[Any], None]]):
        self.pool, self.name, self.args, self.key, self.kind = pool, name, args, key, kind
        self.owners: set = {owner}
        self.on_done = on_done
        self.state = TaskState.QUEUED
        self.value: Any = None
        self.progress: Any = None  # the last progress its task reported from the worker (report), if any
        self.error = ""
        self.asked = time.monotonic()
        self.started: Optional[float] = None
        self.ended: Optional[float] = None
        self.worker: Optional[_Worker] = None
        self.worker_pid: Optional[int] = None  # the process that ran it (kept after it ended)
        self._event = threading.Event()

    @property
    def live(self) -> bool:
        return self.state in (TaskState.QUEUED, TaskState.RUNNING)

    @property
    def elapsed_s(self) -> float:
        """Seconds since it was asked for (until it ended)."""
        return (self.ended if self.ended is not None else time.monotonic()) - self.asked

    def wait(self, timeout_s: Optional[float] = None) -> bool:
        """Block until it ended (True) or `timeout_s` passed (False)."""
        return self._event.wait(timeout_s)

    def result(self, timeout_s: Optional[float] = None) -> Any:
        """Its value; raises TaskCancelled, TaskFailed, or TimeoutError when it has not ended by `timeout_s`."""
        if not self.wait(timeout_s):
            raise TimeoutError(f"the {self.kind} task is still {self.state.value} after {timeout_s} s")
        if self.state is TaskState.CANCELLED:
            raise TaskCancelled(f"the {self.kind} task was cancelled")
        if self.state is TaskState.FAILED:
            raise TaskFailed(self.error)
        return self.value

    def cancel(self) -> None:
        self.pool.cancel(self)

    def _end(self, state: TaskState, value: Any = None, error: str = "") -> None:
        self.state, self.value, self.error, self.ended = state, value, error, time.monotonic()
        self.worker = None
        self._event.set()


class _Worker:
    """One worker process and its pipes; `call` blocks this thread (not the interpreter) until it answers."""

    def __init__(self, argv: Sequence[str], env: dict):
        self.proc = subprocess.Popen(list(argv), cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)
        self.tasks = 0
        self.rss_bytes = 0

    def call(self, name: str, args: tuple, on_progress: Callable[[Any], None]) -> tuple[bool, Any]:
        """(True, value) or (False, one line of what it raised); EOFError when the process ended under it. What the
        task reports meanwhile (report) goes to on_progress."""
        _write_frame(self.proc.stdin, pickle.dumps((name, args), protocol=pickle.HIGHEST_PROTOCOL))
        while True:
            frame = _read_frame(self.proc.stdout)
            if frame is None:
                raise EOFError("the worker process ended")
            kind, *rest = pickle.loads(frame)  # noqa: S301 - our own worker's answer, on our own pipe
            if kind == "progress":
                on_progress(rest[0])
                continue
            ok, value, self.rss_bytes = rest
            self.tasks += 1
            return ok, value

    def kill(self) -> None:
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    def retire(self) -> None:
        """Close its stdin (it exits), and collect it in the background."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()

    @property
    def pid(self) -> int:
        return self.proc.pid


def _write_frame(stream, data: bytes) -> None:
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read_frame(stream) -> Optional[bytes]:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    return data if len(data) == n else None


class Pool:
    """Worker processes for named tasks; see the module's docstring. Thread-safe: every session's script thread
    submits to the one pool of the server."""

    def __init__(self, size: Optional[int] = None, max_tasks: int = MAX_TASKS, max_rss_bytes: int = MAX_RSS_BYTES,
                 argv: Optional[Sequence[str]] = None, grace_s: float = SUPERSEDED_GRACE_S,
                 nice: Optional[int] = None):
        self.size = size or priority.default_size()
        self.max_tasks, self.max_rss_bytes, self.grace_s = max_tasks, max_rss_bytes, grace_s
        self.argv = list(argv or [sys.executable, "-m", "dashboard.serve.planpool"])
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        self.nice = priority.worker_nice() if nice is None else nice
        self.env = {**os.environ, "PYTHONPATH": path, "PLANNER_WORKER_NICE": str(self.nice)}
        self._lock = threading.Condition()
        self._live: "OrderedDict[int, Task]" = OrderedDict()  # queued and running, in the order asked
        self._ids = itertools.count()
        self._idle: list[_Worker] = []
        self._running = 0
        self._closed = False
        self.counts = {"submitted": 0, "joined": 0, "superseded": 0, "done": 0, "failed": 0, "cancelled": 0,
                       "workers_started": 0,
                       "workers_retired": 0, "workers_killed": 0}

    # ---- asking ----

    def submit(self, name: str, args: tuple, key: Hashable, kind: str, owner: Hashable,
               on_done: Optional[Callable[[Any], None]] = None) -> Task:
        """The live task for `key` (joined), or a new one queued. The owner's other live task of this kind is
        superseded: cancelled unless another owner waits for it. `on_done(value)` runs when it succeeded, just
        before it is DONE, in the pool's thread, whether or not anyone still waits (e.g. to cache the value)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            joined = None
            for t in list(self._live.values()):
                if t.key == key:
                    joined = t
                elif t.kind == kind and owner in t.owners:
                    t.owners.discard(owner)
                    if not t.owners:
                        self._supersede_locked(t)
            if joined is not None:
                joined.owners.add(owner)
                self.counts["joined"] += 1
                return joined
            task = Task(self, name, args, key, kind, owner, on_done)
            self._live[next(self._ids)] = task
            self.counts["submitted"] += 1
        threading.Thread(target=self._run, args=(task,), name=f"planpool-{kind}", daemon=True).start()
        return task

    def cancel(self, task: Task) -> None:
        """Cancel it for everyone: dropped if queued, its worker killed if running."""
        with self._lock:
            self._cancel_locked(task)

    def _supersede_locked(self, task: Task) -> None:
        """No one waits for it any more: dropped if queued; if running, it may go on until `grace_s` after its start
        (a short plan's worker then serves the next task, and its value is still remembered), and its worker is
        killed then if it has not finished and no one asked for it again."""
        self.counts["superseded"] += 1
        left = (task.started or 0.0) + self.grace_s - time.monotonic()
        if task.state is not TaskState.RUNNING or left <= 0:
            self._cancel_locked(task)
            return
        timer = threading.Timer(left, self._expire, args=(task,))
        timer.daemon = True
        timer.start()

    def _expire(self, task: Task) -> None:
        with self._lock:
            if task.live and not task.owners:
                self._cancel_locked(task)

    def _cancel_locked(self, task: Task) -> None:
        if not task.live:
            return
        task.owners.clear()
        worker = task.worker
        self._forget(task)
        task._end(TaskState.CANCELLED)
        self.counts["cancelled"] += 1
        if worker is not None:
            worker.kill()  # its runner thread sees the pipe end, and does not return the worker to the pool
            self.counts["workers_killed"] += 1
        self._lock.notify_all()

    def _forget(self, task: Task) -> None:
        for k, t in list(self._live.items()):
            if t is task:
                del self._live[k]

    # ---- running ----

    def _run(self, task: Task) -> None:
        with self._lock:
            while (self._running >= self.size or not self._first_queued(task)) and task.live and not self._closed:
                self._lock.wait()
            if not task.live or self._closed:
                self._lock.notify_all()
                return
            self._running += 1
            task.state, task.started = TaskState.RUNNING, time.monotonic()
            worker = self._idle.pop() if self._idle else None
        try:
            if worker is None:
                worker = _Worker(self.argv, self.env)
                with self._lock:
                    self.counts["workers_started"] += 1
            with self._lock:
                if not task.live:  # cancelled while its worker started
                    self._idle.append(worker)
                    return
                task.worker, task.worker_pid = worker, worker.pid
            try:
                ok, value = worker.call(task.name, task.args, lambda v: setattr(task, "progress", v))
            except (EOFError, OSError, pickle.UnpicklingError) as e:
                worker.kill()
                worker.retire()  # collects the process
                with self._lock:
                    if task.live:  # not cancelled: the worker died by itself (killed, out of memory)
                        self._forget(task)
                        task._end(TaskState.FAILED, error=f"the planning worker process ended ({e}; exit "
                                                          f"{worker.proc.poll()})")
                        self.counts["failed"] += 1
                return
            if ok and task.on_done is not None:  # before the task ends: whoever asks next finds the value there
                task.on_done(value)
            with self._lock:
                keep = task.live and worker.tasks < self.max_tasks and worker.rss_bytes < self.max_rss_bytes
                if keep and not self._closed:
                    self._idle.append(worker)
                else:
                    worker.retire()
                    self.counts["workers_retired"] += 1
                if not task.live:
                    return
                self._forget(task)
                if ok:
                    task._end(TaskState.DONE, value)
                    self.counts["done"] += 1
                else:
                    task._end(TaskState.FAILED, error=value)
                    self.counts["failed"] += 1
        finally:
            with self._lock:
                self._running -= 1
                self._lock.notify_all()

    def _first_queued(self, task: Task) -> bool:
        """Whether `task` is the earliest queued task (first asked, first run)."""
        for t in self._live.values():
            if t.state is TaskState.QUEUED:
                return t is task
        return False

    # ---- looking and stopping ----

    def prestart(self, n: int = 1) -> None:
        """Start up to `n` idle workers now (a worker's start, the engine's imports, is off the first plan's time)."""
        with self._lock:
            missing = max(0, min(n, self.size) - len(self._idle) - self._running)
            for _ in range(missing):
                self._idle.append(_Worker(self.argv, self.env))
                self.counts["workers_started"] += 1

    def stats(self) -> dict:
        with self._lock:
            return {"size": self.size, "running": self._running, "idle_workers": len(self._idle),
                    "queued": sum(1 for t in self._live.values() if t.state is TaskState.QUEUED),
                    "worker_pids": [w.pid for w in self._idle], **self.counts}

    def shutdown(self) -> None:
        """Cancel every live task and end every worker."""
        with self._lock:
            self._closed = True
            for t in list(self._live.values()):
                self._cancel_locked(t)
            idle, self._idle = self._idle, []
            self._lock.notify_all()
        for w in idle:
            w.retire()


_out = None  # in a worker process: the pipe its answers go back on


def report(value: Any) -> None:
    """Called by a task running in a worker: `value` (small, picklable) becomes its Task.progress on the server, at
    once. Does nothing outside a worker."""
    if _out is not None:
        _write_frame(_out, pickle.dumps(("progress", value), protocol=pickle.HIGHEST_PROTOCOL))


def worker_main() -> int:
    """A worker: answer (name, args) frames on stdin with (ok, value or error line, rss) frames on stdout, until
    stdin closes. What the tasks print goes to stderr (stdout is the pipe)."""
    from dashboard.serve import planpool  # run as __main__, this module is another copy than the tasks import
    from dashboard.serve.planwork import TASKS

    priority.lower_priority(0, priority.worker_nice())  # the pool passes its own in the environment
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    planpool._out = out
    sys.stdout = sys.stderr
    while True:
        frame = _read_frame(inp)
        if frame is None:
            return 0
        name, args = pickle.loads(frame)  # noqa: S301 - frames come from the server that started this process
        try:
            reply = (True, TASKS[name](*args))
        except Exception as e:  # noqa: BLE001 - one line back to the page, never a dead worker
            reply = (False, f"{type(e).__name__}: {e}".splitlines()[0])
        try:
            data = pickle.dumps(("reply", *reply, housekeeping.rss_bytes()), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - a value that does not pickle is the task's error
            data = pickle.dumps(("reply", False, f"the {name} task's result does not pickle ({e})",
                                 housekeeping.rss_bytes()))
        _write_frame(out, data)


if __name__ == "__main__":
    sys.exit(worker_main())
