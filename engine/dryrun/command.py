"""`python -m engine dryrun CONFIG.json --plan PLAN.json [--json]`: the kernel dry-run from the command line.

Registered through engine.cli.EXTRA_COMMAND_MODULES; torch is imported only when the command runs.
Every mistake in the flags prints one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import re

from engine.cliutil import one_line_errors
from engine.config import load_config
from engine.replicas import group_config
from engine.planfile import load_plan
from engine.pricing import priced_for
from engine.types import Device

from engine.dryrun.types import DEFAULT_MAX_BYTES, Backend, Distribution, DryrunDevice, DryrunSettings

EXIT_USAGE = 2
UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_bytes(text: str) -> int:
    """'4GiB', '512MiB', '1e9', '123' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 4GiB, 512MiB or 1000000")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def settings_of(args: argparse.Namespace) -> DryrunSettings:
    return DryrunSettings(
        backend=Backend(args.backend), device=DryrunDevice(args.device), iters=args.iters, warmup=args.warmup,
        threads=args.threads, distribution=Distribution(args.distribution), zipf_alpha=args.zipf_alpha,
        seed=args.seed, batches=args.batches, max_bytes=args.max_bytes, scale_rows=args.scale_rows, ids=args.ids,
        turns=not args.one_rank_at_a_time)


def dryrun_result(args: argparse.Namespace) -> tuple[dict, str]:
    """Measure the plan the flags name, priced for the device measured (engine.pricing): (the --json result,
    the human output). `python -m db dryrun` records the same result."""
    cfg = load_config(args.config)
    tables = load_plan(args.plan, cfg)
    settings = settings_of(args)
    pricing = priced_for(group_config(cfg), Device(settings.device.value), "dry-run")  # 2D: one group's ranks
    from engine.dryrun import run_dryrun
    from engine.dryrun.report import dryrun_json, dryrun_summary

    result = run_dryrun(pricing.config, tables, settings)
    return dryrun_json(result, pricing, tables), dryrun_summary(result, pricing)


def cmd_dryrun(args: argparse.Namespace) -> int:
    data, text = dryrun_result(args)
    print(json.dumps(data, indent=1) if args.json else text)
    return 0


def add_dryrun_arguments(p: argparse.ArgumentParser, plan: bool = True) -> None:
    """CONFIG.json, --plan (with plan) and every flag of a dry-run (what dryrun_result reads)."""
    d = DryrunSettings()
    p.add_argument("config", metavar="CONFIG.json")
    if plan:
        p.add_argument("--plan", required=True, metavar="PLAN.json",
                       help="the plan to measure (python -m engine plan --out)")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--device", choices=[x.value for x in DryrunDevice], default=d.device.value,
                   help="where to run the kernels (default %(default)s; cuda only where one is available)")
    p.add_argument("--backend", choices=[x.value for x in Backend], default=d.backend.value,
                   help="fbgemm's TBE, torch's embedding_bag, or auto: fbgemm when it can (default %(default)s)")
    p.add_argument("--iters", type=int, default=d.iters,
                   help="timed steps; the median is reported (default %(default)s)")
    p.add_argument("--warmup", type=int, default=d.warmup, help="untimed steps first (default %(default)s)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads (default %(default)s)")
    p.add_argument("--distribution", choices=[x.value for x in Distribution], default=d.distribution.value,
                   help="how ids are drawn over a table's rows: config (each table's zipf_exponent constraint; "
                        "0 is uniform), or uniform / zipf for every table (default %(default)s)")
    p.add_argument("--zipf-alpha", type=float, default=d.zipf_alpha, metavar="ALPHA",
                   help="skew of --distribution zipf; row 0 is the hottest (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the synthetic batches (default %(default)s)")
    p.add_argument("--batches", type=int, default=d.batches, metavar="N",
                   help="distinct batches the steps cycle through; 0: fresh ids every step, as training sees "
                        "(default %(default)s)")
    p.add_argument("--ids", metavar="SAMPLE",
                   help="replay a sample's ids (.parquet, .csv or .npz; python -m engine stats reads the same) "
                        "instead of synthetic ones: world_size x batch_size rows per step, in order, cycled when "
                        "the sample runs out")
    p.add_argument("--max-bytes", type=parse_bytes, default=DEFAULT_MAX_BYTES, metavar="SIZE",
                   help="refuse a rank whose weights + optimizer state exceed this, e.g. 8GiB (default 4GiB)")
    p.add_argument("--one-rank-at-a-time", action="store_true",
                   help="build, time and free each rank before the next (one rank's memory at a time) instead of "
                        "timing all ranks in turns of a few steps, which a drifting machine speed moves less")
    p.add_argument("--scale-rows", type=float, default=d.scale_rows, metavar="F",
                   help="shrink every table to rows x F (0 < F <= 1); changes what is measured (default 1)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("dryrun", help="build each rank's shards and time forward + backward on this machine")
    add_dryrun_arguments(p)
    p.set_defaults(func=cmd_dryrun)
    one_line_errors(p, "dryrun")


__all__ = ["add_dryrun_arguments", "cmd_dryrun", "dryrun_result", "parse_bytes", "register", "settings_of"]
