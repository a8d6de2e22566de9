"""`python -m engine`: plan, estimate, torchrec-plan (and the measuring commands).

Errors a user can fix print one line, `error: ...`, and exit with code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import replace
from typing import Optional

from engine import atomicfile
from engine import limits as L
from engine.cliutil import one_line_errors
from engine.config import load_config
from engine.errors import EngineError, one_line
from engine.evaluate import evaluate
from engine.planfile import load_plan, plan_to_dict
from engine.planner import PlannerSettings, plan, without_cyclic_gc
from engine.readers import read_json
from engine.report import summary, torchrec_format
from engine.types import Config, Plan

EXIT_USAGE = 2


def _int_in(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number from {lo:,} to {hi:,}, got {_short(text)}") \
                from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo:,} to {hi:,}, got {value:,}")
        return value
    return parse


_effort = _int_in(0, 10**9)
_seed = _int_in(0, 2**32 - 1)


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 86_400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be seconds from 0 to 86,400 (one day), got {text!r}")
    return value


def _gain(text: str) -> float | str:
    from engine.keep import MAX_MIN_GAIN

    if text == "auto":  # with --table-costs: read from the file's probe ranks (engine.table_costs.gain_margin)
        return text
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        value = float("nan")
    if not 0 <= value < MAX_MIN_GAIN:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be auto or a fraction from 0 to under {MAX_MIN_GAIN:g} (e.g. 0.06 or "
                                         f"6%), got {_short(text)}")
    return value


def _write_out(path: str, data: dict, text: str | None = None) -> None:
    """--out written whole or not at all: on a full disk the earlier file stays as it was. `text`: data already
    encoded as write_json encodes it (json.dumps, indent 1), so a plan printed too is encoded once."""
    try:
        if text is None:
            atomicfile.write_json(path, data)
        else:
            atomicfile.write_text(path, text + "\n")
    except OSError as e:
        raise EngineError(f"cannot write --out {path!r}: {e.strerror or e}") from None


def _emit(p: Plan, cfg: Config, args: argparse.Namespace) -> None:
    data = plan_to_dict(p)
    # --json with --out: one encoding for both (0.29 s of a 10,000-table, 1,024-rank plan's 5 s, bench.scale)
    text = json.dumps(data, indent=1) if args.json else None
    if getattr(args, "out", None):
        _write_out(args.out, data, text)
    if text is not None:
        print(text)
    elif getattr(args, "torchrec_format", False):
        print(torchrec_format(p, cfg))
    else:
        print(summary(p, cfg))
        if getattr(args, "out", None):
            print(f"\nWrote {args.out}")


def cmd_plan(args: argparse.Namespace) -> int:
    settings = PlannerSettings(search=not args.no_search, effort=args.effort, seed=args.seed,
                               time_budget_s=args.time_budget)
    with without_cyclic_gc():  # reading, planning and writing 100,000 tables make millions of acyclic objects
        cfg = load_config(args.config, refuse_too_big=True)  # tables that cannot fit: refused once they are read
        if args.min_gain is not None and args.baseline is None:
            raise EngineError("--min-gain is the gain ours must show over --baseline PLAN.json: give --baseline too")
        baseline = load_plan(args.baseline, cfg) if args.baseline is not None else None  # before planning
        if args.min_gain == "auto" and args.table_costs is None:
            raise EngineError("--min-gain auto reads the estimate's error from the probe ranks of --table-costs "
                              "COSTS.json (python -m engine measure-tables): give --table-costs too, or a number")
        measured: list[str] = []
        min_gain = args.min_gain or 0.0
        if args.table_costs is not None:
            from engine.table_costs import apply_table_costs, gain_margin

            costs = read_json(args.table_costs, "--table-costs")
            priced, measured = apply_table_costs(cfg, costs, args.table_costs)
            if args.min_gain == "auto":
                min_gain, said = gain_margin(cfg, costs)
                measured = [*measured, said]
            cfg = priced
        result = plan(cfg, settings)
        if measured:
            result = replace(result, notes=(*result.notes, *measured))
        if baseline is not None:
            from engine.keep import keep_baseline

            result = keep_baseline(cfg, result, baseline, min_gain, "the baseline plan (--baseline)")
        _emit(result, cfg, args)
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    tables = load_plan(args.plan, cfg)
    _emit(evaluate(cfg, tables, planner="file"), cfg, args)
    return 0


def cmd_torchrec_plan(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    from engine.torchrec_compat import torchrec_plan  # imports torch and torchrec

    _emit(torchrec_plan(cfg), cfg, args)
    return 0


def _int_list(lo: int, hi: int):
    item = _int_in(lo, hi)

    def parse(text: str) -> list[int]:
        parts = [t.strip() for t in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"must be whole numbers separated by commas, got {text!r}")
        return [item(t) for t in parts]
    return parse


def _names(text: str) -> list[str]:
    parts = [t.strip() for t in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"must be names separated by commas, got {text!r}")
    return parts


def cmd_sweep(args: argparse.Namespace) -> int:
    from engine import sweep

    settings = PlannerSettings(search=args.effort > 0, effort=args.effort, seed=args.seed,
                               time_budget_s=args.time_budget)
    with without_cyclic_gc():
        cfg = load_config(args.config)
        points = sweep.sweep(cfg, args.devices or list(sweep.ACCELERATORS), args.world_sizes or sweep.WORLD_SIZES,
                             args.batch_sizes, settings, jobs=args.jobs or sweep.default_jobs(),
                             group_sizes=[None, *args.group_sizes] if args.group_sizes else None)
    if args.json:
        print(json.dumps({"effort": args.effort, "seed": args.seed, "note": sweep.PUBLISHED_NOTE,
                          "accelerators": {k: {"label": a.label, "source": a.source}
                                           for k, a in sweep.ACCELERATORS.items()},
                          "points": [p.as_dict() for p in points]}, indent=1))
    else:
        print(sweep.table(points))
    return 0


def _bytes(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of bytes, got {_short(text)}") from None
    if not 0 <= value <= L.MAX_MOVE_BYTES:
        raise argparse.ArgumentTypeError(f"must be from 0 to {L.MAX_MOVE_BYTES:,} bytes, got {_short(text)}")
    return value


def _short(text: str) -> str:
    """A number as typed, cut to fit one line (a 400-digit value is still named, not printed)."""
    return repr(text) if len(text) <= 30 else f"{text[:12]!r}... ({len(text):,} characters)"


def cmd_replan(args: argparse.Namespace) -> int:
    from engine.replan import load_old_plan, replan

    settings = PlannerSettings(search=args.effort > 0, effort=args.effort, seed=args.seed,
                               time_budget_s=args.time_budget)
    with without_cyclic_gc():
        cfg = load_config(args.config)
        old = load_old_plan(args.from_plan)
        result = replan(cfg, old, args.max_move_bytes, settings)
    if args.out:
        _write_out(args.out, plan_to_dict(result.plan))
    s = result.summary()
    if args.json:
        print(json.dumps({"replan": s, "plan": plan_to_dict(result.plan)}, indent=1))
        return 0
    gib = 2**30
    kept = ("- (it leaves no room for the changed tables)" if s["kept_step_ms"] is None
            else f"{s['kept_step_ms']:.4g} ms, moves {s['kept_moved_bytes'] / gib:.3g} GiB")
    print(f"Re-plan: slowest rank {s['step_ms']:.4g} ms, moves {s['moved_bytes'] / gib:.3g} GiB"
          + (f" (limit {s['max_move_bytes'] / gib:.3g} GiB)" if s["max_move_bytes"] is not None else ""))
    print(f"Earlier placement kept as it is: {kept}")
    print(f"From scratch: {s['scratch_step_ms']:.4g} ms, moves {s['scratch_moved_bytes'] / gib:.3g} GiB")
    print(f"Tables with bytes to move ({len(s['moved_tables'])}): {', '.join(s['moved_tables'][:20]) or 'none'}"
          + (" ..." if len(s["moved_tables"]) > 20 else ""))
    if s["new_tables"]:
        print(f"New tables ({len(s['new_tables'])}): {', '.join(s['new_tables'][:20])}")
    for p in s["moved_by_pair"][:20]:
        print(f"  rank {p['from']} -> rank {p['to']}: {p['bytes'] / gib:.3g} GiB")
    for c in s["checkpoint_breaks"]:
        print(f"Checkpoint: {c['table']} does not load as it is ({c['why']})")
    print()
    print(summary(result.plan, cfg))
    return 0


def _output_flags(p: argparse.ArgumentParser, torchrec: bool = True) -> None:
    p.add_argument("--json", action="store_true", help="print the plan JSON instead of the summary")
    p.add_argument("--out", metavar="PLAN.json", help="also write the plan JSON to this file")
    if torchrec:
        p.add_argument("--torchrec-format", action="store_true",
                       help="print the plan as TorchRec prints a ShardingPlan")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Sharding planner for embedding tables.")
    sub = parser.add_subparsers(dest="command", required=True)
    one_line_errors(parser, "")

    p = sub.add_parser("plan", help="plan a config")
    p.add_argument("config", metavar="CONFIG.json")
    _output_flags(p)
    p.add_argument("--no-search", action="store_true", help="greedy placement only, no local search")
    p.add_argument("--effort", type=_effort, default=PlannerSettings.effort, metavar="UNITS",
                   help="work budget of the search, in evaluations (default %(default)s); the same config, effort "
                        "and seed give the same plan on any machine")
    p.add_argument("--seed", type=_seed, default=PlannerSettings.seed, metavar="N",
                   help="seed of the search's random rounds (default %(default)s)")
    p.add_argument("--time-budget", type=_budget, default=PlannerSettings.time_budget_s, metavar="SECONDS",
                   help="safety stop on the whole planning, in wall-clock seconds (default %(default)s); a plan "
                        "it cuts short says so in its notes")
    p.add_argument("--baseline", metavar="PLAN.json", help="a plan already in use (yours, or TorchRec's): it is kept "
                   "unless ours is estimated faster by more than --min-gain (engine.keep)")
    p.add_argument("--min-gain", type=_gain, metavar="F|auto", help="with --baseline: the share by which ours must "
                   "beat its estimated slowest rank, e.g. 0.06 or 6%% (default 0): the estimate's error on two plans' "
                   "ratio on your device (bench/results/measured_guard.md); auto, with --table-costs: sqrt(2) x the "
                   "estimate's median error on the file's probe ranks (engine.table_costs.gain_margin)")
    p.add_argument("--table-costs", metavar="COSTS.json", help="each table's compute as measured alone on the "
                   "device (python -m engine measure-tables), in place of the estimate's (engine.table_costs)")
    p.set_defaults(func=cmd_plan)
    one_line_errors(p, "plan")

    p = sub.add_parser("estimate", help="per-rank memory and cost of a plan made elsewhere")
    p.add_argument("config", metavar="CONFIG.json")
    p.add_argument("--plan", required=True, metavar="PLAN.json")
    _output_flags(p)
    p.set_defaults(func=cmd_estimate)
    one_line_errors(p, "estimate")

    p = sub.add_parser("torchrec-plan", help="run TorchRec's EmbeddingShardingPlanner on the config")
    p.add_argument("config", metavar="CONFIG.json")
    _output_flags(p)
    p.set_defaults(func=cmd_torchrec_plan)
    one_line_errors(p, "torchrec-plan")

    p = sub.add_parser("replan", help="re-plan a changed config from an earlier plan, moving few bytes")
    p.add_argument("config", metavar="CONFIG.json")
    p.add_argument("--from", dest="from_plan", required=True, metavar="PLAN.json",
                   help="the earlier plan: a plan file (python -m engine plan --json) or a saved plan's bundle "
                        "(python -m db export TOKEN --out FILE)")
    p.add_argument("--max-move-bytes", type=_bytes, metavar="N",
                   help="most bytes (weights and optimizer state) to move between ranks (default: no limit)")
    p.add_argument("--effort", type=_effort, default=PlannerSettings.effort, metavar="UNITS")
    p.add_argument("--seed", type=_seed, default=PlannerSettings.seed, metavar="N")
    p.add_argument("--time-budget", type=_budget, default=PlannerSettings.time_budget_s, metavar="SECONDS")
    p.add_argument("--json", action="store_true", help="print the re-plan's figures and plan as JSON")
    p.add_argument("--out", metavar="PLAN.json", help="also write the re-plan's plan JSON to this file")
    p.set_defaults(func=cmd_replan)
    one_line_errors(p, "replan")

    p = sub.add_parser("sweep", help="plan the config over world sizes, accelerators and batch sizes (capacity)")
    p.add_argument("config", metavar="CONFIG.json")
    p.add_argument("--world-sizes", type=_int_list(1, 16_384), metavar="N,N,...",
                   help="world sizes to plan (default 8,16,...,1024); 8 GPUs per host")
    p.add_argument("--devices", type=_names, metavar="NAME,...",
                   help="accelerators: a100_40gb, a100_80gb, h100_80gb, h200_141gb, b200_192gb (default: all); "
                        "a mixed fleet as GPUs per accelerator, e.g. \"8 h100_80gb + 8 a100_80gb\" (its own world "
                        "size; each group whole hosts)")
    p.add_argument("--batch-sizes", type=_int_list(1, 2**24), metavar="N,N,...",
                   help="per-rank batch sizes (default: the config's)")
    p.add_argument("--group-sizes", type=_int_list(1, 16_384), metavar="N,N,...",
                   help="2D sharding: ranks per group to try besides one group (DMPCollection's "
                        "sharding_group_size; default: the config's alone)")
    p.add_argument("--effort", type=_effort, default=10_000, metavar="UNITS",
                   help="search effort per point (default %(default)s; `plan` uses 50,000)")
    p.add_argument("--seed", type=_seed, default=PlannerSettings.seed, metavar="N")
    p.add_argument("--time-budget", type=_budget, default=PlannerSettings.time_budget_s, metavar="SECONDS",
                   help="safety stop per point, in wall-clock seconds (default %(default)s)")
    p.add_argument("--jobs", type=_int_in(1, 256), metavar="N",
                   help="worker processes (default: the cores, at most 4); the points do not depend on it")
    p.add_argument("--json", action="store_true", help="print the points as JSON")
    p.set_defaults(func=cmd_sweep)
    one_line_errors(p, "sweep")

    for module in EXTRA_COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


# Measuring commands live next to what they measure; each module has register(subparsers) and imports
# torch only inside its command function, so `plan` stays fast.
EXTRA_COMMAND_MODULES: list[str] = ["engine.dryrun.command", "engine.dryrun.table_costs",
                                     "engine.validate.command", "engine.stats.command"]


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except EngineError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
