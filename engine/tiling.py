"""Exact check that a table's shards tile it: every cell covered once, none twice, nothing outside.

Row, column and grid splits alike: the columns are cut at every shard edge, and within each column strip
the shards crossing it must follow each other from row 0 to the last row without gap or overlap.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

MAX_STRIP_PIECES = 1 << 22  # (shard, column strip) pairs one check may look at: 4M, about 0.2 s


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _strips(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut points of one axis and, per shard, the first and past-last strip it spans."""
    cuts = np.unique(np.concatenate([lo, hi]))
    return cuts, np.searchsorted(cuts, lo), np.searchsorted(cuts, hi)


def tiling_problem(offsets: np.ndarray, sizes: np.ndarray, rows: int, cols: int) -> Optional[str]:
    """None when the shards (offsets and sizes as (n, 2) arrays of row, column) tile rows x cols exactly,
    else a sentence naming the first shard or region at fault (shards numbered as in the plan). Empty
    shards cover nothing and are passed over (whether one may be empty is the sharding type's business)."""
    index = np.flatnonzero((sizes > 0).all(axis=1))
    offsets, sizes = offsets[index], sizes[index]
    r0, c0 = offsets[:, 0], offsets[:, 1]
    r1, c1 = r0 + sizes[:, 0], c0 + sizes[:, 1]
    out = (r1 > rows) | (c1 > cols)
    if out.any():
        i = _first(out)
        return f"shard {index[i]} ends at row {int(r1[i])}, column {int(c1[i])}, past the table's {rows}x{cols}"
    if not len(index):
        return "every shard is empty"
    cuts, j0, j1 = _strips(c0, c1)
    if cuts[0] > 0 or cuts[-1] < cols:
        lo, hi = (0, int(cuts[0])) if cuts[0] > 0 else (int(cuts[-1]), cols)
        return f"columns {lo}..{hi - 1} are not covered by any shard"
    span = j1 - j0
    if int(span.sum()) > MAX_STRIP_PIECES:
        return (f"the shards cut the table into more than {MAX_STRIP_PIECES:,} pieces; use one of TorchRec's "
                "row, column or table splits")
    shard = np.repeat(np.arange(len(r0)), span)
    strip = np.arange(len(shard)) - np.repeat(np.cumsum(span) - span, span) + np.repeat(j0, span)
    order = np.lexsort((r0[shard], strip))
    shard, strip = shard[order], strip[order]
    covered = np.zeros(len(cuts) - 1, dtype=bool)
    covered[strip] = True
    if not covered.all():
        j = _first(~covered)
        return f"columns {int(cuts[j])}..{int(cuts[j + 1]) - 1} are not covered by any shard"
    starts = np.ones(len(shard), dtype=bool)
    starts[1:] = strip[1:] != strip[:-1]
    prev_end = np.where(starts, 0, np.roll(r1[shard], 1))
    bad = r0[shard] != prev_end
    ends = np.ones(len(shard), dtype=bool)
    ends[:-1] = starts[1:]
    short = ends & (r1[shard] != rows)
    if bad.any() or short.any():
        k = _first(bad | short)
        where = f"columns {int(cuts[strip[k]])}..{int(cuts[strip[k] + 1]) - 1}"
        if short[k] and not bad[k]:
            return f"rows {int(r1[shard[k]])}..{rows - 1} of {where} are not covered by any shard"
        if r0[shard[k]] > prev_end[k]:
            return f"rows {int(prev_end[k])}..{int(r0[shard[k]]) - 1} of {where} are not covered by any shard"
        return f"shard {index[shard[k]]} overlaps shard {index[shard[k - 1]]} in {where}"
    return None
