"""Storage and cost of shards, vectorised over the shards of one table option.

Formulas follow TorchRec's planner (shard_estimators.py and estimator/estimator.py, 1.8.0) so that our
numbers are comparable with TorchRec's for the same topology. Deliberate differences, each documented in
docs/estimator.md: optimizer state is counted from topology.optimizer; row-wise input distribution is split
across the shards instead of charged in full to each; data-parallel all-reduce uses the ring formula.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engine import constants as C
from engine import limits as L
from engine import fields as F
from engine import tiers
from engine.profile import active, piece_perf
from engine.replicas import sync_ms, synced_bytes
from engine.terms import CpuTerms, terms_of
from engine.cachecurve import miss_rate
from engine.workset import WorksetPrice, distinct_array, pressure, workset_price
from engine.types import ComputeKernel, Constraints, Device, Perf, PoolingType, ShardingType, TableConfig, Topology

N_PERF = 6  # columns of a perf array, in Perf's field order


@dataclass(frozen=True)
class ShardEstimates:
    """Per-shard estimates of one option: arrays of length k (the number of shards or replicas)."""

    perf_ms: np.ndarray  # (k, 6): fwd_compute, fwd_comms, bwd_compute, bwd_comms, input_dist, prefetch
    hbm_bytes: np.ndarray  # (k,)
    ddr_bytes: np.ndarray  # (k,)
    input_bytes: np.ndarray  # (k,)
    output_bytes: np.ndarray  # (k,)
    workset_bytes: np.ndarray  # (k,): bytes a step touches (CPU; zeros elsewhere), priced per rank (rank_workset_ms)
    workset_rows: np.ndarray  # (k,): the distinct rows those bytes are
    ssd_bytes: np.ndarray | None = None  # (k,): key_value's backing store (engine.tiers); None: the kernel holds none

    @property
    def cost_ms(self) -> np.ndarray:
        return self.perf_ms.sum(axis=1)


@dataclass(frozen=True)
class TableLoad:
    """What one table asks of a training step, independent of how it is sharded."""

    batch_inputs: float  # ids looked up per rank-local batch, summed over the table's features
    batch_outputs: float  # pooled rows produced per rank-local batch
    is_weighted: bool
    cache_load_factor: float
    zipf: float = 0.0  # the ids' Zipf exponent over the rows (0: uniform)
    # fused_uvm_caching's hit rate: 1 - the miss rate the table's measured curve gives at cache_load_factor; None
    # without a curve: the cache load factor itself, as TorchRec prices it (engine.workload_block.miss_rate)
    cache_hit: float | None = None
    scale: float | None = None  # the table's measured / estimated compute (None: not measured; engine.table_costs)
    col_exponent: float | None = None  # a column piece's measured compute: (its column share)^this of the table's

    @property
    def hit_rate(self) -> float:
        return self.cache_load_factor if self.cache_hit is None else self.cache_hit


def table_load(table: TableConfig, c: Constraints, topo: Topology, clf: float | None = None) -> TableLoad:
    """What the table asks of a step; clf: a cache load factor other than the constraint's (a planner's choice)."""
    n = len(table.feature_names)
    pf = F.pooling_factors(c, n)
    npool = F.num_poolings(c, n)
    bs = F.batch_sizes(c, n, topo.batch_size)
    inputs = sum(p * q * b for p, q, b in zip(pf, npool, bs))
    if table.pooling is PoolingType.NONE:
        outputs = inputs
    else:
        outputs = sum(min(1.0, p) * q * b for p, q, b in zip(pf, npool, bs))
    if clf is None:
        clf = F.cache_load_factor(c)
    hit = None if c.workload is None else 1.0 - miss_rate(c.workload, table.num_embeddings, clf)
    return TableLoad(inputs, outputs, c.is_weighted, clf, c.zipf_exponent, hit, c.compute_scale, c.column_exponent)


@dataclass(frozen=True)
class Pieces:
    """Shard shapes to price, possibly of many tables at once (one sharding type, one topology): per row, the
    shape and what its table asks of a step. Every figure of a row depends only on that row, so a geometry may be
    priced on its distinct shapes only, with num_shards saying how many shards the geometry has."""

    rows: np.ndarray  # float
    cols: np.ndarray
    num_shards: np.ndarray  # shards of the row's geometry
    num_embeddings: np.ndarray  # the row's table
    embedding_dim: np.ndarray
    dtype_bytes: np.ndarray
    batch_inputs: np.ndarray
    batch_outputs: np.ndarray
    weighted: np.ndarray  # bool
    pooled: np.ndarray  # bool: pooling is not NONE
    clf: np.ndarray  # cache load factor
    state_multiplier: np.ndarray  # optimizer state per weight byte
    zipf: np.ndarray  # the table's ids' Zipf exponent (0: uniform)
    opt_work: np.ndarray  # the optimizer's update work per touched weight, bytes at the DDR bandwidth (CPU)
    opt_row_work: np.ndarray  # and per touched row
    cache_hit: np.ndarray  # fused_uvm_caching's hit rate (TableLoad.hit_rate)
    measured_hit: np.ndarray | float = np.nan  # the hit rate a miss curve gives (NaN: none; engine.tiers)
    scale: np.ndarray | float = np.nan  # measured / estimated compute of the row's table (NaN: not measured)
    col_exponent: np.ndarray | float = np.nan  # TableLoad.col_exponent (NaN: not measured)


def pieces_of(table: TableConfig, load: TableLoad, topo: Topology, rows: np.ndarray, cols: np.ndarray,
              num_shards: int | None = None) -> Pieces:
    """The shapes of one table as Pieces."""
    n = len(rows)
    full = np.full
    k, opt = terms_of(topo), topo.optimizer.value
    return Pieces(np.asarray(rows, dtype=np.float64), np.asarray(cols, dtype=np.float64),
                  full(n, len(rows) if num_shards is None else num_shards), full(n, float(table.num_embeddings)),
                  full(n, float(table.embedding_dim)), full(n, float(table.data_type.bytes)),
                  full(n, load.batch_inputs), full(n, load.batch_outputs), full(n, load.is_weighted),
                  full(n, table.pooling is not PoolingType.NONE), full(n, load.cache_load_factor),
                  full(n, topo.optimizer.state_multiplier(table.embedding_dim)), full(n, load.zipf),
                  full(n, k.optimizer_work(opt)), full(n, k.optimizer_row_work(opt)), full(n, load.hit_rate),
                  full(n, np.nan if load.cache_hit is None else load.cache_hit),
                  full(n, np.nan if load.scale is None else load.scale),
                  full(n, np.nan if load.col_exponent is None else load.col_exponent))


def pieces_for(tables: list[TableConfig], loads: list[TableLoad], topo: Topology, owner: np.ndarray,
               rows: np.ndarray, cols: np.ndarray, num_shards: np.ndarray) -> Pieces:
    """Pieces of many tables: row i is a shape of tables[owner[i]], whose load is loads[owner[i]]."""

    def per_row(values: list) -> np.ndarray:
        return np.array(values)[owner]

    k, opt = terms_of(topo), topo.optimizer.value

    return Pieces(np.asarray(rows, dtype=np.float64), np.asarray(cols, dtype=np.float64), num_shards,
                  per_row([float(t.num_embeddings) for t in tables]), per_row([float(t.embedding_dim) for t in tables]),
                  per_row([float(t.data_type.bytes) for t in tables]), per_row([x.batch_inputs for x in loads]),
                  per_row([x.batch_outputs for x in loads]), per_row([x.is_weighted for x in loads]),
                  per_row([t.pooling is not PoolingType.NONE for t in tables]),
                  per_row([x.cache_load_factor for x in loads]),
                  per_row([topo.optimizer.state_multiplier(t.embedding_dim) for t in tables]),
                  per_row([x.zipf for x in loads]), np.full(len(owner), k.optimizer_work(opt)),
                  np.full(len(owner), k.optimizer_row_work(opt)), per_row([x.hit_rate for x in loads]),
                  per_row([np.nan if x.cache_hit is None else x.cache_hit for x in loads]),
                  per_row([np.nan if x.scale is None else x.scale for x in loads]),
                  per_row([np.nan if x.col_exponent is None else x.col_exponent for x in loads]))


def device_bw(topo: Topology, kernel: ComputeKernel, hit: float, measured_hit: float = np.nan) -> float:
    """Effective lookup bandwidth (bytes/ms) of a kernel: TorchRec's kernel_bw_lookup. hit: fused_uvm_caching's hit
    rate, which TorchRec takes to be the cache load factor (TableLoad.hit_rate); the offload kernels: engine.tiers."""
    if tiers.is_offload(kernel) and topo.compute_device is Device.CUDA:
        return tiers.lookup_bw(topo, kernel, measured_hit)
    if topo.compute_device is Device.CPU:
        return topo.ddr_mem_bw * (0.5 if kernel is ComputeKernel.DENSE else 1.0)
    if kernel is ComputeKernel.DENSE:
        return 0.5 * topo.hbm_mem_bw
    if kernel is ComputeKernel.FUSED:
        return topo.hbm_mem_bw
    if kernel is ComputeKernel.FUSED_UVM:
        return topo.hbm_to_ddr_mem_bw / C.UVM_BW_DIVISOR
    return (hit * topo.hbm_mem_bw + (1 - hit) * topo.hbm_to_ddr_mem_bw) / C.UVM_BW_DIVISOR


def comms_bw(topo: Topology) -> float:
    return topo.inter_host_bw if topo.world_size > topo.local_world_size else topo.intra_host_bw


def block_penalty(cols: np.ndarray) -> np.ndarray:
    """FBGEMM's kernel uses 32 threads x 4 floats: narrow rows waste part of a block (TorchRec)."""
    return np.where(cols >= C.FULL_BLOCK_EMB_DIM, 1.0,
                    np.where(cols >= C.FULL_BLOCK_EMB_DIM // 2, C.HALF_BLOCK_PENALTY, C.QUARTER_BLOCK_PENALTY))


def decades(piece_bytes: np.ndarray) -> np.ndarray:
    """How many powers of ten each piece is above the CPU's cache (0 for a piece that fits in it)."""
    return np.log10(np.maximum(piece_bytes, C.CPU_CACHE_BYTES) / C.CPU_CACHE_BYTES)


def touched_rows(p: Pieces, ids: np.ndarray, local: bool) -> np.ndarray:
    """Expected distinct rows each piece touches in a step: its share of the table's distinct rows among the
    step's ids (`ids`: the table's global ids, or a data-parallel replica's local ones); hot rows are scattered
    over the rows (engine.workset)."""
    table_rows = p.num_embeddings
    distinct = distinct_array(ids, table_rows, p.zipf)
    share = np.where(table_rows > 0, p.rows / np.maximum(table_rows, 1.0), 0.0)
    return distinct if local else distinct * share


def cpu_terms(ids: np.ndarray, touched: np.ndarray, rows: np.ndarray, cols: np.ndarray, tdt: np.ndarray,
              read: np.ndarray, out: np.ndarray, opt_work: np.ndarray,
              opt_row_work: np.ndarray, k: CpuTerms) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward work of fbgemm's CPU kernels, in bytes at the DDR bandwidth (the terms k, defaults
    constants CPU_*): fixed work per id, the row per id (backward: the touched rows only, once each, as fbgemm sorts
    the ids), the pooled output, and the optimizer's update of each touched row. The rank's touched working set
    beyond the cache is priced per rank (rank_workset_ms)."""
    d = decades(rows * cols * tdt)
    per_id = k.id_work * (1.0 + C.CPU_FIXED_PER_DECADE * d)
    row = cols * tdt * (C.CPU_ROW_IN_CACHE + k.row_first_decade * np.minimum(d, 1.0)
                        + k.row_later_decades * np.maximum(d - 1.0, 0.0))
    base = read + ids * per_id + out * k.output_work
    fwd = base + ids * row
    bwd = (base + touched * row) * C.BWD_COMPUTE_MULTIPLIER + touched * (opt_row_work + cols * opt_work)
    return fwd, bwd


def working_set_bytes(p: Pieces, touched: np.ndarray) -> np.ndarray:
    """Bytes a step touches per piece: its touched rows' weights and fp32 optimizer state."""
    state_row = p.state_multiplier * p.embedding_dim * C.OPTIMIZER_STATE_BYTES * p.cols / np.maximum(
        p.embedding_dim, 1.0)
    return touched * (p.cols * p.dtype_bytes + state_row)


def perf_parts(table: TableConfig, load: TableLoad, topo: Topology, st: ShardingType,
               rows: np.ndarray, cols: np.ndarray, num_shards: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-shard time of one table's shards as `work / kernel bandwidth + fixed`: (work bytes, fixed ms)."""
    return pieces_perf_parts(pieces_of(table, load, topo, rows, cols, num_shards), topo, st)


def pieces_perf_parts(p: Pieces, topo: Topology, st: ShardingType) -> tuple[np.ndarray, np.ndarray]:
    """Per-row time as `work / kernel bandwidth + fixed`: (work bytes, fixed ms), both (rows, 6).
    Compute scales with the kernel's bandwidth; communication does not. A table whose compute was measured alone
    (Pieces.scale, engine.table_costs) has its forward and backward compute work scaled by it; where the tables'
    pressure on each other was measured too (engine.workset.WorksetPrice.ramp), each piece's own pressure comes
    off (pressure_alone_ms), no more than nine tenths of its compute. A column piece of a table whose half-width copy
    was measured too (Pieces.col_exponent) costs column_share of the table's scaled compute whole, in place of its
    share of the estimate's."""
    work, fixed = _perf_parts(p, topo, st)
    measured = _measured(p, len(work))
    if measured.any():
        scale = np.broadcast_to(np.asarray(p.scale, dtype=np.float64), (len(work),))
        work[measured, 0] *= scale[measured]
        work[measured, 2] *= scale[measured]
        narrow = _column_measured(p, st, len(work))
        if narrow.any():
            whole, _ = _perf_parts(replace(p, rows=p.num_embeddings, cols=p.embedding_dim), topo,
                                   ShardingType.TABLE_WISE)
            g = np.broadcast_to(np.asarray(p.col_exponent, dtype=np.float64), (len(work),))
            share = column_share(p.cols[narrow] / np.maximum(p.embedding_dim[narrow], 1.0), g[narrow])
            work[narrow, 0] = whole[narrow, 0] * scale[narrow] * share
            work[narrow, 2] = whole[narrow, 2] * scale[narrow] * share
    price = workset_price(topo)
    if price.ramp and len(work):
        ms = pressure_alone_ms(p, topo, st, price)
        compute = (work[:, 0] + work[:, 2]) / topo.ddr_mem_bw + fixed[:, 0] + fixed[:, 2]
        ms = np.maximum(ms, -0.9 * np.maximum(compute, 0.0))
        fixed[:, 0] += ms / 3.0  # compute, split forward : backward 1 : 2 as the rank's term is (add_workset)
        fixed[:, 2] += ms * 2.0 / 3.0
    return work, fixed


def _perf_parts(p: Pieces, topo: Topology, st: ShardingType) -> tuple[np.ndarray, np.ndarray]:
    W, L = topo.world_size, topo.local_world_size
    rows, cols = p.rows, p.cols
    tdt = p.dtype_bytes
    out_dt = tdt
    cbw = comms_bw(topo)
    n = len(rows)
    work, fixed = np.zeros((n, N_PERF)), np.zeros((n, N_PERF))
    weight_factor = np.where(p.weighted, 2.0, 1.0)
    kernel_factor = np.where(p.weighted, C.WEIGHTED_KERNEL_MULTIPLIER, 1.0)

    if st is ShardingType.DATA_PARALLEL:
        d = p.embedding_dim
        read = np.ceil(p.batch_inputs * C.INDEX_BYTES) * weight_factor
        table_bytes = p.num_embeddings * d * tdt
        fwd = (read + p.batch_inputs * d * tdt + p.batch_outputs * d * out_dt) * kernel_factor
        bwd = fwd * C.BWD_COMPUTE_MULTIPLIER
        if topo.num_hosts > 1:
            h = topo.num_hosts
            all_reduce = table_bytes * 2 * (h - 1) / h / topo.inter_host_bw
        else:
            all_reduce = table_bytes * 2 * (W - 1) / W / topo.intra_host_bw if W > 1 else np.zeros(n)
        if topo.compute_device is Device.CPU:
            touched = touched_rows(p, p.batch_inputs, local=True)
            cpu_f, cpu_b = cpu_terms(p.batch_inputs, touched, p.num_embeddings, d, tdt, read,
                                     p.batch_outputs * d * out_dt, p.opt_work, p.opt_row_work, terms_of(topo))
            fwd, bwd = cpu_f * kernel_factor, cpu_b * kernel_factor
        work[:, 0] = fwd
        work[:, 2] = bwd + table_bytes * C.DP_ELEMENTWISE_KERNELS_PERF_FACTOR
        fixed[:, 3] = all_reduce
        return work, fixed

    row_split = st.splits_rows or st is ShardingType.GRID_SHARD  # grid_shard: priced as TorchRec does, each piece
    if row_split:  # as a table_row_wise table of the piece's width (GridShardEvaluator is TableRowWiseEvaluator)
        divisor = W if st is ShardingType.ROW_WISE else L
        bi = p.batch_inputs / divisor
        read = np.ceil(bi * W * C.INDEX_BYTES) * weight_factor
        lookup = bi * W * cols * tdt
        out = np.where(p.pooled, p.batch_outputs, bi) * W * cols * out_dt
        penalty = 1.0
    else:  # table_wise, column_wise, table_column_wise: each shard sees every id of the global batch
        read = np.ceil(p.batch_inputs * W * C.INDEX_BYTES) * weight_factor
        lookup = p.batch_inputs * W * np.maximum(cols, C.MIN_LOOKUP_DIM) * tdt
        out = p.batch_outputs * W * cols * out_dt
        penalty = block_penalty(cols) if topo.compute_device is not Device.CPU else 1.0
    fwd_work = (read + lookup + out) * penalty * kernel_factor
    work[:, 0] = fwd_work
    work[:, 2] = fwd_work * C.BWD_COMPUTE_MULTIPLIER
    if topo.compute_device is Device.CPU:
        ids = (bi if row_split else p.batch_inputs) * W
        touched = touched_rows(p, p.batch_inputs * W, local=False)
        cpu_f, cpu_b = cpu_terms(ids, touched, rows, cols, tdt, read, out, p.opt_work, p.opt_row_work,
                                 terms_of(topo))
        work[:, 0], work[:, 2] = cpu_f * kernel_factor, cpu_b * kernel_factor
    input_dist = read / weight_factor / cbw
    if st.rows_in_host and topo.num_hosts > 1:
        # reduce-scatter inside the host, then the host's 1/L share crosses hosts
        comms = out / topo.intra_host_bw + out / L / topo.inter_host_bw
    else:
        comms = out / cbw
    fixed[:, 1] = comms
    fixed[:, 3] = comms
    if row_split:
        work[:, 3] = out * C.BATCHED_COPY_PERF_FACTOR
        fixed[:, 4] = input_dist / (L if st is ShardingType.GRID_SHARD else p.num_shards)
    else:
        fixed[:, 4] = input_dist
    empty = rows * cols == 0
    work[empty] = 0.0
    fixed[empty] = 0.0
    return work, fixed


def _io_bytes(p: Pieces, topo: Topology, st: ShardingType) -> tuple[np.ndarray, np.ndarray]:
    """Input (ids) and output (embeddings) buffer bytes per row: TorchRec's _calculate_*_shard_io_sizes."""
    W, L = topo.world_size, topo.local_world_size
    out_dt = p.dtype_bytes
    if st is ShardingType.DATA_PARALLEL:
        return np.ceil(p.batch_inputs * C.INDEX_BYTES), np.ceil(p.batch_outputs * p.embedding_dim * out_dt)
    divisor = {ShardingType.ROW_WISE: W, ShardingType.TABLE_ROW_WISE: L, ShardingType.GRID_SHARD: L}.get(st, 1)
    bi = p.batch_inputs / divisor
    outputs = np.where(p.pooled, p.batch_outputs, bi)
    inp = np.ceil(bi * W * C.INDEX_BYTES)
    out = np.ceil(outputs * W * p.cols * out_dt)
    empty = p.rows * p.cols == 0
    inp[empty] = 0
    out[empty] = 0
    return inp, out


def _memory(p: Pieces, topo: Topology, kernel: ComputeKernel, rows: np.ndarray, weights: np.ndarray, opt: np.ndarray,
            inp: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(HBM, DDR, SSD or None) bytes per shard: where the kernel keeps weights and optimizer state, plus the buffers."""
    ssd = None
    if tiers.is_offload(kernel):  # the HBM cache (engine.tiers); the backing store is not HBM or DDR (key_value: SSD)
        hbm, ddr, ssd = tiers.memory(kernel, rows, p.clf, weights, opt)
    elif kernel.weights_in_ddr:
        ddr = weights + opt
        if kernel is ComputeKernel.FUSED_UVM_CACHING:
            clf = p.clf
            hbm = np.round(weights * clf) + np.ceil(opt * clf) + np.ceil(rows * (4 + clf * 16))
        else:
            hbm = np.zeros(len(rows))
    else:
        hbm, ddr = weights + opt, np.zeros(len(rows))
    if topo.compute_device is Device.CPU:
        return np.zeros(len(rows), dtype=np.int64), (ddr + hbm + inp + out).astype(np.int64), ssd
    return (hbm + inp + out).astype(np.int64), ddr.astype(np.int64), ssd


def with_profile(perf_ms: np.ndarray, topo: Topology, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Per-shard times under the topology's device profile, when one applies: each non-empty piece's fixed cost
    added (engine.profile; the per-rank terms are added by engine.evaluate)."""
    prof = active(topo)
    if prof is None:
        return perf_ms
    held = (rows * cols > 0).astype(np.float64)[:, None]
    return perf_ms + held * piece_perf(prof)


def estimate_kernels(table: TableConfig, c: Constraints, topo: Topology, st: ShardingType,
                     kernels: list[ComputeKernel], rows: np.ndarray, cols: np.ndarray,
                     num_shards: int | None = None) -> list[ShardEstimates]:
    """Cost and memory of each shard (or data-parallel replica) of one table's geometry, for each kernel. rows
    and cols may list only the distinct shapes of a geometry of num_shards shards (default: len(rows))."""
    return estimate_pieces(pieces_of(table, table_load(table, c, topo), topo, rows, cols, num_shards), topo, st,
                           kernels)


def estimate_pieces(p: Pieces, topo: Topology, st: ShardingType,
                    kernels: list[ComputeKernel]) -> list[ShardEstimates]:
    """Cost and memory of each row (a shard shape of some table), for each kernel: one vectorised pass for
    any number of tables."""
    rows, cols = p.rows, p.cols
    if st is ShardingType.DATA_PARALLEL:
        weights = np.ceil(p.num_embeddings * p.embedding_dim * p.dtype_bytes)
    else:
        weights = np.ceil(p.dtype_bytes * rows * cols)
    opt = np.ceil(weights * p.state_multiplier)
    inp, out = _io_bytes(p, topo, st)
    work, fixed = pieces_perf_parts(p, topo, st)
    if topo.sync_ms_per_byte and st is not ShardingType.DATA_PARALLEL:  # 2D: DMPCollection.sync() (engine.replicas)
        fixed[:, 3] += sync_ms(topo, synced_bytes(topo, rows, cols, weights))
    inp_i, out_i = inp.astype(np.int64), out.astype(np.int64)
    ws, ws_rows = piece_workset(p, topo, st)
    result = []
    for kernel in kernels:
        hbm, ddr, ssd = _memory(p, topo, kernel, rows, weights, opt, inp, out)
        bw = device_bw(topo, kernel, p.cache_hit, p.measured_hit)
        perf = with_profile(work / (bw[:, None] if np.ndim(bw) else bw) + fixed, topo, rows, cols)
        result.append(ShardEstimates(perf, hbm, ddr, inp_i, out_i, ws, ws_rows, ssd))
    return result


def piece_workset(p: Pieces, topo: Topology, st: ShardingType) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, distinct rows) each piece touches in a step (CPU topologies; zeros elsewhere, where the term is not
    measured)."""
    price = workset_price(topo)
    if price.per_row == 0:
        return np.zeros(len(p.rows)), np.zeros(len(p.rows))
    touched = _touched(p, topo, st)
    ws = working_set_bytes(p, touched)
    empty = p.rows * p.cols == 0
    if not price.ramp:
        # a table measured alone (engine.table_costs) without its pressure measured: its measured time holds its
        # working set, and on the VM measured the ranks of such tables add up without the knee's term
        # (docs/estimator.md, "Tables measured alone")
        empty = empty | _measured(p, len(ws))
    ws[empty] = 0.0
    touched = np.where(empty, 0.0, touched)
    return ws, touched


def table_workset(table: TableConfig, c: Constraints, topo: Topology) -> tuple[float, float]:
    """(bytes, distinct rows) a table whole on one rank touches in a step (the global batch's ids), as a table
    measured alone runs (engine.table_costs)."""
    n, d = np.array([float(table.num_embeddings)]), np.array([float(table.embedding_dim)])
    p = pieces_of(table, table_load(table, c, topo), topo, n, d)
    touched = _touched(p, topo, ShardingType.TABLE_WISE)
    return float(working_set_bytes(p, touched)[0]), float(touched[0])


def _touched(p: Pieces, topo: Topology, st: ShardingType) -> np.ndarray:
    if st is ShardingType.DATA_PARALLEL:
        return touched_rows(p, p.batch_inputs, local=True)
    return touched_rows(p, p.batch_inputs * topo.world_size, local=False)


def _measured(p: Pieces, n: int) -> np.ndarray:
    return ~np.isnan(np.broadcast_to(np.asarray(p.scale, dtype=np.float64), (n,)))


def column_share(f: np.ndarray, g: np.ndarray) -> np.ndarray:
    """A column piece's compute over its table's, for a share f of the columns and a column exponent g measured on a
    half-width copy: f^g, g held to 0..1, so a piece never costs less than its share of the columns. Copies measured
    cheaper than that (g over 1: a narrower table also leaves the cache less full) are held to it: two pieces of one
    table on one rank touch the whole rows again, which the copy did not measure, and no split may look cheaper in
    total than the table whole (bench/results/column_pieces.md)."""
    return f ** np.clip(g, 0.0, L.MAX_COLUMN_EXPONENT)


def _column_measured(p: Pieces, st: ShardingType, n: int) -> np.ndarray:
    """Column pieces (all the table's rows, fewer columns) of measured tables whose column exponent was measured."""
    if st not in (ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE):
        return np.zeros(n, dtype=bool)
    g = np.broadcast_to(np.asarray(p.col_exponent, dtype=np.float64), (n,))
    return (_measured(p, n) & ~np.isnan(g) & (p.rows >= p.num_embeddings) & (p.cols < p.embedding_dim)
            & (p.cols > 0))


def pressure_alone_ms(p: Pieces, topo: Topology, st: ShardingType, price: WorksetPrice) -> np.ndarray:
    """Per piece, what its own table's working set costs it where tables were measured alone (price.ramp): the
    pressure its table alone puts on its touched rows (taken off: the measured time holds it, and the rank's term
    adds the rank's pressure back; a column piece priced from a measured half-width copy, the piece's own working
    set's), and for a table not measured, the knee's term of the table alone (added: the
    rank's term no longer holds it). ms, per piece."""
    touched = _touched(p, topo, st)
    if st is ShardingType.DATA_PARALLEL:
        whole = distinct_array(p.batch_inputs * topo.world_size, p.num_embeddings, p.zipf)
    else:
        whole = touched_rows(replace(p, rows=p.num_embeddings), p.batch_inputs * topo.world_size, local=False)
    table_bytes = working_set_bytes(replace(p, cols=p.embedding_dim), whole)
    narrow = _column_measured(p, st, len(touched))  # its measured time is the piece's own: its own working set
    table_bytes = np.where(narrow, working_set_bytes(p, whole), table_bytes)
    own = price.per_row * touched * pressure(table_bytes)
    knee = WorksetPrice(terms_of(topo).workset_row_work / topo.ddr_mem_bw)
    alone = knee.ms(table_bytes, touched)  # the piece's rows at its table's whole working set
    return np.where(_measured(p, len(own)), -own, alone)


def estimate_shards(table: TableConfig, c: Constraints, topo: Topology, st: ShardingType,
                    kernel: ComputeKernel, rows: np.ndarray, cols: np.ndarray) -> ShardEstimates:
    """Cost and memory of each shard (or data-parallel replica) of one table under one option."""
    return estimate_kernels(table, c, topo, st, [kernel], rows, cols)[0]


def perf_from_row(row: np.ndarray) -> Perf:
    return Perf(*(float(x) for x in row))
