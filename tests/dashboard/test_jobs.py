"""dashboard.jobs on real processes: a command's output and exit, its one-line error, a cancel that ends it and the
process it started, no zombie left whether or not anyone looks, and the engine's TorchRec command as a job."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import engine
from dashboard import jobs, presets, services

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
