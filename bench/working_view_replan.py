"""What the working view's headline waits for after a one-table edit, before and after it re-planned from the plan
on screen (issue 28 item 14): per preset, the worker task the strip asks for, timed in this process: before,
`planwork.plan` (the edited config from scratch); after, `planwork.replan_edit` (re-planned from the plan on
screen). Effort 10,000 and the safety stop as the dashboard's. Three edits (table 4's pooling factor 100, 200, 300),
each re-planned from the last re-plan; the edited table is priced once, by the first of the two (the re-plan).

    python -m bench.working_view_replan [PRESET ...]

Prints a markdown table: preset, tables x ranks, seconds from scratch and re-planned (median of the edits), tables
placed differently off the plan on screen by each, the re-plan's slowest rank over the plan from scratch's, whether
every edit was re-planned, the 1-minute load average. No browser: `python -m bench.interactive` times a real one.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import engine
from bench.interactive_replan import PRESETS, edit
from dashboard.plans import headline
from dashboard.serve import planwork
from dashboard.ui.services import DEFAULT_EFFORT, SAFETY_STOP_S

DEFAULT_PRESETS = ["dlrm_criteo_1tb", "synthetic-1000", "synthetic-1000 on 2 x DGX A100 (16 GPUs)",
                   "synthetic-1000 on 4 x DGX H100 (32 GPUs)"]
EDITS = 3


def run_preset(name: str) -> str:
    raw = engine.config_to_dict(engine.parse_config(PRESETS[name]()))
    on_screen = planwork.plan(json.dumps(raw), DEFAULT_EFFORT, SAFETY_STOP_S).result.plan
    rows = []
    for k in range(EDITS):
        raw = edit(raw, 100.0 * (k + 1))
        config_json = json.dumps(raw, sort_keys=True)
        load = os.getloadavg()[0]
        t = time.perf_counter()
        rp = planwork.replan_edit(config_json, on_screen, DEFAULT_EFFORT, SAFETY_STOP_S)
        rp_s = time.perf_counter() - t
        t = time.perf_counter()
        scratch = planwork.plan(config_json, DEFAULT_EFFORT, SAFETY_STOP_S)
        scratch_s = time.perf_counter() - t
        rows.append({"scratch_s": scratch_s, "replan_s": rp_s, "load1": load, "replanned": rp.replanned,
                     "scratch_moved": headline.change(on_screen, scratch.result.plan).moved,
                     "replan_moved": headline.change(on_screen, rp.result.plan).moved,
                     "step": rp.result.plan.max_rank_cost_ms / scratch.result.plan.max_rank_cost_ms})
        on_screen = rp.result.plan

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    return (f"| {name} | {len(raw['tables']):,} x {raw['topology']['world_size']} | {med('scratch_s'):.2f} | "
            f"{med('replan_s'):.2f} | {med('scratch_moved'):g} | {med('replan_moved'):g} | {med('step'):.3f} | "
            f"{'yes' if all(r['replanned'] for r in rows) else 'NO'} | {med('load1'):.1f} |")


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or DEFAULT_PRESETS
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        print(f"unknown preset {unknown[0]!r}: one of {', '.join(PRESETS)}", file=sys.stderr)
        return 2
    print(f"{os.cpu_count()} CPUs, 1-minute load average {os.getloadavg()[0]:.1f} at the start\n")
    print("| preset | tables x ranks | from scratch s | re-planned s | tables moved: from scratch | re-planned | "
          "step re-plan / scratch | every edit re-planned | load1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        print(run_preset(name), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
