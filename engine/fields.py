"""Every config field, declared once (type, unit, range, default, meaning, grid column, CSV/snippet/TorchRec names):
engine.config, the estimates' defaults, TorchRec's ParameterConstraints, the dashboard's grid, importers and README's
field tables derive from them. A new per-table constraint: declare it in CONSTRAINT, add it to engine.types.Constraints,
run `python -m engine.field_tables --readme` (one TorchRec only passes on, sharding=True, then needs nothing more).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional

from engine import constants as C
from engine import limits as L
from engine.types import ComputeKernel, Constraints, DataType, Device, Optimizer, PoolingType, ShardingType, Workload


class Kind:
    """How a field's value is written in a config file (and read by engine.config)."""

    NAME = "name"  # one line of printable text (a table or feature name)
    NAMES = "names"  # a list of names (feature_names)
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    ENUM = "enum"  # one value of `choices`
    ENUMS = "enums"  # a list of values of `choices`
    FLOATS = "floats"  # per feature: one number per feature, or one for all
    INTS = "ints"  # per feature, whole numbers
    IDS = "ids"  # rank or host numbers
    TABLE_NAMES = "table_names"  # other tables' names
    PROFILE = "profile"  # a device profile (engine.profile)
    WORKLOAD = "workload"  # a table's measured workload block (engine.workload_block)
    CAPS = "caps"  # per-rank capacities: lists of bytes, one entry per rank (custom_topology_data)
    DEVICES = "devices"  # groups of ranks in rank order, each with its accelerator (rank_devices)
    EVICTION = "eviction"  # a virtual table's eviction policy block (engine.virtual)
    TABLES_TAB = "tables"  # the grid tabs of the dashboard's Tables page a column sits on
    CONSTRAINTS_TAB = "constraints"


NAME, NAMES, INT, FLOAT, BOOL, ENUM = Kind.NAME, Kind.NAMES, Kind.INT, Kind.FLOAT, Kind.BOOL, Kind.ENUM
ENUMS, FLOATS, INTS, IDS = Kind.ENUMS, Kind.FLOATS, Kind.INTS, Kind.IDS
TABLE_NAMES, PROFILE, WORKLOAD, CAPS, DEVICES = Kind.TABLE_NAMES, Kind.PROFILE, Kind.WORKLOAD, Kind.CAPS, Kind.DEVICES
TABLES_TAB, CONSTRAINTS_TAB = Kind.TABLES_TAB, Kind.CONSTRAINTS_TAB


@dataclass(frozen=True)
class Field:
    """One field of a config. lo/hi: its range (per item for lists); default: the value the planner uses when the
    field is absent (None: required, the planner chooses, or taken from elsewhere, as default_text says)."""

    name: str
    kind: str
    meaning: str  # README's "meaning" column
    default_text: str  # README's "default" column
    unit: str = ""
    lo: Any = None
    hi: Any = None
    lo_open: bool = False  # lo itself is not allowed
    range_text: Optional[str] = None  # README's "range" column when lo/hi do not say it all
    range_note: str = ""  # appended to the range lo/hi give
    default: Any = None
    required: bool = False
    choices: Optional[type[enum.Enum]] = None
    aliases: Optional[dict[str, str]] = None  # older names of choices' values
    refused: Optional[dict[str, str]] = None  # values TorchRec has that we do not plan: why, for the message
    torchrec: Optional[str] = None  # TorchRec's name for it (None: TorchRec has no such field)
    sharding: bool = False  # TorchRec's planner also copies it into the table's ParameterSharding (same name)
    # the dashboard's grid: column key, tab, label, width in px, help, number format; None: not shown
    column: Optional[str] = None
    tab: str = CONSTRAINTS_TAB
    label: Optional[str] = None
    width: Optional[int] = None
    help: Optional[str] = None
    number_format: Optional[str] = None
    grid_stand_in: Any = None  # a valid cell that stands in for a bad one while a row is checked for more problems
    bulk: Optional[tuple] = None  # bulk edit: (min, max, initial) of its number input; () for a choice; None: none
    csv: tuple[str, ...] = ()  # CSV column names (the first is the field's)
    snippet: bool = False  # read from EmbeddingBagConfig(...) keywords of a pasted snippet

    @property
    def per_feature(self) -> bool:
        return self.kind in (FLOATS, INTS)

    @property
    def grid_label(self) -> str:
        return self.label or (self.column or self.name).replace("_", " ")

    @cached_property  # read for every table and topology parsed
    def json_default(self) -> Any:
        """The default as a config file writes it (an enum as its value)."""
        return self.default.value if isinstance(self.default, enum.Enum) else self.default


KERNEL_ALIASES = {"batched_fused": "fused", "batched_dense": "dense", "batched_fused_uvm": "fused_uvm",
                  "batched_fused_uvm_caching": "fused_uvm_caching"}
_INFERENCE = "is one of TorchRec's inference kernels (quantized tables for serving); this planner plans training"
# EmbeddingComputeKernel values of TorchRec 1.8 this planner refuses, and why
TORCHREC_ONLY_KERNELS = {"quant": _INFERENCE, "quant_uvm": _INFERENCE, "quant_uvm_caching": _INFERENCE,
    "customized_kernel": "is TorchRec's hook for a user's own kernel, whose memory and cost no planner knows",
    "fused_triton": "is TorchRec 1.8's Triton kernel for CUDA, which this planner does not price yet",
}

# ---- tables[]: TorchRec's EmbeddingBagConfig ------------------------------------------------------------------

TABLE: tuple[Field, ...] = (
    Field("name", NAME, "unique table name", "required", required=True, torchrec="name",
          range_text=f"1-{L.MAX_NAME_CHARS} characters, no control characters", column="name", tab=TABLES_TAB,
          width=150, grid_stand_in="t", csv=("name", "table"), snippet=True),
    Field("num_embeddings", INT, "rows", "required", unit="rows", lo=1, hi=L.MAX_NUM_EMBEDDINGS, required=True,
          torchrec="num_embeddings", column="rows", tab=TABLES_TAB, label="rows", width=100, help="num_embeddings",
          number_format="%d", grid_stand_in=1, bulk=(1, None, 1000), csv=("num_embeddings", "rows"), snippet=True),
    Field("embedding_dim", INT, "columns; fbgemm's fused kernels need a multiple of 4, so another dim plans "
          "`data_parallel` only (dense kernel)", "required", unit="columns", lo=1, hi=L.MAX_EMBEDDING_DIM,
          required=True, torchrec="embedding_dim", column="dim", tab=TABLES_TAB, label="dim", width=60,
          help="embedding_dim; a multiple of 4 to be sharded", number_format="%d", grid_stand_in=1,
          bulk=(1, None, 64), csv=("embedding_dim", "dim"), snippet=True),
    Field("feature_names", NAMES, "the features that look up this table; unique across tables (TorchRec's default "
          "is empty, which leaves a table unused)", "`[name]`", hi=L.MAX_FEATURES_PER_TABLE,
          range_text=f"1-{L.MAX_FEATURES_PER_TABLE:,} names, each as `name`", torchrec="feature_names",
          column="features", tab=TABLES_TAB, width=140, help="feature names, comma-separated; empty: the table's name",
          csv=("feature_names", "features"), snippet=True),
    Field("pooling", ENUM, "`sum`, `mean` or `none`", '`"sum"`', default=PoolingType.SUM, choices=PoolingType,
          range_text="", torchrec="pooling", column="pooling", tab=TABLES_TAB, width=80, bulk=(), csv=("pooling",),
          snippet=True),
    Field("data_type", ENUM, "`fp32`, `fp16`, `bf16`, `int8`, `int4`, `int2`", '`"fp32"`', default=DataType.FP32,
          choices=DataType, range_text="", torchrec="data_type", column="data_type", tab=TABLES_TAB, width=100,
          bulk=(), csv=("data_type", "dtype"), snippet=True),
    Field("use_virtual_table", BOOL, "a virtual table (TorchRec's: rows materialised as ids arrive). The kernels "
          "`ssd_virtual_table`, `dram_virtual_table`, `dram_ssd_virtual_table` run only such tables, so they are "
          "planned only for them", "`false`", default=False, range_text="", torchrec="use_virtual_table",
          snippet=True),
    Field("total_num_buckets", INT, "a virtual table's buckets (TorchRec's, read for virtual tables only): "
          "`row_wise` gives each rank `buckets // ranks` whole buckets, one more on the first `buckets % ranks`",
          "none", unit="buckets", lo=1, hi=L.MAX_NUM_EMBEDDINGS, torchrec="total_num_buckets", snippet=True,
          range_note="; divides `num_embeddings`; >= the ranks where `row_wise` may be planned"),
    Field("virtual_table_eviction_policy", Kind.EVICTION, 'a virtual table\'s eviction policy, `{"type": ..., field: '
          "value}` with a TorchRec 1.8 class's fields: `no_eviction`, `count_based`, `timestamp_based`, "
          "`count_timestamp_mixed`, `feature_score_based`, `feature_l2_norm_based`", "none", range_text="counts and "
          "minutes >= 0", torchrec="virtual_table_eviction_policy", snippet=True),
)

# ---- constraints.TABLE: TorchRec's ParameterConstraints (all optional) ----------------------------------------

CONSTRAINT: tuple[Field, ...] = (
    Field("sharding_types", ENUMS, "subset of `table_wise`, `row_wise`, `column_wise`, `table_row_wise`, "
          "`table_column_wise`, `data_parallel`, `grid_shard`. As in TorchRec, CPU topologies offer `data_parallel`, "
          "`table_wise`, `column_wise`, `table_column_wise` unless you list `row_wise`/`table_row_wise` here, and "
          "`grid_shard` (column pieces of `min_partition`'s width, each row-split over one host) is planned only "
          "where listed here",
          "all the device offers", choices=ShardingType, range_text="", torchrec="sharding_types",
          column="sharding_types", width=260, help="allowed sharding types; empty: the planner chooses", bulk=(),
          csv=("sharding_types",)),
    Field("compute_kernels", ENUMS, "subset of `fused`, `fused_uvm`, `fused_uvm_caching` and TorchRec 1.8's "
          "offload tiers `key_value`, `ssd_virtual_table`, `dram_virtual_table`, `dram_ssd_virtual_table` (an HBM "
          "cache of `cache_load_factor` x the rows, the table on SSD or in DRAM; planned on cuda only where listed "
          "here, as TorchRec does, and `key_value` only where a rank has `ssd_cap`). `dense` is data_parallel's "
          "kernel; data_parallel always uses it, as the tutorial shows. Older names `batched_fused`, `batched_dense` "
          "are accepted; TorchRec's inference kernels (`quant*`) are refused, saying why",
          "all the device offers but the offload tiers", choices=ComputeKernel, aliases=KERNEL_ALIASES,
          refused=TORCHREC_ONLY_KERNELS,
          range_text="", torchrec="compute_kernels", column="compute_kernels", label="kernels", width=190,
          help="allowed compute kernels; empty: the planner chooses", bulk=(),
          csv=("compute_kernels", "kernels")),
    Field("min_partition", INT, "smallest column-wise shard width, read as TorchRec reads it: the pieces are the "
          "first multiple of 4 from it up that divides the dim, else the whole dim in one piece (the tutorial's 32 "
          "cuts dim 64 into 2 x 32; the default 128 leaves a dim of 128 or less whole). When absent the planner "
          "also tries widths that cut the dim into 2..world_size pieces",
          "128 (TorchRec `MIN_CW_DIM`)", unit="columns", lo=1, hi=L.MAX_EMBEDDING_DIM, torchrec="min_partition",
          column="min_partition", width=130,
          help=f"smallest column-wise piece width; empty: {C.MIN_CW_DIM} (TorchRec's MIN_CW_DIM), which leaves a dim "
               f"of {C.MIN_CW_DIM} or less in one piece unless narrower pieces cost less; 32 cuts dim 64 into "
               "2 x 32 (TorchRec's tutorial)", number_format="%d",
          bulk=(1, None, 1000), csv=("min_partition",)),
    Field("pooling_factors", FLOATS, "mean ids per sample, one per feature (a single value applies to all)",
          "`[1.0]`", unit="ids per sample", lo=0.0, hi=L.MAX_POOLING_FACTOR, default=C.POOLING_FACTOR,
          torchrec="pooling_factors", column="pooling_factor", tab=TABLES_TAB, label="pooling factor", width=140,
          help="mean ids per sample and feature; empty: 1", number_format="%.2f", bulk=(0.0, None, 1.0),
          csv=("pooling_factor", "pooling_factors")),
    Field("num_poolings", FLOATS, "poolings per sample, one per feature", "`[1.0]`", unit="poolings per sample",
          lo=0.0, hi=L.MAX_NUM_POOLINGS, default=C.NUM_POOLINGS, torchrec="num_poolings"),
    Field("batch_sizes", INTS, "per-feature batch size", "`[topology.batch_size]`", unit="samples", lo=1,
          hi=L.MAX_BATCH_SIZE, torchrec="batch_sizes"),
    Field("is_weighted", BOOL, "weighted features (doubles the id read)", "`false`", default=False,
          range_text="", torchrec="is_weighted"),
    Field("cache_load_factor", FLOAT, "share of rows cached in HBM by `fused_uvm_caching` and the offload tiers",
          "0.2 (TorchRec `UVM_CACHING_RATIO`)", lo=0.0, hi=1.0, lo_open=True, default=C.UVM_CACHING_RATIO,
          torchrec="cache_params.load_factor", column="cache_load_factor", width=160,
          help="share of rows cached in HBM by fused_uvm_caching", number_format="%.2f", bulk=(0.01, 1.0, 0.2),
          csv=("cache_load_factor",)),
    Field("stochastic_rounding", BOOL, "stochastic rounding of the weight updates in fbgemm's TBE kernel (keeps "
          "fp16 tables accurate over long training; not deterministic). Passed on to TorchRec, which passes it to "
          "fbgemm and keeps tables with different values in different kernels; memory and our estimates do not "
          "change", "fbgemm's (`true`)", range_text="", torchrec="stochastic_rounding", sharding=True),
    Field("zipf_exponent", FLOAT, "the exponent s of the Zipf distribution over the table's rows that a step's ids "
          "follow (the i-th hottest row drawn with weight 1/i^s; 0: uniform ids). Ours: TorchRec has no such field. "
          "CPU estimates price the distinct rows a step touches from it; dry-runs and validation runs draw ids "
          "with it", "0.0 (uniform ids)", lo=0.0, hi=5.0, default=0.0,
          column="zipf_exponent", width=130, help="skew of the ids over the rows (Zipf exponent s); empty: 0, uniform",
          number_format="%.2f", bulk=(0.0, 5.0, 0.0), csv=("zipf_exponent", "zipf")),
    Field("compute_scale", FLOAT, "the table's lookup compute as measured alone on the device, over the estimate's: "
          "every piece's forward and backward compute is multiplied by it; its own working set is in its measured "
          "time, so the rank's working-set term prices only what the rank's tables cost each other (the profile's "
          "`cpu_pressure_row_work`, from the same file's probe ranks). Ours: set by `python -m engine plan "
          "--table-costs COSTS.json` from `python -m engine measure-tables` (docs/estimator.md, \"Tables measured "
          "alone\"); TorchRec has no such field", "none (the estimate as it is)", lo=0.0, lo_open=True,
          hi=L.MAX_COMPUTE_SCALE),
    Field("column_exponent", FLOAT, "how the table's compute as measured alone goes with a column piece's width: a "
          "`column_wise` or `table_column_wise` piece holding a share f of the columns costs f^column_exponent of "
          "the table's measured compute (1: its share; under 1: a narrow piece keeps a per-row cost; never over 1: "
          "no split costs less in total than the table whole), and its own working set is the piece's. Ours: set "
          "by `python -m engine plan --table-costs COSTS.json` where `measure-tables` also dry-ran a half-width "
          "copy of the table (docs/estimator.md, \"Column pieces measured\"); TorchRec has no such field",
          "none (a piece's share of the estimate)", lo=0.0, hi=L.MAX_COLUMN_EXPONENT),
    Field("ranks", IDS, "pin: every piece of the table on these ranks (ours; TorchRec's planner has no such "
          "constraint). Sharding types that put a piece on every rank (`row_wise`, `data_parallel`) are then ruled "
          "out", "any rank", lo=0, hi=L.MAX_WORLD_SIZE - 1, range_text="0 to world_size - 1", column="ranks",
          width=90, help="pin: every piece on these ranks, e.g. 0, 2-3"),
    Field("hosts", IDS, "pin to these hosts' ranks (with `ranks` too: the ranks in both)", "any host", lo=0,
          hi=L.MAX_WORLD_SIZE - 1, range_text="0 to hosts - 1", column="hosts", width=80,
          help="pin: every piece on these hosts' ranks, e.g. 0"),
    Field("colocate", TABLE_NAMES, "these tables hold exactly the table's ranks (a group: symmetric and transitive, "
          "and a group's pins bind every member)", "none", range_text="table names", column="colocate",
          label="co-locate with", width=140, help="tables that share this table's ranks, e.g. t1, t2"),
    Field("apart", TABLE_NAMES, "these tables share no rank with it (symmetric)", "none", range_text="table names",
          column="apart", label="apart from", width=140, help="tables that share no rank with it"),
)

# ---- topology: TorchRec's Topology, plus the training step ----------------------------------------------------

_PROFILE_MEANING = (
    'a device profile: `{"device", "backend", "hosts", "cores_per_host", "step_ms", "collective_ms", "launch_ms", '
    '"piece_ms", "source"}`, the fixed costs of a DMP training step measured on one device, backend and host count '
    "(`python -m db calibrate --config-out` writes it with the fitted bandwidths; `plan --table-costs` may add the "
    "measured step and collective round to one that prices none, and names them in its `set_by_table_costs`, so "
    "that they come off with the rest), or `\"published\"` on a cuda "
    "topology: kernel-launch and NCCL latencies from published figures, until a GPU profile is measured. It prices "
    "plans only on that device and host count; without one, estimates are the bandwidth terms only "
    "(docs/estimator.md, *Step time*)")


def _bw(name: str, default: float, gib: str, what: str) -> Field:
    return Field(name, FLOAT, f"{what}, as bytes per ms (TorchRec's constants)", f"{gib} GiB/s", unit="bytes/ms",
                 lo=L.MIN_BW, hi=L.MAX_BW, default=default, torchrec=name)


TOPOLOGY: tuple[Field, ...] = (
    Field("world_size", INT, "ranks (GPUs)", "required", unit="ranks", lo=1, hi=L.MAX_WORLD_SIZE,
          range_note=f"; tables x world_size at most {'2^%d' % round(math.log2(L.MAX_TABLE_RANK_PAIRS))}",
          required=True, torchrec="world_size"),
    Field("local_world_size", INT, "ranks per host", "`world_size`", unit="ranks", lo=1, hi=L.MAX_WORLD_SIZE,
          range_text="divides `world_size`", torchrec="local_world_size"),
    Field("compute_device", ENUM, "`cuda` or `cpu`", '`"cuda"`', default=Device.CUDA, choices=Device, range_text="",
          torchrec="compute_device"),
    Field("hbm_cap", INT, "HBM bytes per rank", "32 GiB", unit="bytes", lo=0, hi=L.MAX_CAP_BYTES,
          default=C.HBM_CAP_BYTES, torchrec="hbm_cap"),
    Field("ddr_cap", INT, "DDR bytes per rank", "128 GiB", unit="bytes", lo=0, hi=L.MAX_CAP_BYTES,
          default=C.DDR_CAP_BYTES, torchrec="ddr_cap"),
    Field("ssd_cap", INT, "SSD bytes per rank: the backing store of the `key_value` kernel (TorchRec's `ssd_cap`; "
          "0: no SSD, and `key_value` is not planned, as TorchRec 1.8 skips it)", "2 TiB (TorchRec `SSD_CAP`)",
          unit="bytes", lo=0, hi=L.MAX_CAP_BYTES, default=C.SSD_CAP_BYTES, torchrec="ssd_cap"),
    _bw("hbm_mem_bw", C.HBM_MEM_BW, "897", "HBM bandwidth"),
    _bw("ddr_mem_bw", C.DDR_MEM_BW, "51", "DDR bandwidth"),
    _bw("hbm_to_ddr_mem_bw", C.HBM_TO_DDR_MEM_BW, "32", "HBM to DDR bandwidth"),
    Field("ssd_mem_bw", FLOAT, "SSD bandwidth, as bytes per ms: the `key_value` kernel's lookups (TorchRec's "
          "constants)", "100 MiB/s (TorchRec `SSD_MEM_BW`)", unit="bytes/ms", lo=L.MIN_BW, hi=L.MAX_BW,
          default=C.SSD_MEM_BW, torchrec="ssd_mem_bw"),
    _bw("intra_host_bw", C.INTRA_NODE_BW, "600", "bandwidth within a host"),
    _bw("inter_host_bw", C.CROSS_NODE_BW, "12.5", "bandwidth across hosts"),
    Field("batch_size", INT, "samples per rank per step", "512", unit="samples", lo=1, hi=L.MAX_BATCH_SIZE,
          default=C.BATCH_SIZE),
    Field("storage_reservation", FLOAT, "share of HBM kept free for dense parts and activations (TorchRec's "
          "`HeuristicalStorageReservation`)", "0.15", lo=0.0, hi=0.99, default=C.STORAGE_RESERVATION),
    Field("optimizer", ENUM, "`sgd`, `adagrad`, `rowwise_adagrad`, `adam`: optimizer state counted in memory "
          "(TorchRec counts none unless the optimizer is attached to the tensors; `sgd` keeps none, so the default "
          'matches)', '`"sgd"`', default=Optimizer.SGD, choices=Optimizer, range_text=""),
)
# written only when there is one; read by engine.profile
PROFILE_FIELD = Field("profile", PROFILE, _PROFILE_MEANING, "none",
                      range_text="fixed costs 0 to 10^6 ms; `hosts` 1 to 16,384")
# per-rank capacities of a mixed fleet, TorchRec's CustomTopologyData: written only when there is one; read by
# engine.readers.read_caps, used through engine.capacity
CUSTOM_TOPOLOGY_FIELD = Field(
    "custom_topology_data", CAPS, '`{"hbm_cap": [...], "ddr_cap": [...], "ssd_cap": [...]}`, one entry per rank in '
    "bytes, any of the lists: each rank's own capacity in place of `hbm_cap` / `ddr_cap` / `ssd_cap` (TorchRec's "
    "`CustomTopologyData`, a mixed fleet such as 8 GPUs of 80 GiB and 8 of 40 GiB); the planner keeps every rank "
    "within its own", "none (every rank has `hbm_cap`, `ddr_cap`, `ssd_cap`)", unit="bytes", lo=0, hi=L.MAX_CAP_BYTES,
    range_text="`world_size` entries, each 0 to 2^50", torchrec="custom_topology_data")
# 2D sharding, TorchRec's DMPCollection(sharding_group_size=...): written only when there is one; used through
# engine.replicas
GROUP_FIELD = Field(
    "sharding_group_size", INT, "2D sharding (TorchRec 1.8's `DMPCollection`): tables are sharded over a group of "
    "this many ranks and every group of the world holds a replica, synced by an all-reduce of the weights (and "
    "Adagrad's state) across groups after each step; the plan is one group's (ranks 0 to size - 1)",
    "`world_size` (one group: DMP)", unit="ranks", lo=1, hi=L.MAX_WORLD_SIZE, range_text="divides `world_size`",
    torchrec="sharding_group_size")
CUSTOM_CAPS = ("hbm_cap", "ddr_cap", "ssd_cap")  # the lists custom_topology_data may hold (TorchRec's names)
# the device kind of each rank of a mixed fleet (8 H100 + 8 A100): written only when there is one; read by engine.fleet,
# which prices each rank with its accelerator's published figures (engine.accelerators)
RANK_DEVICES_FIELD = Field(
    "rank_devices", DEVICES, '`[{"ranks": 8, "device": "h100_80gb"}, {"ranks": 8, "device": "a100_80gb"}]`: groups of '
    "consecutive ranks, in rank order, each with its accelerator (a100_40gb, a100_80gb, h100_80gb, h200_141gb, "
    "b200_192gb). Ours: each rank's lookups and links are priced with its own device's published bandwidths and the "
    "planner gives a slower rank less work; a rank's HBM is its device's unless `custom_topology_data` gives it",
    "none (every rank is priced with the topology's bandwidths)",
    range_text="groups' `ranks` add up to `world_size`; `compute_device` cuda")
RANK_DEVICE_KEYS = ("ranks", "device")

# Inside profile: the CPU estimate's cost terms (engine.estimate.cpu_terms, read by engine.terms), in bytes of work at
# ddr_mem_bw; `python -m db calibrate --terms` fits them on its device (device_name); absent, engine.constants'.


def _term(name: str, default: float, unit: str, what: str) -> Field:
    return Field(name, FLOAT, f"CPU cost term: {what}, as bytes of work at `ddr_mem_bw`", f"{default:g}",
                 unit=unit, lo=0.0, hi=L.MAX_TERM_WORK, default=float(default))


_OPT_ROW = "the optimizer's update per touched row ({}), on top of sgd's"
_OPT_WEIGHT = "the optimizer's update per touched weight ({}), on top of sgd's"
PROFILE_TERMS: tuple[Field, ...] = (
    _term("cpu_id_work", C.CPU_ID_FIXED_BYTES, "bytes per id", "fixed work per id looked up (forward and backward)"),
    _term("cpu_row_first_decade", C.CPU_ROW_FIRST_DECADE, "bytes per row byte",
          "a row read per id, per byte, over the first decade of piece bytes above the cache"),
    _term("cpu_row_later_decades", C.CPU_ROW_LATER_DECADES, "bytes per row byte",
          "the same over the later decades (pieces past 10 MiB)"),
    _term("cpu_output_work", C.CPU_OUTPUT_WORK, "bytes per output byte", "the pooled output"),
    *(_term(f"cpu_optimizer_row_work_{o}", C.CPU_OPTIMIZER_ROW_WORK[o], "bytes per touched row", _OPT_ROW.format(o))
      for o in ("adagrad", "rowwise_adagrad", "adam")),
    *(_term(f"cpu_optimizer_work_{o}", C.CPU_OPTIMIZER_WORK[o], "bytes per touched weight", _OPT_WEIGHT.format(o))
      for o in ("adagrad", "rowwise_adagrad", "adam")),
    _term("cpu_workset_row_work", C.CPU_WORKSET_ROW_WORK, "bytes per row past the knee",
          "each distinct row a step touches on a rank past its first CPU_WORKSET_KNEE_BYTES"),
    _term("cpu_pressure_row_work", 0.0, "bytes per touched row at full pressure",
          "tables measured alone slowing each other down on a rank: each distinct row a step touches, times how far "
          "its rank's working set is up the ramp from CPU_PRESSURE_FROM_BYTES to CPU_PRESSURE_TO_BYTES less how far "
          "its table's own is (fitted per config by `python -m engine measure-tables`; 0: off)"),
)
PROFILE_TERM_NAMES = tuple(f.name for f in PROFILE_TERMS)
# the terms `python -m db calibrate --terms` fits; cpu_pressure_row_work is measured per config (engine.table_costs)
PRESSURE_TERM = "cpu_pressure_row_work"
FITTED_TERM_NAMES = tuple(n for n in PROFILE_TERM_NAMES if n != PRESSURE_TERM)

# constraints.TABLE.workload: a block, not a scalar (no grid column); read by engine.workload_block, written only
# when there is one. Kept out of CONSTRAINT so README's constraint table and the grid's columns stay scalars.
WORKLOAD_FIELD = Field(
    "workload", WORKLOAD, "measured on a sample of the table's ids by `python -m engine stats --apply` "
    '(docs/stats.md): `{"from": {"file", "rows", "modified"}, "miss_ratio_curve": [{"cache_rows", '
    '"lru_miss_rate"}, ...], "unique_rows_per_batch": {"mean", "p99"}, "zipf_exponent", "pooling_factors", '
    '...}`. Ours: with it, fused_uvm_caching\'s misses are read off the curve and the planner picks the cache '
    "load factor among its points (docs/estimator.md)", "none (not measured)",
    range_text="cache_rows increasing, 1 to num_embeddings; miss rates 0 to 1, non-increasing")

BY_NAME: dict[str, Field] = {f.name: f for f in (*TABLE, *CONSTRAINT, *TOPOLOGY, PROFILE_FIELD, CUSTOM_TOPOLOGY_FIELD,
                                                    RANK_DEVICES_FIELD, GROUP_FIELD, WORKLOAD_FIELD)}
TABLE_FIELDS = tuple(f.name for f in TABLE)
CONSTRAINT_FIELDS = tuple(f.name for f in CONSTRAINT)
TOPOLOGY_FIELDS = tuple(f.name for f in TOPOLOGY)
# A constraint's value when absent (as engine.types.Constraints holds it): config_to_dict leaves such values out.
CONSTRAINT_ABSENT: dict[str, Any] = {f: getattr(Constraints(), f) for f in CONSTRAINT_FIELDS}


def json_value(v: Any) -> Any:
    """A field's value as a config file writes it: enums as their values, tuples as lists."""
    if isinstance(v, tuple):
        return [x.value if isinstance(x, enum.Enum) else x for x in v]
    if isinstance(v, Workload):
        from engine.workload_block import to_dict  # it reads with engine.config's checks, which import this module

        return to_dict(v)
    return v.value if isinstance(v, enum.Enum) else v


_SHARDING = tuple(f for f in CONSTRAINT if f.sharding)


def sharding_options(c: Constraints) -> dict[str, Any]:
    """The set constraints TorchRec's planner copies into a table's ParameterSharding (declared sharding=True), as
    that class's keywords: the TorchRec export and the dashboard's snippet pass them on."""
    return {f.torchrec: json_value(v) for f in _SHARDING if (v := getattr(c, f.name)) is not None}


# ---- the defaults the estimates use: computed here only ------------------------------------------------------


_POOLING_FACTOR = BY_NAME["pooling_factors"].default
_NUM_POOLINGS = BY_NAME["num_poolings"].default
_CACHE_LOAD_FACTOR = BY_NAME["cache_load_factor"].default


def feature_values(c: Constraints, name: str, n_features: int, fallback: Any = None) -> tuple:
    """A per-feature constraint of a table with n_features features, its declared default (or `fallback`: the
    topology's batch size for batch_sizes) on every feature when absent."""
    v = getattr(c, name)
    if v:
        return v
    d = BY_NAME[name].default
    return ((fallback if d is None else d),) * n_features


# the same for the constraints the estimates read once per table (one call, no look-up by name)
def pooling_factors(c: Constraints, n_features: int) -> tuple[float, ...]:
    return c.pooling_factors or (_POOLING_FACTOR,) * n_features


def num_poolings(c: Constraints, n_features: int) -> tuple[float, ...]:
    return c.num_poolings or (_NUM_POOLINGS,) * n_features


def batch_sizes(c: Constraints, n_features: int, batch_size: int) -> tuple[int, ...]:
    """batch_sizes has no default of its own: the topology's batch size."""
    return c.batch_sizes or (batch_size,) * n_features


def cache_load_factor(c: Constraints) -> float:
    return _CACHE_LOAD_FACTOR if c.cache_load_factor is None else c.cache_load_factor


def value(c: Constraints, name: str) -> Any:
    """A scalar constraint, its declared default when absent."""
    v = getattr(c, name)
    return BY_NAME[name].default if v is None else v
