"""A/B of `python -m engine plan` on one bench.scale config: this tree against another checkout (BASE), run
alternately, each run's child CPU seconds and wall seconds, and whether the two trees' plans are byte-identical.
Usage: python -m bench.ab_plan BASE_DIR [--tables N] [--ranks N] [--repeat N]
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

from bench.scale import scale_config
from bench.suite import ROOT


def run_once(root: Path, config: Path) -> tuple[float, float, str]:
    """(child CPU s, wall s, digest of the plan JSON without its planning time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "engine", "plan", str(config), "--json"], cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    plan = json.loads(out.stdout)
    plan.pop("planning_seconds", None)
    digest = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:12]
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall, digest


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("base", type=Path)
    p.add_argument("--tables", type=int, default=10_000)
    p.add_argument("--ranks", type=int, default=1_024)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        config = Path(d) / "config.json"
        config.write_text(json.dumps(scale_config(args.tables, args.ranks)))
        runs: dict[str, list] = {"base": [], "this": []}
        for _ in range(args.repeat):
            for name, root in (("base", args.base), ("this", ROOT)):
                runs[name].append(run_once(root, config))
    cpu = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
    same = len({r[2] for v in runs.values() for r in v}) == 1
    print(json.dumps({"tables": args.tables, "ranks": args.ranks, "runs": runs, "median_cpu_s": cpu,
                      "ratio": cpu["this"] / cpu["base"], "same_plans": same, "load_average": os.getloadavg()},
                     indent=1))


if __name__ == "__main__":
    main()
