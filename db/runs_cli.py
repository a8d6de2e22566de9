"""`python -m db validate | dryrun | import-results | calibrate`: measuring runs recorded in the database
DATABASE_URL names, and calibration from them. The engine measures (engine.validate.command,
engine.dryrun.command: same flags and output); this module only hands it a sink that records the run
(db.runsink.record_result at the end), so the engine never imports db. The dashboard starts these commands.

As `python -m engine validate`: bad input (a database error included) is one line and exit 2; a run that fails
exits 1 (its result still printed), a cancelled one 130.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from db import calibrate_cli
from db.errors import StoreError
from db.jsonfile import read_json_object
from db.models import RunKind
from db.run_commands import RECORD_OPTIONS, RUN_COMMANDS
from db.runsink import DbSink, check_results, import_results, open_store, store_plan
from engine import (
    Config, EngineError, Plan, RunStatus, TablePlan, add_dryrun_arguments, add_validate_arguments, dryrun_result,
    evaluate, load_config, load_plan, run_validate,
)
from engine import RUN_EXIT_CODES as EXIT_CODES
from engine import ValidationJob as Job
from engine import say_progress as say
from engine import cpu_device_info as engine_cpu_device_info

EXIT_USAGE, EXIT_CANCELLED = 2, 130
Command = Callable[[argparse.Namespace], int]


def cmd_validate(args: argparse.Namespace) -> int:
    config_name = Path(args.config).stem

    def sink_factory(cfg: Config, tables: dict[str, TablePlan], estimates: Plan, job: Job) -> DbSink:
        store = open_store()
        sink = DbSink.create(store, cfg, tables, estimates, args.plan_token, job.backend.value, job.device.value,
                             config_name, run_id=args.run_id)
        say(f"run {sink.run_id} of plan {sink.token} in {store.where}")
        return sink

    def script_notes(cfg: Config, tables: dict[str, TablePlan], estimates: Plan, job: Job) -> dict[str, str]:
        token = store_plan(open_store(), cfg, tables, estimates, args.plan_token, config_name)
        return {"plan_token": token,
                "import": f"python -m db import-results {shlex.quote(str(job.results_path))} --plan-token {token}"}

    return run_validate(args, sink_factory, script_notes)


def cmd_dryrun(args: argparse.Namespace) -> int:
    """`python -m engine dryrun`, recorded: the run row goes running, then holds the result (or the one-line
    error, or cancelled on Ctrl-C or SIGTERM, which is how the dashboard cancels)."""
    from engine import Stopped, stop_on_sigterm

    cfg = load_config(args.config)
    tables = load_plan(args.plan, cfg)
    store = open_store()
    sink = DbSink.create(store, cfg, tables, evaluate(cfg, tables, planner="file"), args.plan_token, args.backend,
                         args.device, Path(args.config).stem, RunKind.DRYRUN, args.run_id)
    print(f"dryrun: run {sink.run_id} of plan {sink.token} in {store.where}", file=sys.stderr, flush=True)
    sink.status(RunStatus.RUNNING)
    try:
        with stop_on_sigterm():
            data, text = dryrun_result(args)
    except (KeyboardInterrupt, Stopped):
        sink.record({}, RunStatus.CANCELLED, "cancelled")
        print("error: dry-run cancelled", file=sys.stderr)
        return EXIT_CODES[RunStatus.CANCELLED]
    except Exception as e:
        sink.fail(str(e) if isinstance(e, EngineError) else f"{type(e).__name__}: {e}")
        raise
    # per-term calibration fits per device, and says how busy the machine was while its runs measured
    sink.record({**data, **_device(args.device), "load_average": os.getloadavg()[0]})
    print(json.dumps(data, indent=1) if args.json else text)
    return 0


def _device(device: str) -> dict:
    """What a dry-run stores of the device it measured on, as validation runs do: the GPU's name, or the CPU's name
    with the machine's platform, caches and library versions (engine.cpu_device_info)."""
    if device == "cuda":
        import torch

        return {"device_name": torch.cuda.get_device_name(0)}
    return engine_cpu_device_info()


def cmd_import_results(args: argparse.Namespace) -> int:
    data = read_json_object(args.results_file, "RESULTS.json")
    check_results(data)  # a file that is no result fails before the database is touched
    run_id = import_results(open_store(), args.plan_token, data)
    print(json.dumps({"run_id": run_id, "plan_token": args.plan_token}) if args.json
          else f"Stored run {run_id} of plan {args.plan_token}")
    return 0


def _exit_codes_of_engine(fn: Command) -> Command:
    """The engine's exit codes for these commands: bad input or database trouble 2, interrupted 130."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (StoreError, EngineError) as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return EXIT_CANCELLED

    return run


def _record_flags(p: argparse.ArgumentParser) -> None:
    token, run_id = RECORD_OPTIONS
    p.add_argument(token, metavar="TOKEN",
                   help="the stored plan this run measures (default: store the plan and print its token)")
    p.add_argument(run_id, type=int, metavar="N",
                   help="record into run N of --plan-token, created queued beforehand (the dashboard does this)")


RUNS = {RunKind.VALIDATION: (add_validate_arguments, cmd_validate), RunKind.DRYRUN: (add_dryrun_arguments, cmd_dryrun)}


def register(sub: argparse._SubParsersAction) -> None:
    for kind, (add_arguments, command) in RUNS.items():  # as db.run_commands declares them
        declared = RUN_COMMANDS[kind.value]
        p = sub.add_parser(declared.name, help=declared.help)
        add_arguments(p)
        _record_flags(p)
        p.set_defaults(func=_exit_codes_of_engine(command))

    p = sub.add_parser("import-results", help="store a validation results file as a run of a saved plan")
    p.add_argument("results_file", metavar="RESULTS.json")
    p.add_argument("--plan-token", required=True, metavar="TOKEN", help="the saved plan the results are of")
    p.add_argument("--json", action="store_true", help="print {run_id, plan_token} as JSON")
    p.set_defaults(func=_exit_codes_of_engine(cmd_import_results))

    calibrate_cli.register(sub, _exit_codes_of_engine)


__all__ = ["cmd_dryrun", "cmd_import_results", "cmd_validate", "register"]
