"""Kernel dry-run: build each rank's shards for real (fbgemm TBE, or torch where fbgemm is missing) and time
forward + backward on synthetic batches. Importing this package does not import torch; run_dryrun does.

Public API: run_dryrun(cfg, tables, DryrunSettings(...)) -> DryrunResult, and dryrun_summary(result).
"""

from engine.dryrun.report import dryrun_summary
from engine.dryrun.run import run_dryrun, spearman
from engine.dryrun.types import (
    Backend,
    Distribution,
    DryrunDevice,
    DryrunResult,
    DryrunSettings,
    Piece,
    RankResult,
)

__all__ = ["Backend", "Distribution", "DryrunDevice", "DryrunResult", "DryrunSettings", "Piece", "RankResult",
           "dryrun_summary", "run_dryrun", "spearman"]
