"""`python -m engine stats CONFIG.json SAMPLE [--json] [--out STATS.json] [--apply CONFIG_OUT.json] [--plan PLAN.json]
[--batch-size N]`: workload statistics measured on a sample of real ids (docs/stats.md).

Registered through engine.cli.EXTRA_COMMAND_MODULES; numpy and pyarrow are imported only when the command runs.
Nothing is written unless the whole sample reads: a bad sample prints one line and leaves --out and --apply alone.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine import limits as L
from engine.cli import _int_in
from engine.cliutil import one_line_errors
from engine.errors import EngineError
from engine.stats.lru import EXACT_LIMIT_LOOKUPS, EXACT_MAX_LOOKUPS


def applied(result: dict, cfg) -> dict:  # noqa: ANN001 - engine.types.Config
    """The config with the measured pooling in each table's constraints and a `workload` block (engine.workload_block:
    the miss-ratio curve, distinct rows per batch, the Zipf exponent, the pooling factors, and where they came
    from), checked by reading it back."""
    from engine.config import config_to_dict, parse_config
    from engine.stats.compute import pooling_constraints

    data = config_to_dict(cfg)
    for name, fields in pooling_constraints(result, cfg).items():
        data["constraints"].setdefault(name, {}).update(fields)
    sample = result["sample"]
    for name, t in result["tables"].items():
        block = {
            "from": {"file": sample["file"], "rows": sample["rows"], "modified": sample["modified"]},
            "miss_ratio_curve": t["miss_ratio_curve"],
            "miss_ratio_method": t["miss_ratio_method"]["method"],
            "batch_size": result["batch_size"],
            "unique_rows": t["unique_rows"],
            "unique_rows_per_batch": {"mean": t["unique_rows_per_batch"]["mean"],
                                      "p99": t["unique_rows_per_batch"]["p99"]},
            "pooling_factors": [result["features"][f]["pooling_factor"] for f in t["features"]],
        }
        if t.get("batch_zipf_exponent") is not None:
            block["zipf_exponent"] = t["batch_zipf_exponent"]
        data["constraints"].setdefault(name, {})["workload"] = block
    parse_config(data)  # what is written reads back
    return data


def _at_share(curve: list[dict], rows: int, share: float) -> float | None:
    """The miss rate of the smallest cache on the curve holding at least `share` of the rows."""
    for point in curve:
        if point["cache_rows"] >= share * rows:
            return point["lru_miss_rate"]
    return curve[-1]["lru_miss_rate"] if curve else None


def cmd_stats(args: argparse.Namespace) -> int:
    from engine import atomicfile
    from engine.config import load_config
    from engine.planfile import load_plan
    from engine.stats.compute import workload_stats

    cfg = load_config(args.config)
    plan = load_plan(args.plan, cfg) if args.plan else None
    tty = sys.stderr.isatty()
    shown = ProgressLine(sys.stderr, tty) if args.progress or tty else None
    result = workload_stats(cfg, args.sample, args.batch_size, plan, budget=args.exact_lookups,
                            progress=shown.update if shown is not None else None)
    if shown is not None:
        shown.end()
    writes = []
    if args.out:
        writes.append((args.out, result))
    if args.apply:
        writes.append((args.apply, applied(result, cfg)))
    for path, data in writes:
        try:
            atomicfile.write_json(path, data)
        except OSError as e:
            raise EngineError(f"cannot write {path!r}: {e.strerror or e}") from None
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(summary(result))
    return 0


def progress_text(rows: int, total: int | None, ids: int) -> str:
    """"42% of 3,395,586 rows read (41,998,000 ids so far)": the share of the sample's rows read (counted, never
    timed); without a row count (a file that does not tell), the rows so far."""
    if total:
        return f"{min(100, 100 * rows // total)}% of {total:,} rows read ({ids:,} ids so far)"
    return f"{rows:,} rows read ({ids:,} ids so far)"


class ProgressLine:
    """The measuring's progress on stderr: redrawn in place on a terminal, else one line per whole percent."""

    def __init__(self, stream, tty: bool) -> None:  # noqa: ANN001 - a text stream
        self.stream, self.tty, self.last = stream, tty, ""

    def update(self, rows: int, total: int | None, ids: int) -> None:
        text = progress_text(rows, total, ids)
        if self.tty:
            self.stream.write(f"\rstats: {text}\x1b[K")
        elif text.split(" ", 1)[0] != self.last.split(" ", 1)[0] or not total:
            self.stream.write(f"stats: {text}\n")
        self.last = text
        self.stream.flush()

    def end(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()


def summary(result: dict) -> str:
    s = result["sample"]
    lines = [f"Sample {s['file']}: {s['rows']:,} rows, batch size {result['batch_size']:,}", "",
             f"{'feature':<24} {'pooling':>8} {'p99':>6} {'empty':>6} {'unique ids':>12} {'top 1%':>7} {'zipf':>6}"]
    for f, v in result["features"].items():
        top = "-" if v["top_1pct_share"] is None else f"{v['top_1pct_share']:.1%}"
        z = "-" if v["zipf_exponent"] is None else f"{v['zipf_exponent']:.2f}"
        lines.append(f"{f[:24]:<24} {v['pooling_factor']:>8.2f} {v['pooling_p99']:>6} {v['empty_share']:>6.1%} "
                     f"{v['unique_ids']:>12,} {top:>7} {z:>6}")
    lines += ["", f"{'table':<24} {'unique rows':>12} {'rows/batch':>11} {'p99':>8} {'LRU miss @10%':>14} method"]
    for name, t in result["tables"].items():
        b = t["unique_rows_per_batch"]
        miss = _at_share(t["miss_ratio_curve"], t["num_embeddings"], 0.1)
        lines.append(f"{name[:24]:<24} {t['unique_rows']:>12,} {b['mean']:>11,.1f} {b['p99']:>8,} "
                     f"{'-' if miss is None else format(miss, '.1%'):>14} {t['miss_ratio_method']['method']}")
    if "working_set" in result:
        lines += ["", "Touched bytes per rank per step (mean / p99):"]
        lines += [f"  rank {r['rank']}: {r['mean_bytes']:,.0f} / {r['p99_bytes']:,.0f}"
                  for r in result["working_set"]["per_rank"]]
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="workload statistics (pooling, skew, LRU miss curve) from a sample of ids")
    p.add_argument("config", metavar="CONFIG.json")
    p.add_argument("sample", metavar="SAMPLE", help="ids per feature and sample: .parquet, .csv or .npz "
                   "(docs/stats.md)")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.add_argument("--out", metavar="STATS.json", help="also write the statistics JSON to this file")
    p.add_argument("--apply", metavar="CONFIG_OUT.json",
                   help="write the config with the measured pooling factors and each table's workload block (miss "
                   "curve, distinct rows per batch, skew; docs/stats.md)")
    p.add_argument("--plan", metavar="PLAN.json", help="also the bytes each rank touches per step under this plan")
    p.add_argument("--batch-size", type=_int_in(1, L.MAX_BATCH_SIZE), metavar="N",
                   help="samples per rank per batch (default: the config's topology batch_size)")
    p.add_argument("--exact-lookups", type=_int_in(1, EXACT_LIMIT_LOOKUPS), metavar="N", default=EXACT_MAX_LOOKUPS,
                   help=f"replay up to N lookups of a table exactly, the sampled (SHARDS) curve past them (default "
                   f"{EXACT_MAX_LOOKUPS:,}: under a minute of CPU on 10^8 lookups; memory 4 bytes per table row and "
                   "per distinct row, docs/stats.md)")
    p.add_argument("--progress", action="store_true", help="show the share of the sample's rows read on stderr "
                   "(always on a terminal)")
    p.set_defaults(func=cmd_stats)
    one_line_errors(p, "stats")
