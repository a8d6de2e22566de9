"""Each rank's local training batches as KeyedJaggedTensors, drawn like the dry-run's (engine.dryrun.workload):
bags of floor(pf) or ceil(pf) ids, uniform or Zipf as each table's zipf_exponent says, the global batch split
across ranks, a fresh batch for every step (up to MAX_DISTINCT_BATCHES, then cycled). Imports torch and torchrec.

A KeyedJaggedTensor needs the same number of bags for every feature; features with fewer bags (other
batch_sizes or num_poolings) are padded with empty bags, which keeps their id count.
"""

from __future__ import annotations

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from engine.dryrun.types import DryrunSettings
from engine.dryrun.workload import FeatureBatch, global_batch
from engine.types import Config

MAX_DISTINCT_BATCHES = 64  # steps draw fresh ids up to this many batches, then cycle through them


def local_part(fb: FeatureBatch, rank: int, world_size: int) -> FeatureBatch:
    """Rank r's bags of a global batch: bags [r*b, (r+1)*b) and their ids."""
    b = len(fb.lengths) // world_size
    offsets = np.concatenate(([0], np.cumsum(fb.lengths)))
    lo, hi = offsets[rank * b], offsets[(rank + 1) * b]
    return FeatureBatch(fb.lengths[rank * b:(rank + 1) * b], fb.ids[lo:hi])


def local_batch(cfg: Config, rank: int, seed: int, device: torch.device, step: int = 0) -> KeyedJaggedTensor:
    """One KeyedJaggedTensor of rank `rank`'s share of one step's global batch, features in config order."""
    settings = DryrunSettings(seed=seed)
    keys: list[str] = []
    parts: list[FeatureBatch] = []
    for i, t in enumerate(cfg.tables):
        for name, fb in zip(t.feature_names, global_batch(cfg, i, settings, step)):
            keys.append(name)
            parts.append(local_part(fb, rank, cfg.topology.world_size))
    stride = max(len(p.lengths) for p in parts)
    lengths = [np.pad(p.lengths, (0, stride - len(p.lengths))) for p in parts]
    return KeyedJaggedTensor.from_lengths_sync(
        keys=keys,
        values=torch.from_numpy(np.concatenate([p.ids for p in parts])).to(device),
        lengths=torch.from_numpy(np.concatenate(lengths)).to(device),
    )


def local_batches(cfg: Config, rank: int, seed: int, device: torch.device, count: int) -> list[KeyedJaggedTensor]:
    return [local_batch(cfg, rank, seed, device, k) for k in range(min(count, MAX_DISTINCT_BATCHES))]
