"""Fixtures of the validation tests: plan files for the tutorial's sharding types, one shared set of real
2-rank gloo runs recorded in a SQLite database by `python -m db validate` (spawned once per session: every
test that needs a run reads these), and a real single-node Slurm for the session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import engine
from tests.factories import EXAMPLES, ROOT
from tests.validate import slurmcluster

CLI_TIMEOUT_S = 300
FAST = ["--iters", "4", "--warmup", "1"]  # what is measured does not matter here, only that it is
SHARDING_TYPES = ("table_wise", "column_wise", "row_wise", "data_parallel")


def run_cli(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`python -m engine ARGS`."""
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env or {**os.environ, "PYTHONPATH": str(ROOT)}, timeout=timeout, check=False)


def db_env(url: str) -> dict[str, str]:
    """The environment of `python -m db` on the database `url` (DATABASE_URL, as scripts set it)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": url}


def run_db_cli(url: str, *args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`python -m db ARGS` on the database `url`."""
    return subprocess.run([sys.executable, "-m", "db", *args], cwd=ROOT, capture_output=True, text=True,
                          env=db_env(url), timeout=timeout, check=False)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain text (e.g. a run's out-dir): leftovers of a run."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmd and state != "Z":
            found.append(f"{entry.name}: {cmd.strip()}")
    return found


def write_plan(config_path: Path, out: Path) -> Path:
    cfg = engine.load_config(config_path)
    out.write_text(json.dumps(engine.plan_to_dict(engine.plan(cfg))))
    return out


@pytest.fixture(scope="session")
def plan_files(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """sharding type (and "tutorial": mixed) -> (config path, plan path)."""
    d = tmp_path_factory.mktemp("plans")
    out = {st: (EXAMPLES / f"tutorial_{st}.json", write_plan(EXAMPLES / f"tutorial_{st}.json", d / f"{st}.json"))
           for st in SHARDING_TYPES}
    out["tutorial"] = (EXAMPLES / "tutorial.json", write_plan(EXAMPLES / "tutorial.json", d / "tutorial.json"))
    return out


@dataclass
class RecordedRuns:
    database_url: str
    runs: dict[str, tuple[subprocess.CompletedProcess, dict, Path]]  # sharding type -> (process, JSON, out-dir)


@pytest.fixture(scope="session")
def recorded_runs(plan_files, tmp_path_factory) -> RecordedRuns:
    """One real 2-rank gloo validation per sharding type, each recorded in the same SQLite database."""
    d = tmp_path_factory.mktemp("recorded")
    url = f"sqlite:///{d / 'runs.db'}"
    runs = {}
    for st in SHARDING_TYPES:
        config, plan = plan_files[st]
        out_dir = d / st
        p = run_db_cli(url, "validate", str(config), "--plan", str(plan), "--json", *FAST,
                       "--out-dir", str(out_dir), "--results", str(d / f"{st}.results.json"))
        try:
            data = json.loads(p.stdout)
        except ValueError:
            pytest.fail(f"validate {st} printed no JSON (exit {p.returncode}):\n{p.stderr[-4000:]}")
        runs[st] = (p, data, out_dir)
    return RecordedRuns(url, runs)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """slurmctld + slurmd for the session; skipped where Slurm is missing, a failure when CI=true."""
    why = slurmcluster.missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Slurm tests: {why}")
        pytest.skip(why)
    cluster = slurmcluster.start(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        slurmcluster.stop(cluster)
