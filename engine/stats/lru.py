"""LRU miss-ratio curves from one pass over a table's lookups: exact, or SHARDS sampling.

The exact replay is engine.stats.replay.ExactReplay (misses at each cache size, streamed in chunks; its docstring
says how). Above EXACT_MAX_LOOKUPS lookups of one table (or the budget asked for) the curve is SHARDS-style spatial
sampling (Waldspurger et al., FAST '15): only rows whose hash falls under a threshold are kept (LookupSampler), and
their lookups are replayed exactly with each cache size scaled by the rate. The rate starts at 1 and halves whenever
the kept lookups pass SAMPLED_MAX_LOOKUPS, so the work and memory stay bounded whatever the sample's size.
"""

from __future__ import annotations

import math

import numpy as np

from engine.stats.replay import ExactReplay

# Lookups of one table replayed exactly by default (engine.stats.replay.ExactReplay, streamed; `engine stats
# --exact-lookups N` takes more, up to EXACT_LIMIT_LOOKUPS), and the most a sampled replay keeps beyond that. Measured
# by bench/stats.py on 2 cores (bench/results/stats.md): the whole pass over 10^8 lookups, exact, takes under 60 CPU
# seconds and under 1 GB.
EXACT_MAX_LOOKUPS = 100_000_000
EXACT_LIMIT_LOOKUPS = 1_000_000_000
SAMPLED_MAX_LOOKUPS = 10_000_000
HASH_BITS = 24
CURVE_POINTS = 16
LOWEST_SHARE = 0.001


def row_hash(rows: np.ndarray) -> np.ndarray:
    """splitmix64 of each row, its top HASH_BITS bits: the same row always gets the same value."""
    with np.errstate(over="ignore"):
        z = rows.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(64 - HASH_BITS)).astype(np.int64)


class LookupSampler:
    """A table's lookups in order, kept whole while they fit the budget, else the rows hashing under a threshold
    that halves as needed (a consistent subset: a row is either always kept or never). Kept as int32 when the rows
    are below `num_rows` <= 2**31 (half the memory)."""

    def __init__(self, budget: int = EXACT_MAX_LOOKUPS, num_rows: int | None = None):
        self.budget = budget
        self.dtype = np.int32 if num_rows is not None and num_rows <= 2**31 else np.int64
        self.threshold = 1 << HASH_BITS  # rate = threshold / 2**HASH_BITS
        self.parts: list[np.ndarray] = []
        self.kept = 0
        self.seen = 0

    @property
    def rate(self) -> float:
        return self.threshold / (1 << HASH_BITS)

    def add(self, rows: np.ndarray) -> None:
        self.seen += rows.size
        if self.threshold < 1 << HASH_BITS:
            rows = rows[row_hash(rows) < self.threshold]
        self.parts.append(rows.astype(self.dtype))
        self.kept += rows.size
        while self.kept > self.budget and self.threshold > 1:
            self.threshold //= 2
            for i, p in enumerate(self.parts):  # one part at a time: memory never holds two copies
                self.parts[i] = p[row_hash(p) < self.threshold]
            self.kept = sum(p.size for p in self.parts)

    def lookups(self) -> np.ndarray:
        rows = np.concatenate(self.parts) if self.parts else np.zeros(0, self.dtype)
        self.parts = [rows]
        return rows


def cache_sizes(num_rows: int, points: int = CURVE_POINTS) -> list[int]:
    """Cache sizes from 0.1% of the table's rows to all of them, log-spaced (every size when the table is small)."""
    low = max(1, math.ceil(num_rows * LOWEST_SHARE))
    if num_rows - low + 1 <= points:
        return list(range(low, num_rows + 1))
    sizes = sorted({int(round(x)) for x in np.geomspace(low, num_rows, points)})
    return sizes


def miss_curve(rows: np.ndarray, num_rows: int, rate: float = 1.0, seen: int = 0, unique: int = 0) -> list[dict]:
    """[{cache_rows, lru_miss_rate}] of the lookups `rows`: all of them (rate 1), or, of `seen` lookups of `unique`
    distinct rows (both counted exactly), the rows kept at `rate` by hash. Sampled, the misses are the first
    lookups (exactly `unique`) plus the kept repeat lookups at distance >= C x rate, scaled by 1 / rate: a hot row
    that the hash keeps or drops by chance moves many lookups, but almost all are hits at short distances, so
    only the capacity misses, which hot rows hardly add to, are estimated."""
    sizes = cache_sizes(num_rows)
    sampled = rate < 1.0
    # a sampled distance d stands for d / rate rows of the whole table: d >= C x rate, i.e. d >= ceil(C x rate)
    replay = ExactReplay([math.ceil(c * rate) for c in sizes] if sampled else sizes, num_rows=num_rows)
    for at in range(0, rows.size, replay.chunk):
        replay.add(rows[at: at + replay.chunk])
    n = seen if sampled else rows.size
    curve = []
    for c, m in zip(sizes, replay.misses()):
        misses = unique + (m - replay.first) / rate if sampled else m
        curve.append({"cache_rows": c, "lru_miss_rate": min(1.0, misses / n) if n else 0.0})
    return curve


def error_bound(sampled_rows: int, rate: float) -> float:
    """A heuristic bound on the sampled curve's absolute error: 0 when exact, else 5/sqrt(distinct rows kept),
    from the spread of which rows the hash keeps (not a guarantee: it covered every gap measured in the tests,
    docs/stats.md and bench/results/stats.md, the largest 5.7 points where it said 6.3)."""
    if rate >= 1.0:
        return 0.0
    return min(1.0, 5.0 / math.sqrt(max(sampled_rows, 1)))
