"""Validation runs: a plan checked on real processes (torchrun, locally or on a cluster), per-rank iteration
time, peak memory and shard sizes measured beside the estimates. Importing this package does not import torch.

Public API: `python -m engine validate` (engine.validate.command, whose add_validate_arguments and run_validate
`python -m db validate` reuses with a sink that records the run); in code, stage() and follow() in
engine.validate.run, the launchers in engine.validate.launch, gather() in engine.validate.results, the types.
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
