"""`python -m db`: init, save, list, show, export, import on the database DATABASE_URL names; validate,
import-results and calibrate (validation runs recorded there) are in db.runs_cli.

Errors print one line, `error: ...`, and exit with code 2, as the engine's commands do; never a traceback.
The run commands keep the engine's codes: 2 for bad input, 1 for a failed run, 130 for a cancelled one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from db import runs_cli
from db.bundle import check_bundle, read_bundle_text
from db.estimates import prepare_plan
from db.compare import placement
from db.errors import StoreError
from db.records import PlanRecord
from db.store import Store
from engine import EngineError, human_bytes, one_line, write_text_file

EXIT_ERROR = 2  # bad input or a database that cannot do it: the engine's code for input a user can fix
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def _read_json(path: str, option: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise StoreError(f"{option}: cannot read {path!r}: {getattr(e, 'strerror', None) or e}") from None
    return read_bundle_text(text, f"{option} {path!r}")


def cmd_init(args: argparse.Namespace) -> int:
    store = Store()
    before = store.upgrade()
    after = store.schema_revision()
    change = "already up to date" if before == after else f"upgraded from {before or 'empty'}"
    print(f"database {store.where}: schema {after} ({change})")
    return 0


def cmd_save(args: argparse.Namespace) -> int:
    config = _read_json(args.config, "--config")
    plan = _read_json(args.plan, "--plan")
    prepared = prepare_plan(config, plan, recompute=args.recompute)  # bad files fail before the database is touched
    store = Store()
    store.upgrade()
    name = args.name or Path(args.config).stem or "untitled"
    token = store.save_plan(config, plan, label=args.label, author=args.author, config_name=name,
                            recompute=args.recompute)
    rec = store.get_plan(token)
    assert rec is not None
    if prepared.recomputed:
        print(f"note: stored the estimates recomputed from the config and plan; the file's differed "
              f"({prepared.recomputed})")
    print(f"saved plan of {rec.config_name} v{rec.config_version} ({rec.planner}, "
          f"max rank cost {rec.max_rank_cost_ms:.4f} ms) to {store.where}")
    print(token)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    plans = Store().list_plans(limit=args.limit)
    if args.json:
        print(json.dumps([_jsonable(vars(p)) for p in plans], indent=1))
        return 0
    print(f"{'token':24} {'created (UTC)':16} {'config':24} {'tables':>6} {'world':>5} {'max ms':>10}  label")
    for p in plans:  # names and labels arrive in other people's bundles: each one printable line
        cfg = f"{one_line(p.config_name)} v{p.config_version}"
        print(f"{p.token:24} {p.created_at:%Y-%m-%d %H:%M} {cfg[:24]:24} {p.num_tables:6d} {p.world_size:5d} "
              f"{p.max_rank_cost_ms:10.4f}  {one_line(p.label)}")
    if not plans:
        print("(no plans saved yet)")
    return 0


def _show_text(store: Store, rec: PlanRecord) -> None:
    """The record as text; every string from the database (a bundle's, perhaps) escaped to one printable line."""
    print(f"token        {rec.token}\nlabel        {one_line(rec.label)}\nauthor       {one_line(rec.author)}")
    print(f"created      {rec.created_at:%Y-%m-%d %H:%M:%S} UTC\nplanner      {one_line(rec.planner)} "
          f"({rec.planning_seconds:.2f} s)\nconfig       {one_line(rec.config_name)} v{rec.config_version}")
    print(f"max cost     {rec.max_rank_cost_ms:.4f} ms per step\n\nrank       hbm        ddr    cost ms")
    for r in rec.plan.get("ranks", []):
        print(f"{r['rank']:4d} {human_bytes(r['hbm_bytes']):>10} {human_bytes(r['ddr_bytes']):>10} "
              f"{r['cost_ms']:10.4f}")
    print("\ntable placements")
    for name, tp in rec.plan.get("plan", {}).items():
        print(f"  {one_line(name)}: {one_line(str(placement(tp)))}")
    runs = store.runs_for_plan(rec.token)
    print(f"\nruns ({len(runs)})")
    for run in runs:
        print(one_line(f"  #{run.id} {run.kind} on {run.backend}/{run.device}: {run.status}"
                       + (f" - {run.error.splitlines()[0]}" if run.error else "")))


def cmd_show(args: argparse.Namespace) -> int:
    store = Store()
    rec = store.get_plan(args.token)
    if rec is None:
        raise StoreError(f"no plan with token {args.token!r} in {store.where} (see `python -m db list`)")
    if args.json:
        print(json.dumps(_jsonable(vars(rec)), indent=1))
    else:
        _show_text(store, rec)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    text = json.dumps(Store().export_bundle(args.token), indent=1) + "\n"
    if args.out:
        try:
            write_text_file(args.out, text)  # on a full disk the earlier file stays whole
        except OSError as e:
            raise StoreError(f"--out: cannot write {args.out!r}: {e.strerror or e}") from None
    else:
        sys.stdout.write(text)
    return 0


def _import_one(path: str, recompute: bool, stores: list[Store]) -> tuple[str, str]:
    """(token, what differed when recompute replaced the bundle's estimates) for one bundle file."""
    bundle = _read_json(path, "FILE")
    prepared = check_bundle(bundle, recompute)["prepared"]  # a bad bundle fails before the database is touched
    if not stores:
        stores.append(Store())
        stores[0].upgrade()
    return stores[0].import_bundle(bundle, recompute=recompute), prepared.recomputed


def cmd_import(args: argparse.Namespace) -> int:
    """One file: its token (or one error line). Several: `TOKEN FILE` or `error: FILE: ...` for each, in turn."""
    several, stores, failed = len(args.files) > 1, [], 0
    for path in args.files:
        where = f"{path}: " if several else ""
        try:
            token, recomputed = _import_one(path, args.recompute, stores)
        except (StoreError, EngineError) as e:
            if not several:
                raise
            print(f"error: {where}{e}", file=sys.stderr, flush=True)
            failed += 1
            continue
        if recomputed:
            print(f"note: {where}stored the estimates recomputed from the config and plan; the bundle's "
                  f"differed ({recomputed})")
        print(f"{token} {path}" if several else token, flush=True)
    return EXIT_ERROR if failed else 0


def _jsonable(d: dict) -> dict:
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in d.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m db", description="The planner's store of configs, plans and runs "
                     "(the database DATABASE_URL names; default: a SQLite file in PLANNER_DATA_DIR or ./data).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("init", help="create or upgrade the schema").set_defaults(func=cmd_init)

    p = sub.add_parser("save", help="save a plan and print its share token (last line)")
    p.add_argument("--config", required=True, metavar="CONFIG.json", help="the config the plan was made for")
    p.add_argument("--plan", required=True, metavar="PLAN.json", help="the plan file (python -m engine plan --out)")
    p.add_argument("--label", default="", help="a note shown next to the plan")
    p.add_argument("--author", default="", help="who made the plan")
    p.add_argument("--name", help="the config's name (default: the config file's name without .json)")
    p.add_argument("--recompute", action="store_true", help="store the estimates recomputed from the config "
                   "and plan when the file's differ (default: refuse such a file)")
    p.set_defaults(func=cmd_save)

    p = sub.add_parser("list", help="saved plans, newest first")
    p.add_argument("--limit", type=int, default=200, help="at most this many plans (default 200)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one plan: estimates per rank, placements, runs")
    p.add_argument("token", metavar="TOKEN")
    p.add_argument("--json", action="store_true", help="print the plan record as JSON")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("export", help="print a plan's bundle JSON (config, plan, runs, metrics)")
    p.add_argument("token", metavar="TOKEN")
    p.add_argument("--out", metavar="FILE", help="write the bundle to FILE instead of stdout")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="import bundles and print their tokens")
    p.add_argument("files", nargs="+", metavar="FILE", help="a bundle written by export ('-' reads stdin); "
                   "several are imported one by one, each printing `TOKEN FILE` or `error: FILE: ...`")
    p.add_argument("--recompute", action="store_true", help="store the estimates recomputed from the config "
                   "and plan when the bundle's differ, e.g. a bundle from an older estimator (default: refuse it)")
    p.set_defaults(func=cmd_import)

    runs_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (StoreError, EngineError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (| head): not an error worth a message
        return 0


if __name__ == "__main__":
    sys.exit(main())
