"""Capacity-sweep benchmark: the whole `python -m engine sweep` process on a seeded realistic config (bench.scale's
generator), timed as medians of repeated runs with the machine's load recorded; the points are checked to be the
same in every repetition and with one worker or several.

    python -m bench.sweep                       # 1,000 tables x 8 world sizes x 4 accelerators (issue 13's target)
    python -m bench.sweep --tables 100 --world-sizes 8,16 --devices h100_80gb --repeat 1 --out-dir /tmp/s
    python -m bench.sweep --baseline OLD/sweep.json   # each point's step against another tree's run of the same grid

Writes sweep.json (every figure and point) and sweep.md (the table) to --out-dir (default bench/results).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.scale import machine, scale_config
import engine

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 30.0
DEVICES = "a100_40gb,a100_80gb,h100_80gb,h200_141gb"
WORLD_SIZES = "8,16,32,64,128,256,512,1024"


def run_sweep(config: Path, args: argparse.Namespace, jobs: int) -> dict:
    """One `python -m engine sweep ... --json` process: wall and CPU seconds (its children included), the points."""
    cmd = [sys.executable, "-m", "engine", "sweep", str(config), "--devices", args.devices, "--world-sizes",
           args.world_sizes, "--effort", str(args.effort), "--jobs", str(jobs), "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"bench.sweep: the sweep failed: {proc.stderr.strip()[-500:]}")
    points = json.loads(proc.stdout)["points"]
    digest = hashlib.sha256(json.dumps(points, sort_keys=True).encode()).hexdigest()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"jobs": jobs, "wall_s": wall, "cpu_s": cpu, "points_sha256": digest, "points": points,
            "load_1min": os.getloadavg()[0]}


def compare(points: list[dict], baseline: dict) -> tuple[dict, str]:
    """Each planned point's estimated step over the baseline run's (a sweep.json of another tree, the same grid), and
    one line: how many points are faster, slower and the same, the median of the faster and the worst ratio."""
    before = {(p["device"], p["world_size"], p["batch_size"]): p["step_ms"] for p in baseline["points"]}
    ratio = {}
    for p in points:
        old = before.get((p["device"], p["world_size"], p["batch_size"]))
        if p["step_ms"] is not None and old:
            ratio[(p["device"], p["world_size"], p["batch_size"])] = p["step_ms"] / old
    faster = sorted(r for r in ratio.values() if r < 1 - 1e-9)
    slower = [r for r in ratio.values() if r > 1 + 1e-9]
    worst = max(ratio.values(), default=1.0)
    line = (f"**Against the baseline** (`{baseline['command']}` on {baseline['date']}, load "
            f"{baseline['load_before'][0]:.1f} / {baseline['load_after'][0]:.1f}; its median CPU seconds per run "
            f"{statistics.median(r['cpu_s'] for r in baseline['runs'] if r['jobs'] == baseline['jobs']):.1f}): of "
            f"{len(ratio)} points planned in both, {len(faster)} faster (median "
            f"{statistics.median(faster) if faster else 1.0:.3f}x, down to {min(ratio.values(), default=1.0):.3f}x), "
            f"{len(slower)} slower, {len(ratio) - len(faster) - len(slower)} the same; worst {worst:.4f}x.")
    return ratio, line


def markdown(results: dict) -> str:
    runs = results["runs"]
    walls = [r["wall_s"] for r in runs if r["jobs"] == results["jobs"]]
    med = statistics.median(walls)
    points = runs[0]["points"]
    lines = [
        f"Made by `{results['command']}` on {results['date']}: {results['machine']['cpu_count']} cores, "
        f"{results['machine']['platform']}. Each run is the whole `python -m engine sweep` process "
        f"({results['tables']} tables, {len(points)} points, effort {results['effort']} per point, "
        f"{results['jobs']} worker processes). 1-minute load average before / after: "
        f"{results['load_before'][0]:.1f} / {results['load_after'][0]:.1f}.",
        "",
        f"**Wall time**: median {med:.1f} s of {len(walls)} runs (range {min(walls):.1f}-{max(walls):.1f} s); "
        f"target <= {TARGET_S:.0f} s: {'met' if med <= TARGET_S else 'not met'}. CPU seconds per run (all "
        f"workers): {statistics.median(r['cpu_s'] for r in runs if r['jobs'] == results['jobs']):.1f}.",
        f"**Same points every time**: {'yes' if results['identical'] else 'NO'} (sha256 of the points over "
        f"{len(runs)} runs, with {sorted({r['jobs'] for r in runs})} worker processes).",
    ]
    ratio = {}
    if results.get("baseline"):
        ratio, line = compare(points, results["baseline"])
        lines.append(line)
    lines += ["", "| device | GPUs | hosts | step ms | peak HBM / usable | samples/s | Pareto | why not |"
              + (" vs baseline |" if ratio else ""), "|---|---|---|---|---|---|---|---|" + ("---|" if ratio else "")]
    for p in points:
        step = f"{p['step_ms']:.4g}" if p["step_ms"] is not None else "-"
        peak = f"{p['peak_hbm_fraction']:.1%}" if p["peak_hbm_fraction"] is not None else "-"
        rate = f"{p['samples_per_s']:,.0f}" if p["fits"] and p["samples_per_s"] else "-"
        why = p["reason"].replace("|", "/")[:160] + ("..." if len(p["reason"]) > 160 else "")
        vs = ratio.get((p["device"], p["world_size"], p["batch_size"]))
        lines.append(f"| {p['device']} | {p['world_size']} | {p['hosts']} | {step} | {peak} | {rate} | "
                     f"{'yes' if p['pareto'] else ''} | {why} |" + (f" {vs:.4f}x |" if vs is not None else
                                                                   " - |" if ratio else ""))
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=1000)
    p.add_argument("--devices", default=DEVICES)
    p.add_argument("--world-sizes", default=WORLD_SIZES)
    p.add_argument("--effort", type=int, default=10_000)
    p.add_argument("--jobs", type=int, default=2, help="worker processes of the timed runs (default 2)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--baseline", type=Path, help="a sweep.json of another tree (the same grid): each point's step "
                   "against it, and how many are faster or slower")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m bench.sweep" + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv))
    results = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine(),
               "tables": args.tables, "effort": args.effort, "jobs": args.jobs, "target_s": TARGET_S,
               "load_before": list(os.getloadavg()), "runs": []}
    if args.baseline is not None:
        baseline = json.loads(args.baseline.read_text(encoding="utf-8"))
        results["baseline"] = {**{k: baseline[k] for k in ("command", "date", "load_before", "load_after", "jobs")},
                               "runs": [{k: r[k] for k in ("jobs", "wall_s", "cpu_s")} for r in baseline["runs"]],
                               "points": baseline["runs"][0]["points"], "file": str(args.baseline)}
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(scale_config(args.tables, 8)), encoding="utf-8")
        for i in range(args.repeat):
            results["runs"].append(run_sweep(config, args, args.jobs))
            print(f"run {i + 1}: {results['runs'][-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
        one = run_sweep(config, args, 1)  # the points do not depend on the number of workers
        results["runs"].append(one)
    results["load_after"] = list(os.getloadavg())
    results["identical"] = len({r["points_sha256"] for r in results["runs"]}) == 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    engine.write_text_file(args.out_dir / "sweep.json", json.dumps(results, indent=1) + "\n")
    engine.write_text_file(args.out_dir / "sweep.md", markdown(results))
    print(f"wrote {args.out_dir / 'sweep.json'} and {args.out_dir / 'sweep.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
