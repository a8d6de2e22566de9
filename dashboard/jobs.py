"""Background jobs: a command run in its own process (and process group) while the page stays usable, with its
elapsed time, a cancel that ends it and every child it started, and its output files in a folder of its own.
The command is an argument list, never a shell string: what the user typed is data in files the command reads.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from enum import Enum
from pathlib import Path
from typing import Optional, Sequence

STDOUT, STDERR = "stdout.txt", "stderr.txt"
TERM_GRACE_S = 2.0  # after SIGTERM, how long the group has to exit before SIGKILL


class JobState(str, Enum):
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


class _Exit:
    """When the process ended (monotonic seconds), set by the reaper thread; the thread holds this, not the Job,
    so a Job nobody holds is collected (and its process ended) while it runs."""

    at: Optional[float] = None


def _reap(proc: subprocess.Popen, exit_: _Exit) -> None:
    proc.wait()
    exit_.at = time.monotonic()


class Job:
    """One command running in the background. Its exit is collected by a thread as soon as it happens (a
    finished process never lingers as a zombie, whether or not anyone looks); `cancel()` ends its whole process
    group; `close()` also deletes its folder. Garbage-collected or at interpreter exit, a running job is ended."""

    def __init__(self, argv: Sequence[str], workdir: Path, label: str = "", cwd: Optional[Path] = None,
                 env: Optional[dict] = None):
        if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("a job's command is a non-empty list of strings (never a shell string)")
        self.argv = tuple(argv)
        self.workdir = Path(workdir)
        self.label = label
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self._exit = _Exit()
        self.cancelled = False
        with open(self.workdir / STDOUT, "wb") as out, open(self.workdir / STDERR, "wb") as err:
            self._proc = subprocess.Popen(self.argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=err, start_new_session=True)
        self.pid = self._proc.pid
        self._reaper = threading.Thread(target=_reap, args=(self._proc, self._exit), name=f"job-{self.pid}",
                                        daemon=True)
        self._reaper.start()
        self._finalizer = weakref.finalize(self, _end_group, self._proc, 0.0)

    @property
    def ended(self) -> Optional[float]:
        """When the process ended (monotonic seconds); None while it runs."""
        return self._exit.at

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.returncode if self.ended is not None else None

    @property
    def state(self) -> JobState:
        if self.cancelled:
            return JobState.CANCELLED
        if self.ended is None:
            return JobState.RUNNING
        return JobState.DONE if self._proc.returncode == 0 else JobState.FAILED

    @property
    def running(self) -> bool:
        return self.state is JobState.RUNNING

    @property
    def elapsed_s(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def wait(self, timeout_s: Optional[float] = None) -> JobState:
        """Block until the job ended (or `timeout_s` passed); its state then."""
        self._reaper.join(timeout_s)
        return self.state

    def cancel(self) -> None:
        """End the command and every process it started (its process group), and collect its exit."""
        if self.ended is None:
            self.cancelled = True
            _end_group(self._proc)
            self._reaper.join(TERM_GRACE_S + 5)

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
        """Cancel it if it still runs, and delete its folder."""
        self.cancel()
        self._finalizer.detach()
        shutil.rmtree(self.workdir, ignore_errors=True)
