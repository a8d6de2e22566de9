"""How many processes the app's background work may use, and how far below the app server they run: the worker and
job counts from the environment (PLANNER_WORKERS, PLANNER_JOBS, PLANNER_RUNS: `env_count`), the cores of this
machine, and the nice of planning workers and heavy jobs (PLANNER_WORKER_NICE; `lower_priority` also sets the nice
of the process's session autogroup, which is what Linux shares the CPU by). No Streamlit.
"""

from __future__ import annotations

import os
import time
from typing import Optional


def default_size() -> int:
    """PLANNER_WORKERS when set (a positive integer), else one worker per core of this machine."""
    return env_count("PLANNER_WORKERS", "planning worker processes", "one per core") or machine_cores()


def env_count(name: str, what: str, unset: str) -> Optional[int]:
    """The positive whole number in environment variable `name`, None when it is unset; raises ValueError naming
    the variable, `what` it counts and what leaving it `unset` gives."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{name}={raw!r}: give a positive whole number of {what} (or leave it unset: {unset})")
    return n


WORKER_NICE = 10  # how many nice levels below the server its heavy processes run (PLANNER_WORKER_NICE)
_AUTOGROUP_TRIES, _AUTOGROUP_RETRY_S = 5, 0.11  # Linux lets a user change an autogroup's nice once per 0.1 s


def worker_nice() -> int:
    """PLANNER_WORKER_NICE when set (0 to 19), else WORKER_NICE: how many nice levels below the app server its
    planning workers and heavy jobs run, so the server's own thread (the web server: pages, websockets, health)
    gets a core before them. Raises ValueError naming the variable and what to give."""
    raw = os.environ.get("PLANNER_WORKER_NICE", "").strip()
    if not raw:
        return WORKER_NICE
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if not 0 <= n <= 19:
        raise ValueError(f"PLANNER_WORKER_NICE={raw!r}: give a whole number from 0 (the server's priority) to 19 "
                         f"(the lowest), how far below the server planning runs (or leave it unset: {WORKER_NICE})")
    return n


def lower_priority(pid: int, steps: int) -> int:
    """Run process `pid` (0: this one; it leads a session of its own) `steps` nice levels below the process that
    calls this (at most 19); returns that nice. Linux puts each session in an autogroup that gets the same share
    of the CPU as every other, whatever the nice of its threads: one worker would weigh as much as the whole
    server. So the session's autogroup gets the same nice (where the kernel has autogroups), and the process's
    thread (threads it starts later inherit it). Best effort: where the system refuses, it runs as it was."""
    target = min(19, os.getpriority(os.PRIO_PROCESS, 0) + steps)
    if steps <= 0:
        return target
    try:
        os.setpriority(os.PRIO_PROCESS, pid, target)
    except OSError:
        pass
    real = pid or os.getpid()
    try:
        leader = os.getsid(real) == real
    except OSError:  # gone meanwhile
        return target
    if leader:  # its own session's autogroup, never the server's
        set_autogroup_nice(real, target)
    return target


def set_autogroup_nice(pid: int, nice: int) -> Optional[int]:
    """Set the nice of the autogroup (Linux: the session) that process `pid` is in; returns the nice it has now,
    None where the kernel has no autogroups or refuses. Every process of that session shares it."""
    path = f"/proc/{pid}/autogroup"
    for _ in range(_AUTOGROUP_TRIES):
        try:
            with open(path, "w") as f:
                f.write(str(nice))
            break
        except BlockingIOError:  # EAGAIN: another autogroup changed within the last 0.1 s
            time.sleep(_AUTOGROUP_RETRY_S)
        except OSError:  # no autogroups here, or not ours to change
            return None
    try:
        with open(path) as f:
            return int(f.read().split()[-1])
    except (OSError, IndexError, ValueError):
        return None


def machine_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
