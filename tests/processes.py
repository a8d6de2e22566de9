"""The processes the tests start: each leads a session (a process group) of its own, and it, its group and every
process under it are killed on any exit, a timeout included. pytest is their subreaper (tests/conftest.py), so a
process whose parent died stays below pytest where the session's last check finds it."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from bench.load import _stat

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
MARK_ENV = "PLANNER_TEST_TREE"  # in the environment of every process a test started, and all below it
TERM_GRACE_S = 10.0  # SIGTERM first: a server closes its workers and files; then SIGKILL


def become_subreaper() -> bool:
    """Orphans below this process are re-parented to it instead of init (Linux); whether that holds."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and not yet waited for, does not)."""
    try:
        return _stat(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def describe(pid: int) -> str:
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} {' '.join(a.decode(errors='replace') for a in argv if a)[:200]}"


def _signal_all(pids: list[int], groups: set[int], sig: int) -> None:
    for g in groups:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap(pids: list[int]) -> None:
    """Wait for those of `pids` that are this process's children (its own, or orphans it is subreaper of)."""
    for p in pids:
        try:
            os.waitpid(p, os.WNOHANG)
        except ChildProcessError:
            pass


def _table() -> dict[int, tuple[str, int, int]]:
    """Every process now: pid -> (state, parent pid, process group), from /proc/*/stat."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                f = _stat(int(entry))
                table[int(entry)] = (f[0], int(f[1]), int(f[2]))
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return table


def _marked(pid: int, mark: bytes) -> bool:
    try:
        return mark in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return False


def _tree(pid: int, groups: set[int], mark: bytes = b"") -> list[int]:
    """`pid`, the processes below it, the members of `groups` and those whose environment holds `mark` (an
    orphan that started a session of its own keeps it), zombies included (they are to be reaped)."""
    table = _table()
    out = {p for p, (_, _, g) in table.items() if g in groups or (mark and _marked(p, mark))}
    todo = [pid] if pid in table else []
    while todo:
        p = todo.pop()
        out.add(p)
        todo += [c for c, (_, parent, _) in table.items() if parent == p]
    return sorted(out)


def survivors() -> list[int]:
    """The live processes below this one."""
    me = os.getpid()
    return [p for p in _tree(me, set()) if p != me and alive(p)]


def kill_tree(pid: int, group: int | None = None, grace_s: float = TERM_GRACE_S, mark: str = "") -> list[int]:
    """SIGTERM `pid`, every process below it (those that started sessions of their own too), their process groups,
    `group` (a session leader's, which outlives its leader) and every process whose environment holds `mark`
    (NAME=VALUE: started's, inherited by all below, orphans too), then SIGKILL what still runs after `grace_s`;
    everything that was this process's child is waited for. Returns the pids that needed the SIGKILL."""
    own, tag = os.getpgid(0), mark.encode()
    groups = {group} if group and group != own else set()
    pids = _tree(pid, groups, tag)
    groups |= {g for g in map(_pgid, pids) if g and g != own}
    _signal_all([p for p in pids if alive(p)], groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while True:
        pids = sorted({*pids, *_tree(pid, groups, tag)})
        _reap([p for p in pids if p != pid])  # `pid` is its starter's to wait for (its exit status)
        running = [p for p in pids if alive(p)]
        if not running or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if running:
        _signal_all(running, groups, signal.SIGKILL)
        time.sleep(0.1)
        _reap([p for p in pids if p != pid])
    return running


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@contextmanager
def started(argv: list[str], **popen_kw) -> Iterator[subprocess.Popen]:
    """subprocess.Popen(argv, **popen_kw) in a session of its own, its environment marked; on leaving, however,
    the process and all it started are ended (kill_tree) and waited for."""
    mark = f"{MARK_ENV}={uuid.uuid4().hex}"
    env = {**(popen_kw.pop("env", None) or os.environ), MARK_ENV: mark.split("=", 1)[1]}
    proc = subprocess.Popen(argv, start_new_session=True, env=env, **popen_kw)
    proc.tree_mark = mark
    try:
        yield proc
    finally:
        kill_tree(proc.pid, group=proc.pid, mark=mark)
        try:
            proc.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def run(argv: list[str], *, timeout: float, input: str | bytes | None = None, capture_output: bool = False,
        **popen_kw) -> subprocess.CompletedProcess:
    """subprocess.run's meaning (check is not offered: assert on the returncode and say what it printed), in a
    session of its own; on a timeout, or any other way out, the whole tree is killed, not only `argv`'s process
    (subprocess.run kills only that one, and its children would outlive the test)."""
    if capture_output:
        popen_kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        popen_kw["stdin"] = subprocess.PIPE
    with started(argv, **popen_kw) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            kill_tree(proc.pid, group=proc.pid, grace_s=1.0, mark=proc.tree_mark)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, out, err) from e
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)
