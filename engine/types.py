"""The planner's vocabulary: closed sets as enums, inputs and results as small frozen dataclasses.

Strings from files become enums once, in engine.config; everything past the door uses these types.
Units live in the names: *_bytes, *_ms, *_bw (bytes per millisecond).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from engine import constants as C


class ShardingType(str, enum.Enum):
    TABLE_WISE = "table_wise"
    ROW_WISE = "row_wise"
    COLUMN_WISE = "column_wise"
    TABLE_ROW_WISE = "table_row_wise"
    TABLE_COLUMN_WISE = "table_column_wise"
    DATA_PARALLEL = "data_parallel"
    GRID_SHARD = "grid_shard"  # column pieces, each row-split over one host's ranks (TorchRec's grid_sharding.py)

    @property
    def splits_columns(self) -> bool:
        return self in (ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)

    @property
    def has_width(self) -> bool:
        """Cut into column pieces of one width (grid_shard's pieces are then row-split within a host)."""
        return self.splits_columns or self is ShardingType.GRID_SHARD

    @property
    def rows_in_host(self) -> bool:
        """Rows split over one host's ranks: table_row_wise, and each column piece of grid_shard."""
        return self in (ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)

    @property
    def splits_rows(self) -> bool:
        return self in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)


class ComputeKernel(str, enum.Enum):
    DENSE = "dense"
    FUSED = "fused"
    FUSED_UVM = "fused_uvm"
    FUSED_UVM_CACHING = "fused_uvm_caching"
    KEY_VALUE = "key_value"  # TorchRec 1.8's offload tiers (engine.tiers): an HBM cache of hot rows, backed by SSD
    SSD_VIRTUAL_TABLE = "ssd_virtual_table"  # ... or by a virtual table on SSD, in DRAM, or both
    DRAM_VIRTUAL_TABLE = "dram_virtual_table"
    DRAM_SSD_VIRTUAL_TABLE = "dram_ssd_virtual_table"

    @property
    def weights_in_ddr(self) -> bool:
        return self in (ComputeKernel.FUSED_UVM, ComputeKernel.FUSED_UVM_CACHING)

    @property
    def virtual_only(self) -> bool:
        """TorchRec 1.8 runs it only on tables declared virtual (TableConfig.use_virtual_table)."""
        return self.value.endswith("_virtual_table")


class PoolingType(str, enum.Enum):
    SUM = "sum"
    MEAN = "mean"
    NONE = "none"


class DataType(str, enum.Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    INT4 = "int4"
    INT2 = "int2"

    @property
    def bytes(self) -> float:
        return C.DATA_TYPE_BYTES[self.value]


class Device(str, enum.Enum):
    CUDA = "cuda"
    CPU = "cpu"


class Optimizer(str, enum.Enum):
    SGD = "sgd"
    ADAGRAD = "adagrad"
    ROWWISE_ADAGRAD = "rowwise_adagrad"
    ADAM = "adam"

    def state_multiplier(self, embedding_dim: int) -> float:
        return 1.0 / embedding_dim if self is Optimizer.ROWWISE_ADAGRAD else C.OPTIMIZER_STATE_MULTIPLIER[self.value]


# Kernels TorchRec's EmbeddingBagCollectionSharder offers, by sharding type and device.
MODEL_PARALLEL_KERNELS = {
    Device.CUDA: (ComputeKernel.FUSED, ComputeKernel.FUSED_UVM, ComputeKernel.FUSED_UVM_CACHING),
    Device.CPU: (ComputeKernel.FUSED,),
}


@dataclass(frozen=True)
class TableConfig:
    """One embedding table: TorchRec's EmbeddingBagConfig fields."""

    name: str
    num_embeddings: int
    embedding_dim: int
    feature_names: tuple[str, ...]
    pooling: PoolingType = PoolingType.SUM
    data_type: DataType = DataType.FP32
    use_virtual_table: bool = False  # TorchRec's: rows materialised as ids arrive; the virtual-table kernels need it
    total_num_buckets: Optional[int] = None  # TorchRec's: a virtual table's row_wise cut in whole buckets
    virtual_table_eviction_policy: Optional[tuple] = None  # TorchRec's, as an engine.virtual.EvictionPolicy

    def __post_init__(self) -> None:  # read several times per table while a config is checked: kept, not recomputed
        self.__dict__["weight_bytes"] = math.ceil(self.num_embeddings * self.embedding_dim * self.data_type.bytes)

    @cached_property  # (set by __post_init__: the instance's own value shadows this)
    def weight_bytes(self) -> int:
        return math.ceil(self.num_embeddings * self.embedding_dim * self.data_type.bytes)


@dataclass(frozen=True)
class Workload:
    """A table's workload measured on a sample of its ids (`python -m engine stats --apply`; engine.workload_block
    reads and writes it). The estimates price fused_uvm_caching's misses from miss_ratio_curve; the planner picks
    the cache load factor among its points (engine.clf)."""

    miss_ratio_curve: tuple[tuple[int, float], ...]  # (cache_rows, lru_miss_rate), cache_rows increasing
    source_file: str  # where it was measured: the sample's file name, its rows, its modification date
    source_rows: int
    source_modified: str
    miss_ratio_method: str = "exact"  # "exact" replay or "shards" sampling (docs/stats.md)
    batch_size: Optional[int] = None  # the batch the per-batch figures are for
    unique_rows: Optional[int] = None
    unique_rows_per_batch_mean: Optional[float] = None
    unique_rows_per_batch_p99: Optional[float] = None
    zipf_exponent: Optional[float] = None  # where the sample is skewed
    pooling_factors: Optional[tuple[float, ...]] = None  # per feature, as measured


@dataclass(frozen=True)
class Constraints:
    """Per-table constraints: TorchRec's ParameterConstraints fields (None means 'planner chooses')."""

    sharding_types: Optional[tuple[ShardingType, ...]] = None
    compute_kernels: Optional[tuple[ComputeKernel, ...]] = None
    min_partition: Optional[int] = None
    pooling_factors: Optional[tuple[float, ...]] = None
    num_poolings: Optional[tuple[float, ...]] = None
    batch_sizes: Optional[tuple[int, ...]] = None
    is_weighted: bool = False
    cache_load_factor: Optional[float] = None
    stochastic_rounding: Optional[bool] = None  # None: fbgemm's default
    zipf_exponent: float = 0.0  # ours: the Zipf exponent of a step's ids over the rows (0: uniform)
    compute_scale: Optional[float] = None  # ours: measured / estimated compute of the table alone (engine.table_costs)
    # ours: a column piece's measured compute over the table's is (its share of the columns)^column_exponent
    column_exponent: Optional[float] = None
    workload: Optional[Workload] = None  # ours: measured on a sample of ids (None: not measured)
    # Placement (ours, not TorchRec's): every shard on these ranks / on these hosts' ranks; the same ranks as
    # the co-located tables; no rank shared with the tables kept apart.
    ranks: Optional[tuple[int, ...]] = None
    hosts: Optional[tuple[int, ...]] = None
    colocate: Optional[tuple[str, ...]] = None
    apart: Optional[tuple[str, ...]] = None

    @property
    def places(self) -> bool:
        """True when the table has a placement rule."""
        return bool(self.ranks or self.hosts or self.colocate or self.apart)


PLACEMENT_FIELDS = ("ranks", "hosts", "colocate", "apart")


@dataclass(frozen=True)
class DeviceProfile:
    """What a training step costs besides its bandwidth terms, on one device kind, backend and host count (read,
    published and priced by engine.profile)."""

    device: Device
    backend: str
    hosts: int
    cores_per_host: float | None  # CPU: the cores a host's ranks share (fitted: those they got); None: a device each
    step_ms: float = 0.0  # per step, every rank: DMP's forward, backward and optimizer calls
    collective_ms: float = 0.0  # per latency round of a collective, every rank (step_counts)
    launch_ms: float = 0.0  # per lookup kernel (forward + backward) a rank runs: one per sharding type it holds
    piece_ms: float = 0.0  # per table piece (shard or replica) a rank holds: its features' split and permute
    source: str = "measured"  # "measured: ...", or "published figures: ..." for the GPU defaults
    # CPU cost terms fitted on one device (engine.fields.PROFILE_TERMS: name, bytes of work), sorted by name, and
    # the device they were fitted on (python -m db calibrate --terms); () and None: the defaults
    terms: tuple[tuple[str, float], ...] = ()
    device_name: str | None = None
    # the fixed costs (step_ms, collective_ms) measure-tables set in a profile of the user's that priced none: the
    # figures a plan stops using with the measured costs (dashboard), and a later measurement replaces
    set_by_table_costs: tuple[str, ...] = ()

    @property
    def published(self) -> bool:
        return self.source.startswith("published")

    def applies(self, topo: Topology) -> bool:
        """A profile prices only the device and host count it was measured on."""
        return topo.compute_device is self.device and topo.num_hosts == self.hosts

    def shares_cores(self, topo: Topology) -> bool:
        """True where a host runs more ranks than it has cores: then a step lasts at least the host's work / cores."""
        return self.cores_per_host is not None and topo.local_world_size > self.cores_per_host

    def as_dict(self) -> dict:
        return {"device": self.device.value, "backend": self.backend, "hosts": self.hosts,
                "cores_per_host": self.cores_per_host, "step_ms": self.step_ms, "collective_ms": self.collective_ms,
                "launch_ms": self.launch_ms, "piece_ms": self.piece_ms, "source": self.source,
                **({"device_name": self.device_name} if self.device_name is not None else {}), **dict(self.terms),
                **({"set_by_table_costs": list(self.set_by_table_costs)} if self.set_by_table_costs else {})}


@dataclass(frozen=True)
class CustomTopologyData:
    """Per-rank capacities of a mixed fleet (TorchRec's CustomTopologyData): a list has one entry per rank and
    replaces the topology's hbm_cap / ddr_cap on that rank; None: every rank has the topology's (engine.capacity)."""

    hbm_cap: Optional[tuple[int, ...]] = None
    ddr_cap: Optional[tuple[int, ...]] = None
    ssd_cap: Optional[tuple[int, ...]] = None


@dataclass(frozen=True)
class Topology:
    """The machines and the training step: TorchRec's Topology fields plus batch size and optimizer."""

    world_size: int
    local_world_size: int
    compute_device: Device = Device.CUDA
    hbm_cap: int = C.HBM_CAP_BYTES
    ddr_cap: int = C.DDR_CAP_BYTES
    ssd_cap: int = C.SSD_CAP_BYTES  # the key_value kernel's backing store per rank (engine.tiers)
    hbm_mem_bw: float = C.HBM_MEM_BW
    ddr_mem_bw: float = C.DDR_MEM_BW
    hbm_to_ddr_mem_bw: float = C.HBM_TO_DDR_MEM_BW
    ssd_mem_bw: float = C.SSD_MEM_BW
    intra_host_bw: float = C.INTRA_NODE_BW
    inter_host_bw: float = C.CROSS_NODE_BW
    batch_size: int = C.BATCH_SIZE
    storage_reservation: float = C.STORAGE_RESERVATION
    optimizer: Optimizer = Optimizer.SGD
    profile: Optional[DeviceProfile] = None  # fixed costs of a step (engine.profile); None: bandwidth terms only
    custom_topology_data: Optional[CustomTopologyData] = None  # per-rank capacities; None: every rank alike
    rank_devices: Optional[tuple[tuple[int, str], ...]] = None  # (ranks, accelerator) groups, rank order: engine.fleet
    sharding_group_size: Optional[int] = None  # 2D: ranks per sharding group (engine.replicas); None: world_size
    sync_ms_per_byte: float = 0.0  # 2D, on a group's topology (engine.replicas.group_topology); never in a file

    @property
    def num_hosts(self) -> int:
        return math.ceil(self.world_size / self.local_world_size)

    @property
    def usable_hbm_bytes(self) -> int:
        return 0 if self.compute_device is Device.CPU else int(self.hbm_cap * (1.0 - self.storage_reservation))

    @property
    def usable_ddr_bytes(self) -> int:  # a CPU rank's memory is DDR, reserved as HBM is on a GPU
        cpu = self.compute_device is Device.CPU
        return int(self.ddr_cap * (1.0 - self.storage_reservation)) if cpu else self.ddr_cap

    def host_of(self, rank: int) -> int:
        return rank // self.local_world_size


@dataclass(frozen=True)
class Config:
    tables: tuple[TableConfig, ...]
    constraints: dict[str, Constraints]
    topology: Topology

    def constraint(self, name: str) -> Constraints:
        return self.constraints.get(name) or Constraints()

    def table(self, name: str) -> TableConfig:
        return self._by_name[name]

    @cached_property
    def _by_name(self) -> dict[str, TableConfig]:
        return {t.name: t for t in self.tables}


@dataclass(frozen=True)
class Shard:
    offsets: tuple[int, int]
    sizes: tuple[int, int]
    rank: int


@dataclass(frozen=True)
class TablePlan:
    sharding_type: ShardingType
    compute_kernel: ComputeKernel
    ranks: tuple[int, ...]
    shards: Optional[tuple[Shard, ...]]  # None for data_parallel (a full copy on every rank)
    # fused_uvm_caching's cache load factor as the planner chose it from the table's miss curve (engine.clf); None:
    # the table's constraint (or its default) holds
    cache_load_factor: Optional[float] = None
    # why the cache is that size and where its miss rate comes from: an explanation, not part of the placement
    cache_note: Optional[str] = field(default=None, compare=False)


@dataclass(frozen=True)
class Perf:
    """Estimated time of one training step's share, in milliseconds."""

    fwd_compute: float = 0.0
    fwd_comms: float = 0.0
    bwd_compute: float = 0.0
    bwd_comms: float = 0.0
    input_dist_comms: float = 0.0
    prefetch_compute: float = 0.0

    @property
    def total(self) -> float:
        return (self.fwd_compute + self.fwd_comms + self.bwd_compute + self.bwd_comms + self.input_dist_comms
                + self.prefetch_compute)

    def __add__(self, other: "Perf") -> "Perf":
        return Perf(self.fwd_compute + other.fwd_compute, self.fwd_comms + other.fwd_comms,
                    self.bwd_compute + other.bwd_compute, self.bwd_comms + other.bwd_comms,
                    self.input_dist_comms + other.input_dist_comms, self.prefetch_compute + other.prefetch_compute)

    def as_dict(self) -> dict[str, float]:  # each component as "<field>_ms", in field order
        return {f"{name}_ms": getattr(self, name) for name in self.__dataclass_fields__}


PERF_COMPONENTS = tuple(Perf().as_dict())


@dataclass(frozen=True)
class MemoryParts:
    """One rank's memory in a training step as DMP allocates it (engine.memory): the parts live at the step's
    peak, which sum to peak_bytes; held_bytes is what stays between steps. reserved_bytes is the share of the
    device's memory the planner keeps for the dense model (storage_reservation), not part of the peak."""

    weights_bytes: int = 0
    optimizer_bytes: int = 0
    cache_bytes: int = 0
    grad_bytes: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    output_grad_bytes: int = 0
    a2a_bytes: int = 0
    reserved_bytes: int = 0
    held_bytes: int = 0
    peak_bytes: int = 0
    peak_hbm_bytes: int = 0
    peak_ddr_bytes: int = 0
    # Of weights_bytes, what UVM kernels (fused_uvm, fused_uvm_caching) keep in host memory on a GPU rank; with the
    # optimizer state they keep there it makes peak_ddr_bytes. 0 on CPU ranks (all their memory is host memory).
    ddr_weights_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class RankStats:
    rank: int
    hbm_bytes: int
    ddr_bytes: int
    hbm_cap_bytes: int
    ddr_cap_bytes: int
    perf: Perf
    input_bytes: int = 0
    output_bytes: int = 0
    num_shards: int = 0
    memory: Optional[MemoryParts] = None  # the step's memory part by part (engine.memory)
    workset_bytes: float = 0.0  # bytes the rank's step touches (CPU estimates; 0 elsewhere)
    workset_rows: float = 0.0  # the distinct rows they are
    workset_ms: float = 0.0  # their cost beyond the cache, inside fwd_compute and bwd_compute (1 : 2); with tables
    # measured alone and their pressure probed (engine.workset.WorksetPrice.ramp): what they cost each other
    fixed_step_ms: float = 0.0  # the profile's fixed step on the rank (step_ms, each launch), inside the compute
    pieces_ms: float = 0.0  # the profile's piece_ms for each table piece the rank holds, inside the compute

    @property
    def cost_ms(self) -> float:
        return self.perf.total


@dataclass(frozen=True)
class Plan:
    """A placement of every table, with per-rank estimates under engine.estimate."""

    tables: dict[str, TablePlan]
    ranks: tuple[RankStats, ...]
    planner: str = "engine"
    planning_seconds: Optional[float] = None
    lower_bound_ms: Optional[float] = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def max_rank_cost_ms(self) -> float:
        return max((r.cost_ms for r in self.ranks), default=0.0)

    @property
    def bottleneck_rank(self) -> int:
        return max(self.ranks, key=lambda r: r.cost_ms).rank if self.ranks else 0
