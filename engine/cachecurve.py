"""A measured LRU miss-ratio curve (a table's workload block, engine.workload_block) read as the estimates read it:
the miss rate of a cache of a given load factor, and the cache load factors worth trying (engine.clf)."""

from __future__ import annotations

import math

from engine.types import Workload


def miss_rate(w: Workload, num_embeddings: int, clf: float) -> float:
    """The LRU miss rate of a cache of clf x num_embeddings rows, read off the curve: linear in log(cache rows)
    between its points; below the smallest point, linear in cache rows from 1.0 at an empty cache; above the
    largest, the largest point's rate (a larger cache misses no more)."""
    curve = w.miss_ratio_curve
    rows = clf * num_embeddings
    c0, r0 = curve[0]
    if rows <= c0:
        return 1.0 - (1.0 - r0) * max(rows, 0.0) / c0
    for (c1, r1), (c2, r2) in zip(curve, curve[1:]):
        if rows <= c2:
            t = math.log(rows / c1) / math.log(c2 / c1)
            return r1 + (r2 - r1) * t
    return curve[-1][1]


def source_text(w: Workload) -> str:
    """Where the block's figures come from, for a plan's notes: `sample X (N rows, DATE)`."""
    return f"sample {w.source_file} ({w.source_rows:,} rows, {w.source_modified})"


def curve_clfs(w: Workload, num_embeddings: int) -> tuple[float, ...]:
    """The cache load factors of the curve's points (cache_rows / num_embeddings), those below 1 only: a cache of
    every row holds what fused keeps in HBM, for more."""
    return tuple(c / num_embeddings for c, _ in w.miss_ratio_curve if c < num_embeddings)
