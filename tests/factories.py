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


def tutorial_with_cache_curve() -> dict:
    """The tutorial with large_table_1 row-wise on a UVM cache and a measured miss curve (a workload block): the
    planner picks its cache size from the curve (engine.clf)."""
    cfg = tutorial()
    curve = [{"cache_rows": r, "lru_miss_rate": m} for r, m in ((40, 0.6), (400, 0.05), (4096, 0.04))]
    cfg["constraints"] = {"large_table_1": {
        "sharding_types": ["row_wise"], "compute_kernels": ["fused_uvm_caching"],
        "workload": {"from": {"file": "ids.parquet", "rows": 5000, "modified": "2026-11-27T00:10:00Z"},
                     "miss_ratio_curve": curve}}}
    return cfg


def with_changes(cfg: dict, **topology) -> dict:
    out = copy.deepcopy(cfg)
    out["topology"].update(topology)
    return out


def write(tmp_path: Path, data, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def within_memory(cfg, plan) -> bool:
    """No rank of the plan uses more than its usable HBM or DDR (its own on a mixed fleet)."""
    from engine.capacity import usable_ddr_of, usable_hbm_of

    topo = cfg.topology
    return all(r.hbm_bytes <= usable_hbm_of(topo, r.rank) and r.ddr_bytes <= usable_ddr_of(topo, r.rank)
               for r in plan.ranks)


def hand_option(table, costs, hbm=0, st=None, kernel=None, ddr=0):
    """A table option with its pieces' costs (ms) and memory set by hand, for partitioner tests."""
    import numpy as np

    from engine.enumerate import Option
    from engine.estimate import ShardEstimates
    from engine.types import ComputeKernel, ShardingType

    k = len(costs)
    perf = np.zeros((k, 6))
    perf[:, 0] = costs
    est = ShardEstimates(perf, np.full(k, hbm, dtype=np.int64), np.full(k, ddr, dtype=np.int64), np.zeros(k),
                         np.zeros(k), np.zeros(k), np.zeros(k))
    return Option(table, st or ShardingType.TABLE_WISE, kernel or ComputeKernel.FUSED,
                  np.zeros((k, 2), dtype=np.int64), np.ones((k, 2), dtype=np.int64), est)


TRUE_STEP_COSTS = (3.0, 0.4, 0.25, 0.05, 1 / 5e6, 1 / 2e6, 0.0)  # ms per step feature: bandwidths 5e6, 2e6 bytes/ms


def synthetic_step(x, costs, cores: int) -> float:
    """The step engine.calibrate models for one host: the slowest rank, or with more ranks than cores their work
    over the cores plus the collectives' latency (feature 1) once."""
    own = x @ costs
    if len(own) <= cores:
        return float(own.max())
    latency = float(x[0, 1] * costs[1])
    return float(max(own.max(), (own.sum() - latency * len(own)) / cores + latency))


def synthetic_step_runs(n: int = 14, seed: int = 0) -> list:
    """Validation runs as engine.calibrate sees them, whose every rank measured exactly the step TRUE_STEP_COSTS
    give (synthetic_step; 2 and 4 ranks on 2 cores, 5 configs)."""
    import numpy as np

    from engine.calibrate import FEATURES, StepObservation

    rng = np.random.default_rng(seed)
    costs = np.array(TRUE_STEP_COSTS)
    out = []
    for i in range(n):
        w = 2 if i % 2 else 4
        x = np.zeros((w, len(FEATURES)))
        x[:, 0], x[:, 1] = 1.0, rng.integers(1, 17)
        x[:, 2], x[:, 3] = rng.integers(0, 4, w), rng.integers(0, 21, w)
        x[:, 4], x[:, 5] = rng.uniform(0, 5e7, w), rng.uniform(0, 2e7, w)
        step = synthetic_step(x, costs, cores=2)
        out.append(StepObservation(x, np.full(w, step), (5.1e7, 6e8, 1e7), f"config{i % 5}", (i + 1,), 1, 2))
    return out
