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

from engine.dryrun.sample_ids import load_sample_batches
from engine.dryrun.types import Distribution, DryrunSettings
from engine.dryrun.workload import BatchSource, FeatureBatch, global_batch
from engine.types import Config

MAX_DISTINCT_BATCHES = 64  # steps draw fresh ids up to this many batches, then cycle through them


def local_part(fb: FeatureBatch, rank: int, world_size: int) -> FeatureBatch:
    """Rank r's bags of a global batch: bags [r*b, (r+1)*b) and their ids."""
    b = len(fb.lengths) // world_size
    offsets = np.concatenate(([0], np.cumsum(fb.lengths)))
    lo, hi = offsets[rank * b], offsets[(rank + 1) * b]
    return FeatureBatch(fb.lengths[rank * b:(rank + 1) * b], fb.ids[lo:hi])


def local_batch(cfg: Config, rank: int, seed: int, device: torch.device, step: int = 0,
                source: BatchSource | None = None) -> KeyedJaggedTensor:
    """One KeyedJaggedTensor of rank `rank`'s share of one step's global batch, features in config order (the
    global batches from `source`, a sample's, else drawn)."""
    settings = DryrunSettings(seed=seed)
    keys: list[str] = []
    parts: list[FeatureBatch] = []
    for i, t in enumerate(cfg.tables):
        whole = source(i, step) if source is not None else global_batch(cfg, i, settings, step)
        for name, fb in zip(t.feature_names, whole):
            keys.append(name)
            parts.append(local_part(fb, rank, cfg.topology.world_size))
    stride = max(len(p.lengths) for p in parts)
    lengths = [np.pad(p.lengths, (0, stride - len(p.lengths))) for p in parts]
    return KeyedJaggedTensor.from_lengths_sync(
        keys=keys,
        values=torch.from_numpy(np.concatenate([p.ids for p in parts])).to(device),
        lengths=torch.from_numpy(np.concatenate(lengths)).to(device),
    )


def local_batches(cfg: Config, rank: int, seed: int, device: torch.device, count: int,
                  ids: str | None = None) -> tuple[list[KeyedJaggedTensor], dict]:
    """The rank's distinct batches for `count` steps, and the result's ids block: from the sample `ids` (the rows
    every rank reads alike, each taking its slice of each global batch), else synthetic."""
    if ids is None:
        n = min(count, MAX_DISTINCT_BATCHES)
        return ([local_batch(cfg, rank, seed, device, k) for k in range(n)],
                {"source": "synthetic", "seed": seed, "distribution": Distribution.CONFIG.value, "batches": n})
    sample = load_sample_batches(cfg, ids, count, MAX_DISTINCT_BATCHES)
    return ([local_batch(cfg, rank, seed, device, k, sample.global_batch) for k in range(sample.batches)],
            sample.ids_block())
