"""Production-scale benchmark (issue 11): the whole `python -m engine plan` process on 100 to 100,000 tables x 8
to 1,024 ranks, timed, its peak memory read from the kernel, refusals and determinism under load recorded.
Usage: python -m bench.scale [--quick] [--tables N ...] [--ranks N ...] [--repeat N] [--timeout S]
       [--infeasible] [--determinism] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import numpy as np

if __package__ in (None, ""):  # run as a script: python bench/scale.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.suite import ROOT
import engine

RESULTS = ROOT / "bench" / "results"
GRID_TABLES = (100, 1_000, 10_000, 100_000)
GRID_RANKS = (8, 64, 256, 1_024)
QUICK_TABLES = (100, 1_000)
QUICK_RANKS = (8, 64)
DIMS = (16, 32, 64, 128, 256)
MIN_HBM_CAP_BYTES = 2 * 2**30
# fp32 weights x 3 (weights, optimizer state, buffers) spread over the ranks, with 50% headroom.
FOOTPRINT_PER_WEIGHT = 3.0
HEADROOM = 1.5
# The infeasible variant: each rank's HBM and its DDR each hold a quarter of its share of the weights, so all
# ranks' memory together holds half of the weights alone.
INFEASIBLE_SHARE = 0.25
REFUSAL_TARGET_S = 2.0
# Issue 11's targets: (tables, ranks, what, value); "wall_s" in seconds, "peak_bytes" in bytes.
TARGETS = (
    (10_000, 1_024, "wall_s", 10.0),
    (10_000, 1_024, "peak_bytes", 1.5e9),
    (1_000, 128, "wall_s", 1.0),
    (100_000, 8, "wall_s", 60.0),
)


def _weight_bytes(cfg: dict) -> int:
    return sum(t["num_embeddings"] * t["embedding_dim"] * 4 for t in cfg["tables"])


def scale_config(num_tables: int, world_size: int, seed: int = 0, feasible: bool = True) -> dict:
    """A seeded config of `num_tables` tables on `world_size` cuda ranks: rows log-uniform in 1e3..1e8, dims
    from DIMS, pooling factors log-uniform in 1..50, and per-rank HBM that holds it (feasible) or, with DDR,
    only half of the weights over all ranks (not feasible: the planner must refuse it)."""
    if num_tables < 1 or world_size < 1:
        raise ValueError(f"num_tables and world_size must be at least 1, got {num_tables} and {world_size}")
    rng = np.random.default_rng(seed)
    rows = np.exp(rng.uniform(np.log(1e3), np.log(1e8), num_tables)).astype(np.int64)
    dims = rng.choice(DIMS, num_tables)
    pf = np.round(np.exp(rng.uniform(0.0, np.log(50.0), num_tables)), 2)
    tables = [{"name": f"t{i}", "num_embeddings": int(r), "embedding_dim": int(d), "feature_names": [f"f{i}"]}
              for i, (r, d) in enumerate(zip(rows, dims))]
    constraints = {f"t{i}": {"pooling_factors": [float(p)]} for i, p in enumerate(pf)}
    topology = {"world_size": world_size, "local_world_size": min(8, world_size), "compute_device": "cuda",
                "batch_size": 512}
    cfg = {"tables": tables, "constraints": constraints, "topology": topology}
    per_rank = _weight_bytes(cfg) / world_size
    if feasible:
        topology["hbm_cap"] = int(min(max(per_rank * FOOTPRINT_PER_WEIGHT * HEADROOM, MIN_HBM_CAP_BYTES),
                                      engine.MAX_CAP_BYTES))
    else:
        topology["hbm_cap"] = topology["ddr_cap"] = int(per_rank * INFEASIBLE_SHARE)
    return cfg


def plan_digest(plan: dict) -> str:
    """sha256 of the plan's canonical JSON without "planning_seconds" (a measurement, not part of the plan)."""
    data = {k: v for k, v in plan.items() if k != "planning_seconds"}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _error_line(stderr: str) -> str:
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error:")]
    return (errors or lines or [""])[-1][:400]


# The planner runs under a small launcher that forks and execs it and reports its ru_maxrss: a child started
# straight from this process would count this process's own resident memory (the kernel keeps the larger
# of the exec'd image and the one it replaced), and here that holds 100,000-table configs.
LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\nbench-peak-rss-kib {usage.ru_maxrss}\\n")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_engine(config_path: Path, plan_path: Path, timeout_s: float) -> dict:
    """Run `python -m engine plan CONFIG --json --out PLAN` as a child process (under LAUNCHER); its wall seconds,
    its own peak RSS (the kernel's ru_maxrss from wait4), exit code, and the plan's figures or its error line."""
    plan_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-S", "-c", LAUNCHER, sys.executable, "-m", "engine", "plan", str(config_path), "--json",
           "--out", str(plan_path)]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        killed = threading.Event()

        def kill() -> None:  # the launcher's group (it and the planner); not Popen.kill: that may reap it first
            killed.set()
            os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its pid stays ours
        except BaseException:  # Ctrl-C: leave no planner running
            timer.cancel()
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        wall_s = time.perf_counter() - start
        timer.cancel()
        timer.join()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        err.seek(0)
        stderr = err.read()
    peak = [line.split()[1] for line in stderr.splitlines() if line.startswith("bench-peak-rss-kib ")]
    stderr = "\n".join(line for line in stderr.splitlines() if not line.startswith("bench-peak-rss-kib "))
    run = {"exit_code": proc.returncode, "wall_s": wall_s,
           "peak_rss_bytes": int(peak[0]) * 1024 if peak else usage.ru_maxrss * 1024}
    if killed.is_set() and proc.returncode == -signal.SIGKILL:
        return {**run, "status": "timeout", "error": f"no plan within {timeout_s:g} s"}
    if proc.returncode != 0:
        line = _error_line(stderr)
        refused = proc.returncode == 2 and line.startswith("error:")
        return {**run, "status": "refused" if refused else "failed", "error": line}
    if not plan_path.is_file():
        return {**run, "status": "failed", "error": "exit code 0 but no plan written to --out"}
    plan = json.loads(plan_path.read_text())
    lb = plan["lower_bound_ms"]
    return {**run, "status": "planned", "error": "", "max_rank_cost_ms": plan["max_rank_cost_ms"],
            "lower_bound_ms": lb, "ratio": plan["max_rank_cost_ms"] / lb if lb else None,
            "planning_seconds": plan["planning_seconds"], "notes": plan["notes"], "plan_sha256": plan_digest(plan)}


@contextmanager
def busy_cores(count: int) -> Iterator[list[int]]:
    """`count` busy-loop processes, killed on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _summarise(runs: list[dict]) -> dict:
    """The cell's figures: the first run's outcome and plan, the median wall time and peak RSS over runs."""
    first = runs[0]
    cell = {k: v for k, v in first.items() if k not in ("wall_s", "peak_rss_bytes")}
    cell["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    cell["peak_rss_bytes"] = int(statistics.median(r["peak_rss_bytes"] for r in runs))
    return cell


def run_cell(num_tables: int, world_size: int, opts: argparse.Namespace, tmp: Path, log=print) -> dict:
    pairs = num_tables * world_size
    cell = {"tables": num_tables, "ranks": world_size, "pairs": pairs, "load_before": list(os.getloadavg())}
    cfg_path, plan_path = tmp / f"scale-{num_tables}x{world_size}.json", tmp / "plan.json"
    cfg_path.write_text(json.dumps(scale_config(num_tables, world_size, opts.seed)))
    runs = []
    for _ in range(opts.repeat):
        runs.append(run_engine(cfg_path, plan_path, opts.timeout))
        if runs[-1]["status"] != "planned":
            break  # refused, timed out or failed: the same again tells nothing new
    cell.update(_summarise(runs), runs=runs)
    cell["bytes_per_pair"] = cell["peak_rss_bytes"] / pairs
    log(f"{num_tables} x {world_size}: {cell['status']} in {cell['wall_s']:.2f} s, "
        f"peak {cell['peak_rss_bytes'] / 1e6:.0f} MB {cell['error']}".rstrip())
    if opts.infeasible:
        cfg_path.write_text(json.dumps(scale_config(num_tables, world_size, opts.seed, feasible=False)))
        cell["infeasible"] = run_engine(cfg_path, plan_path, opts.timeout)
        log(f"  infeasible: {cell['infeasible']['status']} in {cell['infeasible']['wall_s']:.2f} s")
    if opts.determinism and cell["status"] == "planned":
        cfg_path.write_text(json.dumps(scale_config(num_tables, world_size, opts.seed)))
        loaders = os.cpu_count() or 2
        with busy_cores(loaders):
            loaded = run_engine(cfg_path, plan_path, opts.timeout)
        digests = {r["plan_sha256"] for r in runs} | {loaded.get("plan_sha256")}
        cell["determinism"] = {"busy_processes": loaders, "loaded_run": loaded, "identical": len(digests) == 1}
        log(f"  under load: {loaded['status']} in {loaded['wall_s']:.2f} s, "
            f"{'identical' if len(digests) == 1 else 'DIFFERENT'} plan")
    cell["load_after"] = list(os.getloadavg())
    return cell


def _positive_ints(values: list[int], flag: str, upper: int) -> str | None:
    bad = [v for v in values if not 1 <= v <= upper]
    return f"{flag} takes whole numbers from 1 to {upper:,}, got {bad[0]}" if bad else None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage + message
        self.exit(2, f"error: {message} (see python -m bench.scale --help)\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, nargs="+", metavar="N", help=f"table counts (default {GRID_TABLES})")
    p.add_argument("--ranks", type=int, nargs="+", metavar="N", help=f"rank counts (default {GRID_RANKS})")
    p.add_argument("--quick", action="store_true", help="100 and 1,000 tables x 8 and 64 ranks")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="median of N runs per cell (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="per run (default %(default)g s)")
    p.add_argument("--infeasible", action="store_true", help="also time the refusal of a config that cannot fit")
    p.add_argument("--determinism", action="store_true", help="plan each cell again with every core busy")
    p.add_argument("--seed", type=int, default=0, help="the configs' seed (default 0)")
    p.add_argument("--out-dir", type=Path, default=RESULTS, help="where scale.json/.md/.html go")
    args = p.parse_args(argv)
    grid = not (args.tables or args.ranks or args.quick)
    args.tables = args.tables or list(QUICK_TABLES if args.quick else GRID_TABLES)
    args.ranks = args.ranks or list(QUICK_RANKS if args.quick else GRID_RANKS)
    args.cells = [(n, w) for n in args.tables for w in args.ranks]
    if grid:  # the full grid also measures the targets' cells it lacks (1,000 x 128)
        args.cells += sorted({(n, w) for n, w, _, _ in TARGETS} - set(args.cells))
    problem = (_positive_ints(args.tables, "--tables", engine.MAX_TABLES)
               or _positive_ints(args.ranks, "--ranks", engine.MAX_WORLD_SIZE)
               or _positive_ints([args.repeat], "--repeat", 1_000)
               or (None if 0 < args.timeout < float("inf") else f"--timeout must be above 0, got {args.timeout:g}"))
    if problem:
        p.error(problem)
    try:  # before minutes of planning, not after
        args.out_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=args.out_dir).close()
    except OSError as e:
        p.error(f"cannot write to --out-dir {str(args.out_dir)!r}: {e.strerror or e}")
    return args


def machine() -> dict:
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "processor": platform.processor() or platform.machine()}


def write_outputs(results: dict, out_dir: Path) -> list[Path]:
    """scale.json (every raw figure), scale.md (the table) and scale.html (the charts, offline) in out_dir."""
    from bench.scale_figures import html, markdown  # plotly, only once there is something to draw

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "scale.json", out_dir / "scale.md", out_dir / "scale.html"]
    engine.write_text_file(paths[0], json.dumps(results, indent=1) + "\n")
    engine.write_text_file(paths[1], markdown(results))
    engine.write_text_file(paths[2], html(results))
    return paths


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m bench.scale" + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv))
    results = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine(),
               "settings": {"tables": args.tables, "ranks": args.ranks, "cells": args.cells, "repeat": args.repeat,
                            "timeout_s": args.timeout, "infeasible": args.infeasible,
                            "determinism": args.determinism, "seed": args.seed,
                            "refusal_target_s": REFUSAL_TARGET_S},
               "targets": [{"tables": t, "ranks": r, "what": w, "value": v} for t, r, w, v in TARGETS],
               "load_before": list(os.getloadavg()), "cells": []}
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        for n, w in args.cells:
            results["cells"].append(run_cell(n, w, args, Path(tmp),
                                             log=lambda m: print(m, file=sys.stderr, flush=True)))
    results["load_after"] = list(os.getloadavg())
    for path in write_outputs(results, args.out_dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
