"""One road for recording a run: the dashboard starts the command a user types (`python -m db dryrun|validate
... --plan-token T --run-id N`), and whatever records a result (that command, `python -m db import-results`,
or the dashboard when the command could not) goes through db.runsink.record_result, so the same result gives
identical rows: metrics, device info (lists kept), status and error."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import engine
from dashboard.serve import runner
from db.run_commands import RUN_COMMANDS
from tests.factories import ROOT, tutorial

RUN_WAIT_S = 240
NOTE = "the config says cuda; this validation run measures on cpu, so the plan is priced for cpu (same placement)"
FAILED = {  # a validation that ran, measured and failed: rank 1 held other shards
    "status": "failed", "error": "rank 1 holds other shards than the plan: large_table_0: plan a; holds b",
    "ranks": [{"rank": r, "iteration_ms": 9.5 + r, "measured_ms": 9.5 + r, "peak_bytes": 17_000_000,
               "state_bytes": 1_310_720, "shards_match": r == 0, "mismatches": [] if r == 0 else ["plan a; holds b"],
               "estimated_ms": 0.25, "estimated_compute_ms": 0.2, "estimated_comms_ms": 0.05,
               "estimated_bytes": 1_850_000} for r in (0, 1)],
    "backend": "gloo", "device": "cpu", "iters": 10, "warmup": 3, "nproc": 2, "launcher": "local",
    "shards_match": False, "max_rank_iteration_ms": 10.5, "estimate_compute_bw_bytes_per_ms": 5.5e7,
    "estimate_comms_bw_bytes_per_ms": 6.4e8, "elapsed_s": 7.1, "device_name": "test cpu", "world_size": 2,
    "estimated_device": "cpu", "config_device": "cuda", "notes": [NOTE], "log_tail": "rank 1: boom\n"}


def _save(store, cfg: dict | None = None) -> str:
    cfg = cfg or tutorial()
    return store.save_plan(cfg, engine.plan_to_dict(engine.plan(engine.parse_config(cfg))), label="t")


def _db(db_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "db", *args], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=RUN_WAIT_S, check=False)


def _rows(store, run_id: int) -> tuple:
    rec = store.get_run(run_id)
    metrics = sorted((m.rank, m.name, m.value, m.unit) for m in store.metrics(run_id))
    return metrics, rec.device_info, rec.error, str(rec.status)


def test_the_cli_and_the_dashboard_record_the_same_result_as_identical_rows(store, db_url, tmp_path):
    token = _save(store)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(FAILED))
    p = _db(db_url, "import-results", str(path), "--plan-token", token, "--json")
    assert p.returncode == 0, p.stderr
    cli = json.loads(p.stdout)["run_id"]
    # the dashboard's side: its command printed this result and exited 1 without recording it (as when the
    # database stops taking a run's updates mid-run)
    run_id = store.create_run(token, "validation", "gloo", "cpu")
    code = f"import sys; sys.stdout.write(open({str(path)!r}).read()); sys.exit(1)"
    runner.launch(store, run_id, [sys.executable, "-c", code], tmp_path)
    assert runner.wait(run_id, 60)
    assert _rows(store, run_id) == _rows(store, cli)
    metrics, info, error, status = _rows(store, cli)
    assert (status, error) == ("failed", FAILED["error"])
    assert info["notes"] == [NOTE] and info["estimated_device"] == "cpu" and "ranks" not in info
    assert (1, "shards_match", 0.0, "") in metrics and (1, "step_ms", 10.5, "ms") in metrics


def test_the_dashboard_runs_the_command_a_user_types(tmp_path):
    argv = runner.build_argv("validation", tmp_path, "TOKEN", 7, runner.Options(device="cpu", iters=3))
    assert argv[1:] == ["-m", "db", "validate", str(tmp_path / "config.json"), "--plan", str(tmp_path / "plan.json"),
                        "--plan-token", "TOKEN", "--run-id", "7", "--json", "--device", "cpu", "--iters", "3",
                        "--out-dir", str(tmp_path / "job")]
    dry = runner.build_argv("dryrun", tmp_path, "TOKEN", 8, runner.Options(extra={"distribution": "zipf"}))
    assert dry[1:4] == ["-m", "db", "dryrun"] and dry[-2:] == ["--distribution", "zipf"]
    assert "--out-dir" not in dry  # flags the command does not take are left out


@pytest.mark.timeout(600)
def test_a_dashboard_dry_run_and_a_cli_dry_run_are_recorded_alike(store, db_url, tmp_path):
    token = _save(store, tutorial("row_wise"))
    run_id = runner.start(store, token, "dryrun", runner.Options(iters=2))
    assert runner.wait(run_id, RUN_WAIT_S), "the dashboard's run did not finish in time"
    rec = store.get_plan(token)
    (tmp_path / "c.json").write_text(json.dumps(rec.config))
    (tmp_path / "p.json").write_text(json.dumps(rec.plan))
    p = _db(db_url, "dryrun", str(tmp_path / "c.json"), "--plan", str(tmp_path / "p.json"), "--plan-token", token,
            "--iters", "2", "--json")
    assert p.returncode == 0, p.stderr
    ui, cli = store.runs_for_plan(token)
    assert (str(ui.status), str(cli.status), ui.error, cli.error) == ("succeeded", "succeeded", None, None)
    assert {(m.rank, m.name, m.unit) for m in store.metrics(ui.id)} == \
        {(m.rank, m.name, m.unit) for m in store.metrics(cli.id)}
    timed = {"max_rank_measured_ms", "bottleneck_rank", "load_average"}  # what each run measured
    assert {k: v for k, v in ui.device_info.items() if k not in timed} == \
        {k: v for k, v in cli.device_info.items() if k not in timed}
    assert ui.device_info["estimated_device"] == "cpu" and ui.device_info["notes"]
    ident = engine.machine_identity()  # which machine: a fit of its terms can say which it is for
    assert {k: ui.device_info[k] for k in ("device_name", "platform", "caches", "libraries")} == \
        {"device_name": ident["cpu"], "platform": ident["platform"], "caches": ident["caches"],
         "libraries": ident["libraries"]}
    assert "-m db dryrun" in ui.log and f"--run-id {ui.id}" in ui.log


@pytest.mark.parametrize("kind", sorted(RUN_COMMANDS))
def test_the_declared_run_commands_are_what_python_m_db_takes(kind, capsys):
    """db.run_commands declares each run command's name and the options the dashboard may give it; the CLI's
    parser is built from it, and takes every one (its --help lists them)."""
    from db.__main__ import build_parser

    command = RUN_COMMANDS[kind]
    with pytest.raises(SystemExit):
        build_parser().parse_args([command.name, "--help"])
    shown = capsys.readouterr().out
    assert all(f"{option} " in shown or f"{option}\n" in shown for option in command.options), shown
    assert runner.unavailable_reason(kind) is None and runner.COMMANDS[kind] == command.name


def test_a_run_that_ignores_sigterm_is_killed_when_cancelled(store, tmp_path):
    """The dashboard's runs are jobs.Job: cancel sends SIGTERM to the run's process group, SIGKILL after a grace."""
    token = _save(store)
    run_id = store.create_run(token, "dryrun", "torch", "cpu")
    pid_file = tmp_path / "pid"
    code = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"open({str(pid_file) + '.tmp'!r}, 'w').write(str(os.getpid())); "
            f"os.rename({str(pid_file) + '.tmp'!r}, {str(pid_file)!r}); time.sleep(120)")
    runner.launch(store, run_id, [sys.executable, "-c", code], tmp_path)
    for _ in range(1200):  # SIGTERM is ignored from here on
        if pid_file.exists():
            break
        runner.wait(run_id, 0.05)
    assert runner.cancel(store, run_id)
    assert runner.wait(run_id, 30)
    assert str(store.get_run(run_id).status) == "cancelled"
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
