"""Planning time on a mixed fleet (topology.rank_devices) against the same config with every rank alike: the seeded
10,000-table config of bench.scale on 1,024 ranks, planned in one process as given (one speed), then with half the
ranks H100 80GB and half A100 80GB, each rank keeping the config's HBM. CPU seconds (the machine is shared: ratios
within one run are what to read).
Usage: python -m bench.mixed_fleet [--tables N] [--ranks N] [--out PATH]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/mixed_fleet.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine
from bench.scale import RESULTS, scale_config


def cases(num_tables: int, ranks: int) -> dict[str, dict]:
    uniform = scale_config(num_tables, ranks)
    mixed = copy.deepcopy(uniform)
    half = ranks // 2
    mixed["topology"]["rank_devices"] = [{"ranks": half, "device": "h100_80gb"},
                                         {"ranks": ranks - half, "device": "a100_80gb"}]
    # every rank keeps the config's HBM (sized for the tables), so the two differ in speed only
    mixed["topology"]["custom_topology_data"] = {"hbm_cap": [uniform["topology"]["hbm_cap"]] * ranks}
    return {"uniform": uniform, "mixed (half H100 80GB, half A100 80GB, the same HBM)": mixed}


def run(num_tables: int, ranks: int) -> list[dict]:
    out = []
    for name, raw in cases(num_tables, ranks).items():
        cfg = engine.parse_config(raw)
        cpu = time.process_time()
        plan = engine.plan(cfg)
        cpu = time.process_time() - cpu
        costs = [r.cost_ms for r in plan.ranks]
        out.append({"case": name, "cpu_s": cpu, "max_ms": max(costs), "min_ms": min(costs),
                    "lower_bound_ms": plan.lower_bound_ms})
    return out


def markdown(rows: list[dict], argv: list[str], num_tables: int, ranks: int) -> str:
    load = os.getloadavg()
    lines = [f"# Planning a mixed fleet: {num_tables:,} tables on {ranks:,} ranks", "",
             f"Command: `{' '.join(['python -m bench.mixed_fleet', *argv])}`  ",
             f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average after the run "
             f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (a shared machine: other work was running)", "",
             "| case | CPU s | x uniform | slowest rank ms | fastest rank ms | lower bound ms |",
             "|---|---|---|---|---|---|"]
    base = rows[0]["cpu_s"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['cpu_s']:.2f} | {r['cpu_s'] / base:.2f} | {r['max_ms']:.4g} | "
                     f"{r['min_ms']:.4g} | {r['lower_bound_ms']:.4g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.mixed_fleet")
    p.add_argument("--tables", type=int, default=10_000)
    p.add_argument("--ranks", type=int, default=1_024)
    p.add_argument("--out", type=Path, default=RESULTS / "mixed_fleet.md")
    args = p.parse_args(argv)
    text = markdown(run(args.tables, args.ranks), argv, args.tables, args.ranks)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
