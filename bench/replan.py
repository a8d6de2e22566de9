"""Re-plan benchmark (issue 13): for bench cases, plan, grow 10% of the tables 2x (every tenth table), then
re-plan from the first plan and plan from scratch; report the bytes each moves (weights and optimizer state)
and their slowest ranks. Target: the re-plan moves at most 20% of what the plan from scratch moves, at a
slowest rank within 5% of it. Figures are the planner's estimates: they do not depend on the machine.

    python -m bench.replan [--out-dir bench/results]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import engine
from bench.suite import criteo_1tb, synthetic
from engine import atomicfile
from engine.replan import read_old_plan, replan

ROOT = Path(__file__).resolve().parents[1]
CASES = {"synthetic-100x16": lambda: synthetic(100, 16, seed=0), "synthetic-200x8": lambda: synthetic(200, 8, seed=0),
         "criteo-1tb-8": lambda: criteo_1tb(8), "criteo-1tb-16": lambda: criteo_1tb(16)}
MOVE_TARGET, STEP_TARGET = 0.20, 1.05


def grow(raw: dict, share: float = 0.1) -> dict:
    out = copy.deepcopy(raw)
    n = len(out["tables"])
    k = max(1, int(n * share))
    for t in out["tables"][::n // k][:k]:
        t["num_embeddings"] *= 2
    return out


def run_case(name: str, raw: dict) -> dict:
    raw = engine.config_to_dict(engine.parse_config(raw))
    old = read_old_plan(engine.plan_to_dict(engine.plan(engine.parse_config(raw))))
    start = time.process_time()
    r = replan(engine.parse_config(grow(raw)), old)
    s = r.summary()
    return {"case": name, "tables": len(raw["tables"]), "ranks": raw["topology"]["world_size"],
            "cpu_s": time.process_time() - start, **{k: s[k] for k in (
                "moved_bytes", "scratch_moved_bytes", "kept_moved_bytes", "step_ms", "scratch_step_ms",
                "kept_step_ms")},
            "moved_tables": len(s["moved_tables"]), "checkpoint_breaks": len(s["checkpoint_breaks"]),
            "move_ratio": s["moved_bytes"] / s["scratch_moved_bytes"] if s["scratch_moved_bytes"] else 0.0,
            "step_ratio": s["step_ms"] / s["scratch_step_ms"]}


def markdown(results: dict) -> str:
    gib = 2**30
    lines = [f"Made by `{results['command']}` on {results['date']}. Every tenth table of each case grown 2x (10% "
             "of the tables); the re-plan starts from the plan of the original config (`python -m engine replan "
             "NEW --from OLD`, no byte limit); figures are estimates, the same on any machine.", "",
             "| case | tables x ranks | re-plan moves GiB | kept as is moves GiB | from scratch moves GiB | moved / "
             "scratch (target <= 20%) | re-plan step ms | kept step ms | scratch step ms | step / scratch (target "
             "<= 1.05) | tables moving | checkpoint breaks |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in results["cases"]:
        kept = "-" if c["kept_moved_bytes"] is None else f"{c['kept_moved_bytes'] / gib:.2f}"
        kept_ms = "-" if c["kept_step_ms"] is None else f"{c['kept_step_ms']:.4g}"
        lines.append(f"| {c['case']} | {c['tables']} x {c['ranks']} | {c['moved_bytes'] / gib:.2f} | {kept} | "
                     f"{c['scratch_moved_bytes'] / gib:.2f} | {c['move_ratio']:.1%}"
                     f"{'' if c['move_ratio'] <= MOVE_TARGET else ' (missed)'} | {c['step_ms']:.4g} | {kept_ms} | "
                     f"{c['scratch_step_ms']:.4g} | {c['step_ratio']:.3f}"
                     f"{'' if c['step_ratio'] <= STEP_TARGET else ' (missed)'} | {c['moved_tables']} | "
                     f"{c['checkpoint_breaks']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replan")
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    command = "python -m bench.replan" + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv))
    results = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "cases": []}
    for name, make in CASES.items():
        results["cases"].append(run_case(name, make()))
        print(f"{name}: {results['cases'][-1]['move_ratio']:.1%} of the bytes, step x"
              f"{results['cases'][-1]['step_ratio']:.3f}", file=sys.stderr)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    atomicfile.write_text(args.out_dir / "replan.json", json.dumps(results, indent=1) + "\n")
    atomicfile.write_text(args.out_dir / "replan.md", markdown(results))
    print(f"wrote {args.out_dir / 'replan.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
