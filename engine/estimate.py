"""Storage and cost of shards, vectorised over the shards of one table option.

Formulas follow TorchRec's planner (shard_estimators.py and estimator/estimator.py, 1.8.0) so that our
numbers are comparable with TorchRec's for the same topology. Deliberate differences, each documented in
docs/estimator.md: optimizer state is counted from topology.optimizer; row-wise input distribution is split
across the shards instead of charged in full to each; data-parallel all-reduce uses the ring formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine import constants as C
from engine.profile import active, piece_perf
from engine.types import (
    ComputeKernel,
    Constraints,
    Device,
    Perf,
    PoolingType,
    ShardingType,
    TableConfig,
    Topology,
)

N_PERF = 6  # columns of a perf array, in Perf's field order


@dataclass(frozen=True)
class ShardEstimates:
    """Per-shard estimates of one option: arrays of length k (the number of shards or replicas)."""

    perf_ms: np.ndarray  # (k, 6): fwd_compute, fwd_comms, bwd_compute, bwd_comms, input_dist, prefetch
    hbm_bytes: np.ndarray  # (k,)
    ddr_bytes: np.ndarray  # (k,)
    input_bytes: np.ndarray  # (k,)
    output_bytes: np.ndarray  # (k,)

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


def table_load(table: TableConfig, c: Constraints, topo: Topology) -> TableLoad:
    n = len(table.feature_names)
    pf = c.pooling_factors or (C.POOLING_FACTOR,) * n
    npool = c.num_poolings or (C.NUM_POOLINGS,) * n
    bs = c.batch_sizes or (topo.batch_size,) * n
    inputs = sum(p * q * b for p, q, b in zip(pf, npool, bs))
    if table.pooling is PoolingType.NONE:
        outputs = inputs
    else:
        outputs = sum(min(1.0, p) * q * b for p, q, b in zip(pf, npool, bs))
    clf = c.cache_load_factor if c.cache_load_factor is not None else C.UVM_CACHING_RATIO
    return TableLoad(inputs, outputs, c.is_weighted, clf)


def device_bw(topo: Topology, kernel: ComputeKernel, clf: float) -> float:
    """Effective lookup bandwidth (bytes/ms) of a kernel: TorchRec's kernel_bw_lookup."""
    if topo.compute_device is Device.CPU:
        return topo.ddr_mem_bw * (0.5 if kernel is ComputeKernel.DENSE else 1.0)
    if kernel is ComputeKernel.DENSE:
        return 0.5 * topo.hbm_mem_bw
    if kernel is ComputeKernel.FUSED:
        return topo.hbm_mem_bw
    if kernel is ComputeKernel.FUSED_UVM:
        return topo.hbm_to_ddr_mem_bw / C.UVM_BW_DIVISOR
    return (clf * topo.hbm_mem_bw + (1 - clf) * topo.hbm_to_ddr_mem_bw) / C.UVM_BW_DIVISOR


def comms_bw(topo: Topology) -> float:
    return topo.inter_host_bw if topo.world_size > topo.local_world_size else topo.intra_host_bw


def block_penalty(cols: np.ndarray) -> np.ndarray:
    """FBGEMM's kernel uses 32 threads x 4 floats: narrow rows waste part of a block (TorchRec)."""
    return np.where(cols >= C.FULL_BLOCK_EMB_DIM, 1.0,
                    np.where(cols >= C.FULL_BLOCK_EMB_DIM // 2, C.HALF_BLOCK_PENALTY, C.QUARTER_BLOCK_PENALTY))


def unique_share(ids: float, rows: np.ndarray) -> np.ndarray:
    """Expected share of distinct rows among `ids` uniform draws from `rows` rows."""
    safe_rows = np.maximum(rows, 1.0)
    return np.where(ids > 0, safe_rows * -np.expm1(-ids / safe_rows) / max(ids, 1e-12), 1.0)


def _decades(piece_bytes: np.ndarray) -> np.ndarray:
    return np.log10(np.maximum(piece_bytes, C.CPU_CACHE_BYTES) / C.CPU_CACHE_BYTES)


def cpu_compute(ids: float, rows: np.ndarray, cols: np.ndarray, tdt: float, read: float,
                out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward work of fbgemm's CPU kernels, in bytes at the DDR bandwidth (constants CPU_*):
    fixed work per id, the row per id (backward: distinct rows only), and the pooled output."""
    d = _decades(rows * cols * tdt)
    per_id = C.CPU_ID_FIXED_BYTES * (1.0 + C.CPU_FIXED_PER_DECADE * d)
    row = cols * tdt * (C.CPU_ROW_IN_CACHE + C.CPU_ROW_FIRST_DECADE * np.minimum(d, 1.0)
                        + C.CPU_ROW_LATER_DECADES * np.maximum(d - 1.0, 0.0))
    base = read + ids * per_id + out * C.CPU_OUTPUT_WORK
    return base + ids * row, (base + ids * row * unique_share(ids, rows)) * C.BWD_COMPUTE_MULTIPLIER


def perf_parts(table: TableConfig, load: TableLoad, topo: Topology, st: ShardingType,
                rows: np.ndarray, cols: np.ndarray, num_shards: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-shard time as `work / kernel bandwidth + fixed`: (work bytes, fixed ms), both (len(rows), 6).
    Compute scales with the kernel's bandwidth; communication does not. rows and cols may list only the distinct
    shapes of a geometry of num_shards shards (each shard's figures depend on its own shape only)."""
    W, L = topo.world_size, topo.local_world_size
    tdt = table.data_type.bytes
    out_dt = tdt
    cbw = comms_bw(topo)
    k = len(rows) if num_shards is None else num_shards
    work, fixed = np.zeros((len(rows), N_PERF)), np.zeros((len(rows), N_PERF))
    weight_factor = 2.0 if load.is_weighted else 1.0
    kernel_factor = C.WEIGHTED_KERNEL_MULTIPLIER if load.is_weighted else 1.0

    if st is ShardingType.DATA_PARALLEL:
        d = table.embedding_dim
        read = math.ceil(load.batch_inputs * C.INDEX_BYTES) * weight_factor
        table_bytes = table.num_embeddings * d * tdt
        fwd = (read + load.batch_inputs * d * tdt + load.batch_outputs * d * out_dt) * kernel_factor
        bwd = fwd * C.BWD_COMPUTE_MULTIPLIER
        if topo.num_hosts > 1:
            h = topo.num_hosts
            all_reduce = table_bytes * 2 * (h - 1) / h / topo.inter_host_bw
        else:
            all_reduce = table_bytes * 2 * (W - 1) / W / topo.intra_host_bw if W > 1 else 0.0
        if topo.compute_device is Device.CPU:
            cpu_f, cpu_b = cpu_compute(load.batch_inputs, np.array([float(table.num_embeddings)]), np.array([float(d)]),
                                       tdt, read, np.array([load.batch_outputs * d * out_dt]))
            fwd, bwd = float(cpu_f[0]) * kernel_factor, float(cpu_b[0]) * kernel_factor
        work[:, 0] = fwd
        work[:, 2] = bwd + table_bytes * C.DP_ELEMENTWISE_KERNELS_PERF_FACTOR
        fixed[:, 3] = all_reduce
        return work, fixed

    if st.splits_rows:
        divisor = W if st is ShardingType.ROW_WISE else L
        bi = load.batch_inputs / divisor
        read = math.ceil(bi * W * C.INDEX_BYTES) * weight_factor
        lookup = bi * W * cols * tdt
        out = (load.batch_outputs if table.pooling is not PoolingType.NONE else bi) * W * cols * out_dt
        penalty = 1.0
    else:  # table_wise, column_wise, table_column_wise: each shard sees every id of the global batch
        read = math.ceil(load.batch_inputs * W * C.INDEX_BYTES) * weight_factor
        lookup = load.batch_inputs * W * np.maximum(cols, C.MIN_LOOKUP_DIM) * tdt
        out = load.batch_outputs * W * cols * out_dt
        penalty = block_penalty(cols) if topo.compute_device is not Device.CPU else 1.0
    fwd_work = (read + lookup + out) * penalty * kernel_factor
    work[:, 0] = fwd_work
    work[:, 2] = fwd_work * C.BWD_COMPUTE_MULTIPLIER
    if topo.compute_device is Device.CPU:
        ids = (bi if st.splits_rows else load.batch_inputs) * W
        cpu_f, cpu_b = cpu_compute(ids, rows, cols, tdt, read, out)
        work[:, 0], work[:, 2] = cpu_f * kernel_factor, cpu_b * kernel_factor
    input_dist = read / weight_factor / cbw
    if st is ShardingType.TABLE_ROW_WISE and topo.num_hosts > 1:
        # reduce-scatter inside the host, then the host's 1/L share crosses hosts
        comms = out / topo.intra_host_bw + out / L / topo.inter_host_bw
    else:
        comms = out / cbw
    fixed[:, 1] = comms
    fixed[:, 3] = comms
    if st.splits_rows:
        work[:, 3] = out * C.BATCHED_COPY_PERF_FACTOR
        fixed[:, 4] = input_dist / k
    else:
        fixed[:, 4] = input_dist
    empty = rows * cols == 0
    work[empty] = 0.0
    fixed[empty] = 0.0
    return work, fixed


def _io_bytes(table: TableConfig, load: TableLoad, topo: Topology, st: ShardingType,
              rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Input (ids) and output (embeddings) buffer bytes per shard: TorchRec's _calculate_*_shard_io_sizes."""
    W, L = topo.world_size, topo.local_world_size
    out_dt = table.data_type.bytes
    pooled_out = load.batch_outputs
    if st is ShardingType.DATA_PARALLEL:
        inp = np.full(len(rows), math.ceil(load.batch_inputs * C.INDEX_BYTES))
        out = np.full(len(rows), math.ceil(pooled_out * table.embedding_dim * out_dt))
        return inp, out
    divisor = {ShardingType.ROW_WISE: W, ShardingType.TABLE_ROW_WISE: L}.get(st, 1)
    bi = load.batch_inputs / divisor
    outputs = pooled_out if table.pooling is not PoolingType.NONE else bi
    inp = np.full(len(rows), math.ceil(bi * W * C.INDEX_BYTES), dtype=np.float64)
    out = np.ceil(outputs * W * cols * out_dt)
    empty = rows * cols == 0
    inp[empty] = 0
    out[empty] = 0
    return inp, out


def _memory(table: TableConfig, load: TableLoad, topo: Topology, kernel: ComputeKernel, rows: np.ndarray,
            weights: np.ndarray, opt: np.ndarray, inp: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(HBM, DDR) bytes per shard: where the kernel keeps weights and optimizer state, plus the buffers."""
    if kernel.weights_in_ddr:
        ddr = weights + opt
        if kernel is ComputeKernel.FUSED_UVM_CACHING:
            clf = load.cache_load_factor
            hbm = np.round(weights * clf) + np.ceil(opt * clf) + np.ceil(rows * (4 + clf * 16))
        else:
            hbm = np.zeros(len(rows))
    else:
        hbm, ddr = weights + opt, np.zeros(len(rows))
    if topo.compute_device is Device.CPU:
        return np.zeros(len(rows), dtype=np.int64), (ddr + hbm + inp + out).astype(np.int64)
    return (hbm + inp + out).astype(np.int64), ddr.astype(np.int64)


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
    load = table_load(table, c, topo)
    rows = np.asarray(rows, dtype=np.float64)
    cols = np.asarray(cols, dtype=np.float64)
    if st is ShardingType.DATA_PARALLEL:
        weights = np.full(len(rows), float(table.weight_bytes))
    else:
        weights = np.ceil(table.data_type.bytes * rows * cols)
    opt = np.ceil(weights * topo.optimizer.state_multiplier(table.embedding_dim))
    inp, out = _io_bytes(table, load, topo, st, rows, cols)
    work, fixed = perf_parts(table, load, topo, st, rows, cols, num_shards)
    inp_i, out_i = inp.astype(np.int64), out.astype(np.int64)
    result = []
    for kernel in kernels:
        hbm, ddr = _memory(table, load, topo, kernel, rows, weights, opt, inp, out)
        perf = with_profile(work / device_bw(topo, kernel, load.cache_load_factor) + fixed, topo, rows, cols)
        result.append(ShardEstimates(perf, hbm, ddr, inp_i, out_i))
    return result


def estimate_shards(table: TableConfig, c: Constraints, topo: Topology, st: ShardingType,
                    kernel: ComputeKernel, rows: np.ndarray, cols: np.ndarray) -> ShardEstimates:
    """Cost and memory of each shard (or data-parallel replica) of one table under one option."""
    return estimate_kernels(table, c, topo, st, [kernel], rows, cols)[0]


def perf_from_row(row: np.ndarray) -> Perf:
    return Perf(*(float(x) for x in row))
