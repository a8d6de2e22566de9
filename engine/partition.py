"""Placing shards on ranks: greedy (longest first onto the least-loaded rank that has memory), then a
local search that moves, swaps and re-shards what sits on the slowest rank while it gets faster (making
room by demoting another table to a DDR-backed kernel where needed), then ruin and recreate around it.

Objective: the slowest rank's cost (what TorchRec's partitioner minimises), ties broken by the spread of the
loads. A rank's cost is its shards' summed cost plus, on CPU, the price of its touched working set beyond the cache
(engine.estimate.rank_workset_ms), which does not add up shard by shard: crowding large tables on one rank costs
more than the sum of their costs alone. No rank ever exceeds its usable HBM or DDR.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine import constants as C
from engine.config import allowed_ranks
from engine.enumerate import Option
from engine.estimate import rank_workset_ms
from engine.types import Config, ShardingType, Topology
from engine.terms import terms_of

EPS = 1e-9
FREE_PLACEMENT = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)


@dataclass(frozen=True)
class PlacementRules:
    """The config's placement rules by table index: the ranks a pin allows, the co-located groups (symmetric and
    transitive: every member holds exactly the same ranks), the tables kept apart (symmetric). Tables with a rule
    are `fixed`: placed by the greedy pass within their rules and left where they are by the local search."""

    mask: dict[int, np.ndarray]  # table -> allowed ranks (bool per rank; a group's members share one array)
    group: dict[int, int]  # table -> its co-located group (the group's smallest table index)
    members: dict[int, tuple[int, ...]]  # group -> its tables, ascending
    apart: dict[int, tuple[int, ...]]
    fixed: frozenset[int]

    @staticmethod
    def of(cfg: Config) -> PlacementRules | None:
        if not any(c.places for c in cfg.constraints.values()):
            return None
        index = {t.name: i for i, t in enumerate(cfg.tables)}
        w = cfg.topology.world_size
        mask, parent, apart = {}, {}, {}
        for name, c in cfg.constraints.items():
            if not c.places:
                continue
            i = index[name]
            ranks = allowed_ranks(c, cfg.topology)
            if ranks is not None:
                m = np.zeros(w, dtype=bool)
                m[sorted(ranks)] = True
                mask[i] = m
            for other in c.colocate or ():
                a, b = _root(parent, i), _root(parent, index[other])
                parent[max(a, b)] = parent[a] = parent[b] = min(a, b)
            for other in c.apart or ():
                j = index[other]
                apart.setdefault(i, set()).add(j)
                apart.setdefault(j, set()).add(i)
        group = {t: _root(parent, t) for t in sorted(parent)}
        members: dict[int, list[int]] = {}
        for t, g in group.items():
            members.setdefault(g, []).append(t)
        for g, ts in members.items():  # a group's pins bind every member
            pins = [mask[t] for t in ts if t in mask]
            if pins:
                both = np.logical_and.reduce(pins)
                mask.update((t, both) for t in ts)
        fixed = frozenset(mask) | frozenset(group) | frozenset(apart)
        return PlacementRules(mask, group, {g: tuple(ts) for g, ts in members.items()},
                              {i: tuple(sorted(v)) for i, v in apart.items()}, fixed)

    def allowed(self, pl: Placement, table: int) -> np.ndarray | None:
        """The ranks `table` may use now: its pins, within the ranks its placed co-located tables hold, none of
        the ranks of its placed apart tables. None: any rank."""
        if table not in self.fixed:
            return None
        out = self.mask.get(table)
        out = np.ones(pl.topo.world_size, dtype=bool) if out is None else out.copy()
        need = pl.group_ranks(table)
        if need is not None:
            out &= need
        for k in self.apart.get(table, ()):
            if k in pl.ranks:
                out[pl.ranks[k]] = False
        return out


def _root(parent: dict[int, int], x: int) -> int:
    """x's co-located group in the union-find `parent`, shortening the path it walked (near-constant time)."""
    root = x
    while parent.get(root, root) != root:
        root = parent[root]
    while x != root:
        parent[x], x = root, parent[x]
    return root


@dataclass
class Work:
    """The search's budget, counted in work done, never in time: one unit is one evaluation of a table's
    place on the ranks (a greedy placement, a re-shard tried, a reinsertion), or of one shard's moves and swaps,
    weighted by the number of ranks it scans (1 + world_size / 256). So the same config and settings always
    search the same way and give the same plan, on a quiet machine or a busy one.

    deadline (perf_counter seconds) is only a safety stop against a runaway search, read where the search checks
    its work (never inside a greedy placement or a step): when it finds the deadline passed, `cut` says so,
    `cut_s` when (seconds after `start`) and `step_s` how long the work since the clock's previous read took; the
    plan's notes tell the user, in those figures, that this plan depended on the machine's speed."""

    budget: float = float("inf")
    world_size: int = 1
    deadline: float = float("inf")
    start: float | None = None  # perf_counter seconds when planning began (default: when the Work is made)
    used: float = 0.0
    cut: bool = False
    cut_s: float = 0.0
    step_s: float = 0.0
    unit: float = field(init=False, default=1.0)
    _read: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.unit = 1.0 + self.world_size / 256
        self.start = time.perf_counter() if self.start is None else self.start
        self._read = self.start

    def spend(self, evaluations: int = 1) -> None:
        self.used += evaluations * self.unit

    def left(self) -> float:
        return self.budget - self.used

    def done(self, limit: float | None = None) -> bool:
        """Whether the budget (or `limit`, a lower mark on `used`) is spent, or the safety stop fired."""
        if self.used >= (self.budget if limit is None else min(limit, self.budget)):
            return True
        if not self.cut and self.deadline < float("inf"):
            now = time.perf_counter()
            if now > self.deadline:
                self.cut, self.cut_s, self.step_s = True, now - self.start, now - self._read
            self._read = now
        return self.cut


class Placement:
    """Per-rank load and memory while options are placed, removed and moved. `load` is each rank's cost: `base` (its
    shards' summed cost) plus the working-set term of `ws` (its touched bytes) where the topology prices one."""

    def __init__(self, topo: Topology, balance_memory: bool = False, rules: PlacementRules | None = None):
        w = topo.world_size
        self.topo = topo
        self.rules = rules  # placement rules (pins, co-location, apart); None: none
        self.balance_memory = balance_memory  # place by free memory first, load second (tight configs)
        self.priced_ws = bool(rank_workset_ms(np.array([2.0 * C.CPU_WORKSET_KNEE_BYTES + 1.0]), np.array([1.0]),
                                              topo)[0] > 0)
        self._ws_per_row = terms_of(topo).workset_row_work / topo.ddr_mem_bw if self.priced_ws else 0.0
        self.load = np.zeros(w)
        self.base = np.zeros(w)
        self.ws = np.zeros(w)
        self.wsr = np.zeros(w)  # the rows those bytes are
        self.hbm = np.zeros(w)
        self.ddr = np.zeros(w)
        self.hbm_cap = float(topo.usable_hbm_bytes)
        self.ddr_cap = float(topo.usable_ddr_bytes)
        self.choice: dict[int, Option] = {}
        self.ranks: dict[int, np.ndarray] = {}
        self.held: dict[int, tuple[int, np.ndarray]] = {}  # co-located group -> (members placed, their ranks)

    def clone(self) -> Placement:
        out = Placement(self.topo, self.balance_memory, self.rules)
        out.load, out.hbm, out.ddr = self.load.copy(), self.hbm.copy(), self.ddr.copy()
        out.base, out.ws, out.wsr = self.base.copy(), self.ws.copy(), self.wsr.copy()
        out.choice, out.ranks, out.held = dict(self.choice), dict(self.ranks), dict(self.held)
        return out

    # -- bookkeeping --------------------------------------------------------------------------
    def _apply(self, opt: Option, ranks: np.ndarray, sign: float) -> None:
        if self.priced_ws:
            np.add.at(self.base, ranks, sign * opt.cost_ms)
            np.add.at(self.ws, ranks, sign * opt.est.workset_bytes)
            np.add.at(self.wsr, ranks, sign * opt.est.workset_rows)
            self.load[ranks] = self.base[ranks] + self.ws_ms(self.ws[ranks], self.wsr[ranks])
        else:
            np.add.at(self.load, ranks, sign * opt.cost_ms)
        np.add.at(self.hbm, ranks, sign * opt.est.hbm_bytes)
        np.add.at(self.ddr, ranks, sign * opt.est.ddr_bytes)

    def ws_ms(self, ws: np.ndarray, wsr: np.ndarray) -> np.ndarray:
        """The working-set term of ranks touching `ws` bytes in `wsr` rows (engine.estimate.rank_workset_ms, inlined:
        the search asks it often)."""
        return ws_term(self._ws_per_row, ws, wsr)

    def loads_with(self, opt: Option, ranks: np.ndarray) -> np.ndarray:
        """Every rank's load if the option were added on `ranks`."""
        if not self.priced_ws:
            load = self.load.copy()
            np.add.at(load, ranks, opt.cost_ms)
            return load
        base, ws, wsr = self.base.copy(), self.ws.copy(), self.wsr.copy()
        np.add.at(base, ranks, opt.cost_ms)
        np.add.at(ws, ranks, opt.est.workset_bytes)
        np.add.at(wsr, ranks, opt.est.workset_rows)
        return base + self.ws_ms(ws, wsr)

    def after(self, r: np.ndarray | int, cost: np.ndarray | float, ws: np.ndarray | float,
              wsr: np.ndarray | float = 0.0) -> np.ndarray:
        """Load of rank(s) r after adding a shard of `cost` ms touching `ws` bytes in `wsr` rows (negative: taking
        one off)."""
        if not self.priced_ws:
            return self.load[r] + cost
        return self.base[r] + cost + self.ws_ms(self.ws[r] + ws, self.wsr[r] + wsr)

    def add(self, opt: Option, ranks: np.ndarray) -> None:
        self._apply(opt, ranks, 1.0)
        self.choice[opt.table] = opt
        self.ranks[opt.table] = ranks
        g = self.rules.group.get(opt.table) if self.rules is not None else None
        if g is not None:
            n, on = self.held.get(g, (0, None))
            if on is None:
                on = np.zeros(self.topo.world_size, dtype=bool)
                on[ranks] = True
            self.held[g] = (n + 1, on)

    def remove(self, table: int) -> tuple[Option, np.ndarray]:
        opt, ranks = self.choice.pop(table), self.ranks.pop(table)
        self._apply(opt, ranks, -1.0)
        g = self.rules.group.get(table) if self.rules is not None else None
        if g is not None:
            n, on = self.held[g]
            if n > 1:
                self.held[g] = (n - 1, on)
            else:
                del self.held[g]
        return opt, ranks

    def group_ranks(self, table: int) -> np.ndarray | None:
        """The ranks the placed members of `table`'s co-located group hold (bool per rank; never to be changed),
        which it must hold exactly too; None where none is placed or it has no group."""
        g = self.rules.group.get(table) if self.rules is not None else None
        return None if g is None else self.held.get(g, (0, None))[1]

    def fits(self, opt: Option, ranks: np.ndarray) -> bool:
        hbm, ddr = self.hbm.copy(), self.ddr.copy()
        np.add.at(hbm, ranks, opt.est.hbm_bytes)
        np.add.at(ddr, ranks, opt.est.ddr_bytes)
        return bool((hbm[ranks] <= self.hbm_cap).all() and (ddr[ranks] <= self.ddr_cap).all())

    # -- where an option's shards can go ----------------------------------------------------------
    def find_ranks(self, opt: Option) -> np.ndarray | None:
        """Where the option's shards go (see _find_ranks); None where they fit nowhere, or where they would not
        hold exactly the ranks that the placed members of its co-located group hold."""
        ranks = self._find_ranks(opt)
        need = self.group_ranks(opt.table) if ranks is not None else None
        if need is not None and not (len(np.unique(ranks)) == need.sum() and need[ranks].all()):
            return None
        return ranks

    def _find_ranks(self, opt: Option) -> np.ndarray | None:
        w, lw = self.topo.world_size, self.topo.local_world_size
        st = opt.sharding_type
        allowed = self.rules.allowed(self, opt.table) if self.rules is not None else None
        if st in (ShardingType.DATA_PARALLEL, ShardingType.ROW_WISE):
            ranks = np.arange(w)
            if allowed is not None and not allowed.all():
                return None  # every rank holds a piece: a pin to fewer ranks rules these out
            return ranks if self.fits(opt, ranks) else None
        if st is ShardingType.TABLE_ROW_WISE:  # one host's ranks: the fitting host with the lowest peak
            hosts = self.topo.num_hosts
            host_ranks = np.arange(hosts * lw)
            peaks = self.after(host_ranks, np.tile(opt.cost_ms, hosts), np.tile(opt.est.workset_bytes, hosts),
                               np.tile(opt.est.workset_rows, hosts)).reshape(hosts, lw).max(axis=1)
            ok = ((self.hbm[:hosts * lw].reshape(hosts, lw) + opt.est.hbm_bytes <= self.hbm_cap).all(axis=1)
                  & (self.ddr[:hosts * lw].reshape(hosts, lw) + opt.est.ddr_bytes <= self.ddr_cap).all(axis=1))
            if allowed is not None:
                ok &= allowed[:hosts * lw].reshape(hosts, lw).all(axis=1)
            best, best_peak = None, np.inf
            for host, (peak, fits) in enumerate(zip(peaks.tolist(), ok.tolist())):
                if fits and peak < best_peak - EPS:
                    best, best_peak = host, peak
            return None if best is None else np.arange(best * lw, (best + 1) * lw)
        return self._free_ranks(opt, allowed)

    def _free_ranks(self, opt: Option, allowed: np.ndarray | None = None) -> np.ndarray | None:
        if self.priced_ws:
            return self._free_ranks_ws(opt, allowed)
        load, hbm, ddr = self.load.copy(), self.hbm.copy(), self.ddr.copy()
        used = np.zeros(len(load), dtype=bool)
        out = np.empty(opt.num_shards, dtype=np.int64)
        cost, h, d = opt.cost_ms, opt.est.hbm_bytes, opt.est.ddr_bytes
        for j in range(opt.num_shards):
            ok = (hbm + h[j] <= self.hbm_cap) & (ddr + d[j] <= self.ddr_cap)
            if allowed is not None:
                ok &= allowed
            if not ok.any():
                return None
            pick = np.flatnonzero(ok & ~used if (ok & ~used).any() else ok)
            if self.balance_memory:
                fill = np.maximum(self._share(hbm[pick] + h[j], self.hbm_cap),
                                  self._share(ddr[pick] + d[j], self.ddr_cap))
                r = int(pick[np.lexsort((load[pick], fill))[0]])
            else:
                r = int(pick[np.argmin(load[pick])])
            out[j] = r
            used[r] = True
            load[r] += cost[j]
            hbm[r] += h[j]
            ddr[r] += d[j]
        return out

    def _free_ranks_ws(self, opt: Option, allowed: np.ndarray | None) -> np.ndarray | None:
        """_free_ranks where the working set is priced: each shard onto the fitting rank whose load after it is
        lowest (a rank near its cache's knee takes a large shard at more than the shard's own cost)."""
        base, ws, wsr, hbm, ddr = self.base.copy(), self.ws.copy(), self.wsr.copy(), self.hbm.copy(), self.ddr.copy()
        used = np.zeros(len(base), dtype=bool)
        out = np.empty(opt.num_shards, dtype=np.int64)
        cost, wsb, wsn, h, d = (opt.cost_ms, opt.est.workset_bytes, opt.est.workset_rows, opt.est.hbm_bytes,
                                opt.est.ddr_bytes)
        for j in range(opt.num_shards):
            ok = (hbm + h[j] <= self.hbm_cap) & (ddr + d[j] <= self.ddr_cap)
            if allowed is not None:
                ok &= allowed
            if not ok.any():
                return None
            pick = np.flatnonzero(ok & ~used if (ok & ~used).any() else ok)
            now = base[pick] + self.ws_ms(ws[pick], wsr[pick])
            then = base[pick] + cost[j] + self.ws_ms(ws[pick] + wsb[j], wsr[pick] + wsn[j])
            if self.balance_memory:
                fill = np.maximum(self._share(hbm[pick] + h[j], self.hbm_cap),
                                  self._share(ddr[pick] + d[j], self.ddr_cap))
                r = int(pick[np.lexsort((now, fill))[0]])
            else:
                r = int(pick[np.lexsort((now, then))[0]])
            out[j] = r
            used[r] = True
            base[r] += cost[j]
            ws[r] += wsb[j]
            wsr[r] += wsn[j]
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


def ws_term(per_row: float, ws: np.ndarray, wsr: np.ndarray) -> np.ndarray:
    """engine.estimate.rank_workset_ms with its constant folded: per_row x the rows past the knee."""
    past = np.maximum(ws - C.CPU_WORKSET_KNEE_BYTES, 0.0)
    return per_row * np.maximum(wsr, 0.0) * past / np.maximum(ws, 1.0)


def better(new: tuple[float, float], old: tuple[float, float]) -> bool:
    if new[0] < old[0] * (1 - 1e-9) - EPS:
        return True
    return new[0] <= old[0] * (1 + 1e-12) + EPS and new[1] < old[1] * (1 - 1e-9) - EPS


# ---- local search ---------------------------------------------------------------------------------


class FreeShards:
    """Every shard that may go to any rank, as flat arrays: table, shard index, rank, cost, hbm, ddr. Kept
    in step with the placement by the moves of the local search (built again after a re-shard)."""

    def __init__(self, pl: Placement):
        fixed = pl.rules.fixed if pl.rules is not None else frozenset()
        parts = [(table, opt, pl.ranks[table]) for table, opt in pl.choice.items()
                 if opt.sharding_type in FREE_PLACEMENT and table not in fixed]
        if not parts:
            self.t = self.j = self.r = np.empty(0, dtype=np.int64)
            self.c = self.h = self.d = self.w = self.wr = np.empty(0)
            return
        self.t = np.concatenate([np.full(o.num_shards, table) for table, o, _ in parts])
        self.j = np.concatenate([np.arange(o.num_shards) for _, o, _ in parts])
        self.r = np.concatenate([r for _, _, r in parts]).astype(np.int64)
        self.c = np.concatenate([o.cost_ms for _, o, _ in parts])
        self.h = np.concatenate([o.est.hbm_bytes for _, o, _ in parts]).astype(np.float64)
        self.d = np.concatenate([o.est.ddr_bytes for _, o, _ in parts]).astype(np.float64)
        self.w = np.concatenate([o.est.workset_bytes for _, o, _ in parts]).astype(np.float64)
        self.wr = np.concatenate([o.est.workset_rows for _, o, _ in parts]).astype(np.float64)

    def move(self, pl: Placement, i: int, dst: int) -> None:
        _move_shard(pl, int(self.t[i]), int(self.j[i]), dst)
        self.r[i] = dst


def _move_shard(pl: Placement, table: int, shard: int, dst: int) -> None:
    opt, ranks = pl.remove(table)
    ranks = ranks.copy()
    ranks[shard] = dst
    pl.add(opt, ranks)


def _best_move(pl: Placement, fs: FreeShards, a: int, b: int, peak: float) -> tuple[float, int]:
    """Shard a off rank b onto the least-loaded other rank with room: (new peak of the two, destination)."""
    ok = (pl.hbm + fs.h[a] <= pl.hbm_cap) & (pl.ddr + fs.d[a] <= pl.ddr_cap)
    ok[b] = False
    if not ok.any():
        return np.inf, -1
    if not pl.priced_ws:
        dst = int(np.flatnonzero(ok)[np.argmin(pl.load[ok])])
        return max(peak - fs.c[a], pl.load[dst] + fs.c[a]), dst
    cand = np.flatnonzero(ok)
    then = pl.after(cand, fs.c[a], fs.w[a], fs.wr[a])
    dst = int(cand[np.argmin(then)])
    return max(float(pl.after(b, -fs.c[a], -fs.w[a], -fs.wr[a])), float(then.min())), dst


def _best_swap(pl: Placement, fs: FreeShards, a: int, b: int, peak: float) -> tuple[float, int]:
    """Shard a on rank b against a cheaper shard x elsewhere: (new peak of the two ranks, x)."""
    x = np.flatnonzero((fs.r != b) & (fs.c < fs.c[a]))
    if not len(x):
        return np.inf, -1
    delta = fs.c[a] - fs.c[x]
    rx = fs.r[x]
    if pl.priced_ws:  # pl.after, inlined for both ranks of every candidate swap
        dw, dr = fs.w[a] - fs.w[x], fs.wr[a] - fs.wr[x]
        k = pl._ws_per_row
        at_b = pl.base[b] - delta + ws_term(k, pl.ws[b] - dw, pl.wsr[b] - dr)
        at_x = pl.base[rx] + delta + ws_term(k, pl.ws[rx] + dw, pl.wsr[rx] + dr)
        val = np.maximum(at_b, at_x)
    else:
        val = np.maximum(peak - delta, pl.load[rx] + delta)
    mem_ok = (
        (pl.hbm[rx] - fs.h[x] + fs.h[a] <= pl.hbm_cap) & (pl.ddr[rx] - fs.d[x] + fs.d[a] <= pl.ddr_cap)
        & (pl.hbm[b] - fs.h[a] + fs.h[x] <= pl.hbm_cap) & (pl.ddr[b] - fs.d[a] + fs.d[x] <= pl.ddr_cap)
    )
    val = np.where(mem_ok, val, np.inf)
    i = int(np.argmin(val))
    return float(val[i]), int(x[i])


Shift = tuple[int, int, int]  # one shard of the local search moved: (its index in FreeShards, from rank, to rank)


def move_or_swap(pl: Placement, fs: FreeShards | None = None, work: Work | None = None,
                 allow: Callable[[tuple[Shift, ...]], bool] | None = None, margin: float = EPS) -> tuple[Shift, ...]:
    """Move one shard off the slowest rank, or swap it for a cheaper one, if the slowest rank gets faster (by more
    than `margin`) and no rank ends up as slow as it was. `allow`, where given, is asked of each step that would
    be the best so far (its shifts: one for a move, two for a swap) and may refuse it (a re-plan's byte budget).
    Returns the shifts made: none when no step helps."""
    fs = fs if fs is not None else FreeShards(pl)
    if not len(fs.t):
        return ()
    b = int(np.argmax(pl.load))
    peak = pl.load[b]
    best: tuple[Shift, ...] = ()
    best_val = peak - margin
    on_b = np.flatnonzero(fs.r == b)
    if work is not None:
        work.spend(max(len(on_b), 1))
    for a in on_b:
        a = int(a)
        val, dst = _best_move(pl, fs, a, b, peak)
        if val < best_val:
            step = ((a, b, dst),)
            if allow is None or allow(step):
                best, best_val = step, val
        val, x = _best_swap(pl, fs, a, b, peak)
        if val < best_val:
            rx = int(fs.r[x])
            step = ((a, b, rx), (x, rx, b))
            if allow is None or allow(step):
                best, best_val = step, val
    for i, _, dst in best:
        fs.move(pl, i, dst)
    return best


def _siblings(options: list[Option], cur: Option) -> list[tuple[float, Option]]:
    """Options with the same shards as cur and less HBM (DDR-backed kernels), with the cost each adds per
    byte of HBM it frees."""
    out = []
    for o in options:
        if (o.sharding_type is cur.sharding_type and o.total_hbm_bytes < cur.total_hbm_bytes
                and o.same_shards(cur)):
            out.append(((o.total_cost_ms - cur.total_cost_ms) / (cur.total_hbm_bytes - o.total_hbm_bytes), o))
    return out


def _demotions(pl: Placement, options: list[list[Option]], skip: int, top: int,
               known: dict[int, list[tuple[float, Option]]]) -> list[tuple[int, Option]]:
    """The `top` cheapest ways to free HBM without moving a shard: another table's option with the same
    shards and less HBM, by cost added per byte freed. known caches _siblings by id of the option."""
    out = []
    for t, cur in pl.choice.items():
        if t != skip and cur.total_hbm_bytes:
            if id(cur) not in known:
                known[id(cur)] = _siblings(options[t], cur)
            out.extend((ratio, t, o) for ratio, o in known[id(cur)])
    out.sort(key=lambda x: (x[0], x[1]))
    return [(t, o) for _, t, o in out[:top]]


def _try(pl: Placement, table: int, alt: Option, before: tuple[float, float], work: Work | None) -> bool | None:
    """Place the table (already removed) in alt where it fits; keep it if the plan gets better. None where
    it does not fit."""
    if work is not None:
        work.spend()
    ranks = pl.find_ranks(alt)
    if ranks is None:
        return None
    pl.add(alt, ranks)
    if better(pl.score(), before):
        return True
    pl.remove(table)
    return False


def _try_evicting(pl: Placement, options: list[list[Option]], table: int, alt: Option,
                  before: tuple[float, float], victims: list[tuple[int, Option]], work: Work | None) -> bool:
    """Make room for alt by moving one other table to a kernel with less HBM on the same ranks."""
    for v, demoted in victims:
        old, ranks = pl.remove(v)
        pl.add(demoted, ranks)
        if _try(pl, table, alt, before, work):
            return True
        pl.remove(v)
        pl.add(old, ranks)
    return False


def reshard(pl: Placement, options: list[list[Option]], top: int = 4, evict: int = 0,
            known: dict | None = None, work: Work | None = None) -> bool:
    """Give one of the tables that load the slowest rank most another option (another sharding type,
    kernel or column width) if the plan gets faster; where it does not fit, first demote one of `evict`
    other tables to a DDR-backed kernel to make room (known: a cache for _demotions)."""
    known = known if known is not None else {}
    b = int(np.argmax(pl.load))
    before = pl.score()
    on_b = []
    fixed = pl.rules.fixed if pl.rules is not None else frozenset()
    for table, ranks in pl.ranks.items():
        mask = ranks == b
        if mask.any() and table not in fixed:
            on_b.append((float(pl.choice[table].cost_ms[mask].sum()), table))
    on_b.sort(reverse=True)
    for cost_on_b, table in on_b[:top]:
        current = pl.choice[table]
        victims = None
        for alt in options[table]:
            if alt is current or alt.max_shard_cost_ms >= cost_on_b - EPS:
                continue
            old_opt, old_ranks = pl.remove(table)
            placed = _try(pl, table, alt, before, work)
            if placed:
                return True
            if placed is None and evict:
                victims = victims if victims is not None else _demotions(pl, options, table, evict, known)
                if _try_evicting(pl, options, table, alt, before, victims, work):
                    return True
            pl.add(old_opt, old_ranks)
    return False


EVICT = 4  # re-shards that do not fit may first demote one of this many other tables


def improve(pl: Placement, options: list[list[Option]], work: Work | None = None, limit: float | None = None) -> int:
    """Local search until nothing helps or the work is spent (up to `limit` units used, where given).
    Returns steps taken."""
    work = work if work is not None else Work()
    steps = 0
    fs, known = None, {}
    while not work.done(limit):
        fs = fs if fs is not None else FreeShards(pl)
        if not move_or_swap(pl, fs, work):
            if not reshard(pl, options, evict=EVICT, known=known, work=work):
                break
            fs = None
        steps += 1
    return steps


# ---- ruin and recreate ------------------------------------------------------------------------------

STALL_ROUNDS = 25  # the perturbation search stops after this many rounds in a row bring nothing
RUIN_TABLES = 3  # at most this many tables off the slowest rank, and as many others, per round


def _reinsert(pl: Placement, options: list[Option], work: Work) -> bool:
    """Put a removed table back in the option and ranks that leave the peak of its ranks lowest (the
    cheaper option in total at equal peaks). False where no option fits."""
    best, best_key = None, None
    work.spend(len(options))
    for opt in options:
        ranks = pl.find_ranks(opt)
        if ranks is None:
            continue
        load = pl.loads_with(opt, ranks)
        key = (float(load[ranks].max()), opt.total_cost_ms)
        if best_key is None or key < best_key:
            best, best_key = (opt, ranks), key
    if best is None:
        return False
    pl.add(*best)
    return True


def _ruin_and_recreate(pl: Placement, options: list[list[Option]], rng: np.random.Generator, work: Work) -> bool:
    """Take a few tables off the slowest rank and a few others at random, and put them back one by one,
    heaviest first, each where it leaves its ranks least loaded. False where one no longer fits."""
    b = int(np.argmax(pl.load))
    k = int(rng.integers(1, RUIN_TABLES + 1))
    fixed = pl.rules.fixed if pl.rules is not None else frozenset()
    on_b = np.array(sorted(t for t, r in pl.ranks.items() if (r == b).any() and t not in fixed), dtype=np.int64)
    picked = set(rng.choice(on_b, size=min(k, len(on_b)), replace=False).tolist())
    rest = np.array(sorted(set(pl.choice) - picked - fixed), dtype=np.int64)
    picked |= set(rng.choice(rest, size=min(k, len(rest)), replace=False).tolist())
    removed = sorted(((pl.remove(t)[0].max_shard_cost_ms, t) for t in sorted(picked)), reverse=True)
    return all(_reinsert(pl, options[t], work) for _, t in removed)


def perturb(pl: Placement, options: list[list[Option]], work: Work, seed: int = 0) -> tuple[Placement, int]:
    """Iterated local search: ruin and recreate part of the best plan, improve it, keep it if it is better;
    until the work is spent or STALL_ROUNDS rounds in a row bring nothing. The rounds draw from a generator
    seeded by `seed`. Returns the best plan and how many rounds improved it."""
    rng = np.random.default_rng(seed)
    best, idle, gains = pl, 0, 0
    while idle < STALL_ROUNDS and not work.done():
        trial = best.clone()
        if _ruin_and_recreate(trial, options, rng, work):
            improve(trial, options, work)
            if better(trial.score(), best.score()):
                best, idle, gains = trial, 0, gains + 1
                continue
        idle += 1
    return best, gains
