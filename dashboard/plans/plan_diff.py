"""Two plans compared (pure): the renumbering of ranks that keeps the most bytes in place, the tables that
really move under it (and those that only sit on renumbered ranks), the bytes of weights and optimizer state
that would cross ranks to go from one plan to the other, and the headline and per-rank differences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

import engine

SAME, RENUMBERED, MOVES = "same ranks", "renumbered ranks only", "moves"
ONLY_BASE, ONLY_OTHER = "only in A", "only in B"
# A tie-break worth less than a quarter of a byte over all ranks: among the best renumberings, keep rank numbers.
IDENTITY_BONUS_BYTES = 0.25


# ---- one table's pieces -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Side:
    """One table as one plan places it: `key` (sharding type, kernel); pieces as rects (row0, row1, col0, col1)
    each on one rank, or `replicas` (data parallel: the whole table on each of these ranks)."""

    key: tuple[str, str]
    rects: tuple[tuple[int, int, int, int], ...] = ()
    ranks: tuple[int, ...] = ()
    replicas: Optional[np.ndarray] = None


def _side(tp: engine.TablePlan) -> _Side:
    key = (tp.sharding_type.value, tp.compute_kernel.value)
    if tp.shards is None:
        return _Side(key, replicas=np.unique(np.asarray(tp.ranks, dtype=np.int64)))
    pieces = sorted((s.offsets[0], s.offsets[0] + s.sizes[0], s.offsets[1], s.offsets[1] + s.sizes[1], int(s.rank))
                    for s in tp.shards if s.sizes[0] * s.sizes[1])
    return _Side(key, tuple(p[:4] for p in pieces), tuple(p[4] for p in pieces))


def _element_bytes(table: engine.TableConfig, topology: engine.Topology) -> float:
    """Bytes per element of a table's weights plus its optimizer state (the optimizer's state multiplier)."""
    return table.data_type.bytes * (1.0 + topology.optimizer.state_multiplier(int(table.embedding_dim)))


@dataclass
class _Overlap:
    """What rank a of plan A already holds of what rank b of plan B needs, for one table, in bytes. `singles`:
    (a, b, bytes) rows; `rep_a`: A's replicas on ranks R (each B piece (b, bytes) is kept iff b's A rank is in
    R); `rep_b`: B's replicas on R (each A piece (a, bytes) is kept on a's B rank iff it is in R); `rep_both`:
    (R_A, R_B, table bytes). `needed`: the bytes B places (every replica counted)."""

    needed: float
    singles: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None
    rep_a: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None
    rep_b: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None
    rep_both: Optional[tuple[np.ndarray, np.ndarray, float]] = None


def _rect_bytes(rects, per_element: float) -> np.ndarray:
    r = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    return (r[:, 1] - r[:, 0]) * (r[:, 3] - r[:, 2]) * per_element


def _grid(side: _Side, rb: np.ndarray, cb: np.ndarray) -> np.ndarray:
    owner = np.full((len(rb) - 1, len(cb) - 1), -1, dtype=np.int64)
    for (r0, r1, c0, c1), rank in zip(side.rects, side.ranks):
        owner[np.searchsorted(rb, r0):np.searchsorted(rb, r1), np.searchsorted(cb, c0):np.searchsorted(cb, c1)] = rank
    return owner


def _tiled(a: _Side, b: _Side, per_element: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a rank, b rank, bytes) of the cells where A's pieces and B's pieces meet."""
    if a.rects == b.rects:  # the same pieces (most tables): no grid needed
        return (np.asarray(a.ranks, dtype=np.int64), np.asarray(b.ranks, dtype=np.int64),
                _rect_bytes(a.rects, per_element))
    both = np.asarray(a.rects + b.rects, dtype=np.int64).reshape(-1, 4)
    rb, cb = np.unique(both[:, :2]), np.unique(both[:, 2:])
    ga, gb = _grid(a, rb, cb), _grid(b, rb, cb)
    cell = np.outer(np.diff(rb), np.diff(cb)).astype(np.float64) * per_element
    hit = (ga >= 0) & (gb >= 0)
    return ga[hit], gb[hit], cell[hit]


def _overlap(a: _Side, b: _Side, rows: int, dim: int, per_element: float) -> _Overlap:
    full = rows * dim * per_element
    if b.replicas is not None:
        needed = full * len(b.replicas)
        if a.replicas is not None:
            return _Overlap(needed, rep_both=(a.replicas, b.replicas, full))
        return _Overlap(needed, rep_b=(np.asarray(a.ranks, dtype=np.int64), b.replicas,
                                       _rect_bytes(a.rects, per_element)))
    sizes = _rect_bytes(b.rects, per_element)
    if a.replicas is not None:
        return _Overlap(float(sizes.sum()), rep_a=(a.replicas, np.asarray(b.ranks, dtype=np.int64), sizes))
    return _Overlap(float(sizes.sum()), singles=_tiled(a, b, per_element))


# ---- the best renumbering -----------------------------------------------------------------------


def _replicas(m: np.ndarray, every: np.ndarray, ranks: np.ndarray, pieces: np.ndarray, size: np.ndarray) -> None:
    """One side's replicas on `ranks` (m's rows) hold every piece the other side places on `pieces` (m's
    columns): on all ranks, that adds to `every` (the same for every row) instead."""
    per = np.bincount(pieces, size, minlength=m.shape[1])
    if len(ranks) == m.shape[0]:
        every += per
    else:
        m[ranks] += per


def _kept_matrix(overlaps: list[_Overlap], wa: int, wb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bytes kept in place if rank a of A became rank b of B: m[a, b] + row[a] + col[b] (row and col hold
    replicas on all ranks: they add the same to every renumbering that pairs every rank)."""
    m = np.zeros((wa, wb))
    row, col = np.zeros(wa), np.zeros(wb)
    singles = [o.singles for o in overlaps if o.singles is not None]
    if singles:
        np.add.at(m, (np.concatenate([s[0] for s in singles]), np.concatenate([s[1] for s in singles])),
                  np.concatenate([s[2] for s in singles]))
    for o in overlaps:
        if o.rep_a is not None:
            ranks, b, size = o.rep_a
            _replicas(m, col, ranks, b, size)
        elif o.rep_b is not None:
            a, ranks, size = o.rep_b
            _replicas(m.T, row, ranks, a, size)  # the transpose is a view: B's replicas as rows
        elif o.rep_both is not None:
            ra, rb, size = o.rep_both
            if len(ra) == wa and len(rb) == wb:
                continue  # the same for every renumbering
            if len(ra) == wa:
                col[rb] += size
            elif len(rb) == wb:
                row[ra] += size
            else:
                m[np.ix_(ra, rb)] += size
    return m, row, col


def _min_cost_matching(cost: np.ndarray) -> np.ndarray:
    """Exact assignment on a square cost matrix (shortest augmenting paths with potentials, the Hungarian method
    in O(n^3) at worst; each row's search is vectorised over the columns, and rows whose cheapest column is
    free, as in nearly equal plans, take one step). Returns the column of each row."""
    n = cost.shape[0]
    u, v = np.zeros(n + 1), np.zeros(n + 1)
    owner = np.zeros(n + 1, dtype=np.int64)  # owner[j]: the row (1-based) matched to column j; 0: none
    way = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        owner[0], j0 = i, 0
        minv = np.full(n + 1, np.inf)
        used = np.zeros(n + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            free = ~used
            free[0] = False
            cur = cost[i0 - 1] - u[i0] - v[1:]
            better = free[1:] & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            masked = np.where(free, minv, np.inf)
            j1 = int(np.argmin(masked))
            delta = masked[j1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[free] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    out = np.empty(n, dtype=np.int64)
    out[owner[1:] - 1] = np.arange(n)
    return out


def _assign(m: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """sigma[a] = the B rank that A's rank a becomes (-1: none), maximising the kept bytes exactly; among equal
    renumberings, rank numbers are kept."""
    wa, wb = m.shape
    n = max(wa, wb)
    kept = np.zeros((n, n))
    kept[:wa, :wb] = m + row[:, None] + col[None, :]
    kept[np.arange(n), np.arange(n)] += IDENTITY_BONUS_BYTES / n
    cols = _min_cost_matching(kept.max() - kept)
    return np.where(cols[:wa] < wb, cols[:wa], -1)


def _kept(o: _Overlap, sigma: np.ndarray, inverse: np.ndarray, wa: int, wb: int) -> float:
    if o.singles is not None:
        a, b, size = o.singles
        return float(size[sigma[a] == b].sum())
    if o.rep_a is not None:
        ranks, b, size = o.rep_a
        held = np.zeros(wa + 1, dtype=bool)
        held[ranks] = True  # held[-1] (no A rank) stays False
        return float(size[held[inverse[b]]].sum())
    held = np.zeros(wb + 1, dtype=bool)
    if o.rep_b is not None:
        a, ranks, size = o.rep_b
        held[ranks] = True
        return float(size[held[sigma[a]]].sum())
    ra, rb, size = o.rep_both
    held[rb] = True
    return float(size * held[sigma[ra]].sum())


def _status(a: _Side, b: _Side, sigma: np.ndarray) -> str:
    """SAME: the same pieces on the same ranks, which the renumbering keeps; RENUMBERED: the same pieces on the
    ranks the renumbering makes of A's; MOVES: anything else (under the renumbering, a table left on the same
    rank number has moved when that number now stands for another rank)."""
    if a.key != b.key:
        return MOVES
    if a.replicas is not None or b.replicas is not None:
        if a.replicas is None or b.replicas is None or len(a.replicas) != len(b.replicas):
            return MOVES
        if not np.array_equal(np.sort(sigma[a.replicas]), b.replicas):
            return MOVES
        return SAME if np.array_equal(a.replicas, b.replicas) else RENUMBERED
    if a.rects != b.rects or any(int(sigma[x]) != y for x, y in zip(a.ranks, b.ranks)):
        return MOVES
    return SAME if a.ranks == b.ranks else RENUMBERED


# ---- the result ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanDiff:
    """Plan B against plan A. `sigma[a]`: the B rank A's rank a is taken as (-1: none) in the best renumbering;
    `tables`: one row per table (status, placements, bytes to move); bytes are weights plus optimizer state."""

    sigma: np.ndarray
    tables: pd.DataFrame
    moved_bytes: float  # under the best renumbering
    moved_bytes_as_numbered: float  # rank a stays rank a
    total_bytes: float  # all B places (every replica counted)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def renumbered(self) -> bool:
        return bool((self.sigma[self.sigma >= 0] != np.flatnonzero(self.sigma >= 0)).any())

    def renumbering(self, limit: int = 6) -> str:
        """'A's rank 0 is B's rank 1, 1 is 0' (the first `limit` ranks that change), or ''."""
        pairs = [(a, int(b)) for a, b in enumerate(self.sigma) if b >= 0 and a != b]
        if not pairs:
            return ""
        text = ", ".join(f"{a} is {b}" for a, b in pairs[:limit])
        more = f" and {len(pairs) - limit} more" if len(pairs) > limit else ""
        return f"A's rank {text}{more}"


def _shape(name: str, tables_b: dict, tables_a: dict) -> engine.TableConfig:
    return tables_b.get(name) or tables_a[name]


def diff(plan_a: engine.Plan, config_a: engine.Config, plan_b: engine.Plan, config_b: engine.Config) -> PlanDiff:
    """What changes from plan A (on config_a) to plan B (on config_b)."""
    tables_a = {t.name: t for t in config_a.tables}
    tables_b = {t.name: t for t in config_b.tables}
    wa, wb = len(plan_a.ranks), len(plan_b.ranks)
    names, sides, overlaps, only = [], [], [], []
    for name, tp in plan_a.tables.items():
        other = plan_b.tables.get(name)
        if other is None:
            only.append((name, ONLY_BASE))
            continue
        t = _shape(name, tables_b, tables_a)
        rows, dim = int(t.num_embeddings), int(t.embedding_dim)
        a, b = _side(tp), _side(other)
        names.append(name)
        sides.append((a, b))
        overlaps.append(_overlap(a, b, rows, dim, _element_bytes(t, config_b.topology)))
    only += [(name, ONLY_OTHER) for name in plan_b.tables if name not in plan_a.tables]
    sigma = _assign(*_kept_matrix(overlaps, wa, wb))
    inverse = np.full(wb + 1, -1, dtype=np.int64)
    inverse[sigma[sigma >= 0]] = np.flatnonzero(sigma >= 0)
    identity = np.where(np.arange(wa) < wb, np.arange(wa), -1)
    inv_identity = np.where(np.arange(wb + 1) < min(wa, wb), np.arange(wb + 1), -1)
    needed = np.array([o.needed for o in overlaps])
    kept = np.array([_kept(o, sigma, inverse, wa, wb) for o in overlaps])
    kept_id = sum(_kept(o, identity, inv_identity, wa, wb) for o in overlaps)
    rows = [{"table": n, "change": _status(a, b, sigma), "in A": engine.placement_text(plan_a.tables[n]),
             "in B": engine.placement_text(plan_b.tables[n]), "bytes to move": max(float(nd - k), 0.0)}
            for n, (a, b), nd, k in zip(names, sides, needed, kept)]
    rows += [{"table": n, "change": s, "in A": engine.placement_text(plan_a.tables[n]) if s == ONLY_BASE else "",
              "in B": engine.placement_text(plan_b.tables[n]) if s == ONLY_OTHER else "", "bytes to move": 0.0}
             for n, s in only]
    frame = pd.DataFrame(rows, columns=["table", "change", "in A", "in B", "bytes to move"])
    counts = {s: int((frame["change"] == s).sum()) for s in (SAME, RENUMBERED, MOVES, ONLY_BASE, ONLY_OTHER)}
    total = float(needed.sum())
    return PlanDiff(sigma, frame, max(total - float(kept.sum()), 0.0), max(total - kept_id, 0.0), total, counts)


def moved_sentence(d: PlanDiff) -> str:
    """'3 tables move; 21 more only sit on renumbered ranks; 2 stay where they are.' (plain text)"""
    c = d.counts
    parts = [f"{c[MOVES]} table{'' if c[MOVES] == 1 else 's'} move{'s' if c[MOVES] == 1 else ''}"]
    if c[RENUMBERED]:
        parts.append(f"{c[RENUMBERED]} more only sit on renumbered ranks")
    parts.append(f"{c[SAME]} stay{'s' if c[SAME] == 1 else ''} where {'it is' if c[SAME] == 1 else 'they are'}")
    if c[ONLY_BASE] or c[ONLY_OTHER]:
        parts.append(f"{c[ONLY_BASE]} only in A, {c[ONLY_OTHER]} only in B")
    return "; ".join(parts) + "."


def bytes_sentence(d: PlanDiff) -> str:
    """How many bytes would cross ranks, under the best renumbering and as numbered (plain text)."""
    share = d.moved_bytes / d.total_bytes * 100 if d.total_bytes else 0.0
    text = (f"Going from A to B moves {engine.human_bytes(int(d.moved_bytes))} of weights and optimizer state between "
            f"ranks ({share:.1f}% of the {engine.human_bytes(int(d.total_bytes))} B places)")
    if d.renumbered:
        return (text + f", once the ranks are renumbered to keep the most in place ({d.renumbering()}); "
                f"{engine.human_bytes(int(d.moved_bytes_as_numbered))} with the ranks as numbered.")
    return text + "; no renumbering of the ranks keeps more in place."
