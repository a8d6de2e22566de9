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


@dataclass(frozen=True)
class Option:
    """One way to shard one table, with its per-shard estimates."""

    table: int  # index into config.tables
    sharding_type: ShardingType
    kernel: ComputeKernel
    offsets: np.ndarray  # (k, 2) int
    sizes: np.ndarray  # (k, 2) int
    est: ShardEstimates

    @property
    def num_shards(self) -> int:
        return len(self.sizes)

    @cached_property
    def cost_ms(self) -> np.ndarray:
        return self.est.cost_ms

    @cached_property
    def total_cost_ms(self) -> float:
        return float(self.cost_ms.sum())

    @cached_property
    def max_shard_cost_ms(self) -> float:
        return float(self.cost_ms.max())

    @cached_property
    def total_hbm_bytes(self) -> float:
        return float(self.est.hbm_bytes.sum())

    @property
    def label(self) -> str:
        w = f" width {int(self.sizes[0][1])}" if self.sharding_type.splits_columns else ""
        return f"{self.sharding_type.value}/{self.kernel.value}{w}"


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


@lru_cache(maxsize=20_000)
def _priced(table: TableConfig, c: Constraints, topo: Topology, st: ShardingType, kernels: tuple[ComputeKernel, ...],
            width: int) -> tuple[np.ndarray, np.ndarray, list[ShardEstimates]]:
    """Geometry and estimates depend only on the table, its constraints and the topology: an interactive
    session that edits one table re-prices only that table. The arrays are shared: never mutate them."""
    offsets, sizes = geometry(table, st, topo, width)
    return offsets, sizes, estimate_kernels(table, c, topo, st, list(kernels), sizes[:, 0], sizes[:, 1])


def make_options(cfg: Config, i: int, st: ShardingType, kernels: list[ComputeKernel], width: int = 0) -> list[Option]:
    """Options of one geometry, one per kernel (the geometry is computed once)."""
    table = cfg.tables[i]
    offsets, sizes, ests = _priced(table, cfg.constraint(table.name), cfg.topology, st, tuple(kernels), width)
    return [Option(i, st, k, offsets, sizes, e) for k, e in zip(kernels, ests)]


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
        key = (o.kernel, o.sizes.tobytes(), o.sharding_type is ShardingType.DATA_PARALLEL)
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out
