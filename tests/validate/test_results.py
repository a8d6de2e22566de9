"""Gathering rank files into a result (by hand-written files: every way a job can end), the database rows a
result becomes, importing a results file, the docs naming every flag, and engine/ never importing db.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

import engine
from db import runs_cli
from db.runsink import metrics
from db.store import Store
from engine.validate.command import register, resolve_backend
from engine.validate.results import Ending, gather
from engine.validate.run import stage
from engine.validate.shards import expected_pieces, mismatches
from engine.validate.types import Backend, Job, LauncherKind
from tests.factories import ROOT, tutorial
from tests.validate.conftest import run_cli, run_db_cli

DOCS = ROOT / "docs" / "validation.md"


def staged_job(tmp_path: Path, plan_files, st: str = "row_wise") -> Job:
    config, plan = plan_files[st]
    job = Job(out_dir=tmp_path / "job", nproc=2)
    stage(job, str(config), str(plan))
    return job


def rank_file(job: Job, rank: int, **extra) -> None:
    data = {"rank": rank, "iteration_ms": 5.0, "peak_bytes": 100, "state_bytes": 10, "mismatches": [],
            "device_info": {"device_name": "test cpu", "hostname": "h"}, **extra}
    (job.ranks_dir / f"rank{rank}.json").write_text(json.dumps(data))


def test_expected_pieces_and_mismatches():
    cfg = engine.parse_config(tutorial("row_wise"))
    tables = engine.plan(cfg).tables
    mine = expected_pieces(cfg, tables, 1)
    assert mine["large_table_0"] == [((2048, 0), (2048, 64))]
    assert mismatches(mine, mine) == []
    held = dict(mine, large_table_0=[((0, 0), (2048, 64))])
    assert mismatches(mine, held) == ["large_table_0: plan 2048x64 at [2048, 0]; holds 2048x64 at [0, 0]"]
    assert mismatches(mine, dict(mine, small_table_0=[((0, 0), (0, 64))] + mine["small_table_0"])) == []


def test_all_ranks_reporting_is_success_with_estimates(tmp_path, plan_files):
    job = staged_job(tmp_path, plan_files)
    rank_file(job, 0)
    rank_file(job, 1)
    res = gather(job, LauncherKind.LOCAL, Ending(0))
    assert res.status.value == "succeeded" and res.error is None and res.shards_match
    assert all(r.estimated_ms and r.estimated_ms > 0 for r in res.ranks)
    assert res.device_info["device_name"] == "test cpu" and res.compute_bw > 0


@pytest.mark.parametrize("ending, files, expect", [
    (Ending(1), {0: {}}, "ranks 1 wrote no result"),
    (Ending(-9), {}, "killed by SIGKILL (the kernel's out-of-memory killer"),
    (Ending(0), {0: {}, 1: {"mismatches": ["large_table_0: plan x; holds y"]}}, "rank 1 holds other shards"),
    (Ending(None, timed_out_s=7.0), {0: {}, 1: {}}, "timed out after 7 s"),
    (Ending(None, cancelled=True), {0: {}}, "cancelled"),
])
def test_every_bad_ending_is_one_line(tmp_path, plan_files, ending, files, expect):
    job = staged_job(tmp_path, plan_files)
    for r, extra in files.items():
        rank_file(job, r, **extra)
    res = gather(job, LauncherKind.LOCAL, ending)
    assert res.status.value == ("cancelled" if ending.cancelled else "failed")
    assert expect in res.error and "\n" not in res.error


def test_a_rank_error_file_names_the_rank_and_torchrun_signals_are_read_from_the_log(tmp_path, plan_files):
    job = staged_job(tmp_path, plan_files)
    (job.ranks_dir / "rank1.error.json").write_text(json.dumps({"rank": 1, "error": "RuntimeError: boom"}))
    assert gather(job, LauncherKind.LOCAL, Ending(1)).error == "rank 1: RuntimeError: boom"
    (job.ranks_dir / "rank1.error.json").unlink()
    job.log_path.write_text("Root Cause\n  exitcode  : -9 (pid: 123)\n")
    res = gather(job, LauncherKind.LOCAL, Ending(1))
    assert "killed by SIGKILL" in res.error and "exitcode" in res.log_tail


def test_backend_and_device_agree():
    assert resolve_backend(None, None) is Backend.GLOO
    assert resolve_backend(None, "cuda") is Backend.NCCL
    assert resolve_backend("nccl", None) is Backend.NCCL
    with pytest.raises(engine.EngineError, match="--backend nccl runs on --device cuda"):
        resolve_backend("nccl", "cpu")


def test_metrics_carry_measured_and_estimated_per_rank():
    rows = metrics({"ranks": [{"rank": 0, "iteration_ms": 2.0, "shards_match": True, "estimated_ms": 0.5,
                               "peak_bytes": 7, "mismatches": []}]})
    assert (0, "step_ms", 2.0, "ms") in rows and (0, "estimated_ms", 0.5, "ms") in rows
    assert (0, "shards_match", 1.0, "") in rows and (0, "peak_bytes", 7.0, "bytes") in rows


def test_a_results_file_imports_as_a_run(recorded_runs, tmp_path):
    _, data, out_dir = recorded_runs.runs["row_wise"]
    url = f"sqlite:///{tmp_path / 'import.db'}"
    store = Store(url)
    store.upgrade()
    token = store.save_plan(json.loads((out_dir / "config.json").read_text()),
                            json.loads((out_dir / "plan.json").read_text()))
    results = out_dir.parent / "row_wise.results.json"
    p = run_db_cli(url, "import-results", str(results), "--plan-token", token, "--json")
    assert p.returncode == 0, p.stderr
    run = store.get_run(json.loads(p.stdout)["run_id"])
    assert getattr(run.status, "value", run.status) == "succeeded" and run.plan_token == token
    steps = sorted((m.rank, m.value) for m in store.metrics(run.id) if m.name == "step_ms")
    assert steps == [(r["rank"], r["iteration_ms"]) for r in data["ranks"]]
    text = run_db_cli(url, "import-results", str(results), "--plan-token", token)
    assert text.returncode == 0 and text.stdout.startswith("Stored run ") and token in text.stdout
    bad = run_db_cli(url, "import-results", str(results), "--plan-token", "nosuchtoken")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")


def test_a_file_that_is_no_result_is_refused_before_the_database_is_touched(tmp_path):
    path = tmp_path / "never.db"
    (tmp_path / "r.json").write_text(json.dumps({"status": "succeeded"}))
    p = run_db_cli(f"sqlite:///{path}", "import-results", str(tmp_path / "r.json"), "--plan-token", "A" * 22)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "needs \"status\" and \"ranks\"" in p.stderr
    assert not path.exists()


def test_the_script_launcher_under_db_stores_the_plan_and_prints_the_import_command(plan_files, tmp_path):
    config, plan = plan_files["row_wise"]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    p = run_db_cli(url, "validate", str(config), "--plan", str(plan), "--launcher", "script", "--json",
                   "--out-dir", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    (stored,) = Store(url).list_plans()
    assert out["plan_token"] == stored.token and Store(url).runs_for_plan(stored.token) == []
    assert out["import"] == f"python -m db import-results {out['results']} --plan-token {stored.token}"
    plain = run_cli("validate", str(config), "--plan", str(plan), "--launcher", "script", "--json",
                    "--out-dir", str(tmp_path / "plain"))
    assert plain.returncode == 0 and json.loads(plain.stdout)["plan_token"] is None


def _options(register_commands) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    register_commands(sub)
    return {s for p in sub.choices.values() for a in p._actions for s in a.option_strings
            if a.help != argparse.SUPPRESS and s.startswith("--") and s != "--help"}


def test_the_docs_name_every_flag_and_command():
    text = DOCS.read_text()
    options = _options(register) | _options(runs_cli.register)
    missing = sorted(o for o in options if not re.search(rf"{re.escape(o)}\b", text))
    assert not missing, f"docs/validation.md does not mention {missing}"
    for cmd in ("python -m engine validate", "python -m db validate", "python -m db calibrate",
                "python -m db import-results"):
        assert cmd in text
    for gone in ("engine calibrate", "validate-import", "engine validate --database-url"):
        assert gone not in text


ENGINE = ROOT / "engine"
LAYER_IMPORT = re.compile(r"^\s*(import|from)\s+(db|streamlit|dashboard)\b", re.MULTILINE)


def test_the_engine_never_imports_db_streamlit_or_dashboard():
    found = [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for path in sorted(ENGINE.rglob("*.py"))
             for m in LAYER_IMPORT.finditer(path.read_text(encoding="utf-8"))]
    assert found == []
