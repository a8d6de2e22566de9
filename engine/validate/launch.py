"""Launchers behind one interface: prepare a job, start it, poll it, cancel it, wait for it.

`local` runs torchrun as a subprocess in a session of its own (cancel ends it and every rank below it);
`slurm` and `script` live in engine.validate.slurm and engine.validate.script (which build on this module), and
engine.validate.launchers picks one. Every command is an argument list, never a shell string.
"""

from __future__ import annotations

import ctypes
import enum
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.errors import EngineError
from engine.validate.types import Job, LauncherKind

ROOT = Path(__file__).resolve().parents[2]  # the repository: `python -m engine...` must import from here
CANCEL_GRACE_S = 5.0  # SIGTERM first (torchrun forwards it to the ranks), SIGKILL after this long
POLL_S = 0.1
PR_SET_PDEATHSIG = 1


class Phase(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True)
class JobState:
    phase: Phase
    exit_code: int | None = None  # set when DONE; negative: killed by that signal
    detail: str = ""  # the scheduler's own word for the state (e.g. Slurm's COMPLETED, TIMEOUT)


class Launcher(Protocol):
    kind: LauncherKind
    follows: bool  # False: prepare() writes something to run elsewhere; start/poll/cancel do not apply
    poll_interval_s: float

    def prepare(self, job: Job) -> list[str] | Path: ...

    def command_line(self) -> str: ...

    def start(self) -> None: ...

    def poll(self) -> JobState: ...

    def cancel(self) -> None: ...

    def wait(self, timeout_s: float | None = None) -> JobState | None: ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(extra: dict | None = None) -> dict[str, str]:
    """The ranks' environment: this repository importable, output unbuffered (logs arrive as they happen)."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the process that launched us dies (Linux), so a killed CLI
    leaves no job behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _may_tie_to_parent() -> bool:
    """PDEATHSIG fires when the launching *thread* ends: only tie the job to a main thread."""
    return sys.platform == "linux" and threading.current_thread() is threading.main_thread()


def wait_for(launcher: Launcher, timeout_s: float | None) -> JobState | None:
    """Poll until the job is done; None if timeout_s passed first."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        state = launcher.poll()
        if state.phase is Phase.DONE:
            return state
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(launcher.poll_interval_s)


class LocalLauncher:
    """torchrun on this machine: `python -m torch.distributed.run --nproc-per-node N ... -m engine.validate.worker`."""

    kind = LauncherKind.LOCAL
    follows = True
    poll_interval_s = POLL_S

    def __init__(self) -> None:
        self.job: Job | None = None
        self.argv: list[str] = []
        self.proc: subprocess.Popen | None = None

    def prepare(self, job: Job) -> list[str]:
        self.job = job
        # --standalone: a c10d rendezvous on a port torchrun binds itself (no free-port race with other jobs)
        self.argv = [job.python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                     "--nproc-per-node", str(job.nproc), *job.worker_args()]
        return self.argv

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def start(self) -> None:
        if self.job is None:
            raise EngineError("LocalLauncher.start() before prepare()")
        self.job.ranks_dir.mkdir(parents=True, exist_ok=True)
        with open(self.job.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=job_env(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         # only from a main thread, where it is safe: see _may_tie_to_parent
                                         preexec_fn=_die_with_parent if _may_tie_to_parent() else None)  # noqa: PLW1509

    @property
    def pid(self) -> int | None:
        """torchrun's pid; the ranks are its children."""
        return self.proc.pid if self.proc else None

    def poll(self) -> JobState:
        if self.proc is None:
            return JobState(Phase.QUEUED)
        code = self.proc.poll()
        return JobState(Phase.RUNNING) if code is None else JobState(Phase.DONE, code)

    def cancel(self) -> None:
        """TERM torchrun (it stops its ranks), then KILL whatever of its process tree is left after
        CANCEL_GRACE_S. torchrun starts each rank in a session of its own, so the tree, not torchrun's process
        group, is what holds every rank."""
        if self.proc is None:
            return
        tree = [self.proc.pid, *descendants(self.proc.pid)]
        _signal_group(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + CANCEL_GRACE_S
        while time.monotonic() < deadline and any(alive(p) for p in tree):
            self.proc.poll()  # reap torchrun as soon as it exits (a zombie does not count as alive)
            time.sleep(POLL_S)
        for pid in tree[1:] + [p for p in descendants(self.proc.pid) if p not in tree]:
            _signal_group(pid, signal.SIGKILL)  # a rank leads its own group: its helpers go with it
            _signal(pid, signal.SIGKILL)
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout_s: float | None = None) -> JobState | None:
        return wait_for(self, timeout_s)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after "pid (comm)": state, ppid, pgrp, ...; None when gone (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = _proc_stat(pid)
    if fields is not None:
        return fields[0] != "Z"
    if Path("/proc").is_dir():
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def descendants(pid: int) -> list[int]:
    """Every live process below pid (children, grandchildren, ...), read from /proc; [] without /proc."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields is not None and fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


__all__ = ["JobState", "Launcher", "LocalLauncher", "Phase", "alive", "descendants", "free_port", "job_env",
           "wait_for"]
