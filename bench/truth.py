"""Truth benchmark: estimated vs measured step time and memory per config, plan and rank, on real validation
runs (`python -m db validate`: torchrun, DMP, gloo on CPU), before calibration and after calibration on the other
configs (leave one config out), with the rank correlation within runs and the plan-order check.

  python -m bench.truth measure [--configs NAME ...] [--reps N] [--iters K] [--warmup W] [--db URL]
  python -m bench.truth phases [--configs NAME ...] [--reps N] [--iters K] [--warmup W]
  python -m bench.truth report [--db URL] [--out FILE]
Measuring runs in pieces: each call adds runs to the database (default data/truth.db); `phases` adds each rank's
CPU time and step phases (engine.validate.phases) to data/truth-runs/phases.jsonl; report reads them all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/truth.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.suite import ROOT  # noqa: E402
from bench.truth_cases import TruthCase, cases, make_plan  # noqa: E402
from db.store import Store  # noqa: E402

DEFAULT_DB = f"sqlite:///{ROOT / 'data' / 'truth.db'}"
WORK = ROOT / "data" / "truth-runs"
RESULTS = ROOT / "bench" / "results" / "truth.md"
LABEL = "truth {case} {plan}"


def plan_token(store: Store, case: TruthCase, label: str, plan: dict) -> str:
    """The stored plan of (case, label), saved the first time."""
    want = LABEL.format(case=case.name, plan=label)
    for p in store.list_plans(limit=10_000):
        if p.label == want and p.config_name == case.name:
            return p.token
    return store.save_plan(case.config, plan, label=want, author="bench.truth", config_name=case.name)


def _validate(db_url: str, cfg: Path, plan: Path, token: str, iters: int, warmup: int, out_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "db", "validate", str(cfg), "--plan", str(plan), "--plan-token", token,
           "--iters", str(iters), "--warmup", str(warmup), "--json", "--out-dir", str(out_dir), "--timeout", "900"]
    env = {**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    load_before, start = os.getloadavg()[0], time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    return {"rc": proc.returncode, "load1_before": load_before, "load1_after": os.getloadavg()[0],
            "wall_s": time.time() - start, "started": start,
            "error": "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]}


def measure(selected: list[TruthCase], reps: int, iters: int, warmup: int, db_url: str, log=print) -> None:
    """reps x every plan of every selected case, repetition-major (plans of a case alternate: A B A B)."""
    store = Store(db_url)
    store.upgrade()
    WORK.mkdir(parents=True, exist_ok=True)
    jobs = []
    for case in selected:
        cfg_path = WORK / f"{case.name}.json"  # the file's stem is the config name runs are grouped by
        cfg_path.write_text(json.dumps(case.config))
        for label in case.plans:
            plan = make_plan(case.config, label)
            plan_path = WORK / f"{case.name}.{label}.plan.json"
            plan_path.write_text(json.dumps(plan))
            jobs.append((case, label, cfg_path, plan_path, plan_token(store, case, label, plan)))
    with open(WORK / "runs.jsonl", "a", encoding="utf-8") as journal:
        for rep in range(reps):
            for case, label, cfg_path, plan_path, token in jobs:
                out_dir = WORK / f"{case.name}.{label}.{int(time.time() * 1000)}"
                row = _validate(db_url, cfg_path, plan_path, token, iters, warmup, out_dir)
                row.update(case=case.name, plan=label, token=token, rep=rep, iters=iters, warmup=warmup)
                journal.write(json.dumps(row) + "\n")
                journal.flush()
                log(f"{case.name} {label} rep {rep}: rc {row['rc']}, {row['wall_s']:.0f} s, load "
                    f"{row['load1_before']:.1f}->{row['load1_after']:.1f} {row['error']}")


def phases(selected: list[TruthCase], reps: int, iters: int, warmup: int, log=print) -> None:
    """reps x every plan: each rank's CPU time and phases (engine.validate.phases), appended to phases.jsonl."""
    WORK.mkdir(parents=True, exist_ok=True)
    jobs = []
    for case in selected:
        cfg_path = WORK / f"{case.name}.json"
        cfg_path.write_text(json.dumps(case.config))
        for label in case.plans:
            plan_path = WORK / f"{case.name}.{label}.plan.json"
            plan_path.write_text(json.dumps(make_plan(case.config, label)))
            jobs.append((case, label, cfg_path, plan_path))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(WORK / "phases.jsonl", "a", encoding="utf-8") as journal:
        for rep in range(reps):
            for case, label, cfg_path, plan_path in jobs:
                out_dir = WORK / f"phases.{case.name}.{label}.{int(time.time() * 1000)}"
                w = case.config["topology"]["world_size"]
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                       "--nproc-per-node", str(w), "-m", "engine.validate.phases", str(cfg_path), str(plan_path),
                       str(out_dir), "--iters", str(iters), "--warmup", str(warmup)]
                load, start = os.getloadavg()[0], time.time()
                proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
                ranks = [json.loads((out_dir / f"phases{r}.json").read_text())["median"]
                         for r in range(w) if (out_dir / f"phases{r}.json").exists()]
                journal.write(json.dumps({"case": case.name, "plan": label, "rep": rep, "rc": proc.returncode,
                                          "load1_before": load, "load1_after": os.getloadavg()[0],
                                          "started": start, "ranks": ranks}) + "\n")
                journal.flush()
                log(f"phases {case.name} {label} rep {rep}: rc {proc.returncode}, {time.time() - start:.0f} s")


def main(argv: list[str] | None = None) -> int:
    from bench.truth_report import write_report

    p = argparse.ArgumentParser(prog="python -m bench.truth", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["measure", "phases", "report", "all"])
    p.add_argument("--configs", nargs="*", help="only these cases (default: all)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every plan (default %(default)s)")
    p.add_argument("--iters", type=int, default=30, help="timed iterations per run (default %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations first (default %(default)s)")
    p.add_argument("--db", default=DEFAULT_DB, help="database of the runs (default data/truth.db)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where report writes the tables")
    args = p.parse_args(argv)
    selected = [c for c in cases() if not args.configs or c.name in args.configs]
    if not selected:
        print(f"error: no case matches --configs; cases: {', '.join(c.name for c in cases())}", file=sys.stderr)
        return 2
    if args.action in ("measure", "all"):
        measure(selected, args.reps, args.iters, args.warmup, args.db,
                log=lambda m: print(m, file=sys.stderr, flush=True))
    if args.action == "phases":
        phases(selected, args.reps, args.iters, args.warmup, log=lambda m: print(m, file=sys.stderr, flush=True))
    if args.action in ("report", "all"):
        print(write_report(args.db, args.out, WORK / "runs.jsonl", WORK / "phases.jsonl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
