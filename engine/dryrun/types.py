"""The dry-run's vocabulary: its settings, the pieces a rank holds, and the measured results.

Pure Python: nothing here imports torch, so the CLI can build its parser and the dashboard can read results
without paying for torch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

from engine import constants as C
from engine.types import DataType, PoolingType, ShardingType

DEFAULT_MAX_BYTES: int = 4 * C.GIB  # the memory guard: weights + optimizer state of one rank (and of all, in turns)
SCHEDULE_TURNS = "ranks in turns"  # every rank built at once, a few steps each round the ranks
SCHEDULE_ONE_BY_ONE = "one rank after another"  # each rank built, timed and freed before the next
DEFAULT_ZIPF_ALPHA: float = 1.1  # a typical skew of recommendation ids (TorchRec benchmarks use ~1.1)
OUTPUT_ELEMENT_BYTES: int = 4  # TBE outputs fp32 whatever the weights' type
OPTIMIZER_STATE_BYTES: int = 4  # optimizer state is fp32 (fbgemm's default momentum dtype)


class Backend(str, enum.Enum):
    AUTO = "auto"
    FBGEMM = "fbgemm"
    TORCH = "torch"


class Distribution(str, enum.Enum):
    CONFIG = "config"  # each table's constraint zipf_exponent (0, the default: uniform)
    UNIFORM = "uniform"
    ZIPF = "zipf"  # every table Zipf with zipf_alpha


class DryrunDevice(str, enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class DryrunSettings:
    """How to measure. `backend` AUTO: fbgemm when it is importable and runs the case, else torch."""

    backend: Backend = Backend.AUTO
    device: DryrunDevice = DryrunDevice.CPU
    iters: int = 10
    warmup: int = 3
    threads: int = 1
    distribution: Distribution = Distribution.CONFIG
    zipf_alpha: float = DEFAULT_ZIPF_ALPHA
    seed: int = 0
    batches: int = 0  # distinct batches the steps cycle through; 0: a fresh batch for every step
    max_bytes: int = DEFAULT_MAX_BYTES
    scale_rows: float = 1.0
    learning_rate: float = 0.01
    ids: Optional[str] = None  # a sample file whose ids replace the synthetic ones (engine.dryrun.sample_ids)
    turns: bool = True  # every rank held at once and timed in turns round the ranks, where all fit in max_bytes


@dataclass(frozen=True)
class Piece:
    """What one rank holds of one table: a rows x cols block (a shard, or the whole table when replicated)."""

    table: str
    sharding_type: ShardingType
    rank: int
    row_offset: int
    rows: int
    cols: int
    pooling: PoolingType
    data_type: DataType
    is_weighted: bool

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.cols == 0

    @property
    def sees_global_batch(self) -> bool:
        return self.sharding_type is not ShardingType.DATA_PARALLEL


@dataclass(frozen=True)
class RankResult:
    rank: int
    num_pieces: int
    lookups: int  # ids looked up in one step, over all the rank's pieces
    measured_ms: float  # median forward + backward (with the fused optimizer update) of one step
    measured_bytes: int  # weight_bytes + optimizer_bytes + io_bytes
    weight_bytes: int
    optimizer_bytes: int
    io_bytes: int  # ids (int64) + one int64 offset per bag + fp32 outputs
    estimated_ms: float  # engine.evaluate's cost_ms of the rank (compute and comms)
    estimated_compute_ms: float  # its forward + backward compute share only
    measured_p25_ms: float = 0.0  # the 25th percentile of the same steps (the statistic the cost terms were fitted to)

    def as_dict(self) -> dict:
        return {
            "rank": self.rank, "num_pieces": self.num_pieces, "lookups": self.lookups,
            "measured_ms": self.measured_ms, "measured_p25_ms": self.measured_p25_ms,
            "embedding_ms": self.measured_ms,  # the name validation runs give a rank's own embedding work too
            "measured_bytes": self.measured_bytes,
            "weight_bytes": self.weight_bytes, "optimizer_bytes": self.optimizer_bytes, "io_bytes": self.io_bytes,
            "estimated_ms": self.estimated_ms, "estimated_compute_ms": self.estimated_compute_ms,
        }


@dataclass(frozen=True)
class DryrunResult:
    ranks: tuple[RankResult, ...]
    backend: Backend
    device: DryrunDevice
    iters: int
    warmup: int
    threads: int
    distribution: Distribution
    zipf_alpha: Optional[float]
    scale_rows: float
    estimate_rank_correlation: Optional[float]  # Spearman of estimated_ms vs measured_ms over ranks
    notes: tuple[str, ...] = field(default_factory=tuple)
    seed: int = 0
    batches: int = 1  # distinct batches the timed and warmup steps cycled through (the ids used: seed, batches)
    ids: dict = field(default_factory=dict)  # which ids: {"source": "synthetic", ...} or {"source": "sample", ...}
    ids_seen: dict = field(default_factory=dict)  # sample ids: per table, lookups and distinct rows the pieces saw
    schedule: str = SCHEDULE_TURNS  # how the ranks' steps were ordered (engine.dryrun.measure.measure_ranks)

    @property
    def max_rank_measured_ms(self) -> float:
        return max((r.measured_ms for r in self.ranks), default=0.0)

    @property
    def bottleneck_rank(self) -> int:
        return max(self.ranks, key=lambda r: r.measured_ms).rank if self.ranks else 0

    def as_dict(self) -> dict:
        return {
            "ranks": [r.as_dict() for r in self.ranks],
            "backend": self.backend.value, "device": self.device.value, "iters": self.iters,
            "warmup": self.warmup, "threads": self.threads, "distribution": self.distribution.value,
            "zipf_alpha": self.zipf_alpha, "scale_rows": self.scale_rows, "seed": self.seed,
            "batches": self.batches, "schedule": self.schedule, "ids": dict(self.ids),
            **({"ids_seen": self.ids_seen} if self.ids_seen else {}),
            "max_rank_measured_ms": self.max_rank_measured_ms, "bottleneck_rank": self.bottleneck_rank,
            "estimate_rank_correlation": self.estimate_rank_correlation, "notes": list(self.notes),
        }
