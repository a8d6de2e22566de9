"""A table's shard geometries: TorchRec's shard sizes and offsets for each sharding type (exactly as its
calculate_shard_sizes_and_offsets in sharding_plan.py cuts them, so a plan converts to a ShardingPlan that
DistributedModelParallel accepts), the sharding types and kernels a table's constraints allow, and the geometries
engine.enumerate prices (a geometry: sharding type, the kernels allowed for it, column width, cache load factor).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional

import numpy as np

from engine import tiers, virtual, widths
from engine.clf import clf_geometries
from engine.errors import PlanningError
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

# What TorchRec's EmbeddingBagCollectionSharder offers by default on each device; grid_shard only when a table's
# constraints list it (TorchRec's EmbeddingEnumerator._filter_sharding_types drops it otherwise).
DEFAULT_SHARDING_TYPES = {
    Device.CUDA: tuple(st for st in ShardingType if st is not ShardingType.GRID_SHARD),
    Device.CPU: (ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE,
                 ShardingType.TABLE_COLUMN_WISE),
}
Geometry = tuple[ShardingType, tuple[ComputeKernel, ...], int, Optional[float]]


def row_split(rows: int, parts: int) -> np.ndarray:
    """TorchRec's row split: ceil(rows/parts) per shard, the remainder last, then empty shards."""
    block = math.ceil(rows / parts)
    return np.clip(rows - np.arange(parts) * block, 0, block)


def cw_width(table: TableConfig, c: Constraints) -> int:
    """TorchRec's column-wise block (engine.widths.cw_block): the first multiple of 4 from min_partition (default
    128) up that divides the dim, else the whole dim."""
    return widths.cw_block(table.embedding_dim, c.min_partition)


def cw_widths(table: TableConfig, c: Constraints, topo: Topology) -> list[int]:
    """Widths to try: TorchRec's block for the user's min_partition when given, else TorchRec's default plus the
    divisors of the dim that cut it into 2..world_size shards (engine.widths.cw_widths)."""
    return widths.cw_widths(table.embedding_dim, c.min_partition, topo.world_size)


def geometry(table: TableConfig, st: ShardingType, topo: Topology, width: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) of the shards, as (k, 2) arrays; data_parallel gives one full replica per rank."""
    R, D = table.num_embeddings, table.embedding_dim
    if st is ShardingType.TABLE_WISE:
        return np.array([[0, 0]]), np.array([[R, D]])
    if st is ShardingType.DATA_PARALLEL:
        return np.zeros((topo.world_size, 2), dtype=np.int64), np.tile([R, D], (topo.world_size, 1))
    if st.splits_rows:
        parts = topo.world_size if st is ShardingType.ROW_WISE else topo.local_world_size
        buckets = virtual.buckets_of(table) if st is ShardingType.ROW_WISE else None  # TorchRec cuts row_wise only
        rows = row_split(R, parts) if buckets is None else virtual.bucket_rows(R, buckets, parts)
        starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
        return np.stack([starts, np.zeros(parts, dtype=np.int64)], 1), np.stack([rows, np.full(parts, D)], 1)
    if st is ShardingType.GRID_SHARD:  # TorchRec's _calculate_grid_shard_sizes_and_offsets: piece by piece, each
        rows = row_split(R, topo.local_world_size)  # row-split over one host's ranks
        starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
        k, n = D // width, len(rows)
        return (np.stack([np.tile(starts, k), np.repeat(np.arange(k) * width, n)], 1),
                np.stack([np.tile(rows, k), np.full(k * n, width)], 1))
    k = D // width
    return np.stack([np.zeros(k, dtype=np.int64), np.arange(k) * width], 1), np.tile([R, width], (k, 1))


def _widths(table: TableConfig, c: Constraints, topo: Topology, st: ShardingType) -> list[int]:
    """Column widths to price: column splits cut into up to world_size pieces, grid_shard into up to one piece per
    host (TorchRec wraps more pieces than hosts around the hosts)."""
    if st is ShardingType.GRID_SHARD:
        return widths.cw_widths(table.embedding_dim, c.min_partition, topo.num_hosts)
    return cw_widths(table, c, topo) if st.splits_columns else [0]


def allowed(table: TableConfig, c: Constraints, topo: Topology) -> list[tuple[ShardingType, ComputeKernel]]:
    types = c.sharding_types or DEFAULT_SHARDING_TYPES[topo.compute_device]
    kernels = MODEL_PARALLEL_KERNELS[topo.compute_device]
    if c.compute_kernels is not None:  # the offload tiers only where listed (TorchRec's GUARDED_COMPUTE_KERNELS)
        kernels = tuple(k for k in kernels if k in c.compute_kernels) + tiers.guarded(c.compute_kernels, topo)
    pairs = []
    for st in types:
        if st is ShardingType.DATA_PARALLEL:
            pairs.append((st, ComputeKernel.DENSE))  # TorchRec runs data_parallel with the dense kernel only
        else:
            pairs.extend((st, k) for k in kernels)
    return pairs


def distinct_shapes(table: TableConfig, st: ShardingType, topo: Topology,
                    width: int = 0) -> tuple[list[tuple[int, int]], list[int], int]:
    """The geometry's distinct shard shapes (rows, cols), how many shards have each, and the number of shards,
    without listing the shards: a row split has full blocks, one shorter remainder, then empty shards."""
    R, D = table.num_embeddings, table.embedding_dim
    if st is ShardingType.TABLE_WISE:
        return [(R, D)], [1], 1
    if st is ShardingType.DATA_PARALLEL:
        return [(R, D)], [topo.world_size], topo.world_size
    buckets = virtual.buckets_of(table) if st is ShardingType.ROW_WISE else None
    if buckets is not None:  # whole buckets, one more on the first buckets % ranks (engine.virtual.bucket_rows)
        q, extra = divmod(buckets, topo.world_size)
        size = R // buckets
        shapes, counts = [((q + 1) * size, D), (q * size, D)], [extra, topo.world_size - extra]
        return [s for s, n in zip(shapes, counts) if n], [n for n in counts if n], topo.world_size
    if st.splits_rows or st is ShardingType.GRID_SHARD:
        parts = topo.world_size if st is ShardingType.ROW_WISE else topo.local_world_size
        cols, k = (D, 1) if st.splits_rows else (width, D // width)
        block = -(-R // parts)
        full, rem = divmod(R, block)
        shapes, counts = [(block, cols)], [full]
        if rem:
            shapes.append((rem, cols))
            counts.append(1)
        if parts - full - (rem > 0):
            shapes.append((0, cols))
            counts.append(parts - full - (rem > 0))
        return shapes * k, counts * k, parts * k  # grid_shard: the pieces' shapes in shard order, piece by piece
    return [(R, width)], [D // width], D // width


def table_geometries(cfg: Config, i: int) -> list[Geometry]:
    """The table's geometries to price, each with the kernels allowed for it."""
    table = cfg.tables[i]
    c = cfg.constraint(table.name)
    kernels = c.compute_kernels  # the virtual-table kernels for virtual tables only (DMP runs no other)
    if kernels and not table.use_virtual_table:
        kernels = tuple(k for k in kernels if not k.virtual_only)
    out = geometries_of(table.embedding_dim, c.sharding_types, kernels, c.min_partition, cfg.topology)
    if c.workload is not None:
        out = clf_geometries(table, c, out)
    if not widths.runs_fused(table.embedding_dim):
        check_dense_only(cfg, table, c, out)
    if not out:
        kinds = ", ".join(k.value for k in c.compute_kernels or ())
        no_ssd = tiers.KV in (c.compute_kernels or ()) and cfg.topology.compute_device is Device.CUDA
        virtual = kernels != c.compute_kernels  # virtual-table kernels left out: the table is not declared virtual
        raise PlanningError(
            f"Table {table.name!r}: its constraints exclude every option (compute_kernels [{kinds}] are not "
            f"available for sharding types {[s.value for s in c.sharding_types or ()]} on "
            f"{cfg.topology.compute_device.value}{'; key_value needs SSD and no rank has any' if no_ssd else ''}"
            f"{'; the virtual-table kernels run only on tables declared virtual' if virtual else ''}).",
            tables=(table.name,),
            fixes=(f"allow 'fused' in constraints.{table.name}.compute_kernels",
                   *(("or give the ranks SSD (topology.ssd_cap)",) if no_ssd else ()),
                   *((f"or set use_virtual_table to true on table {table.name!r}",) if virtual else ()),
                   f"or add 'data_parallel' to constraints.{table.name}.sharding_types"),
        )
    return out


def check_dense_only(cfg: Config, table: TableConfig, c: Constraints, out: list[Geometry]) -> None:
    """A table whose dim only data_parallel runs: refused, saying why, when its constraints rule that out."""
    topo = cfg.topology
    pinned = set(c.ranks if c.ranks is not None else range(topo.world_size))
    if c.hosts is not None:
        pinned &= {h * topo.local_world_size + r for h in c.hosts for r in range(topo.local_world_size)}
    if out and len(pinned) == topo.world_size:
        return
    why = (f"its constraints rule out data_parallel (sharding_types "
           f"[{', '.join(s.value for s in c.sharding_types or ())}])" if not out else
           f"data_parallel holds a copy on every rank, and constraints.{table.name} pins it to fewer ranks")
    fix = (f"add 'data_parallel' to constraints.{table.name}.sharding_types" if not out else
           f"remove the ranks and hosts pins of constraints.{table.name}")
    raise PlanningError(f"Table {table.name!r}: {widths.dim_note(table.embedding_dim)}, and {why}.",
                        tables=(table.name,),
                        fixes=(fix, f"or set tables[{cfg.tables.index(table)}].embedding_dim to a multiple of 4"))


@lru_cache(maxsize=4096)
def geometries_of(dim: int, sharding_types: tuple | None, compute_kernels: tuple | None, min_partition: int | None,
                   topo: Topology) -> list[Geometry]:
    """What table_geometries lists depends only on these (tables of one dim and constraints share it): never mutate."""
    table = TableConfig(name="-", num_embeddings=1, embedding_dim=dim, feature_names=("-",))
    c = Constraints(sharding_types=sharding_types, compute_kernels=compute_kernels, min_partition=min_partition)
    by_type: dict[ShardingType, list[ComputeKernel]] = {}
    for st, kernel in allowed(table, c, topo):
        if kernel is not ComputeKernel.DENSE and not widths.runs_fused(dim):
            continue  # fbgemm's fused kernels need a multiple of 4 (engine.widths); data_parallel runs dense
        by_type.setdefault(st, []).append(kernel)
    out = []
    for st, kernels in by_type.items():
        for w in _widths(table, c, topo, st):
            out.append((st, tuple(kernels), w, None))
    return out
