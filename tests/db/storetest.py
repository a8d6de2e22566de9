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


def counts(store: Store) -> dict[str, int]:
    """Rows per table: what `nothing changed` is checked against."""
    with store.engine.connect() as c:
        return {t: c.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES}


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
