"""The benchmark's configs: the tutorial, MLPerf DLRM-DCNv2 (Criteo 1TB), and seeded synthetic sets.

Pure data: each case is a config dict the engine and TorchRec's planner both take.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import CRITEO_1TB_EMBEDDING_DIM, CRITEO_1TB_MULTI_HOT, CRITEO_1TB_ROWS

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    name: str
    config: dict
    dryrun: bool = False  # small CPU topologies: both plans are also measured by the kernel dry-run


def synthetic(num_tables: int, world_size: int, seed: int = 0, max_rows: float = 1e7,
              local_world_size: int = 8, batch_size: int = 512, device: str = "cuda") -> dict:
    """Log-uniform rows in [1e3, max_rows], dims 32..256 (multiples of 4... of 32), pooling factors 0.5..96."""
    rng = np.random.default_rng(seed)
    rows = np.exp(rng.uniform(np.log(1e3), np.log(max_rows), num_tables)).astype(int)
    dims = rng.choice([32, 64, 96, 128, 192, 256], num_tables)
    pf = np.round(np.exp(rng.uniform(np.log(0.5), np.log(96), num_tables)), 2)
    tables = [{"name": f"t{i}", "num_embeddings": int(r), "embedding_dim": int(d), "feature_names": [f"f{i}"]}
              for i, (r, d) in enumerate(zip(rows, dims))]
    constraints = {f"t{i}": {"pooling_factors": [float(p)]} for i, p in enumerate(pf)}
    return {"tables": tables, "constraints": constraints,
            "topology": {"world_size": world_size, "local_world_size": min(local_world_size, world_size),
                         "batch_size": batch_size, "compute_device": device}}


def criteo_1tb(world_size: int, batch_size: int = 512) -> dict:
    tables = [{"name": f"cat_{i}", "num_embeddings": r, "embedding_dim": CRITEO_1TB_EMBEDDING_DIM,
               "feature_names": [f"cat_{i}"]}
              for i, r in enumerate(CRITEO_1TB_ROWS)]
    constraints = {f"cat_{i}": {"pooling_factors": [float(h)]} for i, h in enumerate(CRITEO_1TB_MULTI_HOT)}
    return {"tables": tables, "constraints": constraints,
            "topology": {"world_size": world_size, "local_world_size": min(8, world_size), "batch_size": batch_size}}


def tutorial() -> dict:
    return json.loads((ROOT / "examples" / "tutorial.json").read_text())


def tight(cfg: dict, hbm_share: float) -> dict:
    """The same tables on GPUs whose HBM holds only `hbm_share` of the fp32 weights (spread evenly)."""
    weights = sum(t["num_embeddings"] * t["embedding_dim"] * 4 for t in cfg["tables"])
    out = json.loads(json.dumps(cfg))
    out["topology"]["hbm_cap"] = int(weights * hbm_share / out["topology"]["world_size"] / 0.85)
    return out


def cases(quick: bool = False) -> list[Case]:
    """The suite, smallest first. quick: only what TorchRec plans in under a minute here."""
    out = [
        Case("tutorial", tutorial()),
        Case("criteo-1tb-8", criteo_1tb(8)),
        Case("criteo-1tb-16", criteo_1tb(16)),
        Case("synthetic-100x16", synthetic(100, 16, seed=0)),
        Case("synthetic-200x8", synthetic(200, 8, seed=0, max_rows=1e7)),
        Case("synthetic-200x8-rows-1e8 (98% of all memory)", synthetic(200, 8, seed=0, max_rows=1e8)),
        Case("tight-100x16 (HBM 60% of weights)", tight(synthetic(100, 16, seed=0), 0.6)),
        Case("tight-criteo-8 (HBM 50% of weights)", tight(criteo_1tb(8), 0.5)),
        Case("cpu-synthetic-24x4", synthetic(24, 4, seed=0, max_rows=2e5, batch_size=256, device="cpu"), True),
        Case("cpu-synthetic-48x8", synthetic(48, 8, seed=1, max_rows=1e5, batch_size=128, device="cpu"), True),
    ]
    if not quick:
        out += [
            Case("synthetic-200x64", synthetic(200, 64, seed=0, max_rows=1e8)),
            Case("synthetic-200x128", synthetic(200, 128, seed=0, max_rows=1e8)),
            Case("synthetic-1000x128", synthetic(1000, 128, seed=0, max_rows=1e7)),
        ]
    return out
