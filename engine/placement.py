"""Where shards sit while a plan is made: the per-rank load and memory of a partial placement (`Placement`), the
config's placement rules by table (`PlacementRules`, engine.placerules), and the objective the search compares plans
by (`better`).

A rank's cost is its shards' summed cost plus, on CPU, the price of its touched working set beyond the cache
(engine.workset.rank_workset_ms), which does not add up shard by shard: crowding large tables on one rank costs
more than the sum of their costs alone. On a fleet of several device kinds (topology.rank_devices) a shard costs
its option's cost times the rank's kind's factor (Option.kind_factor). No rank ever exceeds its usable HBM or DDR,
nor its SSD (key_value's backing store, engine.tiers: only key_value options hold any, and only they look at it).
"""

from __future__ import annotations

import numpy as np

from engine.capacity import ssd_caps, usable_caps
from engine.fleet import kinds, per_rank
from engine.placerules import PlacementRules
from engine.tiers import SsdRoom, ssd_need
from engine.enumerate import Option
from engine.workset import WorksetPrice, workset_price
from engine.types import ShardingType, Topology

EPS = 1e-9
FREE_PLACEMENT = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)


class Placement:
    """Per-rank load and memory while options are placed, removed and moved. `load` is each rank's cost: `base` (its
    shards' summed cost) plus the working-set term of `ws` (its touched bytes) where the topology prices one."""

    def __init__(self, topo: Topology, balance_memory: bool = False, rules: PlacementRules | None = None):
        w = topo.world_size
        self.topo = topo
        self.rules = rules  # placement rules (pins, co-location, apart); None: none
        self.balance_memory = balance_memory  # place by free memory first, load second (tight configs)
        self.ws_price = workset_price(topo)
        self.priced_ws = self.ws_price.per_row > 0
        self.load = np.zeros(w)
        self.base = np.zeros(w)
        self.ws = np.zeros(w)
        self.wsr = np.zeros(w)  # the rows those bytes are
        self.hbm = np.zeros(w)
        self.ddr = np.zeros(w)
        self.ssd = np.zeros(w)  # key_value's SSD bytes per rank, against ssd_caps (each rank's own)
        self.ssd_caps = ssd_caps(topo)
        # each rank's usable bytes (its own on a mixed fleet); the largest rank's, which bounds one piece; all ranks'
        self.hbm_caps, self.ddr_caps = usable_caps(topo)
        if not per_rank(topo):
            self.hbm_cap, self.ddr_cap = float(topo.usable_hbm_bytes), float(topo.usable_ddr_bytes)
            self.hbm_total, self.ddr_total = self.hbm_cap * w, self.ddr_cap * w
        else:
            self.hbm_cap, self.ddr_cap = float(self.hbm_caps.max()), float(self.ddr_caps.max())
            self.hbm_total, self.ddr_total = float(self.hbm_caps.sum()), float(self.ddr_caps.sum())
        k = kinds(topo)  # on a fleet of several device kinds, each rank's kind: a shard costs its kind's time there
        self.kind = k[1] if k is not None and len(k[0]) > 1 else None
        self.choice: dict[int, Option] = {}
        self.ranks: dict[int, np.ndarray] = {}
        self.held: dict[int, tuple[int, np.ndarray]] = {}  # co-located group -> (members placed, their ranks)

    def clone(self) -> Placement:
        out = Placement(self.topo, self.balance_memory, self.rules)
        out.load, out.hbm, out.ddr, out.ssd = self.load.copy(), self.hbm.copy(), self.ddr.copy(), self.ssd.copy()
        out.base, out.ws, out.wsr = self.base.copy(), self.ws.copy(), self.wsr.copy()
        out.choice, out.ranks, out.held = dict(self.choice), dict(self.ranks), dict(self.held)
        return out

    # -- bookkeeping --------------------------------------------------------------------------
    def mult(self, opt: Option) -> np.ndarray | None:
        """Per rank, what the option costs there over its cost_ms (its kind's factor); None where ranks are alike."""
        if self.kind is None:
            return None
        if opt.mult is None:
            f = opt.kind_factor
            opt.mult = np.ones(len(self.kind)) if f is None else f[self.kind]
        return opt.mult

    def cost_on(self, opt: Option, ranks: np.ndarray) -> np.ndarray:
        """The option's shards' costs, shard j on ranks[j]."""
        m = self.mult(opt)
        return opt.cost_ms if m is None else opt.cost_ms * m[ranks]

    def _apply(self, opt: Option, ranks: np.ndarray, sign: float) -> None:
        s = ssd_need(opt)
        if s is not None:
            np.add.at(self.ssd, ranks, sign * s)
        if len(ranks) == 1 and not self.priced_ws:  # one shard (table-wise): what np.add.at does, without its cost
            r = ranks[0]  # (and from the option's totals: its per-shard arrays need not be made)
            m = self.mult(opt)
            self.load[r] += sign * (opt.total_cost_ms if m is None else opt.total_cost_ms * m[r])
            self.hbm[r] += sign * opt.total_hbm_bytes
            self.ddr[r] += sign * opt.total_ddr_bytes
            return
        if self.priced_ws:
            np.add.at(self.base, ranks, sign * opt.cost_ms)
            np.add.at(self.ws, ranks, sign * opt.est.workset_bytes)
            np.add.at(self.wsr, ranks, sign * opt.est.workset_rows)
            self.load[ranks] = self.base[ranks] + self.ws_ms(self.ws[ranks], self.wsr[ranks])
        else:
            np.add.at(self.load, ranks, sign * self.cost_on(opt, ranks))
        np.add.at(self.hbm, ranks, sign * opt.est.hbm_bytes)
        np.add.at(self.ddr, ranks, sign * opt.est.ddr_bytes)

    def ws_ms(self, ws: np.ndarray, wsr: np.ndarray) -> np.ndarray:
        """The working-set term of ranks touching `ws` bytes in `wsr` rows (engine.workset.rank_workset_ms, inlined:
        the search asks it often)."""
        return self.ws_price.ms(ws, wsr)

    def loads_with(self, opt: Option, ranks: np.ndarray) -> np.ndarray:
        """Every rank's load if the option were added on `ranks`."""
        if not self.priced_ws:
            load = self.load.copy()
            np.add.at(load, ranks, self.cost_on(opt, ranks))
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
        if not self.ssd_fits(opt, ranks):
            return False
        if len(ranks) == 1:  # one shard: its figures are the option's totals
            r = ranks[0]
            return bool(self.hbm[r] + opt.total_hbm_bytes <= self.hbm_caps[r]
                        and self.ddr[r] + opt.total_ddr_bytes <= self.ddr_caps[r])
        hbm, ddr = self.hbm.copy(), self.ddr.copy()
        np.add.at(hbm, ranks, opt.est.hbm_bytes)
        np.add.at(ddr, ranks, opt.est.ddr_bytes)
        return bool((hbm[ranks] <= self.hbm_caps[ranks]).all() and (ddr[ranks] <= self.ddr_caps[ranks]).all())

    def ssd_fits(self, opt: Option, ranks: np.ndarray) -> bool:
        """Whether the option's SSD bytes (key_value's, shard j on ranks[j]) fit each rank's SSD; True for others."""
        s = ssd_need(opt)
        if s is None:
            return True
        ssd = self.ssd.copy()
        np.add.at(ssd, ranks, s)
        return bool((ssd[ranks] <= self.ssd_caps[ranks]).all())

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
        allowed = self.rules.allowed(self, opt.table) if self.rules else None
        if st in (ShardingType.DATA_PARALLEL, ShardingType.ROW_WISE):
            ranks = np.arange(w)
            if allowed is not None and not allowed.all():
                return None  # every rank holds a piece: a pin to fewer ranks rules these out
            return ranks if self.fits(opt, ranks) else None
        if st is ShardingType.TABLE_ROW_WISE:  # one host's ranks: the fitting host with the lowest peak
            hosts = self.topo.num_hosts
            host_ranks = np.arange(hosts * lw)
            cost = np.tile(opt.cost_ms, hosts)
            m = self.mult(opt)
            peaks = self.after(host_ranks, cost if m is None else cost * m[host_ranks],
                               np.tile(opt.est.workset_bytes, hosts), np.tile(opt.est.workset_rows, hosts))
            peaks = peaks.reshape(hosts, lw).max(axis=1)
            by_host = (hosts, lw)
            ok = ((self.hbm[:hosts * lw].reshape(by_host) + opt.est.hbm_bytes
                   <= self.hbm_caps[:hosts * lw].reshape(by_host)).all(axis=1)
                  & (self.ddr[:hosts * lw].reshape(by_host) + opt.est.ddr_bytes
                     <= self.ddr_caps[:hosts * lw].reshape(by_host)).all(axis=1))
            if allowed is not None:
                ok &= allowed[:hosts * lw].reshape(hosts, lw).all(axis=1)
            if (s := ssd_need(opt)) is not None:
                ok &= (self.ssd[:hosts * lw].reshape(by_host) + s <= self.ssd_caps[:hosts * lw].reshape(by_host)).all(1)
            best, best_peak = None, np.inf
            for host, (peak, fits) in enumerate(zip(peaks.tolist(), ok.tolist())):
                if fits and peak < best_peak - EPS:
                    best, best_peak = host, peak
            return None if best is None else np.arange(best * lw, (best + 1) * lw)
        if st is ShardingType.GRID_SHARD:
            return self._grid_ranks(opt, allowed)
        return self._free_ranks(opt, allowed)

    def _grid_ranks(self, opt: Option, allowed: np.ndarray | None) -> np.ndarray | None:
        """grid_shard: each column piece's row shards on one host's ranks, in rank order (TorchRec's multi-host
        partition), piece after piece onto the fitting host with the lowest peak, a host not used yet while any
        fits (TorchRec puts the pieces on consecutive hosts, wrapping round when there are more pieces than hosts)."""
        lw, hosts = self.topo.local_world_size, self.topo.num_hosts
        n = hosts * lw
        base = (self.base if self.priced_ws else self.load)[:n].reshape(hosts, lw).copy()
        ws, wsr = self.ws[:n].reshape(hosts, lw).copy(), self.wsr[:n].reshape(hosts, lw).copy()
        hbm, ddr = self.hbm[:n].reshape(hosts, lw).copy(), self.ddr[:n].reshape(hosts, lw).copy()
        hcap, dcap = self.hbm_caps[:n].reshape(hosts, lw), self.ddr_caps[:n].reshape(hosts, lw)  # each rank's own
        e, sn = opt.est, ssd_need(opt)
        ssd, scap = self.ssd[:n].reshape(hosts, lw).copy(), self.ssd_caps[:n].reshape(hosts, lw)
        m = self.mult(opt)
        scale = 1.0 if m is None else m[:n].reshape(hosts, lw)  # a piece's cost on each rank of each host
        used, out = np.zeros(hosts, dtype=bool), []  # the host of each piece
        for j in range(opt.num_shards // lw):
            s = slice(j * lw, (j + 1) * lw)
            cost = opt.cost_ms[s] * scale
            then = base + cost
            if self.priced_ws:
                then = then + self.ws_ms(ws + e.workset_bytes[s], wsr + e.workset_rows[s])
            ok = (hbm + e.hbm_bytes[s] <= hcap).all(axis=1) & (ddr + e.ddr_bytes[s] <= dcap).all(axis=1)
            if sn is not None:
                ok &= (ssd + sn[s] <= scap).all(axis=1)
            if allowed is not None:
                ok &= allowed[:n].reshape(hosts, lw).all(axis=1)
            ok = ok & ~used if (ok & ~used).any() else ok
            best, best_peak = None, np.inf
            for host, (peak, fits) in enumerate(zip(then.max(axis=1).tolist(), ok.tolist())):
                if fits and peak < best_peak - EPS:
                    best, best_peak = host, peak
            if best is None:
                return None
            base[best] += cost if m is None else cost[best]
            ws[best] += e.workset_bytes[s]
            wsr[best] += e.workset_rows[s]
            hbm[best] += e.hbm_bytes[s]
            ddr[best] += e.ddr_bytes[s]
            if sn is not None:
                ssd[best] += sn[s]
            used[best] = True
            out.append(best)
        return np.concatenate([np.arange(h * lw, (h + 1) * lw) for h in _round_robin(out)])

    def _free_ranks(self, opt: Option, allowed: np.ndarray | None = None) -> np.ndarray | None:
        if self.priced_ws:
            return self._free_ranks_ws(opt, allowed)
        load, hbm, ddr = self.load.copy(), self.hbm.copy(), self.ddr.copy()
        used = np.zeros(len(load), dtype=bool)
        out = np.empty(opt.num_shards, dtype=np.int64)
        cost, h, d = opt.cost_ms, opt.est.hbm_bytes, opt.est.ddr_bytes
        m = self.mult(opt)
        ssd = SsdRoom(self, opt)
        for j in range(opt.num_shards):
            pick = self._fitting(hbm, ddr, h[j], d[j], ssd.room(j, allowed), used)
            if pick is None:
                return None
            # where ranks differ in speed, the rank whose load after the shard is lowest (a slower rank takes less)
            key = load[pick] if m is None else load[pick] + cost[j] * m[pick]
            if self.balance_memory:
                fill = np.maximum(self._fill_after(hbm[pick] + h[j], ddr[pick] + d[j], pick), ssd.fill(j, pick))
                r = int(pick[np.lexsort((key, fill))[0]])
            else:
                r = int(pick[np.argmin(key)])
            out[j] = r
            used[r] = True
            load[r] += cost[j] if m is None else cost[j] * m[r]
            hbm[r] += h[j]
            ddr[r] += d[j]
            ssd.take(j, r)
        return out

    def _free_ranks_ws(self, opt: Option, allowed: np.ndarray | None) -> np.ndarray | None:
        """_free_ranks where the working set is priced: each shard onto the fitting rank whose load after it is
        lowest (a rank near its cache's knee takes a large shard at more than the shard's own cost)."""
        base, ws, wsr, hbm, ddr = self.base.copy(), self.ws.copy(), self.wsr.copy(), self.hbm.copy(), self.ddr.copy()
        used = np.zeros(len(base), dtype=bool)
        out = np.empty(opt.num_shards, dtype=np.int64)
        cost, wsb, wsn, h, d = (opt.cost_ms, opt.est.workset_bytes, opt.est.workset_rows, opt.est.hbm_bytes,
                                opt.est.ddr_bytes)
        ssd = SsdRoom(self, opt)
        for j in range(opt.num_shards):
            pick = self._fitting(hbm, ddr, h[j], d[j], ssd.room(j, allowed), used)
            if pick is None:
                return None
            now = base[pick] + self.ws_ms(ws[pick], wsr[pick])
            then = base[pick] + cost[j] + self.ws_ms(ws[pick] + wsb[j], wsr[pick] + wsn[j])
            if self.balance_memory:
                fill = np.maximum(self._fill_after(hbm[pick] + h[j], ddr[pick] + d[j], pick), ssd.fill(j, pick))
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
            ssd.take(j, r)
        return out

    def _fitting(self, hbm: np.ndarray, ddr: np.ndarray, h: float, d: float, allowed: np.ndarray | None,
                 used: np.ndarray) -> np.ndarray | None:
        """The ranks a shard of `h` HBM and `d` DDR bytes may go to, given the ranks' `hbm` and `ddr`: those with room
        (and `allowed`), only those not `used` yet where any is; None where none has room."""
        ok = (hbm + h <= self.hbm_caps) & (ddr + d <= self.ddr_caps)
        if allowed is not None:
            ok &= allowed
        if not ok.any():
            return None
        return np.flatnonzero(ok & ~used if (ok & ~used).any() else ok)

    def _fill_after(self, hbm: np.ndarray, ddr: np.ndarray, ranks: np.ndarray | None = None) -> np.ndarray:
        """The fuller of `hbm` and `ddr` bytes as a share of the usable bytes of `ranks` (None: every rank)."""
        hcap, dcap = (self.hbm_caps, self.ddr_caps) if ranks is None else (self.hbm_caps[ranks], self.ddr_caps[ranks])
        return np.maximum(_share(hbm, hcap), _share(ddr, dcap))

    def fill(self) -> np.ndarray:
        """Per rank, the fuller of HBM and DDR as a share of the usable bytes."""
        return self._fill_after(self.hbm, self.ddr)

    # -- objective --------------------------------------------------------------------------------
    def score(self) -> tuple[float, float]:
        return float(self.load.max()), float(np.square(self.load).sum())


def _round_robin(hosts: list[int]) -> list[int]:
    """The hosts in TorchRec's order for pieces that cost the same: round after round, each host with a piece left
    in ascending order ([1, 0, 0] -> [0, 1, 0], as TorchRec wraps pieces round the hosts)."""
    left = {h: hosts.count(h) for h in sorted(set(hosts))}
    out = []
    while left:
        out += list(left)
        left = {h: n - 1 for h, n in left.items() if n > 1}
    return out


def _share(used: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """used / cap per rank; where a rank has none of that memory, infinitely full if it holds any."""
    return np.divide(used, cap, out=np.where(used > 0, np.inf, 0.0), where=cap > 0)


def ws_term(price: WorksetPrice, ws: np.ndarray, wsr: np.ndarray) -> np.ndarray:
    """engine.workset.rank_workset_ms with the topology's price already read (the search asks it often)."""
    return price.ms(ws, wsr)


def better(new: tuple[float, float], old: tuple[float, float]) -> bool:
    if new[0] < old[0] * (1 - 1e-9) - EPS:
        return True
    return new[0] <= old[0] * (1 + 1e-12) + EPS and new[1] < old[1] * (1 - 1e-9) - EPS
