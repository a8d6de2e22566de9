"""dashboard.serve.jobs on real processes: a command's output and exit, its one-line error, a cancel that ends it and
the process it started, no zombie left whether or not anyone looks, and the engine's TorchRec command as a job."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import engine
from dashboard.serve import jobs, priority
from dashboard.tables import presets
from dashboard.ui import services
from tests.dashboard.helpers import until

PY = sys.executable


def _proc_state(pid: int) -> str | None:
    """The kernel's state letter of a process (Z: a zombie), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _proc_state(pid) is None:
            return True
        time.sleep(0.05)
    return False


def test_a_command_runs_writes_its_files_and_is_collected_at_once(tmp_path):
    job = jobs.Job([PY, "-c", "import sys; print('out'); open('made.txt', 'w').write('x')"], tmp_path / "j",
                   cwd=tmp_path / "j")
    assert job.wait(30) is jobs.JobState.DONE and job.returncode == 0
    assert job.text(jobs.STDOUT).strip() == "out" and job.text("made.txt") == "x"
    assert job.elapsed_s > 0 and job.elapsed_s == job.elapsed_s  # frozen once ended
    assert _gone(job.pid)  # reaped by the job's own thread: not a zombie, though nobody polled


def test_no_zombie_when_nobody_looks(tmp_path):
    job = jobs.Job([PY, "-c", "pass"], tmp_path / "j")
    deadline = time.monotonic() + 30
    while _proc_state(job.pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(job.pid), f"pid {job.pid} is left as {_proc_state(job.pid)}"


def test_a_failure_says_its_last_error_line(tmp_path):
    job = jobs.Job([PY, "-c", "import sys; print('warming up', file=sys.stderr); "
                               "print('error: tables[0].dim: must be positive', file=sys.stderr); sys.exit(2)"],
                   tmp_path / "j")
    assert job.wait(30) is jobs.JobState.FAILED and job.returncode == 2
    assert job.error_line() == "tables[0].dim: must be positive"
    silent = jobs.Job([PY, "-c", "import sys; sys.exit(3)"], tmp_path / "k")
    silent.wait(30)
    assert silent.error_line() == "it exited with code 3"


def test_cancel_ends_the_command_and_the_process_it_started(tmp_path):
    child_pid = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              f"c = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(120)']); "
              f"open({str(child_pid)!r}, 'w').write(str(c.pid)); time.sleep(120)")
    job = jobs.Job([PY, "-c", script], tmp_path / "j")
    deadline = time.monotonic() + 30
    while not child_pid.exists() or not child_pid.read_text():
        assert time.monotonic() < deadline and job.running
        time.sleep(0.05)
    grandchild = int(child_pid.read_text())
    assert job.running and _proc_state(grandchild) not in (None, "Z")
    time.sleep(0.3)
    job.cancel()
    assert job.state is jobs.JobState.CANCELLED and not job.running
    assert _gone(job.pid)
    # the grandchild was re-parented when its parent died: it must be dead (gone, or a zombie its new parent reaps)
    deadline = time.monotonic() + 5
    while _proc_state(grandchild) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _proc_state(grandchild) in (None, "Z")
    elapsed = job.elapsed_s
    time.sleep(0.2)
    assert job.elapsed_s == elapsed


def test_close_deletes_its_folder_and_a_shell_string_is_refused(tmp_path):
    job = jobs.Job([PY, "-c", "import time; time.sleep(60)"], tmp_path / "j")
    job.close()
    assert not (tmp_path / "j").exists() and _gone(job.pid)
    with pytest.raises(TypeError):
        jobs.Job(f"{PY} -c 'print(1)'", tmp_path / "s")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        jobs.Job([], tmp_path / "s")


def test_a_running_job_dropped_is_ended(tmp_path):
    job = jobs.Job([PY, "-c", "import time; time.sleep(60)"], tmp_path / "j")
    pid = job.pid
    del job
    import gc

    gc.collect()
    assert _gone(pid) or _proc_state(pid) == "Z"


def test_the_engines_torchrec_command_as_a_job_refuses_a_bad_config_in_one_line(tmp_path):
    cfg = presets.tutorial()
    cfg["tables"][0]["embedding_dim"] = 0
    job = services.start_torchrec_plan(cfg)
    try:
        job.wait(60)
        with pytest.raises(engine.EngineError) as e:
            services.torchrec_result(job, cfg)
        assert str(e.value) == "tables[0].embedding_dim: must be from 1 to 65,536, got 0"
    finally:
        job.close()
    assert not job.workdir.exists()


@pytest.mark.timeout(300)
def test_the_engines_torchrec_command_as_a_job_plans(tmp_path):
    cfg = presets.tutorial()
    job = services.start_torchrec_plan(cfg)
    try:
        assert job.wait(240) is jobs.JobState.DONE, job.text(jobs.STDERR)
        result = services.torchrec_result(job, cfg)
    finally:
        job.close()
    assert result.plan.planner == "torchrec" and set(result.plan.tables) == {t["name"] for t in cfg["tables"]}
    assert result.config_dict == engine.config_to_dict(engine.parse_config(cfg))
    assert not os.path.exists(job.workdir)


# ---- a gate of slots: at most `size` heavy jobs run at once, the rest wait first come, first served -------------


def _held(tmp_path: Path, name: str) -> tuple[list[str], Path, Path]:
    """A command that writes its `started` marker, then runs until its `release` file exists (at most 60 s)."""
    started, release = tmp_path / f"{name}.started", tmp_path / f"{name}.release"
    # the marker is written whole, then renamed into place: a reader never sees it half written
    script = (f"import os, time; open({str(started) + '.tmp'!r}, 'w').write(str(time.monotonic()))\n"
              f"os.replace({str(started) + '.tmp'!r}, {str(started)!r}); t = time.monotonic()\n"
              f"while not os.path.exists({str(release)!r}) and time.monotonic() - t < 60: time.sleep(0.02)")
    return [PY, "-c", script], started, release


@pytest.mark.timeout(30)
def test_a_gate_of_one_runs_the_second_job_when_the_first_ends(tmp_path):
    gate = jobs.Slots(1)
    argv_a, started_a, release_a = _held(tmp_path, "a")
    argv_b, started_b, release_b = _held(tmp_path, "b")
    a = jobs.Job(argv_a, tmp_path / "ja", slots=gate)
    b = jobs.Job(argv_b, tmp_path / "jb", slots=gate)
    try:
        assert a.state is jobs.JobState.RUNNING and a.live and a.ahead == 0 and a.pid is not None
        assert b.state is jobs.JobState.QUEUED and b.live and not b.running
        assert b.ahead == 0  # no job queued before it (a runs)
        assert b.pid is None and b.started is None and b.elapsed_s == 0.0
        assert until(started_a.exists)
        assert b.wait(0.3) is jobs.JobState.QUEUED and not started_b.exists()  # a holds the only slot
        assert b.queued_s >= 0.3 and gate.busy == 1 and gate.waiting == 1
        release_a.touch()
        assert a.wait(10) is jobs.JobState.DONE
        assert b.state is jobs.JobState.RUNNING and b.pid is not None  # the slot passed on as a's process ended
        waited = b.queued_s
        assert until(started_b.exists)
        assert float(started_b.read_text()) >= a.ended  # b's process started only after a's ended
        release_b.touch()
        assert b.wait(10) is jobs.JobState.DONE and b.queued_s == waited and b.elapsed_s > 0
        assert gate.busy == 0 and gate.waiting == 0 and _gone(b.pid)
    finally:
        a.close()
        b.close()


@pytest.mark.timeout(30)
def test_a_cancelled_queued_job_never_starts_and_the_next_one_runs(tmp_path):
    gate = jobs.Slots(1)
    argv_a, _, release_a = _held(tmp_path, "a")
    argv_b, started_b, _ = _held(tmp_path, "b")
    argv_c, started_c, release_c = _held(tmp_path, "c")
    a = jobs.Job(argv_a, tmp_path / "ja", slots=gate)
    b = jobs.Job(argv_b, tmp_path / "jb", slots=gate)
    c = jobs.Job(argv_c, tmp_path / "jc", slots=gate)
    try:
        assert (b.ahead, c.ahead) == (0, 1)
        b.cancel()
        assert b.state is jobs.JobState.CANCELLED and not b.live and b.wait(1) is jobs.JobState.CANCELLED
        assert c.ahead == 0 and c.state is jobs.JobState.QUEUED and gate.waiting == 1
        release_a.touch()
        assert a.wait(10) is jobs.JobState.DONE and c.state is jobs.JobState.RUNNING
        assert until(started_c.exists)
        release_c.touch()
        assert c.wait(10) is jobs.JobState.DONE
        assert b.pid is None and b.elapsed_s == 0.0 and not started_b.exists()  # it never ran
        assert b.state is jobs.JobState.CANCELLED and gate.busy == 0
    finally:
        for j in (a, b, c):
            j.close()


@pytest.mark.timeout(30)
def test_a_running_job_cancelled_frees_its_slot_for_the_queued_one(tmp_path):
    gate = jobs.Slots(1)
    argv_a, started_a, _ = _held(tmp_path, "a")
    argv_b, started_b, release_b = _held(tmp_path, "b")
    a = jobs.Job(argv_a, tmp_path / "ja", slots=gate)
    b = jobs.Job(argv_b, tmp_path / "jb", slots=gate)
    try:
        assert until(started_a.exists) and b.state is jobs.JobState.QUEUED
        a.close()
        assert a.state is jobs.JobState.CANCELLED and _gone(a.pid)
        assert b.state is jobs.JobState.RUNNING and until(started_b.exists)
        release_b.touch()
        assert b.wait(10) is jobs.JobState.DONE
    finally:
        b.close()


@pytest.mark.timeout(30)
def test_queued_jobs_start_first_come_first_served(tmp_path):
    gate = jobs.Slots(1)
    order = tmp_path / "order.txt"
    argv_a, _, release_a = _held(tmp_path, "a")
    a = jobs.Job(argv_a, tmp_path / "ja", slots=gate)
    queued = [jobs.Job([PY, "-c", f"open({str(order)!r}, 'a').write('{name}')"], tmp_path / f"j{name}", slots=gate)
              for name in "xyz"]
    try:
        assert [j.ahead for j in queued] == [0, 1, 2]
        assert all(j.state is jobs.JobState.QUEUED for j in queued)
        release_a.touch()
        assert all(j.wait(10) is jobs.JobState.DONE for j in queued)
        assert order.read_text() == "xyz"
        starts = [j.started for j in queued]
        assert starts == sorted(starts) and all(s >= queued[i - 1].ended for i, s in enumerate(starts) if i)
    finally:
        for j in (a, *queued):
            j.close()


@pytest.mark.timeout(30)
def test_a_queued_job_dropped_gives_up_its_place(tmp_path):
    import gc

    gate = jobs.Slots(1)
    argv_a, _, release_a = _held(tmp_path, "a")
    argv_b, started_b, _ = _held(tmp_path, "b")
    a = jobs.Job(argv_a, tmp_path / "ja", slots=gate)
    b = jobs.Job(argv_b, tmp_path / "jb", slots=gate)
    c = jobs.Job([PY, "-c", "pass"], tmp_path / "jc", slots=gate)
    try:
        assert c.ahead == 1
        del b
        gc.collect()
        assert c.ahead == 0 and gate.waiting == 1
        release_a.touch()
        assert c.wait(10) is jobs.JobState.DONE and not started_b.exists()
        assert gate.busy == 0 and gate.waiting == 0
    finally:
        a.close()
        c.close()


def test_a_running_gated_job_dropped_is_ended_and_its_slot_passes_on(tmp_path):
    import gc

    gate = jobs.Slots(1)
    argv_a, started_a, _ = _held(tmp_path, "a")
    a = jobs.Job(argv_a, tmp_path / "ja", slots=gate)
    b = jobs.Job([PY, "-c", "pass"], tmp_path / "jb", slots=gate)
    assert until(started_a.exists)
    pid = a.pid
    del a
    gc.collect()
    try:
        assert b.wait(10) is jobs.JobState.DONE
        assert _gone(pid) or _proc_state(pid) == "Z"
    finally:
        b.close()


def test_the_heavy_gate_is_sized_by_planner_jobs_else_the_pool(monkeypatch):

    monkeypatch.setenv("PLANNER_JOBS", "3")
    assert jobs.heavy_size() == 3
    monkeypatch.delenv("PLANNER_JOBS")
    monkeypatch.setenv("PLANNER_WORKERS", "5")
    assert jobs.heavy_size() == 5 == priority.default_size()
    monkeypatch.setenv("PLANNER_JOBS", "0")
    with pytest.raises(ValueError, match="PLANNER_JOBS='0'"):
        jobs.heavy_size()
    with pytest.raises(ValueError):
        jobs.Slots(0)
    assert jobs.HEAVY.size >= 1


def test_a_job_given_a_nice_runs_below_the_server_its_autogroup_too(tmp_path):
    """The job's process leads its own session (its own autogroup on Linux): both are lowered once it started."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    code = ("import os, time\n"
            "deadline = time.monotonic() + 20\n"
            f"while os.getpriority(os.PRIO_PROCESS, 0) == {base} and time.monotonic() < deadline:\n"
            "    time.sleep(0.02)\n"
            "time.sleep(0.3)  # the autogroup's nice comes right after the thread's\n"
            "try:\n"
            "    group = open('/proc/self/autogroup').read().strip()\n"
            "except OSError:\n"
            "    group = 'none'\n"
            "print(os.getpriority(os.PRIO_PROCESS, 0), group, sep=';')\n")
    job = jobs.Job([PY, "-c", code], tmp_path / "j", nice=6)
    assert job.wait(60) is jobs.JobState.DONE, job.text(jobs.STDERR)
    nice, group = job.text(jobs.STDOUT).strip().split(";")
    assert int(nice) == min(19, base + 6)
    assert group == "none" or group.endswith(f" nice {min(19, base + 6)}")
    plain = jobs.Job([PY, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"], tmp_path / "k")
    assert plain.wait(60) is jobs.JobState.DONE and int(plain.text(jobs.STDOUT)) == base
