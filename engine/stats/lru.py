"""LRU miss-ratio curves from one pass over a table's lookups: exact stack distances, or SHARDS sampling.

A lookup of row x at position i whose previous lookup of x was at p has LRU stack distance
d = (distinct rows looked up strictly between p and i) = (i - p - 1) - #{j < i : prev[j] > p}, because a lookup j
between p and i repeats a row of that window exactly when its own previous lookup lies after p. An LRU cache of
C rows hits the lookup exactly when d < C, so the histogram of d gives the whole curve at once. The counts
#{j < i : prev[j] > prev[i]} are computed level by level over the bits of prev (a wavelet matrix: one stable
partition per bit, all numpy), O(n log n) with no per-lookup Python.

Above EXACT_MAX_LOOKUPS lookups of one table the replay is SHARDS-style spatial sampling (Waldspurger et al.,
FAST '15): only rows whose hash falls under a threshold are kept, their distances are scaled by 1/rate. The rate
starts at 1 and halves whenever the kept lookups pass the budget, so the work and memory stay bounded whatever the
sample's size, and a sample under the budget is replayed exactly.
"""

from __future__ import annotations

import math

import numpy as np

# Lookups of one table replayed exactly. Measured by bench/stats.py on 2 loaded cores (bench/results/stats.md):
# the whole pass over 10^7 lookups replayed exactly takes 22-39 s and 0.7 GB, over 10^8 490 s and 6.3 GB;
# sampled down to at most this many, 10^8 lookups take 50-70 s and 0.8 GB, within 2 points of exact.
EXACT_MAX_LOOKUPS = 10_000_000
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
    that halves as needed (a consistent subset: a row is either always kept or never)."""

    def __init__(self, budget: int = EXACT_MAX_LOOKUPS):
        self.budget = budget
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
        self.parts.append(rows)
        self.kept += rows.size
        while self.kept > self.budget and self.threshold > 1:
            self.threshold //= 2
            self.parts = [p[row_hash(p) < self.threshold] for p in self.parts]
            self.kept = sum(p.size for p in self.parts)

    def lookups(self) -> np.ndarray:
        rows = np.concatenate(self.parts) if self.parts else np.zeros(0, np.int64)
        self.parts = [rows]
        return rows


def stack_distances(rows: np.ndarray) -> tuple[np.ndarray, int]:
    """(the LRU stack distance of every lookup that repeats a row, in order; the number of first lookups).
    Positions are int32 below 2**31 lookups: about 40 bytes per lookup at the peak."""
    n = rows.size
    if n == 0:
        return np.zeros(0, np.int64), 0
    it = np.int32 if n < 2**31 else np.int64
    order = np.argsort(rows, kind="stable").astype(it)
    ordered = rows[order]
    same = ordered[1:] == ordered[:-1]
    del ordered
    prev = np.full(n, -1, dtype=it)
    prev[order[1:][same]] = order[:-1][same]
    del order, same
    again = np.flatnonzero(prev >= 0).astype(it)
    p = prev[again]
    del prev
    gap = again - p - 1
    del again
    return gap - _greater_before(p), n - gap.size


def _greater_before(values: np.ndarray) -> np.ndarray:
    """For each k: #{j < k : values[j] > values[k]}, for distinct non-negative values, in the input's order."""
    m = values.size
    if m == 0:
        return np.zeros(0, values.dtype)
    dtype = np.int32 if m < 2**31 and values.max() < 2**31 else np.int64
    vals = values.astype(dtype)
    pos = np.arange(m, dtype=dtype)  # each element's place in the input, to put the counts back
    count = np.zeros(m, dtype=dtype)
    prefix = np.zeros(m, dtype=dtype)  # the bits above the current one; equal prefixes are contiguous
    idx = np.arange(m, dtype=dtype)
    for bit in range(int(vals.max()).bit_length() - 1, -1, -1):
        b = (vals >> bit) & 1
        ones = np.cumsum(b, dtype=dtype) - b  # ones before each element, over the whole array
        start = np.ones(m, dtype=bool)
        start[1:] = prefix[1:] != prefix[:-1]
        first = np.maximum.accumulate(np.where(start, idx, 0))
        del start
        zero = b == 0
        del b
        count[zero] += (ones - ones[first])[zero]
        del ones, first
        one = ~zero
        vals = np.concatenate((vals[zero], vals[one]))
        pos = np.concatenate((pos[zero], pos[one]))
        count = np.concatenate((count[zero], count[one]))
        prefix = np.concatenate(((prefix * 2)[zero], (prefix * 2 + 1)[one]))
    out = np.empty(m, dtype=dtype)
    out[pos] = count
    return out


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
    distances, first = stack_distances(rows)
    ds = np.sort(distances)
    sampled = rate < 1.0
    n = seen if sampled else rows.size
    curve = []
    for c in cache_sizes(num_rows):
        scaled = c * rate  # a sampled distance d stands for d / rate rows of the whole table
        far = ds.size - int(np.searchsorted(ds, scaled, side="left"))
        misses = unique + far / rate if sampled else first + far
        curve.append({"cache_rows": c, "lru_miss_rate": min(1.0, misses / n) if n else 0.0})
    return curve


def error_bound(sampled_rows: int, rate: float) -> float:
    """A heuristic bound on the sampled curve's absolute error: 0 when exact, else 5/sqrt(distinct rows kept),
    from the spread of which rows the hash keeps (not a guarantee: it covered every gap measured in the tests,
    docs/stats.md and bench/results/stats.md, the largest 5.7 points where it said 6.3)."""
    if rate >= 1.0:
        return 0.0
    return min(1.0, 5.0 / math.sqrt(max(sampled_rows, 1)))
