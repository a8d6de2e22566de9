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


def grid_problem(offsets: np.ndarray, sizes: np.ndarray, ranks: np.ndarray, rows: int, local_world_size: int,
                 row_sizes: np.ndarray) -> Optional[str]:
    """None when grid_shard's shards are laid out as TorchRec's grid sharding runs them (grid_sharding.py): column
    pieces of one width, in column order, each cut into the host's `local_world_size` row shards `row_sizes`
    (TorchRec's row split) placed on one host's ranks in rank order; else a sentence naming the first shard at
    fault (shards numbered as in the plan)."""
    n, lw = len(sizes), local_world_size
    if n % lw:
        return f"grid_shard cuts each column piece into the {lw} ranks of a host: {n} shards is not a multiple of {lw}"
    width = int(sizes[0, 1])
    starts = np.concatenate([[0], np.cumsum(row_sizes)[:-1]])
    for j in range(n // lw):
        at = slice(j * lw, (j + 1) * lw)
        want = np.stack([starts, np.full(lw, j * width)], 1), np.stack([row_sizes, np.full(lw, width)], 1)
        bad = np.flatnonzero((offsets[at] != want[0]).any(axis=1) | (sizes[at] != want[1]).any(axis=1))
        if len(bad):
            i = j * lw + int(bad[0])
            return (f"shard {i} is at {offsets[i].tolist()} with sizes {sizes[i].tolist()}; grid_shard's column piece "
                    f"{j} ({width} columns from column {j * width}) has rows {row_sizes.tolist()} of the table's "
                    f"{rows}, in that order (TorchRec's row split over a host's {lw} ranks)")
        host = int(ranks[j * lw]) // lw
        if (ranks[at] != host * lw + np.arange(lw)).any():
            return (f"shards {j * lw}..{j * lw + lw - 1} (column piece {j}) are on ranks {ranks[at].tolist()}; "
                    f"grid_shard puts a piece on one host's ranks in order, e.g. {host * lw}..{host * lw + lw - 1}")
    return None
