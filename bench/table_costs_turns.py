"""measure-tables with each round's tables, copies, fixed step and probe ranks timed in turns, against the same units
timed one after another (`--one-rank-at-a-time`, the order before 2026-11-29), on the configs of a stored
measured-quality run. The probes' figure beyond their tables alone is a difference of dry-runs; measured one after
another, each of them meets its own moment of the VM's drifting speed, and that difference reads the drift as the
tables' cost to each other.

  python -m bench.table_costs_turns [--json RUN.json] [--runs 2] [--only CONFIG ...] [--out FILE.md]
  python -m bench.table_costs_turns --report TURNS.json [--out FILE.md]   # judged again by this engine, nothing timed

Every config is measured --runs times each way, the two alternating (which goes first alternates too), 3 rounds each
(bench.measured's), the dry-run flags the stored run used, seeds as the run number. Per file it reads:
- probe error: the median over the probe ranks of |fitted pressure and pieces - measured beyond alone| / probe ms,
  what `plan --min-gain auto` reads as the estimate's error (engine.table_costs.gain_margin), in sample;
- beyond alone: the median over probes of (probe - fixed - the sum of its tables alone less fixed) / probe ms, signed:
  how much more a rank costs than its tables alone;
- held out: each probe priced by the fit on the file's other probes, the pressure alone and with a cost per table
  beyond a rank's first (engine.table_costs.probe_fit), the median of |error| / probe ms;
- table spread: the median over tables of the standard deviation over rounds of log(round ms);
and, held out, the stored run's plans and measured rank times judged with the file (bench.targets --reprice, each
config's kept file replaced by this one): naming the slowest rank, Spearman >= 0.9, the per-rank error.
The load average before and after is in the report; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):  # run as a script: python bench/table_costs_turns.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench import targets  # noqa: E402
from bench.measured import TABLE_COST_REPS, git_commit, load_average, machine_meta, read_run  # noqa: E402
from bench.rank_error import on_cpu  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "measured_turns.json"
RESULTS = ROOT / "bench" / "results" / "table_costs_turns.md"
SCHEDULES = (engine.SCHEDULE_ONE_BY_ONE, engine.SCHEDULE_TURNS)


def settings(flags: list[str], seed: int, turns: bool) -> engine.DryrunSettings:
    """The stored run's dry-run flags (--iters, --batches, --warmup; what bench.measured passes) as settings."""
    known = {"--iters": "iters", "--batches": "batches", "--warmup": "warmup"}
    got = {known[k]: int(v) for k, v in zip(flags[::2], flags[1::2]) if k in known}
    return engine.DryrunSettings(**got, seed=seed, turns=turns)


def file_figures(cfg: engine.Config, data: dict) -> dict:
    """A measure-tables file's probe error, beyond-alone share and table spread (the module's docstring)."""
    fit = engine.probe_fit(cfg, data)
    err = [fit.error(r) for r in fit.rows if r["ms"] > 0]
    beyond = [r["beyond_alone_ms"] / r["ms"] for r in fit.rows if r["ms"] > 0]
    spread = [float(np.std(np.log(t["reps_ms"]), ddof=1)) for t in data["tables"].values() if len(t["reps_ms"]) > 1]
    held = {pieces: held_out_probes(cfg, data, pieces) for pieces in (False, True)}
    return {"probe_error": float(np.median(err)) if err else None,
            "held_out_pressure": held[False], "held_out_pieces": held[True],
            "beyond_alone": float(np.median(beyond)) if beyond else None,
            "table_spread": float(np.median(spread)) if spread else None, "pressure_per_row": fit.pressure_ms_per_row,
            "piece_ms": fit.piece_ms}


def held_out_probes(cfg: engine.Config, data: dict, pieces: bool) -> Optional[float]:
    """The median over probes of each one's error priced by a fit on the others (the pressure alone, or with the
    pieces beyond a rank's first): |fitted - measured beyond alone| / probe ms; None under 2 probes."""
    probes = data.get("probes", [])
    if len(probes) < 2:
        return None
    rows = engine.probe_fit(cfg, data).rows  # each probe's figures, whatever the fit
    err = [engine.probe_fit(cfg, {**data, "probes": probes[:i] + probes[i + 1:]}, pieces).error(r)
           for i, r in enumerate(rows) if r["ms"] > 0]
    return float(np.median(err)) if err else None


def held_out(stored: dict, files: dict[str, dict]) -> dict:
    """The stored run's rank and error targets, each config priced from files[config] (configs without one left out)."""
    data = copy.deepcopy(stored)
    data["configs"] = [c for c in data["configs"] if c["name"] in files]
    for c in data["configs"]:
        c["table_costs"] = {**(c.get("table_costs") or {}), "file": files[c["name"]]}
    found, _ = targets.checks([("", data)], reprice=True)
    out = {}
    for c in found[2:]:
        out[c.target] = {"applies": c.applies, "met": c.met, "figure": c.figure}
    return out


def measure(configs: list[dict], runs: int, log) -> list[dict]:
    rows = []
    for k in range(runs):
        for c in configs:
            cfg = engine.priced_for(engine.parse_config(c["config"]), engine.Device.CPU, "dry-run").config
            for name in (SCHEDULES if k % 2 == 0 else SCHEDULES[::-1]):
                s = settings(c.get("flags") or [], seed=k, turns=name == engine.SCHEDULE_TURNS)
                data = engine.measure_tables(cfg, s, TABLE_COST_REPS, collectives=False)
                if data["schedule"] != name:
                    raise SystemExit(f"error: measure-tables timed {data['schedule']!r} where {name!r} was asked")
                rows.append({"run": k, "config": c["name"], "schedule": name, "file": data,
                             **file_figures(on_cpu(cfg), data)})
                log(f"run {k + 1}/{runs} {c['name']} ({name}): probe error {rows[-1]['probe_error']}, "
                    f"{data['measure_s']:.1f} s")
    return rows


def _pct(values: list) -> str:
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    return f"{100 * np.median(v):.1f}% ({100 * np.percentile(v, 25):.1f}-{100 * np.percentile(v, 75):.1f})"


def report(rows: list[dict], held: dict, meta: dict) -> str:
    lines = [f"Made by `{meta['command']}` on {meta['date']} (commit {meta['commit']}; {meta['cpu']}; 1/5/15-min "
             f"load average {meta['load_before']} before, {meta['load_after']} after), {meta['runs']} run(s) of each "
             f"schedule per config, alternating, {TABLE_COST_REPS} rounds each. See the module's docstring for the "
             "columns." + (f" Judged again by `{meta['again'][0]}` at commit {meta['again'][1]}: the files as "
                           "measured, the fits and held-out figures this engine's." if meta.get("again") else ""), "",
             "| schedule | files | probe error, median over configs (IQR) | held out: the pressure alone | held out: "
             "with pieces | beyond alone, median (IQR) | table spread (log SD), median (IQR) |",
             "|---|---|---|---|---|---|---|"]
    for name in SCHEDULES:
        mine = [r for r in rows if r["schedule"] == name]
        lines.append(f"| {name} | {len(mine)} | {_pct([r['probe_error'] for r in mine])} | "
                     f"{_pct([r.get('held_out_pressure') for r in mine])} | "
                     f"{_pct([r.get('held_out_pieces') for r in mine])} | "
                     f"{_pct([r['beyond_alone'] for r in mine])} | {_pct([r['table_spread'] for r in mine])} |")
    lines += ["", "Held out: the stored run's plans and measured rank times, priced from each run's files "
              f"({meta['json']}; bench.targets --reprice):", "",
              "| schedule | run | " + " | ".join(next(iter(held.values())).keys()) + " |",
              "|---|---|" + "---|" * len(next(iter(held.values())))]
    for key, found in held.items():
        name, run = key.rsplit(" #", 1)
        lines.append(f"| {name} | {run} | " + " | ".join(
            f"{v['met']} of {v['applies']}" + (f": {v['figure']}" if v["figure"] else "") for v in found.values())
            + " |")
    lines += ["", "Per config (probe error / beyond alone, each run):", "",
              "| config | " + " | ".join(SCHEDULES) + " |", "|---|---|---|"]
    for config in dict.fromkeys(r["config"] for r in rows):
        cells = []
        for name in SCHEDULES:
            cells.append(" ".join(f"{100 * r['probe_error']:.0f}%/{100 * r['beyond_alone']:+.0f}%" for r in rows
                                  if r["config"] == config and r["schedule"] == name and r["probe_error"] is not None))
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.table_costs_turns", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="a measured-quality run (default %(default)s)")
    p.add_argument("--runs", type=int, default=2, help="measure-tables runs of each schedule per config (default 2)")
    p.add_argument("--only", nargs="*", default=None, metavar="CONFIG", help="only these configs")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--report", type=Path, help="a stored run of this bench: its files judged again by this engine "
                                                 "(file figures and held out), nothing measured")
    args = p.parse_args(argv)
    if args.runs < 1:
        raise SystemExit("error: --runs must be 1 or more")
    if args.report:
        return _again(args.report, args.out, argv)
    stored = read_run(args.json, "--json ")
    configs = [c for c in stored["configs"] if not c.get("error") and "config" in c and "series" in c
               and (args.only is None or c["name"] in args.only)]
    if not configs:
        raise SystemExit("error: no measured config of --json" + (" named by --only" if args.only else ""))
    meta = {"command": "python -m bench.table_costs_turns " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(),
            "cpu": machine_meta()["cpu"], "load_before": load_average(), "runs": args.runs, "json": str(args.json)}
    rows = measure(configs, args.runs, lambda line: print(line, file=sys.stderr))
    meta["load_after"] = load_average()
    return _write(rows, stored, meta, args.out)


def _write(rows: list[dict], stored: dict, meta: dict, out: Path) -> int:
    held = {}
    for name in SCHEDULES:
        for k in sorted({r["run"] for r in rows}):
            files = {r["config"]: r["file"] for r in rows if r["schedule"] == name and r["run"] == k}
            held[f"{name} #{k + 1}"] = held_out(stored, files)
    text = report(rows, held, meta)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "held_out": held}, indent=1))
    print(text)
    return 0


def _again(path: Path, out: Path, argv: Optional[list[str]]) -> int:
    """A stored run's files judged by this engine: the figures and the held-out targets made again, the times kept."""
    try:
        data = json.loads(path.read_text())
        meta, rows = dict(data["meta"]), data["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: --report {path}: {e}; give a file this bench wrote") from None
    source = Path(meta["json"])
    if not source.exists():  # stored in another checkout: the same results file here
        source = ROOT / "bench" / "results" / source.name
    stored = read_run(source, "the run's --json ")
    cfgs = {c["name"]: on_cpu(engine.parse_config(c["config"])) for c in stored["configs"] if "config" in c}
    rows = [{**r, **file_figures(cfgs[r["config"]], r["file"])} for r in rows]
    meta["again"] = (f"python -m bench.table_costs_turns {' '.join(argv if argv is not None else sys.argv[1:])}",
                     git_commit())
    return _write(rows, stored, meta, out)


if __name__ == "__main__":
    raise SystemExit(main())
