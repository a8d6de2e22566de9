"""The measuring runs of `python -m db` as data: for each run kind its command (`python -m db validate|dryrun
CONFIG.json --plan PLAN.json ...`), its help line and the options a caller such as the dashboard may give it.
db.runs_cli builds the commands' argparse from it (the engine's flags of the run, plus RECORD_OPTIONS), and
dashboard.serve.runner builds a run's command line from it: nobody reads argparse's internals.
"""

from __future__ import annotations

from dataclasses import dataclass

RECORD_OPTIONS = ("--plan-token", "--run-id")  # which stored plan and which queued run the command records into
COMMON_OPTIONS = (*RECORD_OPTIONS, "--json", "--device", "--backend", "--iters", "--warmup", "--seed")


@dataclass(frozen=True)
class RunCommand:
    kind: str  # the run's kind in the store (db.models.RunKind)
    name: str  # python -m db NAME
    help: str
    options: tuple[str, ...]  # the options a caller may give, besides CONFIG.json and --plan PLAN.json

    def takes(self, option: str) -> bool:
        return option in self.options


RUN_COMMANDS = {c.kind: c for c in (
    RunCommand("validation", "validate", "run a plan on real processes (as python -m engine validate) and record the "
               "run: status, log, per-rank metrics", (*COMMON_OPTIONS, "--out-dir", "--timeout", "--nproc", "--ids")),
    RunCommand("dryrun", "dryrun", "time each rank's kernels (as python -m engine dryrun) and record the run: status, "
               "per-rank metrics", (*COMMON_OPTIONS, "--threads", "--distribution", "--zipf-alpha", "--batches",
                                    "--max-bytes", "--scale-rows", "--ids")),
)}

__all__ = ["COMMON_OPTIONS", "RECORD_OPTIONS", "RUN_COMMANDS", "RunCommand"]
