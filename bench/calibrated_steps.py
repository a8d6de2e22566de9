"""Measured tables with a profile calibrated from validation runs, judged in real steps.

For one config: `python -m db validate` of TorchRec's plan, ours, and our planner's plans with every table held to
one sharding type (and half to table_wise, half to column_wise: two types), `--runs` times each, into a database of
the bench's own; `python -m db calibrate` fits the step's fixed costs to them. Then for that config and each
`--held-out` one (no run of theirs is in the fit): `db calibrate --config-out` applies the profile, `python -m
engine measure-tables` measures the tables under it, and `python -m engine plan --table-costs --baseline TORCHREC
--min-gain` plans. Where the plan differs from TorchRec's, the two run in real steps (bench.dmp_ab, alternating,
with an A/A pair); where it is TorchRec's, there is nothing to run.

  python -m bench.calibrated_steps CONFIG.json TORCHREC.json [--held-out CONFIG2.json TORCHREC2.json ...]
      [--runs 2] [--variants tw,cw,twcw,mix] [--min-gain 0.05] [--rounds 7] [--out FILE.md] [--workdir DIR]
  python -m bench.calibrated_steps --cases m2 m0 later-1 ...   # bench.measured's configs, TorchRec planning them

Results: docs/benchmarks.md, "Measured tables with a profile calibrated from validation runs".
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import engine
from bench import dmp_ab
from bench.measured import same_sharding
from bench.measured_cases import cases as measured_cases
from bench.suite import ROOT

VARIANTS = {  # our planner with every table held to these sharding types (min_partition: a two-way split)
    "tw": ("table_wise",),
    "cw": ("column_wise",),
    "twcw": ("table_column_wise",),
    "mix": ("table_wise", "column_wise"),  # even tables table_wise, odd ones column_wise: two types
}


def held_config(raw: dict, variant: str) -> dict:
    """The config with every table held to the variant's sharding type(s); split ones at half their width."""
    out = copy.deepcopy(raw)
    types = VARIANTS[variant]
    for i, t in enumerate(out["tables"]):
        st = types[i % len(types)]
        c = out.setdefault("constraints", {}).setdefault(t["name"], {})
        c["sharding_types"] = [st]
        dim = int(t["embedding_dim"])
        if st != "table_wise" and dim >= 8 and dim % 8 == 0:
            c["min_partition"] = dim // 2
    return out


def _cli(args: list[str], env: dict, what: str) -> str:
    p = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{what} failed (exit {p.returncode}): {p.stderr.strip()[-600:]}")
    return p.stdout


def pieces(plan: dict) -> int:
    """The plan's table pieces: its shards, and a data_parallel table's replicas."""
    return sum(len(t.get("shards") or t["ranks"]) for t in plan["plan"].values())


def case_files(names: list[str], workdir: Path) -> list[tuple[Path, Path]]:
    """(config, TorchRec's plan of it) for each of bench.measured's configs named, written into workdir."""
    known = {c.name: c for c in measured_cases()}
    picked = []
    for n in names:  # a name, or its short form: m2 for m2-4r-rowwise_adagrad-uniform
        hits = [k for k in known if k == n] or [k for k in known if k.startswith(n + "-")]
        if len(hits) != 1:
            raise SystemExit(f"--cases: no config {n!r} in bench.measured ({', '.join(known)})")
        picked.append(hits[0])
    workdir.mkdir(parents=True, exist_ok=True)
    out = []
    for name in picked:
        cfg, plan = workdir / f"{name}.json", workdir / f"{name}.torchrec.json"
        cfg.write_text(json.dumps(known[name].config))
        _cli(["-m", "engine", "torchrec-plan", str(cfg), "--out", str(plan)], {**os.environ, "PYTHONPATH": str(ROOT)},
             f"torchrec-plan {name}")
        out.append((cfg, plan))
    return out


def run(config: Path, torchrec: Path, held_out: list[tuple[Path, Path]], workdir: Path, runs: int,
        variants: list[str], min_gain: float, rounds: int, iters: int, log=print) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": f"sqlite:///{workdir / 'runs.db'}"}
    raw = json.loads(config.read_text())
    plans = {"torchrec": torchrec}
    ours = workdir / "plan_ours.json"
    _cli(["-m", "engine", "plan", str(config), "--out", str(ours)], env, "plan")
    plans["ours"] = ours
    for v in variants:
        cfg_v, plan_v = workdir / f"config_{v}.json", workdir / f"plan_{v}.json"
        cfg_v.write_text(json.dumps(held_config(raw, v)))
        _cli(["-m", "engine", "plan", str(cfg_v), "--out", str(plan_v)], env, f"plan ({v})")
        plans[v] = plan_v
    _cli(["-m", "db", "init"], env, "db init")
    recorded = []
    for rep in range(runs):
        for name, path in plans.items():
            out = json.loads(_cli(["-m", "db", "validate", str(config), "--plan", str(path), "--json", "--iters",
                                   str(iters)], env, f"validate {name}"))
            ranks = out["ranks"]
            recorded.append({"plan": name, "run": rep + 1, "step_ms": out["max_rank_iteration_ms"],
                             "embedding_ms": [r["embedding_ms"] for r in ranks],
                             "pieces": pieces(json.loads(path.read_text()))})
            log(f"run {rep + 1}/{runs} {name}: step {out['max_rank_iteration_ms']:.2f} ms")
    cal = json.loads(_cli(["-m", "db", "calibrate", "--device", "cpu", "--json"], env, "calibrate"))
    results = []
    for i, (cfg_path, tr_path) in enumerate([(config, torchrec), *held_out]):
        tag = f"c{i}"
        cal_cfg, costs, plan = (workdir / f"{tag}_{what}.json" for what in ("calibrated", "costs", "plan"))
        _cli(["-m", "db", "calibrate", "--device", "cpu", "--config", str(cfg_path), "--config-out", str(cal_cfg)],
             env, "calibrate --config-out")
        _cli(["-m", "engine", "measure-tables", str(cal_cfg), "--out", str(costs)], env, "measure-tables")
        _cli(["-m", "engine", "plan", str(cal_cfg), "--table-costs", str(costs), "--baseline", str(tr_path),
              "--min-gain", str(min_gain), "--out", str(plan)], env, "plan --table-costs")
        priced, _ = engine.apply_table_costs(engine.load_config(cal_cfg), json.loads(costs.read_text()), str(costs))
        ours_d, tr_d = json.loads(plan.read_text()), json.loads(tr_path.read_text())
        est = {k: engine.evaluate(priced, engine.parse_plan(d, priced), planner="file").max_rank_cost_ms
               for k, d in (("ours", ours_d), ("torchrec", tr_d))}
        row = {"config": str(cfg_path), "held_out": i > 0, "kept": same_sharding(ours_d, tr_d),
               "types": sorted({t["sharding_type"] for t in ours_d["plan"].values()}),
               "estimated_ours_ms": est["ours"], "estimated_torchrec_ms": est["torchrec"]}
        if not row["kept"] and rounds > 0:
            log(f"{cfg_path.name}: our plan differs from TorchRec's: {rounds} rounds in real steps")
            ab = dmp_ab.run(cfg_path, tr_path, plan, rounds, iters, 3, log=log)
            row["steps"] = {k: ab[k] for k in ("step_ms", "embedding_ms", "load", "rounds")}
        results.append(row)
    return {"config": str(config), "runs": recorded, "calibration": cal, "results": results, "min_gain": min_gain}


def markdown(r: dict) -> str:
    cal = r["calibration"]
    prof = cal.get("profile") or {}
    costs = ", ".join(f"{prof.get(k, 0):.3f} ms a {what}" for k, what in (
        ("step_ms", "step"), ("collective_ms", "collective round"), ("launch_ms", "launch"), ("piece_ms", "piece")))
    lines = [f"Calibrated from {cal['n_runs']} validation runs of {Path(r['config']).name} (R^2 {cal['r2']:.3f}, "
             f"median error {cal['median_error']:.0%}): {costs}, cores per host {prof.get('cores_per_host')}.", "",
             "| plan | run | pieces | step ms | embedding ms per rank |", "|---|---|---|---|---|"]
    lines += [f"| {x['plan']} | {x['run']} | {x['pieces']} | {x['step_ms']:.2f} | "
              f"{' '.join(f'{e:.2f}' for e in x['embedding_ms'])} |" for x in r["runs"]]
    lines += ["", f"Planned with the profile and the tables measured under it (`--min-gain {r['min_gain']}`):", "",
              "| config | held out | plan | our types | estimate, ours / TorchRec's | real steps, ours / TorchRec's |",
              "|---|---|---|---|---|---|"]
    for x in r["results"]:
        ratio = x["estimated_ours_ms"] / x["estimated_torchrec_ms"]
        steps = x.get("steps")
        said = "-" if steps is None else (f"{steps['step_ms']['b_over_a'][0]:.3f} ({steps['step_ms']['verdict']}; "
                                          f"A/A {steps['step_ms']['a_a'][0]:.3f})")
        lines.append(f"| {Path(x['config']).name} | {'yes' if x['held_out'] else 'no'} | "
                     f"{'TorchRec' + chr(39) + 's kept' if x['kept'] else 'ours'} | {', '.join(x['types'])} | "
                     f"{ratio:.3f} | {said} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.calibrated_steps", description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path, nargs="?")
    p.add_argument("torchrec", type=Path, nargs="?", help="TorchRec's plan of the config (python -m engine "
                                                           "torchrec-plan)")
    p.add_argument("--cases", nargs="+", metavar="NAME", help="bench.measured's configs instead, TorchRec planning "
                                                              "them: the first calibrated, the others held out")
    p.add_argument("--held-out", nargs=2, action="append", default=[], type=Path, metavar=("CONFIG", "TORCHREC"),
                   help="a config planned with the calibration but not in it, and TorchRec's plan of it")
    p.add_argument("--runs", type=int, default=2, help="validation runs of each plan for the fit (default 2)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"our planner's plans held to sharding types, for the fit (default {','.join(VARIANTS)})")
    p.add_argument("--min-gain", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=7, help="real-step rounds where the plans differ (0: none)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--workdir", type=Path, help="keep the database, plans and files here (default: a temporary one)")
    p.add_argument("--out", type=Path, help="also write the report here (and its figures beside it, .json)")
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        p.error(f"--variants: {bad[0]!r} is not one of {', '.join(VARIANTS)}")
    if (args.cases is None) == (args.config is None or args.torchrec is None):
        p.error("give CONFIG.json and TORCHREC.json, or --cases")
    started = time.perf_counter()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="calibrated-steps-"))
    pairs = case_files(args.cases, workdir) if args.cases else [(args.config, args.torchrec)]
    held = pairs[1:] + [tuple(x) for x in args.held_out]
    r = run(pairs[0][0], pairs[0][1], held, workdir, args.runs, variants,
            args.min_gain, args.rounds, args.iters, log=lambda line: print(line, file=sys.stderr))
    load = os.getloadavg()
    text = f"{markdown(r)}\n\n({time.perf_counter() - started:.0f} s; 1-minute load at the end {load[0]:.1f})"
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
