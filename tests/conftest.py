"""The whole run's guards. pytest is the subreaper of every process the tests start (tests/processes.py), and when
the session ends no process below it may still run: any that does fails the run, named, and is killed. A test's
pytest-timeout is scaled for the load when it starts, as its waits' budgets are (tests/waits.py): a wait that
gives up, and says what it saw, does so before the test's timeout would cut it short."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests import processes, waits

# The processes already told to end get this long: a pool retires a worker by closing its stdin, and a worker
# that imported torch takes seconds to exit on a loaded machine (the pool's reaper kills it after 10 s).
ENDING_S = 30.0


def pytest_configure(config) -> None:
    processes.become_subreaper()


# Folders whose files share session fixtures that cost minutes (tests/validate: real gloo validation runs): with
# several workers (pytest-xdist, scripts/test.sh) their files run on one worker, so the fixtures are made once.
SHARED_SESSION_FIXTURES = ("tests/validate/",)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist (requirements-dev.txt); unused without it
def pytest_xdist_make_scheduler(config, log):
    """With several workers, whatever --dist says: each test file runs on one worker (its module fixtures are made
    once, its tests in file order), and the files of a SHARED_SESSION_FIXTURES folder on one worker together.
    (xdist's own --dist loadgroup did not group files here, with pytest 9.2 and xdist 3.8: tests marked
    xdist_group still went to both workers.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((folder for folder in SHARED_SESSION_FIXTURES if path.startswith(folder)), path)

    return ByFile(config, log)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Before pytest-timeout reads it: the test's timeout (its mark's, else the ini's) times slowdown()."""
    mark = item.get_closest_marker("timeout")
    seconds = mark.args[0] if mark and mark.args else (mark.kwargs.get("timeout") if mark else None)
    if seconds is None:
        seconds = float(item.config.getini("timeout") or 0)
    if seconds:
        item.add_marker(pytest.mark.timeout(float(seconds) * waits.slowdown()), append=False)
    yield


@pytest.fixture(scope="session", autouse=True)
def in_process_pool_shut_down(no_process_outlives_the_run):
    """AppTest runs the app in this process (tests/dashboard, and the fuzz test's Tables page): its planning
    workers (dashboard.ui.services.pool) are this process's children, and end here, before the check below. Here,
    not in tests/dashboard: with several workers a worker may run the fuzz file and no dashboard file."""
    yield
    services = sys.modules.get("dashboard.ui.services")
    if services is not None:
        services.pool().shutdown()
        services.pool.clear()


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_run():
    """Session-scoped fixtures that start servers on purpose (tests/db's PostgreSQL) depend on nothing here, so
    pytest tears them down before this check runs (it is set up first, torn down last)."""
    yield
    left = processes.survivors()
    deadline = time.monotonic() + ENDING_S
    while left and time.monotonic() < deadline:  # retired workers exit once they read their closed stdin
        time.sleep(0.1)
        left = processes.survivors()
    if not left:
        return
    named = [processes.describe(p) for p in left]
    for p in left:
        processes.kill_tree(p, grace_s=2.0)
    pytest.fail(f"{len(left)} processes started by the tests outlived the run (killed now):\n  " + "\n  ".join(named)
                + f"\n(pytest is {os.getpid()}; start processes with tests.processes.started/run)")

