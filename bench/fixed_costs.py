"""Plans under a device profile's plan-dependent fixed costs (engine.typesets): our plan against alternatives on the
sweep's accelerator topologies, and planning time against a baseline tree.

--survey: every config of examples/ and bench's quick suite whose tables are free to take any sharding type, on
each accelerator and world size given (published profile, as every sweep point has), planned by us; against it the
same config with every table held to one sharding type (our planner within that type), the plan for a mixed fleet
of as many GPUs (half the accelerator, half A100 80GB) scored on the uniform one, and with --torchrec TorchRec 1.8's
plan scored by our estimator.
--time: CPU seconds of engine.plan on bench.scale's seeded config (as given, and with the published profile), in a
child process per run, this tree and --baseline alternating.
Usage: python -m bench.fixed_costs [--survey] [--time --baseline PATH] [--devices ...] [--ranks-list ...] [--out PATH]
(the survey on another tree's engine: FIXED_COSTS_CHILD=1 PYTHONPATH=TREE python bench/fixed_costs.py --survey ...)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, "") and not os.environ.get("FIXED_COSTS_CHILD"):  # run as a script from this tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import json, sys, time, engine
from bench.scale import scale_config
raw = scale_config({tables}, {ranks})
if {profile}:
    raw["topology"]["profile"] = "published"
cfg = engine.parse_config(raw)
cpu = time.process_time()
plan = engine.plan(cfg)
print(json.dumps({{"cpu_s": time.process_time() - cpu, "max_ms": plan.max_rank_cost_ms,
                  "lower_bound_ms": plan.lower_bound_ms}}))
"""


def free_configs() -> list[tuple[str, object]]:
    """examples/ and the quick suite's GPU cases whose constraints name no sharding type."""
    import engine
    from bench.suite import cases

    out = [(p.name, engine.load_config(p)) for p in sorted((ROOT / "examples").glob("*.json"))]
    out += [(c.name.split(" (")[0], engine.parse_config(c.config)) for c in cases(quick=True)
            if c.config["topology"].get("compute_device", "cuda") == "cuda"]
    return [(n, c) for n, c in out if not any(k.sharding_types for k in c.constraints.values())]


def survey_point(cfg, device: str, ranks: int, effort: int, torchrec: bool = False) -> dict:
    import engine

    def on(dev: str):
        topo = engine.sweep_topology(cfg.topology, dev, ranks, cfg.topology.batch_size)
        return dataclasses.replace(cfg, topology=topo)

    settings = engine.PlannerSettings(effort=effort)
    c = on(device)
    ours = engine.plan(c, settings)
    alts = {}
    for st in engine.ShardingType:
        held = {t.name: dataclasses.replace(c.constraint(t.name), sharding_types=(st,)) for t in c.tables}
        try:
            alts[f"all {st.value}"] = engine.plan(dataclasses.replace(c, constraints=held), settings).max_rank_cost_ms
        except engine.PlanningError:
            pass
    if ranks >= 16:
        mixed = engine.plan(on(f"{ranks // 2} {device} + {ranks - ranks // 2} a100_80gb"), settings)
        scored = engine.evaluate(c, mixed.tables)
        if all(r.hbm_bytes <= r.hbm_cap_bytes and r.ddr_bytes <= r.ddr_cap_bytes for r in scored.ranks):
            alts["mixed fleet's plan"] = scored.max_rank_cost_ms  # where it fits the uniform ranks' memory
    if torchrec:  # TorchRec 1.8's planner on the same input, scored by our estimator (as bench does)
        alts["TorchRec's plan"] = engine.torchrec_planner()(c).max_rank_cost_ms
    best = min(alts, key=alts.get)
    return {"ours_ms": ours.max_rank_cost_ms, "lower_bound_ms": ours.lower_bound_ms,
            "types": sorted({t.sharding_type.value for t in ours.tables.values()}), "best_alt": best,
            "best_alt_ms": alts[best], "torchrec_ms": alts.get("TorchRec's plan")}


def survey(devices: list[str], ranks: list[int], effort: int, torchrec: bool = False) -> list[dict]:
    rows = []
    for name, cfg in free_configs():
        for device in devices:
            for w in ranks:
                row = {"config": name, "device": device, "ranks": w, **survey_point(cfg, device, w, effort, torchrec)}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def time_runs(baseline: Path, tables: int, ranks: int, repeat: int) -> dict:
    out: dict[str, list[dict]] = {}
    for _ in range(repeat):
        for profile in (False, True):
            for tree in (baseline, ROOT):  # alternating, so load changes touch both alike
                code = CHILD.format(tables=tables, ranks=ranks, profile=profile)
                env = {**os.environ, "PYTHONPATH": str(tree), "FIXED_COSTS_CHILD": "1"}
                proc = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                                      check=True)
                key = f"{'baseline' if tree == baseline else 'this'}|{'published profile' if profile else 'as given'}"
                out.setdefault(key, []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def _how() -> str:
    """How this run was started: as a module of this tree, or as a script on another tree's engine (PYTHONPATH)."""
    if os.environ.get("FIXED_COSTS_CHILD"):
        return f"FIXED_COSTS_CHILD=1 PYTHONPATH={os.environ.get('PYTHONPATH', '')} python bench/fixed_costs.py"
    return "python -m bench.fixed_costs"


def markdown(args: argparse.Namespace, argv: list[str], rows: list[dict], times: dict) -> str:
    load = os.getloadavg()
    lines = ["# Plans under a profile's plan-dependent fixed costs", "",
             f"Command: `{' '.join([_how(), *argv])}`  ",
             f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average after the run "
             f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (2 cores shared with other work)", ""]
    if rows:
        theirs = "; TorchRec 1.8 planner's plan scored by our estimator" if args.torchrec else ""
        lines += [f"Survey, effort {args.effort:,}: our plan against the best alternative (one sharding type for every "
                  f"table, our planner within it; the mixed fleet's plan scored on the uniform one{theirs}).", "",
                  "| config | device | ranks | ours ms | lower bound ms | our types | best alternative | its ms | "
                  f"ours / it |{' ours / TorchRec |' if args.torchrec else ''}",
                  f"|---|---|---|---|---|---|---|---|---|{'---|' if args.torchrec else ''}"]
        for r in rows:
            lines.append(f"| {r['config']} | {r['device']} | {r['ranks']} | {r['ours_ms']:.4f} | "
                         f"{r['lower_bound_ms']:.4f} | {', '.join(r['types'])} | {r['best_alt']} | "
                         f"{r['best_alt_ms']:.4f} | {r['ours_ms'] / r['best_alt_ms']:.3f} |"
                         + (f" {r['ours_ms'] / r['torchrec_ms']:.3f} |" if args.torchrec else ""))
        lines.append("")
    if times:
        lines += [f"Planning {args.tables:,} tables on {args.ranks:,} ranks (bench.scale's seeded config), CPU "
                  f"seconds of engine.plan in a child process, median of {args.repeat}, this tree and {args.baseline} "
                  "alternating:", "",
                  "| case | baseline CPU s | this CPU s | this / baseline | baseline ms | this ms |",
                  "|---|---|---|---|---|---|"]
        for case in ("as given", "published profile"):
            b, t = times[f"baseline|{case}"], times[f"this|{case}"]
            mb, mt = statistics.median(x["cpu_s"] for x in b), statistics.median(x["cpu_s"] for x in t)
            lines.append(f"| {case} | {mb:.2f} | {mt:.2f} | {mt / mb:.3f} | {b[0]['max_ms']:.4g} | "
                         f"{t[0]['max_ms']:.4g} |")
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.fixed_costs")
    p.add_argument("--survey", action="store_true")
    p.add_argument("--devices", nargs="+", default=["h100_80gb", "a100_40gb"])
    p.add_argument("--ranks-list", type=int, nargs="+", default=[8, 16, 32, 64])
    p.add_argument("--effort", type=int, default=10_000, help="the sweep's effort per point (default %(default)s)")
    p.add_argument("--torchrec", action="store_true", help="the survey also plans with TorchRec 1.8's planner")
    p.add_argument("--time", action="store_true")
    p.add_argument("--baseline", type=Path, help="a tree of this repository to time against (e.g. a worktree of main)")
    p.add_argument("--tables", type=int, default=10_000)
    p.add_argument("--ranks", type=int, default=1_024)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fixed_costs.md")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.time and args.baseline is None:
        p.error("--time needs --baseline PATH")
    rows = survey(args.devices, args.ranks_list, args.effort, args.torchrec) if args.survey else []
    times = time_runs(args.baseline.resolve(), args.tables, args.ranks, args.repeat) if args.time else {}
    args.out.write_text(markdown(args, argv, rows, times))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
