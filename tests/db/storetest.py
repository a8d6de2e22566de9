"""Helpers shared by the store tests: sample configs and plans, row counts, the CLI's environment."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

import engine
from db.store import Store

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TABLES = ("configs", "plans", "plan_ranks", "runs", "metrics")


def load_example(name: str = "tutorial") -> dict:
    """examples/<name>.json as a dict (a fresh copy each call)."""
    return json.loads((EXAMPLES / f"{name}.json").read_text())


def make_plan(config: dict) -> dict:
    return engine.plan_to_dict(engine.plan(engine.parse_config(config), engine.PlannerSettings(search=False)))


_PLANS: dict[str, dict] = {}


def sample(name: str = "tutorial") -> tuple[dict, dict]:
    """(config, plan file JSON) for an example config; copies, so a test may change them."""
    if name not in _PLANS:
        _PLANS[name] = make_plan(load_example(name))
    return load_example(name), copy.deepcopy(_PLANS[name])


def _shard(offsets: list[int], sizes: list[int], rank: int) -> dict:
    return {"offsets": offsets, "sizes": sizes, "rank": rank}


IMPOSSIBLE = {  # the tutorial's large_table_0 (4096 x 64 on 2 ranks) placed in ways no plan can be
    "overlapping shards": {"sharding_type": "row_wise", "compute_kernel": "fused", "ranks": [0, 1, 0, 1],
                           "shards": [_shard([0, 0], [1024, 64], 0), _shard([1024, 0], [1024, 64], 1),
                                      _shard([1024, 0], [1024, 64], 0), _shard([3072, 0], [1024, 64], 1)]},
    "data parallel on rank 0 twice": {"sharding_type": "data_parallel", "compute_kernel": "dense", "ranks": [0, 0],
                                      "shards": None},
    "a zero-size shard": {"sharding_type": "column_wise", "compute_kernel": "fused", "ranks": [0, 1],
                          "shards": [_shard([0, 0], [4096, 64], 0), _shard([0, 64], [4096, 0], 1)]},
}


def impossible_plan(case: str) -> dict:
    """The tutorial's plan file with large_table_0 placed as IMPOSSIBLE[case] (its estimates left as they were):
    four shards of the right total area, two overlapping and a region uncovered; a data-parallel table twice on
    one rank; a shard of no columns."""
    plan = sample()[1]
    plan["plan"]["large_table_0"] = copy.deepcopy(IMPOSSIBLE[case])
    return plan


def counts(store: Store) -> dict[str, int]:
    """Rows per table: what `nothing changed` is checked against."""
    with store.engine.connect() as c:
        return {t: c.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES}


def integrity(store: Store) -> str:
    """SQLite's `PRAGMA integrity_check` ("ok" for a sound file); "n/a" on other backends."""
    if store.engine.dialect.name != "sqlite":
        return "n/a"
    with store.engine.connect() as c:
        return "; ".join(r[0] for r in c.execute(text("PRAGMA integrity_check")))


def measured_plan(store: Store) -> str:
    """A saved tutorial plan with a succeeded validation run (three metrics) and a failed dry-run."""
    cfg, plan = sample()
    token = store.save_plan(cfg, plan, label="shared", author="ana", config_name="tutorial",
                            settings={"search": True, "time_budget_s": 1.5})
    run = store.create_run(token, "validation", "gloo", "cpu")
    store.update_run(run, status="running", log_append="two ranks up\n", device_info={"cpus": 2, "torch": "2.13"})
    store.add_metrics(run, [(0, "step_ms", 1.0 / 3.0, "ms"), (1, "step_ms", 2.5e-7, "ms"),
                            (0, "peak_hbm_bytes", 123456789.0, "bytes")])
    store.update_run(run, status="succeeded")
    failed = store.create_run(token, "dryrun", "fbgemm", "cpu")
    store.update_run(failed, status="failed", error="fbgemm kernel missing\nsecond line")
    return token


def cli_env(url: str) -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=url, PYTHONPATH=str(REPO))
    env.pop("PLANNER_DATA_DIR", None)
    return env


def run_cli(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`python -m db ARGS` on the database `url`, as a script would run it."""
    return subprocess.run([sys.executable, "-m", "db", *args], cwd=REPO, env=cli_env(url), input=stdin,
                          capture_output=True, text=True, timeout=120, check=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (right now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
