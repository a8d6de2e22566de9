"""Placing shards on ranks: greedy (longest first onto the least-loaded rank that has memory), then a
local search that moves, swaps and re-shards what sits on the slowest rank while it gets faster.

Objective: the slowest rank's summed shard cost (what TorchRec's partitioner minimises), ties broken by
the spread of the loads. No rank ever exceeds its usable HBM or DDR.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from engine.enumerate import Option
from engine.types import ShardingType, Topology

EPS = 1e-9
FREE_PLACEMENT = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)


class Placement:
    """Per-rank load and memory while options are placed, removed and moved."""

    def __init__(self, topo: Topology, balance_memory: bool = False):
        w = topo.world_size
        self.topo = topo
        self.balance_memory = balance_memory  # place by free memory first, load second (tight configs)
        self.load = np.zeros(w)
        self.hbm = np.zeros(w)
        self.ddr = np.zeros(w)
        self.hbm_cap = float(topo.usable_hbm_bytes)
        self.ddr_cap = float(topo.usable_ddr_bytes)
        self.choice: dict[int, Option] = {}
        self.ranks: dict[int, np.ndarray] = {}

    # -- bookkeeping --------------------------------------------------------------------------
    def _apply(self, opt: Option, ranks: np.ndarray, sign: float) -> None:
        np.add.at(self.load, ranks, sign * opt.cost_ms)
        np.add.at(self.hbm, ranks, sign * opt.est.hbm_bytes)
        np.add.at(self.ddr, ranks, sign * opt.est.ddr_bytes)

    def add(self, opt: Option, ranks: np.ndarray) -> None:
        self._apply(opt, ranks, 1.0)
        self.choice[opt.table] = opt
        self.ranks[opt.table] = ranks

    def remove(self, table: int) -> tuple[Option, np.ndarray]:
        opt, ranks = self.choice.pop(table), self.ranks.pop(table)
        self._apply(opt, ranks, -1.0)
        return opt, ranks

    def fits(self, opt: Option, ranks: np.ndarray) -> bool:
        hbm, ddr = self.hbm.copy(), self.ddr.copy()
        np.add.at(hbm, ranks, opt.est.hbm_bytes)
        np.add.at(ddr, ranks, opt.est.ddr_bytes)
        return bool((hbm[ranks] <= self.hbm_cap).all() and (ddr[ranks] <= self.ddr_cap).all())

    # -- where an option's shards can go ----------------------------------------------------------
    def find_ranks(self, opt: Option) -> Optional[np.ndarray]:
        w, lw = self.topo.world_size, self.topo.local_world_size
        st = opt.sharding_type
        if st in (ShardingType.DATA_PARALLEL, ShardingType.ROW_WISE):
            ranks = np.arange(w)
            return ranks if self.fits(opt, ranks) else None
        if st is ShardingType.TABLE_ROW_WISE:
            best, best_peak = None, np.inf
            for host in range(self.topo.num_hosts):
                ranks = np.arange(host * lw, (host + 1) * lw)
                peak = float((self.load[ranks] + opt.cost_ms).max())
                if peak < best_peak - EPS and self.fits(opt, ranks):
                    best, best_peak = ranks, peak
            return best
        return self._free_ranks(opt)

    def _free_ranks(self, opt: Option) -> Optional[np.ndarray]:
        load, hbm, ddr = self.load.copy(), self.hbm.copy(), self.ddr.copy()
        used = np.zeros(len(load), dtype=bool)
        out = np.empty(opt.num_shards, dtype=np.int64)
        cost, h, d = opt.cost_ms, opt.est.hbm_bytes, opt.est.ddr_bytes
        for j in range(opt.num_shards):
            ok = (hbm + h[j] <= self.hbm_cap) & (ddr + d[j] <= self.ddr_cap)
            if not ok.any():
                return None
            pick = np.flatnonzero(ok & ~used if (ok & ~used).any() else ok)
            if self.balance_memory:
                fill = np.maximum(self._share(hbm[pick] + h[j], self.hbm_cap), self._share(ddr[pick] + d[j], self.ddr_cap))
                r = int(pick[np.lexsort((load[pick], fill))[0]])
            else:
                r = int(pick[np.argmin(load[pick])])
            out[j] = r
            used[r] = True
            load[r] += cost[j]
            hbm[r] += h[j]
            ddr[r] += d[j]
        return out

    @staticmethod
    def _share(used: np.ndarray, cap: float) -> np.ndarray:
        return used / cap if cap else np.where(used > 0, np.inf, 0.0)

    def fill(self) -> np.ndarray:
        """Per rank, the fuller of HBM and DDR as a share of the usable bytes."""
        return np.maximum(self._share(self.hbm, self.hbm_cap), self._share(self.ddr, self.ddr_cap))

    # -- objective --------------------------------------------------------------------------------
    def score(self) -> tuple[float, float]:
        return float(self.load.max()), float(np.square(self.load).sum())


def better(new: tuple[float, float], old: tuple[float, float]) -> bool:
    if new[0] < old[0] * (1 - 1e-9) - EPS:
        return True
    return new[0] <= old[0] * (1 + 1e-12) + EPS and new[1] < old[1] * (1 - 1e-9) - EPS


# ---- local search ---------------------------------------------------------------------------------


def _free_shards(pl: Placement) -> tuple[np.ndarray, ...]:
    """Every shard that may go to any rank: arrays of table, shard index, rank, cost, hbm, ddr."""
    t, j, r, c, h, d = [], [], [], [], [], []
    for table, opt in pl.choice.items():
        if opt.sharding_type in FREE_PLACEMENT:
            k = opt.num_shards
            t.append(np.full(k, table))
            j.append(np.arange(k))
            r.append(pl.ranks[table])
            c.append(opt.cost_ms)
            h.append(opt.est.hbm_bytes)
            d.append(opt.est.ddr_bytes)
    if not t:
        return tuple(np.empty(0) for _ in range(6))
    return tuple(np.concatenate(x) for x in (t, j, r, c, h, d))


def _move_shard(pl: Placement, table: int, shard: int, dst: int) -> None:
    opt, ranks = pl.remove(table)
    ranks = ranks.copy()
    ranks[shard] = dst
    pl.add(opt, ranks)


def move_or_swap(pl: Placement) -> bool:
    """Move one shard off the slowest rank, or swap it for a cheaper one, if the slowest rank gets faster
    and no rank ends up as slow as it was."""
    t, j, r, c, h, d = _free_shards(pl)
    if not len(t):
        return False
    b = int(np.argmax(pl.load))
    peak = pl.load[b]
    on_b = np.flatnonzero(r == b)
    best, best_val = None, peak - EPS
    for a in on_b:
        # move: a to the least-loaded rank with room
        ok = (pl.hbm + h[a] <= pl.hbm_cap) & (pl.ddr + d[a] <= pl.ddr_cap)
        ok[b] = False
        if ok.any():
            dst = int(np.flatnonzero(ok)[np.argmin(pl.load[ok])])
            val = max(peak - c[a], pl.load[dst] + c[a])
            if val < best_val:
                best, best_val = ("move", a, dst), val
        # swap: a against a cheaper shard x on another rank
        others = (r != b) & (c < c[a])
        if not others.any():
            continue
        x = np.flatnonzero(others)
        delta = c[a] - c[x]
        rx = r[x].astype(np.int64)
        val = np.maximum(peak - delta, pl.load[rx] + delta)
        mem_ok = (
            (pl.hbm[rx] - h[x] + h[a] <= pl.hbm_cap) & (pl.ddr[rx] - d[x] + d[a] <= pl.ddr_cap)
            & (pl.hbm[b] - h[a] + h[x] <= pl.hbm_cap) & (pl.ddr[b] - d[a] + d[x] <= pl.ddr_cap)
        )
        val = np.where(mem_ok, val, np.inf)
        i = int(np.argmin(val))
        if val[i] < best_val:
            best, best_val = ("swap", a, int(x[i])), float(val[i])
    if best is None:
        return False
    kind, a, other = best
    if kind == "move":
        _move_shard(pl, int(t[a]), int(j[a]), other)
    else:
        ra = int(r[other])
        _move_shard(pl, int(t[a]), int(j[a]), ra)
        _move_shard(pl, int(t[other]), int(j[other]), b)
    return True


def reshard(pl: Placement, options: list[list[Option]], top: int = 4) -> bool:
    """Give one of the tables that load the slowest rank most another option (another sharding type,
    kernel or column width) if the plan gets faster."""
    b = int(np.argmax(pl.load))
    before = pl.score()
    on_b = []
    for table, ranks in pl.ranks.items():
        mask = ranks == b
        if mask.any():
            on_b.append((float(pl.choice[table].cost_ms[mask].sum()), table))
    on_b.sort(reverse=True)
    for cost_on_b, table in on_b[:top]:
        current = pl.choice[table]
        for alt in options[table]:
            if alt is current or alt.max_shard_cost_ms >= cost_on_b - EPS:
                continue
            old_opt, old_ranks = pl.remove(table)
            ranks = pl.find_ranks(alt)
            if ranks is not None:
                pl.add(alt, ranks)
                if better(pl.score(), before):
                    return True
                pl.remove(table)
            pl.add(old_opt, old_ranks)
    return False


def improve(pl: Placement, options: list[list[Option]], deadline: float, max_iters: int = 5000) -> int:
    """Local search until nothing helps, the iteration cap, or the deadline. Returns steps taken."""
    steps = 0
    while steps < max_iters and time.perf_counter() < deadline:
        if not (move_or_swap(pl) or reshard(pl, options)):
            break
        steps += 1
    return steps
