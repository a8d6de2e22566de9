"""LRU miss-ratio curves from one pass over a table's lookups: exact stack distances, or SHARDS sampling.

A lookup of row x at position i whose previous lookup of x was at p has LRU stack distance
d = (distinct rows looked up strictly between p and i) = (i - p - 1) - #{j < i : prev[j] > p}, because a lookup j
between p and i repeats a row of that window exactly when its own previous lookup lies after p. An LRU cache of
C rows hits the lookup exactly when d < C, so the histogram of d gives the whole curve at once. The counts
#{j < i : prev[j] > prev[i]} are computed level by level over the bits of prev (a wavelet matrix: one stable
partition per bit, all numpy), O(n log n) with no per-lookup Python.

The exact replay (ExactReplay) streams: lookups are replayed in chunks of CHUNK_LOOKUPS as they are read, and all
it keeps between chunks is the LRU stack itself (each distinct row seen, by its last lookup) and a histogram of
distances by cache size. A chunk is replayed as the trace "the stack, oldest row first, then the chunk": that trace
leaves an LRU cache in the same state as the whole past did, so the chunk's distances are those of the full replay,
and its memory is the chunk's plus 24 bytes per distinct row, whatever the number of lookups.

Above EXACT_MAX_LOOKUPS lookups of one table (or the budget asked for) the replay is SHARDS-style spatial sampling
(Waldspurger et al., FAST '15): only rows whose hash falls under a threshold are kept, their distances are scaled by
1/rate. The rate starts at 1 and halves whenever the kept lookups pass SAMPLED_MAX_LOOKUPS, so the work and memory
stay bounded whatever the sample's size.
"""

from __future__ import annotations

import math

import numpy as np

# Lookups of one table replayed exactly by default (ExactReplay, streamed; `engine stats --exact-lookups N` takes more,
# up to EXACT_LIMIT_LOOKUPS), and the most a sampled replay keeps beyond that. Measured by bench/stats.py on 2 cores
# (bench/results/stats.md): at 10^8 lookups the exact replay costs about 5x the sampled one (which meets the 60 s
# target there and stays within 2 points of it), so the default stays sampled past 10^7.
EXACT_MAX_LOOKUPS = 10_000_000
EXACT_LIMIT_LOOKUPS = 1_000_000_000
SAMPLED_MAX_LOOKUPS = 10_000_000
CHUNK_LOOKUPS = 1 << 21  # lookups replayed at once by ExactReplay: about 100 bytes each at the peak
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
    """For each k: #{j < k : values[j] > values[k]}, for distinct non-negative values, in the input's order.

    A wavelet matrix built bit by bit, highest first: each level stably puts the elements whose bit is 0 before those
    whose bit is 1, so elements with equal higher bits stay together, in input order; `lo` is where an element's
    group starts. An element whose bit is 0 is exceeded by every element of its group before it whose bit is 1."""
    m = values.size
    if m == 0:
        return np.zeros(0, values.dtype)
    dtype = np.int32 if m < 2**31 and values.max() < 2**31 else np.int64
    vals = values.astype(dtype)
    pos = np.arange(m, dtype=dtype)  # each element's place in the input, to put the counts back
    count = np.zeros(m, dtype=dtype)
    lo = np.zeros(m, dtype=dtype)
    ones = np.zeros(m + 1, dtype=dtype)  # ones[i]: elements before place i whose bit is 1
    for bit in range(int(vals.max()).bit_length() - 1, -1, -1):
        b = (vals >> bit) & 1
        np.cumsum(b, out=ones[1:])
        at_lo = ones[lo]
        zero = b == 0
        zeros = m - int(ones[-1])
        count += np.where(zero, ones[:-1] - at_lo, 0)
        lo = np.where(zero, lo - at_lo, zeros + at_lo)
        order = np.concatenate((np.flatnonzero(zero), np.flatnonzero(b))).astype(dtype, copy=False)
        del b, zero, at_lo
        vals, pos, count, lo = vals[order], pos[order], count[order], lo[order]
    out = np.empty(m, dtype=dtype)
    out[pos] = count
    return out


class ExactReplay:
    """Exact LRU misses at each of `sizes` (cache rows) over lookups added in order, replayed in chunks of `chunk`
    (see the module's docstring); the same lookups give the same counts whatever the chunk."""

    def __init__(self, sizes: list[int], chunk: int = CHUNK_LOOKUPS):
        self.sizes = np.asarray(sizes, np.int64)
        self.chunk = chunk
        self.far = np.zeros(self.sizes.size + 1, np.int64)  # repeat lookups by how many sizes their distance reaches
        self.first = 0  # first lookups of a row: a miss at every size
        self.replayed = 0
        self.keys = np.zeros(0, np.int64)  # every row seen, sorted
        self.last = np.zeros(0, np.int64)  # its last lookup's position
        self.stack = np.zeros(0, np.int64)  # the rows' last positions, sorted: the LRU stack, oldest first
        self.pending: list[np.ndarray] = []
        self.pending_n = 0

    def add(self, rows: np.ndarray) -> None:
        self.pending.append(np.asarray(rows, np.int64))
        self.pending_n += rows.size
        if self.pending_n >= self.chunk:
            rows = np.concatenate(self.pending)
            cut = rows.size - rows.size % self.chunk
            for at in range(0, cut, self.chunk):
                self._replay(rows[at: at + self.chunk])
            self.pending, self.pending_n = [rows[cut:]], rows.size - cut

    def misses(self) -> list[int]:
        """Misses at each size over every lookup added."""
        if self.pending_n:
            self._replay(np.concatenate(self.pending))
            self.pending, self.pending_n = [], 0
        reach = np.cumsum(self.far[::-1])[::-1]  # reach[j]: distances >= sizes[j - 1]
        return [self.first + int(reach[j + 1]) for j in range(self.sizes.size)]

    def curve(self) -> list[dict]:
        """[{cache_rows, lru_miss_rate}] at each size, over every lookup added."""
        n = self.replayed + self.pending_n
        return [{"cache_rows": int(c), "lru_miss_rate": min(1.0, m / n) if n else 0.0}
                for c, m in zip(self.sizes, self.misses())]

    def _replay(self, rows: np.ndarray) -> None:
        k, m = rows.size, self.stack.size
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        head = np.ones(k, dtype=bool)  # a row's first lookup in the chunk, in row order
        head[1:] = ordered[1:] != ordered[:-1]
        tail = np.append(head[1:], True)  # its last
        rows_in, firsts, lasts = ordered[head], order[head], order[tail]
        del ordered
        # the virtual trace: the stack (positions 0..m-1), then the chunk (m + i); prev there of each lookup
        prev = np.full(k, -1, np.int64)
        again = ~head[1:]
        prev[order[1:][again]] = m + order[:-1][again]
        del order, again, head, tail
        at = np.searchsorted(self.keys, rows_in)
        seen = at < self.keys.size
        seen[seen] = self.keys[at[seen]] == rows_in[seen]
        old = self.last[at[seen]]
        depth = np.searchsorted(self.stack, old)  # each seen row's place in the stack
        prev[firsts[seen]] = depth
        hit = np.flatnonzero(prev >= 0)
        p = prev[hit]
        del prev
        distance = (m + hit) - p - 1 - _greater_before(p)
        del hit, p
        self.first += int((~seen).sum())
        self.far += np.bincount(np.searchsorted(self.sizes, distance, side="right"), minlength=self.far.size)
        del distance
        new_last = self.replayed + lasts
        keep = np.ones(m, dtype=bool)
        keep[depth] = False
        self.stack = np.concatenate((self.stack[keep], np.sort(new_last)))
        self.last[at[seen]] = new_last[seen]
        self.keys = np.insert(self.keys, at[~seen], rows_in[~seen])
        self.last = np.insert(self.last, at[~seen], new_last[~seen])
        self.replayed += k


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
