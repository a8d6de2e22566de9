"""The truth benchmark's configs and plans: CPU workloads of different shapes on 2 and 4 ranks (one host), each
with a few plans (our planner's, one sharding type forced, everything on one rank) so that plans can be ordered.

Pure data and the engine's planner (numpy only); bench/truth.py measures them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import engine
from bench.suite import ROOT
from engine import MIN_CW_DIM, ShardingType, TablePlan


@dataclass(frozen=True)
class TruthCase:
    name: str
    config: dict
    plans: tuple[str, ...]  # labels: "engine", a sharding type forced on every table, "skew" (all on rank 0)


def _tables(rows: list[int], dims: list[int], pfs: list[float], prefix: str = "t") -> tuple[list, dict]:
    tables = [{"name": f"{prefix}{i}", "num_embeddings": int(r), "embedding_dim": int(d),
               "feature_names": [f"{prefix}{i}_f"]} for i, (r, d) in enumerate(zip(rows, dims))]
    return tables, {f"{prefix}{i}": {"pooling_factors": [float(p)]} for i, p in enumerate(pfs)}


def _config(tables: list, constraints: dict, world_size: int, batch_size: int) -> dict:
    return {"tables": tables, "constraints": constraints,
            "topology": {"world_size": world_size, "compute_device": "cpu", "batch_size": batch_size}}


def tutorial(world_size: int) -> dict:
    cfg = json.loads((ROOT / "examples" / "tutorial.json").read_text())
    cfg["topology"].update(world_size=world_size, local_world_size=world_size, compute_device="cpu")
    return cfg


def heavy(world_size: int) -> dict:
    """Four 250k x 64 tables read 16 ids per sample: lookups weigh as much as DMP's fixed costs."""
    return _config(*_tables([250_000] * 4, [64] * 4, [16] * 4), world_size, 512)


def many_small() -> dict:
    """40 small tables: per-piece and per-feature costs dominate."""
    return _config(*_tables([2_000] * 40, [16] * 40, [2] * 40), 2, 256)


def wide() -> dict:
    """Two wide tables (dim 512): column-wise splits are candidates."""
    return _config(*_tables([20_000, 20_000], [512, 512], [4, 4]), 2, 256)


def mixed(world_size: int, seed: int = 3) -> dict:
    """12 tables of log-uniform rows (1e3..2e5), dims 16..128 and pooling factors 1..20."""
    rng = np.random.default_rng(seed)
    rows = np.exp(rng.uniform(np.log(1e3), np.log(2e5), 12)).astype(int).tolist()
    dims = rng.choice([16, 32, 64, 128], 12).tolist()
    pfs = np.round(np.exp(rng.uniform(0, np.log(20), 12)), 1).tolist()
    return _config(*_tables(rows, dims, pfs), world_size, 256)


def cases() -> list[TruthCase]:
    return [
        TruthCase("tutorial-2r", tutorial(2), ("engine", "column_wise", "row_wise", "data_parallel",
                                                "table_column_wise")),
        TruthCase("heavy-2r", heavy(2), ("engine", "skew", "row_wise")),
        TruthCase("many-2r", many_small(), ("engine", "data_parallel", "skew")),
        TruthCase("wide-2r", wide(), ("engine", "table_wise", "skew")),  # the engine now splits by columns itself
        TruthCase("mixed-2r", mixed(2), ("engine", "skew", "row_wise")),
        TruthCase("tutorial-4r", tutorial(4), ("engine", "row_wise", "data_parallel")),
        TruthCase("heavy-4r", heavy(4), ("engine", "skew", "row_wise")),
        TruthCase("mixed-4r", mixed(4), ("engine", "skew", "row_wise")),
    ]


def _forced(cfg: dict, st: str) -> dict:
    out = copy.deepcopy(cfg)
    cons = out.setdefault("constraints", {})
    for t in out["tables"]:
        c = cons.setdefault(t["name"], {})
        c["sharding_types"] = [st]
        if st in ("column_wise", "table_column_wise") and t["embedding_dim"] <= MIN_CW_DIM:
            c["min_partition"] = max(4, t["embedding_dim"] // 2)  # two pieces, as the tutorial cuts its 64 into 32s
    return out


def _skew(cfg: dict) -> dict[str, TablePlan]:
    """Every table whole on rank 0: the other ranks only take part in the collectives."""
    parsed = engine.parse_config(cfg)
    tables = {}
    for t in parsed.tables:
        shard = engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), 0)
        tables[t.name] = TablePlan(ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (0,), (shard,))
    return tables


def make_plan(cfg: dict, label: str) -> dict:
    """The plan file (engine.plan_to_dict) of one label for the config, scored under the config."""
    parsed = engine.parse_config(cfg)
    settings = engine.PlannerSettings(effort=100_000)
    makers: dict[str, Callable[[], dict[str, TablePlan]]] = {
        "engine": lambda: engine.plan(parsed, settings).tables,
        "skew": lambda: _skew(cfg),
    }
    maker = makers.get(label) or (lambda: engine.plan(engine.parse_config(_forced(cfg, label)), settings).tables)
    return engine.plan_to_dict(engine.evaluate(parsed, maker(), planner=f"truth:{label}"))


__all__ = ["TruthCase", "cases", "make_plan"]
