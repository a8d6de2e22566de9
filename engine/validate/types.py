"""The validation run's vocabulary: the job to launch, its settings, and what the ranks measured.

Pure Python: nothing here imports torch, so the CLI builds its parser and the dashboard reads results for free.
"""

from __future__ import annotations

import enum
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine import atomicfile
from engine.types import Device

DEFAULT_ITERS = 10
DEFAULT_WARMUP = 3
DEFAULT_SEED = 0
DEFAULT_PG_TIMEOUT_S = 120  # a collective whose peer died fails after this long instead of hanging
LEARNING_RATE = 0.01
LOG_TAIL_CHARS = 4000  # what a result keeps of the job's log
# a rank's own embedding work per step, medians (engine.validate.embtime): the sum, then its parts. embedding_ms is
# the name the dry-run gives its per-rank time too (the same work, there without any collective)
EMBEDDING_TIMES = ("embedding_ms", "embedding_forward_ms", "embedding_backward_ms", "embedding_optimizer_ms")


class Backend(str, enum.Enum):
    GLOO = "gloo"
    NCCL = "nccl"

    @property
    def device(self) -> Device:
        return Device.CUDA if self is Backend.NCCL else Device.CPU


class LauncherKind(str, enum.Enum):
    LOCAL = "local"
    SLURM = "slurm"
    SCRIPT = "script"


class RunStatus(enum.StrEnum):
    """A measuring run's status: the one definition (db stores it, the commands and the dashboard read it)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@dataclass(frozen=True)
class SlurmOptions:
    """sbatch flags; None leaves the cluster's default."""

    partition: str | None = None
    nodes: int = 1
    time: str | None = None  # sbatch --time, e.g. "00:10:00"
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    account: str | None = None
    job_name: str = "validate-plan"


@dataclass(frozen=True)
class Job:
    """One validation job: everything lives under out_dir (config and plan copies, per-rank results, log)."""

    out_dir: Path
    nproc: int
    backend: Backend = Backend.GLOO
    iters: int = DEFAULT_ITERS
    warmup: int = DEFAULT_WARMUP
    seed: int = DEFAULT_SEED
    pg_timeout_s: int = DEFAULT_PG_TIMEOUT_S
    python: str = sys.executable  # the interpreter the ranks and job scripts run: this one (the venv's)
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    script_path: Path | None = None
    results_file: Path | None = None  # --results; default out_dir/results.json
    ids: str | None = None  # --ids: a sample file (absolute path) whose ids the ranks replay instead of synthetic ones

    @property
    def device(self) -> Device:
        return self.backend.device

    @property
    def config_path(self) -> Path:
        return self.out_dir / "config.json"

    @property
    def plan_path(self) -> Path:
        return self.out_dir / "plan.json"

    @property
    def ranks_dir(self) -> Path:
        return self.out_dir / "ranks"

    @property
    def log_path(self) -> Path:
        return self.out_dir / "job.log"

    @property
    def results_path(self) -> Path:
        return self.results_file or self.out_dir / "results.json"

    @property
    def spec_path(self) -> Path:
        return self.out_dir / "job.json"

    def worker_args(self) -> list[str]:
        """What follows torchrun's own flags: the worker module and its flags (paths absolute: any cwd works)."""
        return ["-m", "engine.validate.worker", "--config", str(self.config_path), "--plan", str(self.plan_path),
                "--results-dir", str(self.ranks_dir), "--backend", self.backend.value, "--iters", str(self.iters),
                "--warmup", str(self.warmup), "--seed", str(self.seed), "--pg-timeout", str(self.pg_timeout_s),
                *(["--ids", self.ids] if self.ids else [])]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(out_dir=str(self.out_dir), backend=self.backend.value,
                 script_path=str(self.script_path) if self.script_path else None,
                 results_file=str(self.results_file) if self.results_file else None)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Job:
        return cls(out_dir=Path(d["out_dir"]), nproc=int(d["nproc"]), backend=Backend(d["backend"]),
                   iters=int(d["iters"]), warmup=int(d["warmup"]), seed=int(d["seed"]),
                   pg_timeout_s=int(d["pg_timeout_s"]), python=d["python"], slurm=SlurmOptions(**d["slurm"]),
                   script_path=Path(d["script_path"]) if d.get("script_path") else None,
                   results_file=Path(d["results_file"]) if d.get("results_file") else None, ids=d.get("ids"))

    def write_spec(self) -> None:
        atomicfile.write_json(self.spec_path, self.to_dict())

    @classmethod
    def read_spec(cls, out_dir: Path) -> Job:
        return cls.from_dict(json.loads((Path(out_dir) / "job.json").read_text(encoding="utf-8")))


@dataclass(frozen=True)
class RankResult:
    """One rank: measured (iteration_ms, peak_bytes, the shards it holds) beside the estimate of its plan."""

    rank: int
    iteration_ms: float  # median forward + backward + optimizer of one training iteration
    peak_bytes: int  # CUDA: max_memory_allocated; CPU: growth of the peak resident set (docs/validation.md)
    state_bytes: int  # weights + optimizer state the rank holds, summed over its tensors
    shards_match: bool
    mismatches: tuple[str, ...] = ()
    estimated_ms: float | None = None
    estimated_compute_ms: float | None = None
    estimated_comms_ms: float | None = None
    estimated_bytes: int | None = None
    memory: dict[str, int] = field(default_factory=dict)  # measured and estimated memory parts (results.py)
    embedding: dict[str, float] = field(default_factory=dict)  # EMBEDDING_TIMES: this rank's own embedding work

    def as_dict(self) -> dict:
        return {
            "rank": self.rank, "iteration_ms": self.iteration_ms,
            "measured_ms": self.iteration_ms,  # the name dry-runs use, which the dashboard stores as step_ms
            "peak_bytes": self.peak_bytes, "state_bytes": self.state_bytes, "shards_match": self.shards_match,
            "mismatches": list(self.mismatches), "estimated_ms": self.estimated_ms,
            "estimated_compute_ms": self.estimated_compute_ms, "estimated_comms_ms": self.estimated_comms_ms,
            "estimated_bytes": self.estimated_bytes, **self.embedding, **self.memory,
        }


@dataclass(frozen=True)
class ValidationResult:
    status: RunStatus
    ranks: tuple[RankResult, ...]
    backend: Backend
    device: Device
    iters: int
    warmup: int
    nproc: int
    launcher: LauncherKind
    error: str | None = None  # one line, when status is not succeeded
    log_tail: str = ""
    device_info: dict = field(default_factory=dict)  # str/int/float values, notes (a list), ids (a dict of those)
    compute_bw: float | None = None  # bytes/ms the estimate assumed for lookups (calibration reads it)
    comms_bw: float | None = None  # bytes/ms the estimate assumed for collectives
    elapsed_s: float | None = None

    @property
    def shards_match(self) -> bool:
        return bool(self.ranks) and all(r.shards_match for r in self.ranks)

    @property
    def max_rank_iteration_ms(self) -> float | None:
        return max((r.iteration_ms for r in self.ranks), default=None)

    def as_dict(self) -> dict:
        return {
            "status": self.status.value, "error": self.error, "ranks": [r.as_dict() for r in self.ranks],
            "backend": self.backend.value, "device": self.device.value, "iters": self.iters, "warmup": self.warmup,
            "nproc": self.nproc, "launcher": self.launcher.value, "shards_match": self.shards_match,
            "max_rank_iteration_ms": self.max_rank_iteration_ms,
            "estimate_compute_bw_bytes_per_ms": self.compute_bw, "estimate_comms_bw_bytes_per_ms": self.comms_bw,
            "elapsed_s": self.elapsed_s, **self.device_info, "log_tail": self.log_tail,
        }


__all__ = ["EMBEDDING_TIMES", "Backend", "Job", "LauncherKind", "RankResult", "RunStatus", "SlurmOptions",
           "ValidationResult"]
