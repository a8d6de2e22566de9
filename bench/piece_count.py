"""What a table beyond a rank's first costs, apart from the rows it touches: one table against the same ids and rows
split into n tables, on one rank each, timed in turns in one dry-run (engine.run_dryrun) with the n tables each alone
and a one-row table for the fixed step.

  python -m bench.piece_count [--rounds 5] [--optimizers sgd rowwise_adagrad adam] [--out bench/results/piece_count.md]

Ranks of each dry-run: 0, one table of R rows and pooling P; 1, n tables of R/n rows and pooling P/n (the same ids a
step, the same distinct rows under uniform ids, so the same working set); 2..n+1, each of those n tables alone; n+2,
a one-row, four-wide table, pooling 1 (the fixed step). The topology's world size is held at WORLD (the global batch
a table-wise piece looks up), whatever n is. Per (optimizer, R, n) it reports the medians over rounds, each less the
round's fixed step, of: the one table, the n tables together, the sum of the n alone; and group / one, group / the
sum alone, and (group - one) / (n - 1), the ms a table beyond a rank's first adds at a fixed working set.
engine.table_costs.probe_fit fits that figure per config from measure-tables' probe ranks; this is the controlled
measurement behind it. The load average before and after is in the report; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):  # run as a script: python bench/piece_count.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.measured import git_commit, load_average, machine_meta  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "piece_count.md"
WORLD, BATCH, DIM, POOLING = 12, 64, 64, 16.0
ROWS = (2048, 16384, 131072)
SPLITS = (2, 4, 8)
ITERS, WARMUP = 20, 3


def split_config(n: int, rows: int, optimizer: str) -> tuple[engine.Config, dict]:
    """The config and plan of one dry-run (the module's docstring): (config, {table: TablePlan})."""
    tables, constraints, where = [], {}, {}

    def add(name: str, num: int, pooling: float, rank: int, dim: int = DIM) -> None:
        tables.append({"name": name, "num_embeddings": num, "embedding_dim": dim, "feature_names": [name]})
        constraints[name] = {"pooling_factors": [pooling]}
        where[name] = rank

    add("one", rows, POOLING, 0)
    for k in range(n):
        add(f"group{k}", rows // n, POOLING / n, 1)
        add(f"alone{k}", rows // n, POOLING / n, 2 + k)
    add("fixed", 1, 1.0, n + 2, dim=4)
    cfg = engine.parse_config({"tables": tables, "constraints": constraints,
                               "topology": {"world_size": WORLD, "local_world_size": WORLD, "compute_device": "cpu",
                                            "batch_size": BATCH, "optimizer": optimizer}})
    plan = {t.name: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (where[t.name],),
                                     (engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), where[t.name]),))
            for t in cfg.tables}
    return cfg, plan


def measure(n: int, rows: int, optimizer: str, rounds: int, seed: int) -> dict:
    """Per round (one, group, the sum alone), each less the round's fixed step, and the lookups of one and group."""
    cfg, plan = split_config(n, rows, optimizer)
    got = []
    for k in range(rounds):
        res = engine.run_dryrun(cfg, plan, engine.DryrunSettings(iters=ITERS, warmup=WARMUP, seed=seed + k))
        if res.schedule != engine.SCHEDULE_TURNS:
            raise SystemExit(f"error: the dry-run timed {res.schedule!r}, not in turns (memory?)")
        ms = [r.measured_ms for r in res.ranks]
        fixed = ms[n + 2]
        got.append([ms[0] - fixed, ms[1] - fixed, sum(ms[2:n + 2]) - n * fixed, fixed])
    a = np.array(got)
    lookups = [res.ranks[0].lookups, res.ranks[1].lookups]
    return {"optimizer": optimizer, "rows": rows, "n": n, "rounds": a.tolist(), "lookups": lookups,
            "one_ms": float(np.median(a[:, 0])), "group_ms": float(np.median(a[:, 1])),
            "alone_ms": float(np.median(a[:, 2])), "fixed_ms": float(np.median(a[:, 3])),
            "group_over_one": float(np.median(a[:, 1] / a[:, 0])),
            "group_over_alone": float(np.median(a[:, 1] / a[:, 2])),
            "per_piece_ms": float(np.median((a[:, 1] - a[:, 0]) / (n - 1)))}


def report(rows: list[dict], meta: dict) -> str:
    lines = [f"Made by `{meta['command']}` on {meta['date']} (commit {meta['commit']}; {meta['cpu']}; 1/5/15-min "
             f"load average {meta['load_before']} before, {meta['load_after']} after), {meta['rounds']} rounds, "
             f"{ITERS} timed steps a rank, dim {DIM}, world size {WORLD} x batch {BATCH}, pooling {POOLING:g} over the "
             "n tables, uniform ids. ms are medians over rounds, each less its round's fixed step.", "",
             "| optimizer | rows | n | one table ms | n tables together ms | n alone, sum ms | group / one | "
             "group / sum alone | ms per table beyond the first (group - one) / (n - 1) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['optimizer']} | {r['rows']} | {r['n']} | {r['one_ms']:.3f} | {r['group_ms']:.3f} | "
                     f"{r['alone_ms']:.3f} | {r['group_over_one']:.3f} | {r['group_over_alone']:.3f} | "
                     f"{r['per_piece_ms']:.4f} |")
    lines.append("")
    for opt in dict.fromkeys(r["optimizer"] for r in rows):
        mine = [r for r in rows if r["optimizer"] == opt]
        lines.append(f"- {opt}: a table beyond the first adds {np.median([r['per_piece_ms'] for r in mine]):.3f} ms "
                     f"median (range {min(r['per_piece_ms'] for r in mine):.3f} to "
                     f"{max(r['per_piece_ms'] for r in mine):.3f}); group / one "
                     f"{np.median([r['group_over_one'] for r in mine]):.2f} median")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.piece_count", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="dry-runs per (optimizer, rows, n) (default 5)")
    p.add_argument("--optimizers", nargs="+", default=["sgd", "rowwise_adagrad", "adam"],
                   choices=[o.value for o in engine.Optimizer])
    p.add_argument("--rows", nargs="+", type=int, default=list(ROWS), help=f"R (default {' '.join(map(str, ROWS))})")
    p.add_argument("--splits", nargs="+", type=int, default=list(SPLITS),
                   help=f"n, 2 to {WORLD - 3} (default {' '.join(map(str, SPLITS))})")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.rounds < 1 or any(not 2 <= n <= WORLD - 3 for n in args.splits) or any(r < 16 for r in args.rows):
        raise SystemExit(f"error: --rounds must be 1 or more, --splits from 2 to {WORLD - 3}, --rows 16 or more")
    meta = {"command": "python -m bench.piece_count " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(),
            "cpu": machine_meta()["cpu"], "load_before": load_average(), "rounds": args.rounds}
    rows = []
    for opt in args.optimizers:
        for r in args.rows:
            for n in args.splits:
                rows.append(measure(n, r, opt, args.rounds, seed=r + n))
                print(f"{opt} rows {r} n {n}: {rows[-1]['per_piece_ms']:.4f} ms a table beyond the first",
                      file=sys.stderr)
    meta["load_after"] = load_average()
    text = report(rows, meta)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
