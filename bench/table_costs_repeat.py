"""measure-tables run again and again (issue 24): how far apart its column ratios come out from run to run.

`plan --table-costs` prices a column piece from a half-width copy of its table measured alone: the copy's compute
over the table's gives the exponent g (engine.table_costs.column_ratio, column_exponent). On a noisy VM one run read
a third of later-9's 906k-row table at 0.69 of the table (g 0.33) where its pieces measured 0.40-0.50 and two other
runs read g 0.99-1.00. This runs `python -m engine measure-tables` on the same configs several times, alternating
between engine checkouts (`--roots`: this one and, say, a worktree of an older commit), each run with its own seed,
and reports per checkout the spread of each copy's ratio across the runs, read two ways: the ratio of the two
medians over the rounds, and the median of the rounds' own pairs (what column_ratio reads where the file has both).

  python -m bench.table_costs_repeat [--configs NAME ...] [--runs 4] [--roots . /tmp/old] [--labels paired shuffled]
                                     [--out bench/results/table_costs_repeat.md]
  python -m bench.table_costs_repeat --report RUN.json [--out FILE]   # the report again, from a stored run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/table_costs_repeat.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.measured import git_commit, load_average, machine_meta  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

SOURCE = ROOT / "bench" / "results" / "measured_auto_gain.json"
# the five configs whose plans of ours split a table by columns (docs/benchmarks.md, "Column pieces measured")
CONFIGS = ("m2-4r-rowwise_adagrad-uniform", "later-1", "later-5", "later-8", "later-9")
FLAGS = ("--iters", "20", "--batches", "0")  # bench.measured's dry-run flags, where a stored config has none
REPS = 3  # bench.measured's measure-tables rounds
TIMEOUT_S = 900
OFF = 0.15  # a run's ratio this far from the table's median over every run of its checkout is called off


def ratios(costs: dict) -> dict[str, tuple[float, float, float]]:
    """Per table with a half-width copy: (the medians' ratio, the median of the rounds' pairs, the copy's share of
    the columns), the fixed step taken off each time."""
    fixed = float(costs["fixed_ms"])
    out = {}
    for name, rec in costs["tables"].items():
        col = rec.get("column")
        if col is not None:
            out[name] = (engine.column_ratio(rec, fixed, pairs=False), engine.column_ratio(rec, fixed),
                         col["dim"] / rec["embedding_dim"])
    return out


def measure(configs: list[dict], roots: list[Path], labels: list[str], runs: int, log) -> list[dict]:
    """Every config measured `runs` times by every checkout, the checkouts' order rotated each run."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(runs):
            order = [(roots[(k + j) % len(roots)], labels[(k + j) % len(roots)]) for j in range(len(roots))]
            for rec in configs:
                cfg = Path(tmp) / f"{rec['name']}.json"
                cfg.write_text(json.dumps(rec["config"]))
                for root, label in order:
                    out = Path(tmp) / f"{rec['name']}.{label}.{k}.costs.json"
                    start = time.perf_counter()
                    flags = rec.get("flags") or FLAGS
                    proc = subprocess.run([sys.executable, "-m", "engine", "measure-tables", str(cfg), "--out",
                                           str(out), "--reps", str(REPS), "--seed", str(k), *flags],
                                          cwd=root, capture_output=True, text=True, timeout=TIMEOUT_S)
                    if proc.returncode != 0:
                        raise SystemExit(f"measure-tables failed in {root} on {rec['name']}: "
                                         + (proc.stderr.strip().splitlines() or ["?"])[-1])
                    costs = json.loads(out.read_text())
                    rows.append({"run": k, "checkout": label, "config": rec["name"],
                                 "wall_s": round(time.perf_counter() - start, 1),
                                 "ratios": {n: list(v) for n, v in ratios(costs).items()},
                                 "tables_ms": {n: v["ms"] for n, v in costs["tables"].items()}})
                    log(f"run {k + 1}/{runs} {rec['name']} ({label}): {len(rows[-1]['ratios'])} copies, "
                        f"{rows[-1]['wall_s']} s")
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per checkout and way of reading: each copy's ratios over the runs, their range, and the runs called off; raw,
    and held to what an exponent can give (its share of the columns to 1: what the planner prices, column_exponent)."""
    out = []
    for label in dict.fromkeys(r["checkout"] for r in rows):
        for way, idx in (("medians' ratio", 0), ("pairs' median", 1)):
            got: dict[str, list] = {"raw": [], "held": []}
            off = {"raw": 0, "held": 0}
            n = 0
            for config in dict.fromkeys(r["config"] for r in rows):
                mine = [r for r in rows if r["checkout"] == label and r["config"] == config]
                for table in mine[0]["ratios"] if mine else []:
                    raw = np.array([r["ratios"][table][idx] for r in mine if table in r["ratios"]])
                    share = mine[0]["ratios"][table][2]
                    for kind, v in (("raw", raw), ("held", np.clip(raw, share, 1.0))):
                        got[kind].append(float(v.max() - v.min()))
                        off[kind] += int((np.abs(v - np.median(v)) > OFF).sum())
                    n += len(raw)
            row = {"checkout": label, "way": way, "copies": len(got["raw"]), "runs": n}
            for kind, r in got.items():
                r = np.array(r)
                row.update({f"{kind}_median": float(np.median(r)), f"{kind}_q3": float(np.percentile(r, 75)),
                            f"{kind}_off": off[kind]})
            out.append(row)
    return out


def _md(text: str) -> str:
    """A label or name as one Markdown table cell: its pipes escaped, its line breaks spaces."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def report(data: dict, command: str) -> str:
    m = data["meta"]
    text = [f"Made by `{command}` on {m['started']} UTC at commit {m['commit']}, in {m['wall_s'] / 60:.1f} min "
            f"({m['cpu']}; 1/5/15-min load average {m['load_before']} before, {m['load_after']} after). Checkouts: "
            + ", ".join(f"{_md(lab)} ({_md(root)})" for lab, root in zip(m["labels"], m["roots"]))
            + f". Each run: `python -m engine measure-tables CONFIG --reps {REPS} --seed RUN FLAGS` (the config's "
            f"dry-run flags as its bench.measured run stored them, else `{' '.join(FLAGS)}`) on "
            f"{', '.join(map(_md, m['configs']))}, the checkouts' order rotated each run. A copy's ratio: its "
            "compute over its table's, the fixed step taken off each.", "",
            f"| checkout | ratio read as | copies | runs | range over runs, median (75th percentile) | runs off the "
            f"copy's median by more than {OFF} | held to share..1: range, median (75th percentile) | held: runs off |",
            "|---|---|---|---|---|---|---|---|"]
    for s in summary(data["rows"]):
        text.append(f"| {_md(s['checkout'])} | {s['way']} | {s['copies']} | {s['runs']} | {s['raw_median']:.3f} "
                    f"({s['raw_q3']:.3f}) | {s['raw_off']} | {s['held_median']:.3f} ({s['held_q3']:.3f}) | "
                    f"{s['held_off']} |")
    text += ["", "Per copy (each run's ratio, pairs' median; runs in order):", "",
             "| config | table | " + " | ".join(map(_md, m["labels"])) + " |", "|---|---|" + "---|" * len(m["labels"])]
    for config in m["configs"]:
        first = next((r for r in data["rows"] if r["config"] == config), None)
        for table in (first or {}).get("ratios", {}):
            cells = []
            for label in m["labels"]:
                v = [r["ratios"][table][1] for r in data["rows"] if r["config"] == config and r["checkout"] == label
                     and table in r["ratios"]]
                cells.append(" ".join(f"{x:.2f}" for x in v))
            text.append(f"| {_md(config)} | {_md(table)} | " + " | ".join(cells) + " |")
    return "\n".join(text) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.table_costs_repeat", description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), help="config names of --source")
    p.add_argument("--source", type=Path, default=SOURCE, help="a bench.measured JSON holding the configs")
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--roots", nargs="+", type=Path, default=[ROOT], help="engine checkouts, alternated")
    p.add_argument("--labels", nargs="+", help="a name per checkout (default: their paths)")
    p.add_argument("--report", type=Path, help="a stored run's JSON: the report again, nothing measured")
    p.add_argument("--out", type=Path, help="write the Markdown report here and the run beside it (.json)")
    args = p.parse_args(argv)
    command = "python -m bench.table_costs_repeat " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.report:
        try:
            data = json.loads(args.report.read_text())
        except (OSError, ValueError) as e:
            print(f"error: --report {args.report}: {e}; give a file this bench wrote", file=sys.stderr)
            return 2
        text = report(data, data["meta"]["command"])
    else:
        labels = args.labels or [str(r) for r in args.roots]
        if len(labels) != len(args.roots) or args.runs < 1:
            print("error: give one --labels name per --roots checkout, and --runs of 1 or more", file=sys.stderr)
            return 2
        try:
            stored = {c["name"]: c for c in json.loads(args.source.read_text())["configs"]}
        except (OSError, ValueError, KeyError) as e:
            print(f"error: --source {args.source}: {e}; give a bench.measured JSON", file=sys.stderr)
            return 2
        missing = [n for n in args.configs if n not in stored]
        if missing:
            print(f"error: --configs {', '.join(missing)} not in {args.source}; it has {', '.join(stored)}",
                  file=sys.stderr)
            return 2
        meta = {"command": command, "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                "commit": git_commit(), "cpu": machine_meta()["cpu"], "load_before": load_average(),
                "configs": args.configs, "roots": [str(r) for r in args.roots], "labels": labels}
        start = time.perf_counter()
        rows = measure([stored[n] for n in args.configs], [r.resolve() for r in args.roots], labels, args.runs,
                       lambda line: print(line, file=sys.stderr))
        meta.update(wall_s=time.perf_counter() - start, load_after=load_average())
        data = {"meta": meta, "rows": rows}
        text = report(data, command)
        if args.out:
            args.out.with_suffix(".json").write_text(json.dumps(data, indent=1))
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
