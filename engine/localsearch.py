"""The local search of a placement: move or swap a shard off the slowest rank while it gets faster
(`move_or_swap`, with a hook that may refuse a step: a re-plan's byte budget), and give a table that loads the
slowest rank another option (`reshard`, making room by demoting another table to a DDR-backed kernel where
needed); `improve` runs both until nothing helps or the work is spent."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.enumerate import Option
from engine.placement import EPS, FREE_PLACEMENT, Placement, better, ws_term
from engine.tiers import ssd_need
from engine.work import Work



class FreeShards:
    """Every shard that may go to any rank, as flat arrays: table, shard index, rank, cost, hbm, ddr (and ssd, where
    any is key_value's: engine.tiers; else None). Kept
    in step with the placement by the moves of the local search (built again after a re-shard)."""

    def __init__(self, pl: Placement):
        fixed = pl.rules.fixed if pl.rules is not None else frozenset()
        parts = [(table, opt, pl.ranks[table]) for table, opt in pl.choice.items()
                 if opt.sharding_type in FREE_PLACEMENT and table not in fixed]
        self.f = None  # several device kinds: per shard, its cost on each kind over c (Option.kind_factor)
        self.s = None
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
        ssd = [ssd_need(o) for _, o, _ in parts]
        if any(x is not None for x in ssd):
            self.s = np.concatenate([np.zeros(o.num_shards) if x is None else x for (_, o, _), x in zip(parts, ssd)])
        if pl.kind is not None:
            kinds = int(pl.kind.max()) + 1
            self.f = np.concatenate([np.broadcast_to(np.ones(kinds) if o.kind_factor is None else o.kind_factor,
                                                     (o.num_shards, kinds)) for _, o, _ in parts])

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
    ok = (pl.hbm + fs.h[a] <= pl.hbm_caps) & (pl.ddr + fs.d[a] <= pl.ddr_caps)
    if fs.s is not None:
        ok &= pl.ssd + fs.s[a] <= pl.ssd_caps
    ok[b] = False
    if not ok.any():
        return np.inf, -1
    if fs.f is not None:  # ranks differ in speed: the shard costs its kind's time on each
        cand = np.flatnonzero(ok)
        on = fs.c[a] * fs.f[a, pl.kind[cand]]
        i = int(np.argmin(pl.load[cand] + on))
        return max(peak - fs.c[a] * fs.f[a, pl.kind[b]], pl.load[cand[i]] + on[i]), int(cand[i])
    if not pl.priced_ws:
        dst = int(np.flatnonzero(ok)[np.argmin(pl.load[ok])])
        return max(peak - fs.c[a], pl.load[dst] + fs.c[a]), dst
    cand = np.flatnonzero(ok)
    then = pl.after(cand, fs.c[a], fs.w[a], fs.wr[a])
    dst = int(cand[np.argmin(then)])
    return max(float(pl.after(b, -fs.c[a], -fs.w[a], -fs.wr[a])), float(then.min())), dst


def _best_swap(pl: Placement, fs: FreeShards, a: int, b: int, peak: float) -> tuple[float, int]:
    """Shard a on rank b against a cheaper shard x elsewhere: (new peak of the two ranks, x)."""
    on_b = fs.c if fs.f is None else fs.c * fs.f[:, pl.kind[b]]  # every shard's cost were it on rank b
    x = np.flatnonzero((fs.r != b) & (on_b < on_b[a]))
    if not len(x):
        return np.inf, -1
    delta = fs.c[a] - fs.c[x]
    rx = fs.r[x]
    if fs.f is not None:
        kx = pl.kind[rx]
        val = np.maximum(peak - on_b[a] + on_b[x], pl.load[rx] - fs.c[x] * fs.f[x, kx] + fs.c[a] * fs.f[a, kx])
    elif pl.priced_ws:  # pl.after, inlined for both ranks of every candidate swap
        dw, dr = fs.w[a] - fs.w[x], fs.wr[a] - fs.wr[x]
        k = pl.ws_price
        at_b = pl.base[b] - delta + ws_term(k, pl.ws[b] - dw, pl.wsr[b] - dr)
        at_x = pl.base[rx] + delta + ws_term(k, pl.ws[rx] + dw, pl.wsr[rx] + dr)
        val = np.maximum(at_b, at_x)
    else:
        val = np.maximum(peak - delta, pl.load[rx] + delta)
    mem_ok = (
        (pl.hbm[rx] - fs.h[x] + fs.h[a] <= pl.hbm_caps[rx]) & (pl.ddr[rx] - fs.d[x] + fs.d[a] <= pl.ddr_caps[rx])
        & (pl.hbm[b] - fs.h[a] + fs.h[x] <= pl.hbm_caps[b]) & (pl.ddr[b] - fs.d[a] + fs.d[x] <= pl.ddr_caps[b])
    )
    if fs.s is not None:
        ds = fs.s[a] - fs.s[x]
        mem_ok &= (pl.ssd[rx] + ds <= pl.ssd_caps[rx]) & (pl.ssd[b] - ds <= pl.ssd_caps[b])
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
