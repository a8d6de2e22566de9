"""Sharding options of a table: which sharding type and kernel, cut into which shards (engine.geometry: TorchRec's
shard sizes and offsets), at what estimate; priced for many tables at once and cached.
"""

from __future__ import annotations

import time
from collections import OrderedDict, namedtuple

import numpy as np

from engine import widths
from engine.errors import PlanningError
from engine.estimate import ShardEstimates, estimate_pieces, pieces_for, table_load
from engine.fleet import kind_topologies
from engine.geometry import Geometry, distinct_shapes, geometry, table_geometries
from engine.types import (
    ComputeKernel,
    Config,
    ShardingType,
    TableConfig,
    Topology,
)

MIN_SEARCH_CW_DIM = widths.MIN_SEARCH_CW_DIM


class Option:
    """One way to shard one table, with its per-shard estimates.

    Built from a Priced geometry, an option holds figures for its distinct shard shapes only (a row-wise or
    data-parallel option on 1,024 ranks has at most three): its totals and largest piece come from those, and
    the per-shard arrays (offsets, sizes, est) are made when placement first asks for them. So enumerating
    every option of 10,000 tables on 1,024 ranks does not hold tables x ranks figures. Built by hand (tests),
    it takes the per-shard arrays directly.
    """

    __slots__ = ("table", "sharding_type", "kernel", "_summary", "_priced", "_k", "_offsets", "_sizes", "_est", "_cost",
                 "mult")

    def __init__(self, table: int, sharding_type: ShardingType, kernel: ComputeKernel,
                 offsets: np.ndarray | None = None, sizes: np.ndarray | None = None,
                 est: ShardEstimates | None = None, priced: Priced | None = None, k: int = 0):
        self.table, self.sharding_type, self.kernel = table, sharding_type, kernel
        self._offsets, self._sizes, self._est = offsets, sizes, est
        self._priced, self._k = priced, k
        self._cost: np.ndarray | None = None
        self._summary: tuple[float, ...] | None = None
        self.mult: np.ndarray | None = None  # per rank, its cost over the reference (engine.placement.Placement.mult)
        if priced is None:
            cost = est.cost_ms
            self._summary = (float(cost.sum()), float(cost.max()), float(est.hbm_bytes.sum()),
                             float(est.ddr_bytes.sum()), float(est.hbm_bytes.max()), float(est.ddr_bytes.max()))

    # -- totals and the largest piece (from the distinct shapes) -------------------------------------------
    @property
    def summary(self) -> tuple[float, ...]:
        """Total and largest-piece cost, total HBM and DDR, largest piece's HBM and DDR."""
        if self._summary is None:
            self._summary = tuple(self._priced.summary[self._priced.item, self._k].tolist())
        return self._summary

    @property
    def total_cost_ms(self) -> float:
        return self.summary[0]

    @property
    def max_shard_cost_ms(self) -> float:
        return self.summary[1]

    @property
    def total_hbm_bytes(self) -> float:
        return self.summary[2]

    @property
    def total_ddr_bytes(self) -> float:
        return self.summary[3]

    @property
    def piece_hbm_bytes(self) -> float:
        return self.summary[4]

    @property
    def piece_ddr_bytes(self) -> float:
        return self.summary[5]

    @property
    def piece_ssd_bytes(self) -> float:
        """Its largest piece's SSD bytes (key_value's backing store; 0 for other kernels), from the distinct shapes."""
        e = self._priced.ests[self._k] if self._priced is not None else self.est
        return 0.0 if e.ssd_bytes is None else float(e.ssd_bytes.max())

    @property
    def kind_factor(self) -> np.ndarray | None:
        """On a fleet of several device kinds (topology.rank_devices): per kind, the option's cost on that kind over
        its cost on the first (which cost_ms is priced on); None where every rank is alike."""
        p = self._priced
        return None if p is None or p.factors is None else p.factors[p.item, self._k]

    @property
    def num_shards(self) -> int:
        return self._priced.num_shards if self._priced is not None else len(self._sizes)

    # -- per shard, made on first use ----------------------------------------------------------------
    @property
    def offsets(self) -> np.ndarray:  # (k, 2) int
        if self._offsets is None:
            self._offsets, self._sizes = self._priced.geometry
        return self._offsets

    @property
    def sizes(self) -> np.ndarray:  # (k, 2) int
        if self._sizes is None:
            self._offsets, self._sizes = self._priced.geometry
        return self._sizes

    @property
    def est(self) -> ShardEstimates:
        if self._est is None:
            self._est = self._priced.per_shard(self._k)
        return self._est

    @property
    def cost_ms(self) -> np.ndarray:
        if self._cost is None:
            self._cost = self.est.cost_ms
        return self._cost

    def same_shards(self, other: Option) -> bool:
        """Whether the two options cut the table into the same shards (options of one geometry share it)."""
        p, q = self._priced, other._priced
        if p is not None and q is not None:  # a geometry priced at several cache load factors (engine.clf) too
            return p is q or (p.table is q.table and p.sharding_type is q.sharding_type and p.width == q.width)
        return self.sizes.shape == other.sizes.shape and bool((self.sizes == other.sizes).all())

    @property
    def clf(self) -> float | None:
        """The cache load factor a fused_uvm_caching option is priced at when the planner tries one from the
        table's miss curve (engine.clf); None: the table's constraint or its default."""
        return self._priced.clf if self._priced is not None else None

    @property
    def label(self) -> str:
        clf = "" if self.clf is None else f" clf {self.clf:.4g}"
        if not self.sharding_type.has_width:
            return f"{self.sharding_type.value}/{self.kernel.value}{clf}"
        width = self._priced.width if self._priced is not None else int(self.sizes[0][1])
        return f"{self.sharding_type.value}/{self.kernel.value} width {width}{clf}"


class Priced:
    """One geometry of one table, priced for each kernel on its distinct shard shapes only. Its figures are a
    slice [lo, hi) of arrays priced for many tables at once (estimate_pieces), shared: never mutate them."""

    __slots__ = ("table", "topo", "sharding_type", "width", "num_shards", "counts", "summary", "item", "_group",
                 "_lo", "_hi", "_ests", "_geometry", "clf", "factors")

    def __init__(self, table: TableConfig, topo: Topology, st: ShardingType, width: int, num_shards: int,
                 counts: np.ndarray, summary: np.ndarray, item: int, group: list[ShardEstimates], lo: int, hi: int,
                 clf: float | None = None, factors: np.ndarray | None = None):
        self.table, self.topo, self.sharding_type, self.width, self.clf = table, topo, st, width, clf
        self.factors = factors  # [item, kernel, kind]: Option.kind_factor (shared by the group); None: ranks alike
        self.num_shards = num_shards
        self.counts = counts  # shards of each distinct shape, in shard order (full blocks, remainder, empty)
        # summary[item, kernel]: total and largest-piece cost, HBM and DDR totals and pieces (shared by the group)
        self.summary, self.item = summary, item
        self._group, self._lo, self._hi = group, lo, hi
        self._ests: tuple[ShardEstimates, ...] | None = None
        self._geometry: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def ests(self) -> tuple[ShardEstimates, ...]:
        """Per kernel, the estimates of the distinct shapes."""
        if self._ests is None:
            lo, hi = self._lo, self._hi
            self._ests = tuple(ShardEstimates(e.perf_ms[lo:hi], e.hbm_bytes[lo:hi], e.ddr_bytes[lo:hi],
                                              e.input_bytes[lo:hi], e.output_bytes[lo:hi], e.workset_bytes[lo:hi],
                                              e.workset_rows[lo:hi], None if e.ssd_bytes is None else
                                              e.ssd_bytes[lo:hi])
                               for e in self._group)
        return self._ests

    @property
    def geometry(self) -> tuple[np.ndarray, np.ndarray]:
        if self._geometry is None:
            self._geometry = geometry(self.table, self.sharding_type, self.topo, self.width)
        return self._geometry

    def per_shard(self, k: int) -> ShardEstimates:
        """Kernel k's estimates per shard (made only for the options placement touches)."""
        e = self.ests[k]
        counts = self.counts  # the distinct shapes come in shard order
        return ShardEstimates(*(None if a is None else np.repeat(a, counts, axis=0) for a in
                                (e.perf_ms, e.hbm_bytes, e.ddr_bytes, e.input_bytes, e.output_bytes,
                                 e.workset_bytes, e.workset_rows, e.ssd_bytes)))


# sharding type, its kernels, column width (or 0), and the cache load factor fused_uvm_caching is priced at (None:
# the table's; else one of its miss curve's, engine.clf.clf_geometries)


class _PriceCache:
    """Priced geometries by (table, constraints, topology), least recently used dropped first: an interactive
    session that edits one table re-prices only that table. cache_info() counts tables, as lru_cache does."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self.data: OrderedDict[tuple, dict[Geometry, Priced]] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: tuple) -> dict[Geometry, Priced] | None:
        entry = self.data.get(key)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
            self.data.move_to_end(key)
        return entry

    def put(self, key: tuple, entry: dict[Geometry, Priced]) -> None:
        self.data[key] = entry
        self.data.move_to_end(key)
        while len(self.data) > self.maxsize:
            self.data.popitem(last=False)

    def cache_info(self) -> _CacheInfo:
        return _CacheInfo(self.hits, self.misses, self.maxsize, len(self.data))

    def cache_clear(self) -> None:
        self.data.clear()
        self.hits = self.misses = 0


_CacheInfo = namedtuple("_CacheInfo", "hits misses maxsize currsize")
_priced = _PriceCache(maxsize=120_000)


def pricing_cache_info() -> _CacheInfo:
    """This process's pricing cache: hits, misses (tables priced), maxsize, currsize."""
    return _priced.cache_info()


def _price(cfg: Config, todo: list[tuple[int, Geometry]]) -> dict[tuple[int, Geometry], Priced]:
    """Price many tables' geometries in one vectorised pass per (sharding type, kernels). On a fleet of several
    device kinds the costs are the first kind's, and each option's cost on every other kind is priced too, as a
    factor (Option.kind_factor)."""
    topo = cfg.topology
    kinds = kind_topologies(topo)
    ref = kinds[0] if kinds else topo
    loads = {(i, clf): table_load(cfg.tables[i], cfg.constraint(cfg.tables[i].name), topo, clf)
             for i, clf in {(i, x[3]) for i, x in todo}}
    groups: dict[tuple[ShardingType, tuple[ComputeKernel, ...]], list] = {}  # (table, width, shapes, counts, n, clf)
    for i, (st, kernels, w, clf) in todo:
        shapes, counts, n = distinct_shapes(cfg.tables[i], st, topo, w)
        groups.setdefault((st, kernels), []).append((i, w, shapes, counts, n, clf))
    out = {}
    for (st, kernels), items in groups.items():
        sizes_l, owner_l, shapes_l, counts_l, n_l = [], [], [], [], []
        for i, _, sh, c, n, clf in items:
            sizes_l.append(len(c))
            owner_l += [(i, clf)] * len(c)
            shapes_l += sh
            counts_l += c
            n_l += [n] * len(c)
        sizes = np.array(sizes_l, dtype=np.int64)
        shapes = np.array(shapes_l, dtype=np.float64).reshape(-1, 2)
        counts = np.array(counts_l, dtype=np.float64)
        tables = list(dict.fromkeys(owner_l))  # (table, clf) in first-seen order
        col = {key: k for k, key in enumerate(tables)}
        pieces = pieces_for([cfg.tables[i] for i, _ in tables], [loads[key] for key in tables], ref,
                            np.array([col[key] for key in owner_l], dtype=np.int64), shapes[:, 0], shapes[:, 1],
                            np.array(n_l, dtype=np.int64))
        ests = estimate_pieces(pieces, ref, st, list(kernels))
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        summary = np.empty((len(items), len(ests), 6))
        for k, e in enumerate(ests):
            cost = e.cost_ms
            hbm, ddr = e.hbm_bytes.astype(np.float64), e.ddr_bytes.astype(np.float64)
            summary[:, k] = np.stack([np.add.reduceat(cost * counts, starts), np.maximum.reduceat(cost, starts),
                                      np.add.reduceat(hbm * counts, starts), np.add.reduceat(ddr * counts, starts),
                                      np.maximum.reduceat(hbm, starts), np.maximum.reduceat(ddr, starts)], axis=1)
        factors = _kind_factors(pieces, kinds, st, kernels, counts, starts, summary)
        for j, ((i, w, _, c, n, clf), lo, size) in enumerate(zip(items, starts.tolist(), sizes.tolist())):
            out[(i, (st, kernels, w, clf))] = Priced(cfg.tables[i], topo, st, w, n, c, summary, j, ests, lo,
                                                     lo + size, clf, factors)
    return out


class OptionLists(list):
    """Per table, its options; `summary` holds every option's totals (Option.summary) as one (options, 6) array,
    in option order, and `table` each option's table, so that strategy.option_arrays need not visit them."""

    summary: np.ndarray | None = None
    table: np.ndarray | None = None


def all_table_options(cfg: Config, deadline: float = float("inf"), budget_s: float = 0.0) -> OptionLists:
    """Every table's options, priced in one vectorised pass per sharding type (what an earlier call priced for the
    same table, constraints and topology is reused). The clock is read every 256 tables against `deadline`, a
    safety stop (budget_s seconds after the start) that ends pricing with an error saying how far it got."""
    topo = cfg.topology
    geoms, entries, todo = [], [], []
    for i, table in enumerate(cfg.tables):
        if i % 256 == 255 and (now := time.perf_counter()) > deadline:
            raise PlanningError(
                f"Planning stopped at the time budget ({budget_s:g} s) while pricing the tables' options "
                f"({i} of {len(cfg.tables)} done; the budget was found passed {now - deadline + budget_s:.3g} s into "
                "planning).", fixes=("raise the time budget (--time-budget)",))
        g = table_geometries(cfg, i)
        geoms.append(g)
        entry = _priced.get((table, cfg.constraint(table.name), topo))
        entries.append(entry)
        if entry is None:
            todo.extend((i, x) for x in g)
    priced = _price(cfg, todo)
    out = OptionLists()
    arrays: dict[int, int] = {}  # id of a summary array -> its number
    summaries: list[np.ndarray] = []
    rows: list[tuple[int, int, int, int]] = []  # per geometry: its summary array, item, kernels, table
    for i, (g, entry) in enumerate(zip(geoms, entries)):
        if entry is None:
            entry = {x: priced[(i, x)] for x in g}
            table = cfg.tables[i]
            _priced.put((table, cfg.constraint(table.name), topo), entry)
        opts = []
        for x in g:
            st, kernels = x[0], x[1]
            p = entry[x]
            a = arrays.get(id(p.summary))
            if a is None:
                a = arrays[id(p.summary)] = len(summaries)
                summaries.append(p.summary)
            opts += [Option(i, st, kernel, priced=p, k=k) for k, kernel in enumerate(kernels)]
            rows.append((a, p.item, len(kernels), i))
        out.append(opts)
    if topo.world_size == 1:
        out[:] = [_dedupe_single_rank(o) for o in out]
        return out
    which, items, nk, owner = np.array(rows, dtype=np.int64).reshape(-1, 4).T
    which, items, owner = np.repeat(which, nk), np.repeat(items, nk), np.repeat(owner, nk)
    kernel = np.arange(len(which)) - np.repeat(np.cumsum(nk) - nk, nk)
    out.summary = np.empty((len(which), 6))
    for a, arr in enumerate(summaries):
        at = which == a
        out.summary[at] = arr[items[at], kernel[at]]
    out.table = np.array(owner, dtype=np.int64)
    return out


def _kind_factors(pieces, kinds: tuple[Topology, ...], st: ShardingType, kernels: tuple[ComputeKernel, ...],
                  counts: np.ndarray, starts: np.ndarray, summary: np.ndarray) -> np.ndarray | None:
    """[item, kernel, kind]: each geometry's summed cost priced on each device kind over its cost on the first
    (summary[:, kernel, 0]); None with fewer than two kinds."""
    if len(kinds) < 2:
        return None
    out = np.ones((summary.shape[0], summary.shape[1], len(kinds)))
    for d, td in enumerate(kinds[1:], start=1):
        for k, e in enumerate(estimate_pieces(pieces, td, st, list(kernels))):
            ref = summary[:, k, 0]
            out[:, k, d] = np.divide(np.add.reduceat(e.cost_ms * counts, starts), ref, out=np.ones(len(ref)),
                                     where=ref > 0)
    return out


def table_options(cfg: Config, i: int) -> list[Option]:
    """One table's options (all_table_options for one table)."""
    g = table_geometries(cfg, i)
    table = cfg.tables[i]
    key = (table, cfg.constraint(table.name), cfg.topology)
    entry = _priced.get(key)
    if entry is None:
        priced = _price(cfg, [(i, x) for x in g])
        entry = {x: priced[(i, x)] for x in g}
        _priced.put(key, entry)
    opts = [Option(i, x[0], kernel, priced=entry[x], k=k) for x in g for k, kernel in enumerate(x[1])]
    return _dedupe_single_rank(opts) if cfg.topology.world_size == 1 else opts


def _dedupe_single_rank(options: list[Option]) -> list[Option]:
    """On one rank every sharding puts the whole table on rank 0: keep the first of each geometry."""
    seen, out = set(), []
    for o in options:
        key = (o.kernel, o.sizes.tobytes(), o.sharding_type is ShardingType.DATA_PARALLEL, o.clf)  # one rank: one shard
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out
