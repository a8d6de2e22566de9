"""Building blocks of the workload statistics: id counts merged chunk by chunk, percentiles, the Zipf fit, and the
distinct rows of each batch of consecutive samples."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

MERGE_AT = 1 << 20
DENSE_MAX = 1 << 24  # ids counted in one array while below it: 64 MiB at most per counter (int32 counts)
DENSE_PER_ID = 16
ZIPF_POINTS = 256


class IdCounter:
    """How often each id occurs, over chunks. Counted in one array indexed by id (np.bincount per chunk: no sort)
    while every id is below DENSE_MAX and below DENSE_PER_ID times the ids counted so far, so the array never takes
    more than 4 x DENSE_PER_ID bytes per id read (the sparse merge's peak is about as much per distinct id);
    otherwise each chunk's (ids, counts) is kept until the pending ones outgrow the merged
    table, then all are merged at once (amortised O(n log n), 16 bytes per distinct id)."""

    def __init__(self) -> None:
        self.dense: np.ndarray | None = None  # int32 counts; int64 once 2**31 ids are counted
        self.total = 0
        self.top = -1  # the largest id counted
        self.ids = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending_size = 0

    def add(self, values: np.ndarray) -> None:
        if not values.size:
            return
        self.total += values.size
        self.top = max(self.top, int(values.max()))
        dense_fits = self.top < DENSE_MAX and self.top < DENSE_PER_ID * self.total
        if self.dense is None and dense_fits:  # sparse so far: the counts move into the array
            self._merge()
            self.dense = np.zeros(self.top + 1, np.int32)
            self.dense[self.ids] = self.counts
            self.ids, self.counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        elif self.dense is not None and not dense_fits:  # an id past DENSE_MAX: sparse from now on
            self.ids = np.flatnonzero(self.dense).astype(np.int64)
            self.counts, self.dense = self.dense[self.ids].astype(np.int64), None
        if self.dense is not None:
            if self.total >= 2**31 and self.dense.dtype != np.int64:
                self.dense = self.dense.astype(np.int64)
            if self.top >= self.dense.size:
                grown = np.zeros(min(DENSE_MAX, max(self.top + 1, self.dense.size + self.dense.size // 8)),
                                 self.dense.dtype)
                grown[: self.dense.size] = self.dense
                self.dense = grown
            self.dense += np.bincount(values, minlength=self.dense.size)
            return
        ids, counts = sorted_counts(values)
        self.pending.append((ids, counts))
        self.pending_size += ids.size
        if self.pending_size > max(MERGE_AT, self.ids.size):
            self._merge()

    def _merge(self) -> None:
        if self.pending:
            ids = np.concatenate([self.ids] + [p[0] for p in self.pending])
            counts = np.concatenate([self.counts] + [p[1] for p in self.pending])
            order = np.argsort(ids, kind="stable")
            ids, counts = ids[order], counts[order]
            start = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
            self.ids, self.counts = ids[start], np.add.reduceat(counts, start) if start.size else counts
            self.pending, self.pending_size = [], 0

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct ids sorted, their counts)."""
        if self.dense is not None:  # read once: the dense array goes
            self.ids = np.flatnonzero(self.dense).astype(np.int64)
            self.counts, self.dense = self.dense[self.ids].astype(np.int64), None
        self._merge()
        return self.ids, self.counts


def sorted_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values sorted, how often each occurs): np.unique's result, by one sort."""
    v = np.sort(values)
    start = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
    return v[start], np.diff(np.append(start, v.size))


def nearest_rank(sorted_values: np.ndarray, q: float) -> int:
    """The q-quantile by nearest rank: the smallest value with at least q of the values at or below it."""
    n = sorted_values.size
    return int(sorted_values[max(0, math.ceil(q * n) - 1)]) if n else 0


def histogram_quantile(hist: np.ndarray, q: float) -> int:
    """nearest_rank over values given as a histogram (hist[v] = how many times v occurs)."""
    total = int(hist.sum())
    if total == 0:
        return 0
    return int(np.searchsorted(np.cumsum(hist), max(1, math.ceil(q * total)), side="left"))


def top_share(counts: np.ndarray, share: float = 0.01) -> float | None:
    """Share of lookups on the most frequent `share` of the distinct ids (at least one id)."""
    if counts.size == 0:
        return None
    k = max(1, math.ceil(share * counts.size))
    top = np.partition(counts, counts.size - k)[counts.size - k:]
    return float(top.sum() / counts.sum())


def zipf_fit(counts: np.ndarray) -> tuple[float | None, float | None]:
    """(s, error) of frequency ~ rank**-s, least squares of ln(frequency) on ln(rank) at up to ZIPF_POINTS ranks
    log-spaced from 1 to the number of distinct ids (so the tail does not outweigh the head); error is the fit's
    root-mean-square residual in ln units. (None, None) with fewer than 2 distinct ids."""
    u = counts.size
    if u < 2:
        return None, None
    ranks = np.unique(np.round(np.geomspace(1, u, min(ZIPF_POINTS, u))).astype(np.int64))
    freq = np.sort(counts)[::-1][ranks - 1].astype(np.float64)
    x, y = np.log(ranks.astype(np.float64)), np.log(freq)
    xm, ym = x.mean(), y.mean()
    slope = float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())
    resid = y - (ym + slope * (x - xm))
    return -slope, float(math.sqrt((resid ** 2).mean()))


def batch_distinct(rows: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (batch, row) pairs of lookups, sorted by batch then row: (batch of each pair, row of each)."""
    if rows.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    span = int(rows.max()) + 1
    if (int(batch[-1]) + 1) * span < 2**62:  # one int64 key per lookup, one sort
        key, _ = sorted_counts(batch * span + rows)
        return key // span, key % span
    uniq, dense = np.unique(rows, return_inverse=True)
    key, _ = sorted_counts(batch * uniq.size + dense.reshape(-1))
    return key // uniq.size, uniq[key % uniq.size]


class Batcher:
    """Lookups of consecutive samples cut into batches of `size` samples; `on_batches(first, pair_batch,
    pair_row, n)` gets the distinct (batch, row) pairs of n whole batches from batch number `first` on. The
    samples after the last whole batch are given as one partial batch at the end only when no batch was whole."""

    def __init__(self, size: int, on_batches: Callable[[int, np.ndarray, np.ndarray, int], None]):
        self.size, self.on_batches = size, on_batches
        self.rows: list[np.ndarray] = []
        self.samples: list[np.ndarray] = []
        self.done = 0  # whole batches given
        self.partial_samples = 0

    def add(self, rows: np.ndarray, sample: np.ndarray, end_sample: int) -> None:
        """Lookups `rows` of samples `sample` (global sample numbers, in order); every sample before
        `end_sample` has been read."""
        self.rows.append(rows)
        self.samples.append(sample)
        whole = end_sample // self.size - self.done
        if whole > 0:
            self._flush(whole)

    def _flush(self, whole: int) -> None:
        rows, sample = np.concatenate(self.rows), np.concatenate(self.samples)
        cut = int(np.searchsorted(sample, (self.done + whole) * self.size, side="left"))
        pb, pr = batch_distinct(rows[:cut], sample[:cut] // self.size - self.done)
        self.on_batches(self.done, pb, pr, whole)
        self.done += whole
        self.rows, self.samples = [rows[cut:]], [sample[cut:]]

    def finish(self, total_samples: int) -> None:
        if self.done == 0 and total_samples > 0:
            self.partial_samples = total_samples
            rows, sample = np.concatenate(self.rows), np.concatenate(self.samples)
            pb, pr = batch_distinct(rows, np.zeros_like(sample))
            self.on_batches(0, pb, pr, 1)
        self.rows, self.samples = [], []
