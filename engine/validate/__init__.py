"""Validation runs: a plan checked on real processes (torchrun, locally or on a cluster), per-rank iteration
time, peak memory and shard sizes measured beside the estimates. Importing this package does not import torch.

Public API: run_validation(...) in engine.validate.run, the launchers in engine.validate.launch, and the types.
"""

from engine.validate.types import (
    Backend,
    Job,
    LauncherKind,
    RankResult,
    RunStatus,
    SlurmOptions,
    ValidationResult,
)

__all__ = ["Backend", "Job", "LauncherKind", "RankResult", "RunStatus", "SlurmOptions", "ValidationResult"]
