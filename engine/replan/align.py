"""Ranks are interchangeable within a host: a plan's freely placed shards (table_wise, column_wise,
table_column_wise) may trade ranks wholesale, rank a's shards all going to rank pi(a), and every rank's load and
memory go with them. Of those relabellings, the one that leaves the most bytes where an earlier plan held them
(an assignment problem per host, solved exactly) turns a plan from scratch into one that moves less, at the
same slowest rank. Row-split tables (row_wise, table_row_wise, grid_shard: shard i on the i-th rank of their
scope) and data-parallel ones stay as they are; the caller checks that the relabelled plan still fits and is no
slower (ranks of one host may still differ in memory, a table may be pinned).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from engine.placement import FREE_PLACEMENT
from engine.replan.moves import OldTable, bytes_per_element, old_pieces
from engine.types import Config, Shard, TablePlan


def kept_matrix(cfg: Config, old: dict[str, OldTable], tables: dict[str, TablePlan]) -> np.ndarray:
    """[a, b]: bytes of the freely placed shards `tables` puts on rank a that the earlier plan held on rank b."""
    w = cfg.topology.world_size
    out = np.zeros((w, w))
    for name, tp in tables.items():
        o = old.get(name)
        if o is None or tp.shards is None or tp.sharding_type not in FREE_PLACEMENT:
            continue
        t = cfg.table(name)
        prev = old_pieces(o, t.num_embeddings, t.embedding_dim)
        prev = prev[prev[:, 0] < w]
        per = bytes_per_element(cfg, name) / (len(o.ranks) if o.shards is None else 1)  # replicas: one copy's worth
        for s in tp.shards:
            r0, c0, r1, c1 = s.offsets[0], s.offsets[1], s.offsets[0] + s.sizes[0], s.offsets[1] + s.sizes[1]
            rows = np.clip(np.minimum(r1, prev[:, 2]) - np.maximum(r0, prev[:, 1]), 0, None)
            cols = np.clip(np.minimum(c1, prev[:, 4]) - np.maximum(c0, prev[:, 3]), 0, None)
            np.add.at(out[s.rank], prev[:, 0], (rows * cols).astype(np.float64) * per)
    return out


def max_assignment(gain: np.ndarray) -> np.ndarray:
    """The permutation p maximising sum(gain[i, p[i]]) (Hungarian method, O(n^3); ties to the lower index)."""
    n = gain.shape[0]
    cost = gain.max() - gain if n else gain
    u, v = np.zeros(n + 1), np.zeros(n + 1)
    match = np.zeros(n + 1, dtype=np.int64)  # match[j]: the row given column j (1-based; 0: none)
    for i in range(1, n + 1):
        match[0], j0 = i, 0
        minv = np.full(n + 1, np.inf)
        used = np.zeros(n + 1, dtype=bool)
        way = np.zeros(n + 1, dtype=np.int64)
        while match[j0]:
            used[j0] = True
            i0 = match[j0]
            cur = cost[i0 - 1] - u[i0] - v[1:]
            free = ~used[1:]
            better = free & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            cand = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(cand)) + 1
            delta = cand[j1 - 1]
            u[match[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
        while j0:
            j1 = int(way[j0])
            match[j0] = match[j1]
            j0 = j1
    p = np.zeros(n, dtype=np.int64)
    for j in range(1, n + 1):
        p[match[j] - 1] = j - 1
    return p


def relabel(cfg: Config, old: dict[str, OldTable], tables: dict[str, TablePlan]) -> dict[str, TablePlan]:
    """`tables` with its freely placed shards moved rank for rank within each host so that the most bytes stay
    where the earlier plan held them (see the module's docstring); `tables` itself when no relabelling keeps more."""
    w, local = cfg.topology.world_size, cfg.topology.local_world_size
    gain = kept_matrix(cfg, old, tables)
    perm = np.arange(w)
    for h0 in range(0, w, local):
        block = slice(h0, min(h0 + local, w))
        perm[block] = h0 + max_assignment(gain[block, block])
    if float(gain[np.arange(w), perm].sum()) <= float(np.trace(gain)):
        return tables
    out = {}
    for name, tp in tables.items():
        if tp.shards is None or tp.sharding_type not in FREE_PLACEMENT:
            out[name] = tp
            continue
        shards = tuple(Shard(s.offsets, s.sizes, int(perm[s.rank])) for s in tp.shards)
        out[name] = replace(tp, ranks=tuple(s.rank for s in shards), shards=shards)
    return out
