"""Planner constants: each with its unit and where it comes from.

Defaults match TorchRec 1.8.0 (torchrec/distributed/planner/constants.py) so that our estimates of a
plan are comparable with TorchRec's for the same topology. Bandwidths are bytes per millisecond.
"""

from __future__ import annotations

GIB: int = 1024**3

# Memory capacities per rank (TorchRec HBM_CAP / DDR_CAP).
HBM_CAP_BYTES: int = 32 * GIB
DDR_CAP_BYTES: int = 128 * GIB
SSD_CAP_BYTES: int = 2 * 1024 * GIB  # TorchRec SSD_CAP ("2 TB"): the SSD tier of the key_value kernel

# Bandwidths in bytes/ms (TorchRec: HBM_MEM_BW, DDR_MEM_BW, HBM_TO_DDR_MEM_BW, INTRA_NODE_BANDWIDTH,
# CROSS_NODE_BANDWIDTH). These are V100-era numbers; a calibrated topology overrides them.
HBM_MEM_BW: float = 897 * GIB / 1000
DDR_MEM_BW: float = 51 * GIB / 1000
HBM_TO_DDR_MEM_BW: float = 32 * GIB / 1000
INTRA_NODE_BW: float = 600 * GIB / 1000
CROSS_NODE_BW: float = 12.5 * GIB / 1000
SSD_MEM_BW: float = 100 * 1024 * 1024 / 1000  # TorchRec SSD_MEM_BW: 100 MiB/s, key_value's lookup bandwidth

BATCH_SIZE: int = 512  # TorchRec BATCH_SIZE: per-rank batch
POOLING_FACTOR: float = 1.0  # TorchRec POOLING_FACTOR: mean ids per sample per feature
NUM_POOLINGS: float = 1.0  # TorchRec NUM_POOLINGS
MIN_CW_DIM: int = 128  # TorchRec MIN_CW_DIM: default column-wise shard width
UVM_CACHING_RATIO: float = 0.2  # TorchRec UVM_CACHING_RATIO: default cache load factor
STORAGE_RESERVATION: float = 0.15  # TorchRec HeuristicalStorageReservation(percentage=0.15) of HBM

INDEX_BYTES: int = 8  # TorchRec BIGINT_DTYPE: TBE converts indices to int64

# Empirical factors from TorchRec's perf model.
BATCHED_COPY_PERF_FACTOR: float = 2.455
FULL_BLOCK_EMB_DIM: int = 128
HALF_BLOCK_PENALTY: float = 1.15
QUARTER_BLOCK_PENALTY: float = 1.75
BWD_COMPUTE_MULTIPLIER: float = 2.0
WEIGHTED_KERNEL_MULTIPLIER: float = 1.1
DP_ELEMENTWISE_KERNELS_PERF_FACTOR: float = 9.22
MIN_LOOKUP_DIM: int = 32  # table-wise lookups read at least 32 columns per id (TorchRec)
UVM_BW_DIVISOR: float = 10.0  # TorchRec divides UVM bandwidths by 10 (host round trips)

# Bytes per element of each data type.
DATA_TYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "int8": 1,
    "int4": 0.5,
    "int2": 0.25,
}

# Optimizer state as a multiple of the weights (TorchRec _get_optimizer_multipler).
# rowwise_adagrad keeps one fp32 per row: 1/dim of the weights.
OPTIMIZER_STATE_MULTIPLIER: dict[str, float] = {
    "sgd": 0.0,
    "adagrad": 1.0,
    "rowwise_adagrad": -1.0,  # sentinel: 1 / embedding_dim, computed per table
    "adam": 2.0,
}

# fbgemm's CPU kernels (forward + backward), fitted to kernel dry-runs of one rank's tables with fresh ids every
# step (python -m bench.cost_terms: 59 cases, bench/results/cost_terms.md; docs/estimator.md), in bytes at the DDR
# bandwidth:
# per id FIXED x (1 + FIXED_PER_DECADE x d) (forward and backward alike); per id its row's bytes x (IN_CACHE +
# FIRST x min(d, 1) + LATER x max(d - 1, 0)) (backward: distinct rows only); per output element OUTPUT_WORK x
# its bytes. d: decades of the piece's bytes above CPU_CACHE_BYTES (random rows miss the cache, then the TLB).
CPU_CACHE_BYTES: float = 2**20
CPU_ID_FIXED_BYTES: float = 946.3
CPU_FIXED_PER_DECADE: float = 0.1698
CPU_ROW_IN_CACHE: float = 0.0
CPU_ROW_FIRST_DECADE: float = 5.979
CPU_ROW_LATER_DECADES: float = 6.18
CPU_OUTPUT_WORK: float = 17.17

# The optimizer's update of each touched row on CPU (fbgemm's fused backward), per touched weight, in bytes at the
# DDR bandwidth, on top of sgd's (which the row terms above hold). Fitted with the CPU terms (docs/estimator.md).
OPTIMIZER_STATE_BYTES: int = 4  # fbgemm keeps optimizer state in fp32
CPU_OPTIMIZER_WORK: dict[str, float] = {
    "sgd": 0.0,
    "adagrad": 287.0,
    "rowwise_adagrad": 0.0,
    "adam": 2 * 287.0,  # not measured (fbgemm has no CPU adam kernel): two moments, twice adagrad's one
}
CPU_OPTIMIZER_ROW_WORK: dict[str, float] = {  # the same, per touched row (rowwise_adagrad's state is per row)
    "sgd": 0.0,
    "adagrad": 12250.0,
    "rowwise_adagrad": 19850.0,
    "adam": 2 * 12250.0,  # not measured, as above
}
# The rank's touched working set (distinct rows of a step x their weight and state bytes, summed over the rank's
# pieces): the rows beyond the first CPU_WORKSET_KNEE_BYTES (the rank's rows x the share of its bytes past the knee)
# each cost CPU_WORKSET_ROW_WORK bytes of work at the DDR bandwidth: a row evicted before the step comes back to it
# costs a miss whatever its width (measured: narrow and wide rows alike, bench/results/cost_terms.md).
CPU_WORKSET_KNEE_BYTES: float = 2**20
CPU_WORKSET_ROW_WORK: float = 6040.0
# Tables measured alone (engine.table_costs) slow each other down on a rank: each distinct row a piece touches costs
# the profile's cpu_pressure_row_work times the share of the ramp from CPU_PRESSURE_FROM_BYTES to
# CPU_PRESSURE_TO_BYTES that its rank's touched working set is past, less the same at its table's own working set
# (which its measured time holds). The ramp: held out over 105 measured fbgemm plans of this VM, 0.25-1 MiB to
# 12-64 MiB fit alike (4.6-4.9% median per-rank error, against 9.3% without the term); the one-factor
# measurements saw the cost per id double by about 8 MiB and stay so to 15.5 (bench/interplay.py).
CPU_PRESSURE_FROM_BYTES: float = 0.5 * 2**20
CPU_PRESSURE_TO_BYTES: float = 16.5 * 2**20
