"""Configs for tests, built by code: the tutorial in each sharding type, and random small configs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SHARDING_TYPES = ("table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "data_parallel")


def tutorial(sharding_type: str | None = None) -> dict:
    """The tutorial's 4 tables on 2 ranks, optionally forced to one sharding type (as the tutorial does)."""
    name = f"tutorial_{sharding_type}.json" if sharding_type else "tutorial.json"
    return json.loads((EXAMPLES / name).read_text())


def with_changes(cfg: dict, **topology) -> dict:
    out = copy.deepcopy(cfg)
    out["topology"].update(topology)
    return out


def write(tmp_path: Path, data, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p
