"""Planning out of the server's process (dashboard.serve.planpool): real worker processes plan as the engine does in
process; a request for a key in the works joins it; a session's next request supersedes its last one, killing its
worker unless another session waits for it; at most `size` tasks run at once, first asked first run; workers are
replaced after their task count; a task that raises, a worker that dies and a value that does not pickle each
come back as one line; workers end with the pool."""

from __future__ import annotations

import json
import os
import time

import pytest

import engine
from dashboard.serve import planpool, planwork, priority
from dashboard.tables import presets
from tests.factories import tutorial

EFFORT, STOP_S = 2_000, 60.0
SLOW = (2_000_000, 300.0)  # 1,000 tables at this effort plan for tens of seconds: long enough to cancel


def _json(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


@pytest.fixture(scope="module")
def big() -> str:
    return _json(presets.synthetic(presets.SyntheticSpec(count=1000)))


@pytest.fixture
def pool():
    p = planpool.Pool(size=2)
    yield p
    p.shutdown()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _gone(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _running(task: planpool.Task, within_s: float = 60.0) -> int:
    """The pid of the worker running `task`, once it has one."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        w = task.worker
        if w is not None:
            return w.pid
        time.sleep(0.02)
    raise AssertionError(f"the task is still {task.state.value} after {within_s} s")


def test_a_worker_plans_as_the_engine_does_in_process(pool):
    cfg = tutorial()
    task = pool.submit("plan", (_json(cfg), EFFORT, STOP_S), "k", "plan", "alice")
    out = task.result(120)
    assert isinstance(out, planwork.PlanOutcome) and out.result is not None and not out.problem
    here = engine.plan(engine.parse_config(cfg), engine.PlannerSettings(search=True, effort=EFFORT,
                                                                       time_budget_s=STOP_S))

    def same(p):
        return {k: v for k, v in engine.plan_to_dict(p).items() if k != "planning_seconds"}

    assert same(out.result.plan) == same(here)
    assert out.result.config == engine.parse_config(cfg) and task.state is planpool.TaskState.DONE
    assert pool.stats()["done"] == 1 and pool.stats()["idle_workers"] == 1  # the worker went back to the pool


def test_on_done_has_run_when_the_task_is_done(pool):
    """Whoever the finished task wakes (or whoever asks for its key next) finds the value where on_done put it: a
    task no longer live with its value not yet cached would be planned again."""
    cache = {}

    def slow_put(value):
        time.sleep(0.3)  # the pool's thread put aside right there: the task must not be done yet
        cache["k"] = value

    task = pool.submit("plan", (_json(tutorial()), EFFORT, STOP_S), "k", "plan", "alice", slow_put)
    out = task.result(120)
    assert cache.get("k") is out and task.state is planpool.TaskState.DONE


def test_config_errors_and_refusals_come_back_as_one_line(pool):
    bad = tutorial()
    bad["tables"][1]["embedding_dim"] = -4
    out = pool.submit("plan", (_json(bad), EFFORT, STOP_S), "bad", "plan", "alice").result(120)
    assert out.result is None and out.config_error and "embedding_dim" in out.problem
    huge = tutorial()
    huge["tables"][0]["num_embeddings"] = 10**13
    out = pool.submit("plan", (_json(huge), EFFORT, STOP_S), "huge", "plan", "alice").result(120)
    assert out.result is None and (out.refused or out.config_error) and "\n" not in out.problem
    with pytest.raises(planpool.TaskFailed, match="KeyError"):
        pool.submit("no-such-task", (), "x", "plan", "alice").result(120)


def test_the_same_key_is_joined_and_a_sessions_next_request_supersedes_its_last(pool, big):
    slow = pool.submit("plan", (big, *SLOW), "slow", "plan", "alice")
    pid = _running(slow)
    assert pool.submit("plan", (big, *SLOW), "slow", "plan", "bob") is slow  # joined, not planned twice
    assert slow.owners == {"alice", "bob"} and pool.stats()["joined"] == 1
    quick = pool.submit("plan", (_json(tutorial()), EFFORT, STOP_S), "quick", "plan", "alice")
    assert slow.live and slow.owners == {"bob"}  # bob still waits: alice's new request does not cancel it
    assert quick.result(120).result is not None
    pool.submit("plan", (_json(tutorial()), 0, STOP_S), "quick-0", "plan", "bob")  # bob moves on too
    assert slow.wait(pool.grace_s + 5)  # no one waits: its worker is killed (at once, or once its grace is over)
    assert slow.state is planpool.TaskState.CANCELLED and _gone(pid)
    with pytest.raises(planpool.TaskCancelled):
        slow.result(1)
    assert pool.stats()["workers_killed"] == 1
    other_kind = pool.submit("replan", ("{}", {}, None, 0, STOP_S), "replan", "replan", "bob")
    assert other_kind.result(120).problem  # another kind never supersedes a plan (and a bad config is one line)


def test_a_superseded_task_within_its_grace_finishes_and_keeps_its_worker(big):
    """Superseded less than grace_s after it started, a task may finish (its value still handed to on_done); one
    that does not finish in its grace is killed."""
    pool = planpool.Pool(size=2, grace_s=30.0)
    try:
        done = []
        short = pool.submit("plan", (_json(tutorial()), EFFORT, STOP_S), "short", "plan", "alice", done.append)
        pool.submit("plan", (_json(tutorial()), 0, STOP_S), "newer", "plan", "alice").result(120)
        assert short.result(120).result is not None and done == [short.value]  # it finished: not cancelled
        assert pool.stats()["workers_killed"] == 0 and pool.stats()["superseded"] == 1
        tight = planpool.Pool(size=1, grace_s=0.5)
        try:
            slow = tight.submit("plan", (big, *SLOW), "slow", "plan", "alice")
            pid = _running(slow)
            tight.submit("plan", (_json(tutorial()), 0, STOP_S), "newer", "plan", "alice")
            assert slow.wait(30) and slow.state is planpool.TaskState.CANCELLED and _gone(pid)
        finally:
            tight.shutdown()
    finally:
        pool.shutdown()


def test_at_most_size_tasks_run_first_asked_first_run(big):
    pool = planpool.Pool(size=1)
    try:
        slow = pool.submit("plan", (big, *SLOW), "slow", "plan", "alice")
        _running(slow)
        first = pool.submit("plan", (_json(tutorial()), EFFORT, STOP_S), "a", "plan", "bob")
        second = pool.submit("plan", (_json(tutorial()), 0, STOP_S), "b", "plan", "carol")
        time.sleep(1.0)
        assert first.state is second.state is planpool.TaskState.QUEUED and pool.stats()["queued"] == 2
        pool.cancel(slow)
        assert first.result(120).result is not None and second.result(120).result is not None
        assert first.started <= second.started
        assert pool.stats()["workers_started"] == 2  # the killed worker was replaced, once
    finally:
        pool.shutdown()


def test_workers_are_replaced_after_their_task_count_and_end_with_the_pool():
    pool = planpool.Pool(size=1, max_tasks=2)
    cfg = _json(tutorial())
    pids = []
    for effort in (0, 1, 2):
        task = pool.submit("plan", (cfg, effort, STOP_S), effort, "plan", "alice")
        task.result(120)
        pids.append(task.worker_pid)
    assert pids[0] == pids[1] != pids[2]
    assert _gone(pids[0]) and pool.stats()["workers_retired"] == 1
    idle = pool.stats()["worker_pids"]
    assert idle == [pids[2]]
    pool.shutdown()
    assert idle and all(_gone(p) for p in idle)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit("plan", (cfg, 0, STOP_S), "late", "plan", "alice")


def test_a_worker_that_dies_fails_its_task_in_one_line_and_is_replaced(pool, big):
    slow = pool.submit("plan", (big, *SLOW), "slow", "plan", "alice")
    os.kill(_running(slow), 9)
    with pytest.raises(planpool.TaskFailed, match="worker process ended"):
        slow.result(60)
    assert pool.submit("plan", (_json(tutorial()), 0, STOP_S), "after", "plan", "alice").result(120).result


def test_what_the_page_shows_is_planned_in_a_worker():
    """The dashboard's plan_outcome goes through the server's pool (the page's thread only waits)."""
    from dashboard.ui import services

    cfg = tutorial()
    cfg["tables"][0]["num_embeddings"] = 4097  # a config no other test planned
    before = services.pool().stats()["done"]
    out = services.plan_outcome(_json(cfg), 0)
    assert out.result is not None and services.pool().stats()["done"] == before + 1
    assert services.plan_outcome(_json(cfg), 0) is out  # remembered: the same objects


def _nice(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16])


def _autogroup(pid: int | str) -> str | None:
    """/proc/PID/autogroup ("/autogroup-N nice K"), None where the kernel has no autogroups."""
    try:
        return open(f"/proc/{pid}/autogroup").read().strip()
    except OSError:
        return None


def test_workers_run_below_the_server_and_so_does_their_autogroup():
    """Each worker leads a session of its own, and Linux gives each session's autogroup the same CPU share as the
    server's whole one: the pool lowers both, the worker's thread and its autogroup, and never the server's."""
    server_nice, server_group = _nice(os.getpid()), _autogroup("self")
    pool = planpool.Pool(size=1, nice=7)
    try:
        task = pool.submit("plan", (_json(tutorial()), EFFORT, STOP_S), "k", "plan", "alice")
        task.result(120)
        pid = task.worker_pid
        assert _nice(pid) == min(19, server_nice + 7)
        group = _autogroup(pid)
        if group is not None:  # this kernel has autogroups: the worker's own, at the same nice
            assert group.endswith(f" nice {min(19, server_nice + 7)}") and group != server_group
        assert _nice(os.getpid()) == server_nice and _autogroup("self") == server_group
    finally:
        pool.shutdown()
    even = planpool.Pool(size=1, nice=0)
    try:
        task = even.submit("plan", (_json(tutorial()), 0, STOP_S), "k0", "plan", "alice")
        task.result(120)
        assert _nice(task.worker_pid) == server_nice
    finally:
        even.shutdown()


def test_the_workers_nice_comes_from_planner_worker_nice(monkeypatch):
    monkeypatch.delenv("PLANNER_WORKER_NICE", raising=False)
    assert priority.worker_nice() == priority.WORKER_NICE == 10
    monkeypatch.setenv("PLANNER_WORKER_NICE", " 0 ")
    assert priority.worker_nice() == 0
    for bad in ("20", "-1", "low", "2.5"):
        monkeypatch.setenv("PLANNER_WORKER_NICE", bad)
        with pytest.raises(ValueError, match=rf"PLANNER_WORKER_NICE='{bad}': give a whole number from 0"):
            priority.worker_nice()
        with pytest.raises(ValueError, match="PLANNER_WORKER_NICE"):
            planpool.Pool(size=1)
