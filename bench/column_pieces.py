"""What a column-wise piece of a table costs alone, against the table whole (issue 24): the evidence for how
`plan --table-costs` prices a piece of a table measured alone.

A table measured alone (engine.table_costs) prices each piece at its share of the table's measured time, less the
pressure its table's whole working set put on that time, plus its rank's pressure (engine.estimate.pressure_alone_ms,
engine.workset.WorksetPrice): a column piece touches the table's rows at a fraction of their bytes, so its rank's
working set is smaller than the table's and the model gives it back some of the table's own pressure ("relief").

This dry-runs, for each table our stored plans split column-wise, a one-table config under the config's topology
(batch, optimizer, world size): the table whole as rank 0's table-wise piece, and its column pieces one per rank,
alternating in rounds (fresh ids every step). It reports a piece's measured time over the whole table's, beside the
estimate's share of the compute (what `plan --table-costs` prices without the pressure) and the share less the
relief at the pressure measure-tables fitted for the config (what it prices now).

  python -m bench.column_pieces [--rounds N] [--iters N] [--out bench/results/column_pieces.md]
  python -m bench.column_pieces --report bench/results/column_pieces.json   # the report again, from a stored run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):  # run as a script: python bench/column_pieces.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.measured import dryrun, git_commit, machine_meta, rotated  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SOURCES = ("measured_collectives.json", "measured_later_9_11.json")  # runs with measured tables and collectives
SPLIT = ("column_wise", "table_column_wise")
PER_ROW = re.compile(r"([0-9.]+) ns per touched row")
MIB = float(2**20)
EVEN_SPLITS = (2, 4)


def split_tables(paths: list[Path]) -> list[dict]:
    """Each table a stored plan of ours splits by columns: its config, the widths of its pieces and the pressure per
    touched row the run's measure-tables fitted (ms)."""
    out = []
    for path in paths:
        for rec in json.loads(path.read_text())["configs"]:
            plan = (rec.get("ours_plan") or {}).get("plan") or {}
            tc = rec.get("table_costs") or {}
            per_row = next((float(m.group(1)) * 1e-6 for n in tc.get("notes", []) for m in [PER_ROW.search(n)] if m),
                           0.0)
            for name, tp in plan.items():
                if tp["sharding_type"] in SPLIT and len(tp["shards"]) > 1:
                    out.append({"config": rec["name"], "cfg": rec["config"], "table": name, "per_row_ms": per_row,
                                "widths": [int(s["sizes"][1]) for s in tp["shards"]]})
    return out


def one_table(cfg: dict, name: str) -> dict:
    """The config cut to one table, its constraints and the same topology."""
    table = next(t for t in cfg["tables"] if t["name"] == name)
    cons = {name: cfg["constraints"][name]} if name in cfg.get("constraints", {}) else {}
    return {"tables": [table], "constraints": cons, "topology": cfg["topology"]}


def plan_file(table: dict, widths: Optional[list[int]]) -> dict:
    """The table whole on rank 0 (widths None), or its column pieces one per rank from rank 0."""
    rows, dim = int(table["num_embeddings"]), int(table["embedding_dim"])
    if widths is None:
        tp = {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [0],
              "shards": [{"offsets": [0, 0], "sizes": [rows, dim], "rank": 0}]}
    else:
        offs = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(int).tolist()
        tp = {"sharding_type": "column_wise", "compute_kernel": "fused", "ranks": list(range(len(widths))),
              "shards": [{"offsets": [0, o], "sizes": [rows, w], "rank": k}
                         for k, (o, w) in enumerate(zip(offs, widths))]}
    return {"format_version": 1, "planner": "bench", "plan": {table["name"]: tp}}


def model(case: dict) -> dict:
    """The estimate's view of the pieces against the whole: each piece's share of the table's compute, and the
    pressure relief the measured-tables pricing gives it (ms, per piece)."""
    cfg = engine.parse_config(one_table(case["cfg"], case["table"]))
    plan = engine.read_plan_file(plan_file(one_table(case["cfg"], case["table"])["tables"][0], case["widths"]), cfg)
    pieces = engine.pressure_pieces(cfg, plan.tables)
    ramp = lambda b: float(engine.workset_pressure(b))  # noqa: E731
    shares, relief = [], []
    for rank in pieces[:len(case["widths"])]:
        (_, b, r, tb, _, share), = rank
        shares.append(share)
        relief.append(case["per_row_ms"] * r * (ramp(tb) - ramp(b)))
    return {"shares": shares, "relief_ms": relief}


def even_widths(dim: int, k: int) -> list[int]:
    """k column widths, multiples of 4 as fbgemm's TBE wants, adding up to dim."""
    base = dim // k // 4 * 4
    return [base] * (k - 1) + [dim - base * (k - 1)]


def measure(cases: list[dict], rounds: int, iters: int, work: Path, log) -> list[dict]:
    flags = ["--iters", str(iters), "--batches", "0"]
    out = []
    for case in cases:
        cfg = one_table(case["cfg"], case["table"])
        cpath = work / f"{case['config']}-{case['table']}.json"
        cpath.write_text(json.dumps(cfg))
        dim = int(cfg["tables"][0]["embedding_dim"])
        splits = {"whole": None, "pieces": case["widths"]}
        for k in EVEN_SPLITS:  # even splits beside the plan's: how a piece's time goes with its width
            if k != len(case["widths"]) and dim // k >= 4 and k <= int(cfg["topology"]["world_size"]):
                splits[f"{k} even"] = even_widths(dim, k)
        paths = {}
        for label, widths in splits.items():
            paths[label] = work / f"{case['config']}-{case['table']}-{label.replace(' ', '_')}.json"
            paths[label].write_text(json.dumps(plan_file(cfg["tables"][0], widths)))
        runs: dict[str, list] = {label: [] for label in splits}
        for i in range(rounds):
            for label in rotated(list(splits), i):
                ranks = dryrun(cpath, paths[label], flags)["ranks"]
                runs[label].append([float(r["measured_ms"]) for r in ranks[:len(splits[label] or [0])]])
        med = {label: np.median(np.array(r), axis=0) for label, r in runs.items()}
        w, p = float(med["whole"][0]), med["pieces"]
        m = model(case)
        rec = {**{k: case[k] for k in ("config", "table", "widths", "per_row_ms")},
               "shape": [int(cfg["tables"][0]["num_embeddings"]), dim],
               "optimizer": cfg["topology"].get("optimizer", "sgd"), "whole_ms": w, "whole_runs": runs["whole"],
               "piece_ms": p.tolist(), "piece_runs": runs["pieces"],
               "even": {label: {"widths": splits[label], "piece_ms": med[label].tolist(), "runs": runs[label]}
                        for label in splits if label.endswith(" even")}, **m}
        out.append(rec)
        log(f"{case['config']} {case['table']}: " + ", ".join(f"{label} {' '.join(f'{x:.3f}' for x in med[label])}"
                                                               for label in splits))
    return out


def out_of_sample(recs: list[dict]) -> tuple[list[float], list[float]]:
    """Per piece not of the 2-way split the exponent is fitted to: its error as priced before (the estimate's share
    less the relief) and with the measured exponent (engine.column_share)."""
    cases = {(c["config"], c["table"]): c for c in split_tables([RESULTS / s for s in SOURCES])}
    before, after = [], []
    for r in recs:
        dim, w = r["shape"][1], r["whole_ms"]
        sets = [(r["widths"], r["piece_ms"])] if len(r["widths"]) != 2 else []
        sets += [(e["widths"], e["piece_ms"]) for label, e in r["even"].items() if label != "2 even"]
        two = r["even"].get("2 even", {"widths": r["widths"], "piece_ms": r["piece_ms"]}) if len(r["widths"]) != 2 \
            else {"widths": r["widths"], "piece_ms": r["piece_ms"]}
        g = float(np.mean([np.log(p / w) / np.log(x / dim) for p, x in zip(two["piece_ms"], two["widths"])]))
        for widths, ms in sets:
            m = model({**cases[(r["config"], r["table"])], "widths": widths})
            for x, p, s, rel in zip(widths, ms, m["shares"], m["relief_ms"]):
                before.append(abs(s * w - rel - p) / p)
                after.append(abs(float(engine.column_share(np.array(x / dim), np.array(g))) * w - p) / p)
    return before, after


def report(meta: dict, recs: list[dict]) -> str:
    lines = [f"Made by `python -m bench.column_pieces --rounds {meta['rounds']} --iters {meta['iters']}` on "
             f"{meta['when']} at commit {meta['commit']}, in {meta['minutes']:.1f} min ({meta['machine']}; 1-minute "
             f"load {meta['load_before']:.1f} before, {meta['load_after']:.1f} after). Each table whole (rank 0's "
             "table-wise piece) and its column pieces (one per rank) dry-run alone under the config's topology, "
             f"alternating, {meta['rounds']} rounds, fresh ids every step; medians.", "",
             "| config | table | rows x dim | optimizer | pieces | whole ms | piece ms (median) | measured piece / "
             "whole | estimate's share (no relief) | share less the relief (priced before) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        meas = [p / r["whole_ms"] for p in r["piece_ms"]]
        now = [s - x / r["whole_ms"] for s, x in zip(r["shares"], r["relief_ms"])]
        lines.append(f"| {r['config']} | {r['table']} | {r['shape'][0]:,} x {r['shape'][1]} | {r['optimizer']} | "
                     f"{'+'.join(map(str, r['widths']))} | {r['whole_ms']:.3f} | "
                     f"{' '.join(f'{p:.3f}' for p in r['piece_ms'])} | {' '.join(f'{x:.2f}' for x in meas)} | "
                     f"{' '.join(f'{x:.2f}' for x in r['shares'])} | {' '.join(f'{x:.2f}' for x in now)} |")
    lines += ["", "How a piece's time goes with its width, even splits (piece / whole, each piece's median); the "
                  "exponent g fitted to the 2-way split predicts the others as `plan --table-costs` prices them "
                  "(engine.column_share: f^g, g held to 0-1, so a piece never costs less than its share):", "",
              "| config | table | 2-way | exponent g | plan's split: measured / predicted | 4-way: measured / "
              "predicted |",
              "|---|---|---|---|---|---|"]
    for r in recs:
        dim, w = r["shape"][1], r["whole_ms"]
        two = r["even"].get("2 even", {"widths": r["widths"], "piece_ms": r["piece_ms"]}) if len(r["widths"]) != 2 \
            else {"widths": r["widths"], "piece_ms": r["piece_ms"]}
        g = float(np.mean([np.log(p / w) / np.log(x / dim) for p, x in zip(two["piece_ms"], two["widths"])]))
        def vs(widths, ms):
            return " ".join(f"{p / w:.2f} / {float(engine.column_share(np.array(x / dim), np.array(g))):.2f}"
                            for p, x in zip(ms, widths))
        four = r["even"].get("4 even")
        halves = " ".join(f"{p / w:.2f}" for p in two["piece_ms"])
        lines.append(f"| {r['config']} | {r['table']} | {halves} | {g:.2f} | "
                     f"{vs(r['widths'], r['piece_ms'])} | {vs(four['widths'], four['piece_ms']) if four else '-'} |")
    def err(pred) -> float:
        return float(np.median([abs(p - m) / m for r in recs for p, m in zip(pred(r), r["piece_ms"])]))

    share = err(lambda r: [s * r["whole_ms"] for s in r["shares"]])
    now = err(lambda r: [s * r["whole_ms"] - x for s, x in zip(r["shares"], r["relief_ms"])])
    lines += ["", f"Median error of a piece alone, the plan's split: the share without relief {share:.1%}, the share "
                  f"less the relief {now:.1%} ({sum(len(r['piece_ms']) for r in recs)} pieces of {len(recs)} tables)."]
    before, after = out_of_sample(recs)
    if before:
        lines.append(f"Pieces of other widths than the half the exponent is fitted to ({len(before)}: the 3-way and "
                     f"4-way splits): median error {float(np.median(before)):.1%} as priced before, "
                     f"{float(np.median(after)):.1%} with the measured exponent (engine.column_share).")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.column_pieces", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of the whole and the pieces")
    ap.add_argument("--iters", type=int, default=20, help="timed steps of each dry-run")
    ap.add_argument("--out", type=Path, default=RESULTS / "column_pieces.md")
    ap.add_argument("--report", type=Path, metavar="RUN.json", help="print the report of a stored run; measure nothing")
    args = ap.parse_args(argv)
    if args.report is not None:
        stored = json.loads(args.report.read_text())
        print(report(stored["meta"], stored["tables"]))
        return 0
    cases = split_tables([RESULTS / s for s in SOURCES])
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        recs = measure(cases, args.rounds, args.iters, Path(tmp), lambda s: print(s, file=sys.stderr, flush=True))
    meta = {"rounds": args.rounds, "iters": args.iters, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": git_commit(), "minutes": (time.perf_counter() - start) / 60, "load_before": load_before,
            "load_after": os.getloadavg()[0], "machine": machine_meta().get("machine", "this machine")}
    text = report(meta, recs)
    args.out.write_text(text + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "tables": recs}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
