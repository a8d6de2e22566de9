"""Launchers behind one interface: prepare a job, start it, poll it, cancel it, wait for it.

`local` runs torchrun as a subprocess in its own process group (cancel ends every rank); `slurm` and `script`
live in engine.validate.slurm and engine.validate.script. Every command is an argument list, never a shell
string.
"""

from __future__ import annotations

import ctypes
import enum
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol, Union

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
    exit_code: Optional[int] = None  # set when DONE; negative: killed by that signal
    detail: str = ""  # the scheduler's own word for the state (e.g. Slurm's COMPLETED, TIMEOUT)


class Launcher(Protocol):
    kind: LauncherKind
    follows: bool  # False: prepare() writes something to run elsewhere; start/poll/cancel do not apply
    poll_interval_s: float

    def prepare(self, job: Job) -> Union[list[str], Path]: ...

    def start(self) -> None: ...

    def poll(self) -> JobState: ...

    def cancel(self) -> None: ...

    def wait(self, timeout_s: Optional[float] = None) -> Optional[JobState]: ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(extra: Optional[dict] = None) -> dict[str, str]:
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


def wait_for(launcher: Launcher, timeout_s: Optional[float]) -> Optional[JobState]:
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
        self.job: Optional[Job] = None
        self.argv: list[str] = []
        self.proc: Optional[subprocess.Popen] = None

    def prepare(self, job: Job) -> list[str]:
        self.job = job
        self.argv = [job.python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(job.nproc),
                     "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", *job.worker_args()]
        return self.argv

    def start(self) -> None:
        if self.job is None:
            raise EngineError("LocalLauncher.start() before prepare()")
        self.job.ranks_dir.mkdir(parents=True, exist_ok=True)
        with open(self.job.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=job_env(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent if _may_tie_to_parent() else None)

    @property
    def pgid(self) -> Optional[int]:
        """The job's process group (torchrun and every rank): the id of torchrun, its leader."""
        return self.proc.pid if self.proc else None

    def poll(self) -> JobState:
        if self.proc is None:
            return JobState(Phase.QUEUED)
        code = self.proc.poll()
        return JobState(Phase.RUNNING) if code is None else JobState(Phase.DONE, code)

    def cancel(self) -> None:
        """TERM the whole process group, KILL what is left after CANCEL_GRACE_S, reap torchrun."""
        if self.proc is None:
            return
        _signal_group(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + CANCEL_GRACE_S
        while time.monotonic() < deadline and _group_alive(self.proc.pid):
            self.proc.poll()  # reap torchrun as soon as it exits, or it stays a zombie member of the group
            time.sleep(POLL_S)
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout_s: Optional[float] = None) -> Optional[JobState]:
        return wait_for(self, timeout_s)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group pgid, read from /proc (Linux)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def _group_alive(pgid: int) -> bool:
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    return bool(group_members(pgid))


def make_launcher(kind: LauncherKind) -> Launcher:
    if kind is LauncherKind.LOCAL:
        return LocalLauncher()
    if kind is LauncherKind.SLURM:
        from engine.validate.slurm import SlurmLauncher

        return SlurmLauncher()
    from engine.validate.script import ScriptLauncher

    return ScriptLauncher()


__all__ = ["JobState", "Launcher", "LocalLauncher", "Phase", "free_port", "group_members", "job_env",
           "make_launcher", "wait_for"]
