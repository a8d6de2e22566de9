"""The exact LRU replay: misses at a few cache sizes over a table's lookups, streamed in chunks, all numpy.

A lookup of row x at position i whose previous lookup of x was at p has LRU stack distance
d = (distinct rows looked up strictly between p and i) = (i - p - 1) - #{j < i : prev[j] > p}, because a lookup j
between p and i repeats a row of that window exactly when its own previous lookup lies after p. An LRU cache of
C rows hits the lookup exactly when d < C, so the misses at every size come from one count per lookup: how many
sizes its distance reaches (its bucket), never d itself.

Lookups are replayed in chunks of CHUNK_LOOKUPS as they are read; all that is kept between chunks is the LRU stack
(each distinct row seen, oldest last lookup first), each row's place in it, and the lookups per bucket. A chunk is
replayed as the trace "the stack, oldest row first, then the chunk": that trace leaves an LRU cache in the same
state as the whole past did, so its distances are the full replay's. Memory: the chunk's arrays (about 100 bytes
per lookup at the peak), a byte per distance up to the largest cache size (the bucket table), and 20 bytes per
distinct row, or 4 per distinct row and 4 per row of the table when a row's place is kept in an array indexed by
row (read without a search; see ExactReplay), whatever the number of lookups.

The counts #{j < i : prev[j] > p} are taken over the bits of prev, highest first (a wavelet matrix: one stable
partition of the values per bit). After the top bits, a lookup's count is known up to the earlier lookups whose
prev shares those bits; as soon as both ends of that range give the same bucket, the lookup is settled and leaves,
and values that no unsettled lookup still needs are dropped. Sizes are log-spaced, so most lookups settle within a
few bits, and the exact count is finished only for the few whose distance lies next to a cache size.
"""

from __future__ import annotations

import queue
import threading

from typing import Callable

import numpy as np

CHUNK_LOOKUPS = 1 << 20  # lookups replayed at once (2^21 took more memory and more time: bench/results/stats.md)
DENSE_ROWS = 1 << 25  # tables up to this many rows keep each row's place in an array indexed by row (4 bytes a row)
DENSE_PER_LOOKUP = 16  # ... when the table has at most this many rows per lookup of the first chunk (or 2^16 rows)
COMPACT_SHARE = 8  # the values are cut to the unsettled lookups' groups once those are under 1/8 of them


def _sorted_positions(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions in row order, stable; the rows in that order): one sort of row * 2**b + position where it fits
    in int64 (several times faster than a stable argsort), else the stable argsort."""
    k = rows.size
    shift = max(1, (k - 1).bit_length())
    if int(rows.max()) < 1 << (62 - shift):
        key = (rows << shift) | np.arange(k, dtype=np.int64)
        key.sort()
        return key & ((1 << shift) - 1), key >> shift
    order = np.argsort(rows, kind="stable")
    return order, rows[order]


def bucket_table(sizes: np.ndarray, limit: int) -> np.ndarray:
    """table[min(d, len - 1)] = how many sizes are at or below d, for every 0 <= d <= limit (a gather instead of a
    search per lookup)."""
    top = max(0, min(int(sizes[-1]), limit)) if sizes.size else 0
    dt = np.uint8 if sizes.size < 2**8 else np.uint16 if sizes.size < 2**16 else np.int64
    edges = np.clip(sizes, 0, top + 1)
    return np.repeat(np.arange(sizes.size + 1, dtype=dt), np.diff(np.concatenate(([0], edges, [top + 1]))))


def bucket_counts(values: np.ndarray, window: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Lookups per bucket (up to the table's last): out[j] counts the k whose distance
    d_k = window[k] - #{i < k : values[i] > values[k]} has table[min(d_k, len - 1)] == j (distinct non-negative
    values; table from bucket_table, for d up to the largest window). See the module's docstring for the pruning."""
    top = table.size - 1
    out = np.zeros(int(table[-1]) + 1, np.int64)
    n = values.size
    if n == 0:
        return out
    dt = np.int32 if max(int(values.max()), int(window.max()), n) < 2**31 else np.int64
    vals = values.astype(dt)  # the values, stably partitioned by the bits done so far
    v, u = vals.copy(), window.astype(dt)  # per unsettled lookup: its value, and its window less the count so far
    s, e = np.zeros(n, dt), np.arange(n, dtype=dt)  # the values before it sharing its bits done: vals[s:e]
    for bit in range(int(vals.max()).bit_length() - 1, -2, -1):
        hi = table[np.minimum(u, top)]  # its bucket if none of vals[s:e] exceeds it; if all do, this one's:
        done = hi == table[np.clip(u - (e - s), 0, top)]
        if bit < 0 or done.all():
            out += np.bincount(hi[done], minlength=out.size)
            break
        if done.any():
            out += np.bincount(hi[done], minlength=out.size)
            left = ~done
            v, u, s, e = v[left], u[left], s[left], e[left]
        b = ((vals >> bit) & 1).astype(np.uint8)
        ones = np.zeros(vals.size + 1, dt)
        np.cumsum(b, out=ones[1:])
        zeros = vals.size - ones[-1]
        os, oe = ones[s], ones[e]
        zero = ((v >> bit) & 1) == 0
        u -= np.where(zero, oe - os, 0)
        s = np.where(zero, s - os, zeros + os)
        e = np.where(zero, e - oe, zeros + oe)
        vals = vals[np.argsort(b, kind="stable")]  # a radix sort of one byte: the stable partition by the bit
        if v.size * COMPACT_SHARE < vals.size:  # keep only the groups (bits done) an unsettled lookup is in
            need = np.zeros((int(vals.max()) >> bit) + 1, dtype=bool)
            need[v >> bit] = True
            keep = need[vals >> bit]
            before = np.zeros(vals.size + 1, dt)
            np.cumsum(keep, out=before[1:])
            s, e, vals = before[s], before[e], vals[keep]
    return out


class Background:
    """One thread that runs jobs in the order given, at most one waiting while one runs (submit blocks meanwhile):
    the exact replays of every table of a sample share it, so one chunk's replay at a time overlaps the reading and
    counting of the next ones (numpy lets go of the interpreter in its loops), and memory holds two chunks at most.
    `wait` runs what was given to its end and raises what a job raised."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, job: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="lru-replay", daemon=True)
            self._thread.start()
        self._queue.put(job)

    def wait(self, raise_error: bool = True) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None and raise_error:
            raise error

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            if self._error is None:
                try:
                    job()
                except BaseException as e:  # noqa: BLE001 - raised again by wait(), in the caller's thread
                    self._error = e


class ExactReplay:
    """Exact LRU misses at each of `sizes` (cache rows, sorted) over lookups added in order, replayed in chunks of
    `chunk` (see the module's docstring); the same lookups give the same counts whatever the chunk. `num_rows`:
    the rows are below it (a table's num_embeddings), so a row's place may be kept by row: up to DENSE_ROWS rows,
    and at most DENSE_PER_LOOKUP per lookup of the first chunk replayed (a small sample of a large table is not
    charged the table's size).
    `background`: the chunks are replayed there (Background), behind `add`; `misses` waits for them, and after
    `close` the ones still queued are dropped. Distinct rows: fewer than 2**31."""

    def __init__(self, sizes: list[int], chunk: int = CHUNK_LOOKUPS, num_rows: int | None = None,
                 background: Background | None = None):
        self.sizes = np.asarray(sizes, np.int64)
        self.chunk = chunk
        self.table = bucket_table(self.sizes, 0)
        self.far = np.zeros(self.sizes.size + 1, np.int64)  # repeat lookups by how many sizes their distance reaches
        self.first = 0  # first lookups of a row: a miss at every size
        self.replayed = 0
        self.stack = np.zeros(0, np.int32)  # the rows' ids, oldest last lookup first: the LRU stack
        self.num_rows = num_rows
        self.dense: bool | None = None  # decided by the first chunk replayed
        self.place = np.zeros(0, np.int32)  # by id: its place in the stack, or -1
        self.keys = np.zeros(0, np.int64)  # not dense: every row seen, sorted, and its id (ids 0, 1, ...)
        self.key_ids = np.zeros(0, np.int32)
        self.pending: list[np.ndarray] = []
        self.pending_n = 0
        self.background = background
        self.closed = False

    def add(self, rows: np.ndarray) -> None:
        self.pending.append(np.asarray(rows, np.int64))
        self.pending_n += rows.size
        if self.pending_n >= self.chunk:
            rows = np.concatenate(self.pending)
            cut = rows.size - rows.size % self.chunk
            for at in range(0, cut, self.chunk):
                self._hand(rows[at: at + self.chunk])
            self.pending, self.pending_n = [rows[cut:]], rows.size - cut

    def misses(self) -> list[int]:
        """Misses at each size over every lookup added."""
        if self.background is not None:
            self.background.wait()
        if self.pending_n:
            self._replay(np.concatenate(self.pending))
            self.pending, self.pending_n = [], 0
        reach = np.cumsum(self.far[::-1])[::-1]  # reach[j]: distances >= sizes[j - 1]
        return [self.first + int(reach[j + 1]) for j in range(self.sizes.size)]

    def curve(self) -> list[dict]:
        """[{cache_rows, lru_miss_rate}] at each size, over every lookup added."""
        misses = self.misses()
        n = self.replayed
        return [{"cache_rows": int(c), "lru_miss_rate": min(1.0, m / n) if n else 0.0}
                for c, m in zip(self.sizes, misses)]

    def close(self) -> None:
        """Drop the chunks still waiting in the background: this replay gives no figures after it."""
        self.closed = True

    def _hand(self, rows: np.ndarray) -> None:
        if self.background is None:
            self._replay(rows)
        else:
            self.background.submit(lambda: None if self.closed else self._replay(rows))

    def _ids(self, rows: np.ndarray) -> np.ndarray:
        """Each row's id (sorted distinct rows in): the row itself when dense, else a number given at first sight."""
        if self.dense:
            return rows
        at = np.searchsorted(self.keys, rows)
        found = at < self.keys.size
        found[found] = self.keys[at[found]] == rows[found]
        ids = np.empty(rows.size, np.int64)
        ids[found] = self.key_ids[at[found]]
        new = ~found
        ids[new] = self.place.size + np.arange(int(new.sum()))
        self.keys = np.insert(self.keys, at[new], rows[new])
        self.key_ids = np.insert(self.key_ids, at[new], ids[new].astype(np.int32))
        self.place = np.concatenate((self.place, np.full(int(new.sum()), -1, np.int32)))
        return ids

    def _replay(self, rows: np.ndarray) -> None:
        k, m = rows.size, self.stack.size
        if k == 0:
            return
        if self.dense is None:
            n = self.num_rows
            self.dense = n is not None and n <= DENSE_ROWS and (n <= DENSE_PER_LOOKUP * k or n <= 1 << 16)
            if self.dense:
                self.place = np.full(n, -1, np.int32)
        it = np.int32 if m + k < 2**31 else np.int64  # places in the virtual trace below
        order, ordered = _sorted_positions(rows)
        order = order.astype(it)
        head = np.ones(k, dtype=bool)  # a row's first lookup in the chunk, in row order
        head[1:] = ordered[1:] != ordered[:-1]
        lasts = order[np.append(head[1:], True)]  # its last lookup
        ids = self._ids(ordered[head])
        del ordered
        depth = self.place[ids]  # each row's place in the stack before the chunk (-1: first seen now)
        seen = depth >= 0
        # the virtual trace: the stack (positions 0..m-1), then the chunk (m + i); prev there of each lookup
        prev = np.full(k, -1, it)
        again = ~head[1:]
        prev[order[1:][again]] = m + order[:-1][again]
        prev[order[head][seen]] = depth[seen]
        del order, again, head
        hit = np.flatnonzero(prev >= 0).astype(it)
        p = prev[hit]
        del prev
        if self.sizes.size and self.table.size - 1 < min(int(self.sizes[-1]), m + k):
            self.table = bucket_table(self.sizes, 2 * (m + k))
        hit += m - 1
        hit -= p  # the window: lookups strictly between the previous lookup and this one
        reach = bucket_counts(p, hit, self.table)
        self.far[: reach.size] += reach
        del hit, p
        self.first += int(seen.size - seen.sum())
        # the new stack: the rows the chunk left alone, in their order, then the chunk's rows by their last lookup
        keep = np.ones(m, dtype=bool)
        keep[depth[seen]] = False
        by_last = np.full(k, -1, np.int32)
        by_last[lasts] = ids
        self.stack = np.concatenate((self.stack[keep], by_last[by_last >= 0]))
        moved = int(depth[seen].min()) if seen.any() else m  # places below it are unchanged
        self.place[self.stack[moved:]] = np.arange(moved, self.stack.size, dtype=np.int32)
        self.replayed += k
