"""Sharding options of a table: which sharding type and kernel, cut into which shards, at what estimate.

Shard geometry follows TorchRec's calculate_shard_sizes_and_offsets (sharding_plan.py) exactly, so a plan
converts to a ShardingPlan that DistributedModelParallel accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from engine import constants as C
from engine.errors import PlanningError
from engine.estimate import ShardEstimates, estimate_kernels
from engine.types import (
    MODEL_PARALLEL_KERNELS,
    ComputeKernel,
    Config,
    Constraints,
    Device,
    ShardingType,
    TableConfig,
    Topology,
)

# What TorchRec's EmbeddingBagCollectionSharder offers by default on each device.
DEFAULT_SHARDING_TYPES = {
    Device.CUDA: tuple(ShardingType),
    Device.CPU: (ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE,
                 ShardingType.TABLE_COLUMN_WISE),
}

# The smallest column-wise width the width search tries (FBGEMM rows are 4-float aligned; narrower
# shards pay the quarter-block penalty and repeat the input read once more per shard).
MIN_SEARCH_CW_DIM = 32


class Option:
    """One way to shard one table, with its per-shard estimates.

    Built from a Priced geometry, an option holds figures for its distinct shard shapes only (a row-wise or
    data-parallel option on 1,024 ranks has at most three): its totals and largest piece come from those, and
    the per-shard arrays (offsets, sizes, est) are made when placement first asks for them. So enumerating
    every option of 10,000 tables on 1,024 ranks does not hold tables x ranks figures. Built by hand (tests),
    it takes the per-shard arrays directly.
    """

    __slots__ = ("table", "sharding_type", "kernel", "num_shards", "total_cost_ms", "max_shard_cost_ms",
                 "total_hbm_bytes", "total_ddr_bytes", "piece_hbm_bytes", "piece_ddr_bytes",
                 "_priced", "_k", "_offsets", "_sizes", "_est")

    def __init__(self, table: int, sharding_type: ShardingType, kernel: ComputeKernel,
                 offsets: np.ndarray | None = None, sizes: np.ndarray | None = None,
                 est: ShardEstimates | None = None, priced: Priced | None = None, k: int = 0):
        self.table, self.sharding_type, self.kernel = table, sharding_type, kernel
        self._offsets, self._sizes, self._est = offsets, sizes, est
        self._priced, self._k = priced, k
        if priced is not None:
            self.num_shards = priced.num_shards
            (self.total_cost_ms, self.max_shard_cost_ms, self.total_hbm_bytes, self.total_ddr_bytes,
             self.piece_hbm_bytes, self.piece_ddr_bytes) = priced.summary[k]
        else:
            cost = est.cost_ms
            self.num_shards = len(sizes)
            self.total_cost_ms, self.max_shard_cost_ms = float(cost.sum()), float(cost.max())
            self.total_hbm_bytes, self.total_ddr_bytes = float(est.hbm_bytes.sum()), float(est.ddr_bytes.sum())
            self.piece_hbm_bytes, self.piece_ddr_bytes = float(est.hbm_bytes.max()), float(est.ddr_bytes.max())

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
        return self.est.cost_ms

    def same_shards(self, other: Option) -> bool:
        """Whether the two options cut the table into the same shards (options of one geometry share it)."""
        if self._priced is not None and other._priced is not None:
            return self._priced is other._priced
        return self.sizes.shape == other.sizes.shape and bool((self.sizes == other.sizes).all())

    @property
    def label(self) -> str:
        if not self.sharding_type.splits_columns:
            return f"{self.sharding_type.value}/{self.kernel.value}"
        width = self._priced.width if self._priced is not None else int(self.sizes[0][1])
        return f"{self.sharding_type.value}/{self.kernel.value} width {width}"


def row_split(rows: int, parts: int) -> np.ndarray:
    """TorchRec's row split: ceil(rows/parts) per shard, the remainder last, then empty shards."""
    block = math.ceil(rows / parts)
    return np.clip(rows - np.arange(parts) * block, 0, block)


def cw_width(table: TableConfig, c: Constraints) -> int:
    """TorchRec's column-wise block: min_partition (default 128) if it divides the dim, else the whole dim."""
    w = min(c.min_partition or C.MIN_CW_DIM, table.embedding_dim)
    return w if table.embedding_dim % w == 0 else table.embedding_dim


def cw_widths(table: TableConfig, c: Constraints, topo: Topology) -> list[int]:
    """Widths to try: the user's min_partition exactly when given, else TorchRec's default plus the
    divisors of the dim that cut it into 2..world_size shards."""
    default = cw_width(table, c)
    if c.min_partition is not None:
        return [default]
    d = table.embedding_dim
    widths = {default}
    for k in range(2, min(topo.world_size, d // MIN_SEARCH_CW_DIM) + 1):
        if d % k == 0 and (d // k) % 4 == 0 and d // k >= MIN_SEARCH_CW_DIM:
            widths.add(d // k)
    return sorted(widths, reverse=True)


def geometry(table: TableConfig, st: ShardingType, topo: Topology, width: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) of the shards, as (k, 2) arrays; data_parallel gives one full replica per rank."""
    R, D = table.num_embeddings, table.embedding_dim
    if st is ShardingType.TABLE_WISE:
        return np.array([[0, 0]]), np.array([[R, D]])
    if st is ShardingType.DATA_PARALLEL:
        return np.zeros((topo.world_size, 2), dtype=np.int64), np.tile([R, D], (topo.world_size, 1))
    if st.splits_rows:
        parts = topo.world_size if st is ShardingType.ROW_WISE else topo.local_world_size
        rows = row_split(R, parts)
        starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
        return np.stack([starts, np.zeros(parts, dtype=np.int64)], 1), np.stack([rows, np.full(parts, D)], 1)
    k = D // width
    return np.stack([np.zeros(k, dtype=np.int64), np.arange(k) * width], 1), np.tile([R, width], (k, 1))


def allowed(table: TableConfig, c: Constraints, topo: Topology) -> list[tuple[ShardingType, ComputeKernel]]:
    types = c.sharding_types or DEFAULT_SHARDING_TYPES[topo.compute_device]
    kernels = MODEL_PARALLEL_KERNELS[topo.compute_device]
    if c.compute_kernels is not None:
        kernels = tuple(k for k in kernels if k in c.compute_kernels)
    pairs = []
    for st in types:
        if st is ShardingType.DATA_PARALLEL:
            pairs.append((st, ComputeKernel.DENSE))  # TorchRec runs data_parallel with the dense kernel only
        else:
            pairs.extend((st, k) for k in kernels)
    return pairs


def distinct_shapes(table: TableConfig, st: ShardingType, topo: Topology,
                    width: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """The geometry's distinct shard shapes (u, 2), how many shards have each, and the number of shards, without
    listing the shards: a row split has full blocks, one shorter remainder, then empty shards."""
    R, D = table.num_embeddings, table.embedding_dim
    if st is ShardingType.TABLE_WISE:
        return np.array([[R, D]]), np.array([1]), 1
    if st is ShardingType.DATA_PARALLEL:
        return np.array([[R, D]]), np.array([topo.world_size]), topo.world_size
    if st.splits_rows:
        parts = topo.world_size if st is ShardingType.ROW_WISE else topo.local_world_size
        block = math.ceil(R / parts)
        full, rem = divmod(R, block)
        shapes, counts = [[block, D]], [full]
        if rem:
            shapes.append([rem, D])
            counts.append(1)
        if parts - full - (rem > 0):
            shapes.append([0, D])
            counts.append(parts - full - (rem > 0))
        return np.array(shapes), np.array(counts), parts
    return np.array([[R, width]]), np.array([D // width]), D // width


@dataclass(frozen=True, eq=False)
class Priced:
    """One geometry of one table, priced for each kernel on its distinct shard shapes only."""

    table: TableConfig
    topo: Topology
    sharding_type: ShardingType
    width: int
    num_shards: int
    counts: np.ndarray  # shards of each distinct shape, in shard order (full blocks, remainder, empty)
    ests: tuple[ShardEstimates, ...]  # per kernel, over the distinct shapes
    summary: tuple[tuple[float, ...], ...]  # per kernel: total and largest-piece cost, HBM and DDR totals and pieces

    @cached_property
    def geometry(self) -> tuple[np.ndarray, np.ndarray]:
        return geometry(self.table, self.sharding_type, self.topo, self.width)

    def per_shard(self, k: int) -> ShardEstimates:
        """Kernel k's estimates per shard: read-only views where every shard is alike, else expanded."""
        e = self.ests[k]
        arrays = (e.perf_ms, e.hbm_bytes, e.ddr_bytes, e.input_bytes, e.output_bytes)
        if len(self.counts) == 1:
            return ShardEstimates(*(np.broadcast_to(a[0], (self.num_shards,) + a.shape[1:]) for a in arrays))
        inverse = np.repeat(np.arange(len(self.counts)), self.counts)  # the distinct shapes come in shard order
        return ShardEstimates(*(a[inverse] for a in arrays))


def _summary(e: ShardEstimates, counts: np.ndarray) -> tuple[float, ...]:
    cost = e.cost_ms
    hbm, ddr = e.hbm_bytes.astype(np.float64), e.ddr_bytes.astype(np.float64)
    return (float(cost @ counts), float(cost.max()), float(hbm @ counts), float(ddr @ counts), float(hbm.max()),
            float(ddr.max()))


@lru_cache(maxsize=20_000)
def _priced(table: TableConfig, c: Constraints, topo: Topology, st: ShardingType, kernels: tuple[ComputeKernel, ...],
            width: int) -> Priced:
    """Geometry and estimates depend only on the table, its constraints and the topology: an interactive
    session that edits one table re-prices only that table. The arrays are shared: never mutate them."""
    shapes, counts, n = distinct_shapes(table, st, topo, width)
    ests = estimate_kernels(table, c, topo, st, list(kernels), shapes[:, 0], shapes[:, 1], num_shards=n)
    counts = counts.astype(np.float64)
    return Priced(table, topo, st, width, n, counts.astype(np.int64), tuple(ests),
                  tuple(_summary(e, counts) for e in ests))


def make_options(cfg: Config, i: int, st: ShardingType, kernels: list[ComputeKernel], width: int = 0) -> list[Option]:
    """Options of one geometry, one per kernel (the geometry is priced once)."""
    table = cfg.tables[i]
    priced = _priced(table, cfg.constraint(table.name), cfg.topology, st, tuple(kernels), width)
    return [Option(i, st, kernel, priced=priced, k=k) for k, kernel in enumerate(kernels)]


def table_options(cfg: Config, i: int) -> list[Option]:
    table = cfg.tables[i]
    c = cfg.constraint(table.name)
    pairs = allowed(table, c, cfg.topology)
    if not pairs:
        kinds = ", ".join(k.value for k in c.compute_kernels or ())
        raise PlanningError(
            f"Table {table.name!r}: its constraints exclude every option (compute_kernels [{kinds}] are not "
            f"available for sharding types {[s.value for s in c.sharding_types or ()]} on "
            f"{cfg.topology.compute_device.value}).",
            tables=(table.name,),
            fixes=(f"allow 'fused' in constraints.{table.name}.compute_kernels",
                   f"or add 'data_parallel' to constraints.{table.name}.sharding_types"),
        )
    by_type: dict[ShardingType, list[ComputeKernel]] = {}
    for st, kernel in pairs:
        by_type.setdefault(st, []).append(kernel)
    out = []
    for st, kernels in by_type.items():
        for w in cw_widths(table, c, cfg.topology) if st.splits_columns else [0]:
            out.extend(make_options(cfg, i, st, kernels, w))
    if cfg.topology.world_size == 1:
        out = _dedupe_single_rank(out)
    return out


def _dedupe_single_rank(options: list[Option]) -> list[Option]:
    """On one rank every sharding puts the whole table on rank 0: keep the first of each geometry."""
    seen, out = set(), []
    for o in options:
        key = (o.kernel, o.sizes.tobytes(), o.sharding_type is ShardingType.DATA_PARALLEL)  # one rank: one shard
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out
