"""Validation runs that go wrong: bad input stops before launching (one line, exit 2); a crashing rank, a
timeout, a cancel (in-process, by SIGTERM as the dashboard sends it, or through the database for a run that
`python -m db validate` records) end as a recorded failed or cancelled run, with the log's tail, no traceback
from the CLI and no process left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from db.store import Store
from engine.validate.launch import LocalLauncher, alive, descendants
from engine.validate.run import stage
from engine.validate.types import Job
from tests.factories import ROOT, tutorial, write
from tests.validate.conftest import FAST, db_env, processes_mentioning, run_cli, run_db_cli

LONG = ["--iters", "1000000", "--warmup", "0"]  # a job that runs until something stops it
START_TIMEOUT_S = 120


def one_line_error(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in p.stderr
    return lines[0]


def last_line_error(p: subprocess.CompletedProcess) -> str:
    """The error after progress lines (`validate: ...`, e.g. that a cuda config is measured on cpu)."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("validate: ") for ln in lines[:-1]), p.stderr
    assert lines[-1].startswith("error: ") and "Traceback" not in p.stderr
    return lines[-1]


def test_a_plan_that_does_not_fit_the_config_stops_before_launching(plan_files, tmp_path):
    config, plan = plan_files["row_wise"]
    data = json.loads(plan.read_text())
    data["plan"]["large_table_0"]["shards"][1]["sizes"] = [1024, 64]  # 3072 of 4096 rows
    bad = write(tmp_path, data, "plan.json")
    p = run_cli("validate", str(config), "--plan", str(bad), "--out-dir", str(tmp_path / "out"))
    assert p.returncode == 2
    assert "plan.large_table_0.shards" in one_line_error(p)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, names", [
    (["--nproc", "3"], "--nproc 3"),
    (["--backend", "gloo", "--device", "cuda"], "--backend gloo"),
    (["--iters", "0"], "--iters"),
    (["--timeout", "-1"], "--timeout"),
    (["--plan-token", "abc"], "--plan-token: the engine does not record runs; use python -m db validate"),
    (["--database-url", "sqlite:///x.db"], "--database-url: the engine does not record runs"),
    (["--nodes", "2"], "--nodes 2"),
    (["--launcher", "pbs"], "--launcher"),
    (["--no-such-flag"], "--no-such-flag"),
])
def test_bad_flags_are_one_line_naming_the_flag(plan_files, flags, names):
    config, plan = plan_files["table_wise"]
    p = run_cli("validate", str(config), "--plan", str(plan), *flags)
    assert p.returncode == 2
    assert names in one_line_error(p)


@pytest.mark.parametrize("flags, names", [
    (["--plan-token", "A" * 22], "--plan-token 'AAAAAAAAAAAAAAAAAAAAAA': no plan with that token"),
    (["--nproc", "3"], "--nproc 3"),
    (["--no-such-flag"], "--no-such-flag"),
])
def test_db_validate_refuses_bad_input_in_one_line(plan_files, tmp_path, flags, names):
    config, plan = plan_files["table_wise"]
    p = run_db_cli(f"sqlite:///{tmp_path / 'runs.db'}", "validate", str(config), "--plan", str(plan), *flags)
    assert p.returncode == 2
    assert names in last_line_error(p)
    if (tmp_path / "runs.db").exists():
        assert Store(f"sqlite:///{tmp_path / 'runs.db'}").list_plans() == []


def test_db_validate_with_a_token_of_another_plan_is_refused(plan_files, tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(url)
    store.upgrade()
    config, plan = plan_files["table_wise"]
    other = json.loads(plan_files["row_wise"][1].read_text())
    token = store.save_plan(json.loads(config.read_text()), other)
    p = run_db_cli(url, "validate", str(config), "--plan", str(plan), "--plan-token", token)
    assert p.returncode == 2 and "places the tables differently from --plan" in last_line_error(p)
    assert store.runs_for_plan(token) == []


def test_a_config_the_worker_cannot_build_is_refused_before_launching(plan_files, tmp_path):
    cfg = tutorial("table_wise")
    cfg["tables"][0]["pooling"] = "none"
    config = write(tmp_path, cfg)
    plan = plan_files["table_wise"][1]
    p = run_cli("validate", str(config), "--plan", str(plan))
    assert p.returncode == 2 and "tables[0].pooling" in one_line_error(p)


def test_a_kernel_cpu_cannot_run_is_refused_before_launching(plan_files, tmp_path):
    config, plan = plan_files["table_wise"]
    data = json.loads(plan.read_text())
    data["plan"]["large_table_1"]["compute_kernel"] = "fused_uvm_caching"
    p = run_cli("validate", str(config), "--plan", str(write(tmp_path, data, "plan.json")))
    assert p.returncode == 2 and "plan.large_table_1.compute_kernel" in one_line_error(p)


def test_grid_shard_on_another_host_size_than_the_launch_is_refused_before_launching(tmp_path):
    """The local launcher puts every rank on one node (LOCAL_WORLD_SIZE = 4), the plan's grid pieces span hosts of
    2: TorchRec would run other groups than the plan's."""
    import engine

    config = ROOT / "examples" / "grid_shard.json"
    plan = write(tmp_path, engine.plan_to_dict(engine.plan(engine.load_config(config))), "plan.json")
    p = run_cli("validate", str(config), "--plan", str(plan), "--out-dir", str(tmp_path / "out"))
    line = one_line_error(p)
    assert p.returncode == 2 and line.startswith("error: plan.large_table.sharding_type: grid_shard")
    assert "this run puts 4 ranks on each node" in line and "--nodes 2" in line
    assert not (tmp_path / "out" / "ranks").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_without_gpus_is_refused_before_launching(plan_files):
    config, plan = plan_files["table_wise"]
    p = run_cli("validate", str(config), "--plan", str(plan), "--device", "cuda")
    assert p.returncode == 2 and "this machine has 0 CUDA devices" in one_line_error(p)


def test_a_crashing_rank_is_a_failed_run_with_its_log_tail(plan_files, tmp_path):
    config, plan = plan_files["table_wise"]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    out = tmp_path / "out"
    p = run_db_cli(url, "validate", str(config), "--plan", str(plan), "--nproc", "1", "--unchecked-nproc", "--json",
                   *FAST, "--out-dir", str(out))
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error: validation failed: rank 0: EngineError")
    data = json.loads(p.stdout)
    assert data["status"] == "failed" and data["ranks"] == []
    assert "torchrun started 1" in data["error"]
    assert "engine.validate.worker" in data["log_tail"]
    store = Store(url)
    (plan_summary,) = store.list_plans()
    (run,) = store.runs_for_plan(plan_summary.token)
    assert getattr(run.status, "value", run.status) == "failed" and "torchrun started 1" in run.error
    assert "torchrun started 1" in run.log
    assert processes_mentioning(str(out)) == []


def test_timeout_stops_the_job_and_records_it_failed(plan_files, tmp_path):
    config, plan = plan_files["row_wise"]
    out = tmp_path / "out"
    p = run_cli("validate", str(config), "--plan", str(plan), "--timeout", "3", "--json", *LONG,
                "--out-dir", str(out))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    data = json.loads(p.stdout)
    assert data["status"] == "failed" and data["error"].startswith("timed out after 3 s")
    assert json.loads((out / "results.json").read_text())["status"] == "failed"
    assert processes_mentioning(str(out)) == []


def _wait_for_ranks(parent: int, out: Path, n: int = 2) -> list[int]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ranks = [line for line in processes_mentioning(str(out)) if "engine.validate.worker" in line
                 and "torch.distributed.run" not in line]
        if len(ranks) >= n:
            return [int(line.split(":")[0]) for line in ranks]
        time.sleep(0.2)
    pytest.fail(f"the ranks did not start in {START_TIMEOUT_S}s: {processes_mentioning(str(out))}")


def test_cancel_ends_torchrun_and_every_rank(plan_files, tmp_path):
    config, plan = plan_files["row_wise"]
    job = Job(out_dir=tmp_path / "out", nproc=2, python=sys.executable, iters=1_000_000, warmup=0)
    stage(job, str(config), str(plan))
    launcher = LocalLauncher()
    launcher.prepare(job)
    launcher.start()
    ranks = _wait_for_ranks(launcher.pid, job.out_dir)
    assert set(ranks) <= set(descendants(launcher.pid))
    launcher.cancel()
    assert launcher.poll().exit_code is not None
    assert not any(alive(pid) for pid in [launcher.pid, *ranks])
    assert processes_mentioning(str(job.out_dir)) == []


def test_sigterm_to_the_cli_cancels_the_run(plan_files, tmp_path):
    """The dashboard cancels a run by sending SIGTERM to the command it started."""
    config, plan = plan_files["column_wise"]
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "validate", str(config), "--plan", str(plan), "--json",
                             *LONG, "--out-dir", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _wait_for_ranks(proc.pid, out)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert json.loads(stdout)["status"] == "cancelled"
    assert processes_mentioning(str(out)) == []


def test_a_run_cancelled_in_the_database_is_stopped(plan_files, tmp_path):
    """A run started from the CLI can be cancelled from the dashboard: it marks the run cancelled."""
    config, plan = plan_files["table_wise"]
    out = tmp_path / "out"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    proc = subprocess.Popen([sys.executable, "-m", "db", "validate", str(config), "--plan", str(plan), "--json",
                             *LONG, "--out-dir", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=db_env(url))
    try:
        _wait_for_ranks(proc.pid, out)
        store = Store(url)
        (plan_summary,) = store.list_plans()
        (run,) = store.runs_for_plan(plan_summary.token)
        assert getattr(run.status, "value", run.status) == "running"
        store.update_run(run.id, status="cancelled")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    assert json.loads(stdout)["status"] == "cancelled"
    run = store.get_run(run.id)
    assert getattr(run.status, "value", run.status) == "cancelled" and run.error == "cancelled"
    assert processes_mentioning(str(out)) == []
