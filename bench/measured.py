"""Measured quality (issue 24, item 5): our plan and TorchRec's of seeded CPU configs, each measured by the kernel
dry-run (`python -m engine dryrun`), alternating in rounds of three (ours, TorchRec's, ours again; the order
rotates each round): the pair ratios ours / TorchRec beside the A/A ratios ours again / ours, the noise floor.

  python -m bench.measured [--configs NAME ...] [--pairs N] [--iters K] [--quick] [--out FILE]
Writes bench/results/measured.md and measured.json beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):  # run as a script: python bench/measured.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measured_cases import MeasuredCase, cases, quick_cases  # noqa: E402
from bench.measured_report import summarize, table_markdown, tally  # noqa: E402
from bench.planner_vs_torchrec import run_planner  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "measured.md"
DRYRUN_TIMEOUT_S = 900
TABLE_COST_REPS = 3  # measure-tables rounds per config (--table-costs)


def dryrun_flags(iters: int, batches: int, case: MeasuredCase, help_text: str) -> list[str]:
    """The dry-run's flags for a case: --iters, --batches where the dry-run has it (0: fresh ids every step), and the
    Zipf flags where the dry-run cannot read the ids' skew from the config's zipf_exponent (older dry-runs)."""
    flags = ["--iters", str(iters)]
    if "--batches" in help_text:
        flags += ["--batches", str(batches)]
    if case.zipf_alpha is not None and "{config," not in help_text:
        flags += ["--distribution", "zipf", "--zipf-alpha", str(case.zipf_alpha)]
    return flags


def dryrun_help() -> str:
    proc = subprocess.run([sys.executable, "-m", "engine", "dryrun", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    return proc.stdout


def dryrun(config_path: Path, plan_path: Path, flags: list[str]) -> dict:
    """One `python -m engine dryrun --json` of a plan; raises RuntimeError with its last error line."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "engine", "dryrun", str(config_path), "--plan", str(plan_path),
                           "--json", *flags], cwd=ROOT, capture_output=True, text=True, timeout=DRYRUN_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["dry-run failed"])[-1][:300])
    out = json.loads(proc.stdout)
    out["wall_s"] = time.perf_counter() - start
    return out


def rotated(labels: list[str], i: int) -> list[str]:
    """Round i's order: the labels rotated by i, so that each takes every position in turn and a drift within a
    round (a run that follows a run of the same plan, or the first of a round) favours none of them."""
    k = i % len(labels)
    return labels[k:] + labels[:k]


def same_sharding(a: dict, b: dict) -> bool:
    """Whether two plan files shard every table alike (type, kernel, ranks, shards); figures are not compared."""
    keys = ("sharding_type", "compute_kernel", "ranks", "shards")
    return a["plan"].keys() == b["plan"].keys() and all(
        {k: a["plan"][t].get(k) for k in keys} == {k: b["plan"][t].get(k) for k in keys} for t in a["plan"])


def measure_case(case: MeasuredCase, work: Path, pairs: int, flags: list[str], torchrec_timeout_s: float,
                 log=print, fit_from: Optional[list] = None, baseline: str = "torchrec", fit_cases: list = (),
                 min_gain: Optional[str] = None, table_costs: bool = False) -> dict:
    """Plan a case with both planners and run the rounds; the record of the config (runs, summary, notes). With
    `fit_from` (bench.measured_fit.fit_sources' plans), ours is planned, and both plans dry-run, with the CPU terms
    fitted on the other configs' ranks of those runs (TorchRec's planner gets the config as it is). With `baseline`
    "defaults", the plan ours is compared with (the JSON's "torchrec" series) is our planner's on the config as it
    is, priced with the default terms: whether fitting the terms made our plan faster when run. `fit_cases`
    (bench.measured_fit.fit_cases) join every fit. With `min_gain` ("auto": bench.measured_fit.pair_margin, or a
    fraction), ours is planned against TorchRec's plan as `engine plan --baseline --min-gain` plans it: TorchRec's
    plan is kept unless ours is estimated faster by more than that. With `table_costs`, every table is first dry-run
    alone (`python -m engine measure-tables`, with the rounds' flags) and both plans are priced, and ours planned, with
    each table's compute as measured (engine.apply_table_costs): the config the rounds read carries the scales."""
    cfg_path = work / f"{case.name}.json"
    cfg_path.write_text(json.dumps(case.config))
    rec: dict = {"name": case.name, "held_out": case.held_out, "zipf_alpha": case.zipf_alpha, "config": case.config,
                 "flags": flags, "notes": []}
    plan_path = cfg_path
    if fit_from is not None:
        from bench.measured_fit import fitted_config, pair_margin  # bench.measured_fit reads runs through this module

        try:
            fitted, rec["fit"] = fitted_config(case.name, case.config, fit_from, fit_cases)
            if min_gain == "auto":
                rec["guard"] = pair_margin(case.name, fit_from, fit_cases)
        except engine.EngineError as e:
            rec["error"] = f"fit: {engine.one_line(str(e))}"
            return rec
        plan_path = work / f"{case.name}.fitted.json"
        plan_path.write_text(json.dumps(fitted))
        rec["fitted_config"] = fitted
    if table_costs:
        costs_path = work / f"{case.name}.costs.json"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "engine", "measure-tables", str(plan_path), "--out",
                               str(costs_path), "--reps", str(TABLE_COST_REPS), *flags], cwd=ROOT, capture_output=True,
                              text=True, timeout=DRYRUN_TIMEOUT_S)
        if proc.returncode != 0:
            rec["error"] = "measure-tables: " + (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]
            return rec
        costs = json.loads(costs_path.read_text())
        priced, said = engine.apply_table_costs(engine.parse_config(json.loads(plan_path.read_text())), costs,
                                                "measure-tables")
        rec["table_costs"] = {"wall_s": time.perf_counter() - start, "measure_s": costs["measure_s"],
                              "fixed_ms": costs["fixed_ms"], "backend": costs["backend"], "reps": TABLE_COST_REPS,
                              "tables": {k: v["ms"] for k, v in costs["tables"].items()},
                              "scales": {t.name: priced.constraint(t.name).compute_scale for t in priced.tables},
                              "columns": {k: v["column"] for k, v in costs["tables"].items() if "column" in v},
                              "exponents": {t.name: priced.constraint(t.name).column_exponent for t in priced.tables
                                            if priced.constraint(t.name).column_exponent is not None},
                              "notes": said, "file": costs}  # every round and probe, for offline reads
        if min_gain == "auto" and "guard" not in rec:  # no --fit-from: the costs' probe ranks give the margin
            margin, note = engine.gain_margin(engine.parse_config(json.loads(plan_path.read_text())), costs)
            rec["guard"] = {"min_gain": margin, "how": note}
        plan_path = work / f"{case.name}.measured.json"
        plan_path.write_text(json.dumps(engine.config_to_dict(priced)))
        rec["measured_config"] = engine.config_to_dict(priced)
    theirs = run_planner("plan", cfg_path, 300) if baseline == "defaults" else \
        run_planner("torchrec-plan", cfg_path, torchrec_timeout_s)
    extra: list[str] = []
    if min_gain is not None and theirs.ok:
        if "guard" not in rec:  # auto: pair_margin set it above
            rec["guard"] = {"min_gain": float(min_gain)}
        guard = rec["guard"]
        (work / f"{case.name}.baseline.json").write_text(json.dumps(theirs.plan))
        extra = ["--baseline", str(work / f"{case.name}.baseline.json"), "--min-gain", f"{guard['min_gain']:.6f}"]
    ours = run_planner("plan", plan_path, 300, extra)
    rec["baseline"] = baseline
    rec["planning_s"] = {"ours": ours.wall_s, "torchrec": theirs.wall_s}
    if not ours.ok:
        rec["error"] = f"ours: {ours.error}"
        return rec
    if not theirs.ok:
        rec["notes"].append(f"TorchRec: {theirs.error}; only the A/A series measured")
    identical = theirs.ok and same_sharding(ours.plan, theirs.plan)
    if extra:
        said = [n for n in ours.plan.get("notes", []) if "(--baseline)" in n]
        rec["guard"]["kept"] = "torchrec" if identical else "ours"
        rec["notes"] += [n.replace("the baseline plan (--baseline)", "TorchRec's plan") for n in said[:1]]
    if identical:
        rec["notes"].append("identical plans (same sharding of every table): one series, A/A only")
    plans = {"ours": ours.plan, "torchrec": theirs.plan if theirs.ok and not identical else None}
    paths = {}
    for who, plan in plans.items():
        if plan is not None:
            paths[who] = work / f"{case.name}.{who}.plan.json"
            paths[who].write_text(json.dumps(plan))
            rec[f"{who}_plan"] = plan
    base = ["ours", "torchrec", "ours_again"] if "torchrec" in paths else ["ours", "ours_again"]
    series: dict = {"ours": [], "torchrec": [], "ours_again": []}
    rec["load_before"] = os.getloadavg()
    start = time.perf_counter()
    try:
        for i in range(pairs):
            order = rotated(base, i)
            for who in order:
                series[who].append(dryrun(plan_path, paths[who.replace("_again", "")], flags))
            log(f"{case.name} round {i + 1}/{pairs}: " + ", ".join(
                f"{w} {series[w][-1]['max_rank_measured_ms']:.2f} ms" for w in order))
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
        rec["error"] = f"dry-run: {e}"
        return rec
    rec["load_after"], rec["measure_s"] = os.getloadavg(), time.perf_counter() - start
    rec["series"] = series
    rec["backends"] = sorted({r["backend"] for runs in series.values() for r in runs})
    if len(rec["backends"]) > 1:
        rec["notes"].append("the plans were measured on different backends")
    rec["notes"] += sorted({n for runs in series.values() for r in runs for n in r.get("notes", [])})
    rec["summary"] = summarize(series)
    return rec


def read_run(path: Path, flag: str = "") -> dict:
    """A stored run (the JSON `main` writes), or SystemExit with one line naming the file (after `flag`, the option
    that gave it) and the fix; readers of stored runs (bench.measured_pool, bench.rank_error) share it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"error: {flag}{path}: {engine.one_line(str(e))}; give a file `python -m bench.measured` "
                         "wrote")
    if not isinstance(data, dict) or not isinstance(data.get("configs"), list) or not all(
            isinstance(c, dict) and "name" in c and "config" in c for c in data["configs"]):
        raise SystemExit(f"error: {flag}{path} has no 'configs' list of named configs; give a file `python -m "
                         "bench.measured` wrote")
    return data


def machine_meta() -> dict:
    """What a run records of its machine (engine.machine_identity): the platform as "machine", the CPU's name, its
    caches and the kernels' library versions; bench.measured_fit compares a stored run's with this machine's."""
    ident = engine.machine_identity()
    return {"machine": ident["platform"], "cpu": ident["cpu"], "caches": ident["caches"],
            "libraries": ident["libraries"]}


def load_average() -> str:
    """The 1/5/15-minute load average as a report says it: "0.4 / 0.7 / 1.1"."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":!bench/results"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30).stdout.strip()  # results are not code
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")


def report_markdown(meta: dict, records: list[dict]) -> str:
    bench = [r for r in records if not r["held_out"]]
    later = [r for r in records if r["held_out"]]
    text = [f"Made by `{meta['command']}` on {meta['started']} UTC at commit {meta['commit']}, in "
            f"{meta['wall_s'] / 60:.1f} min ({meta['cpus']} cores of {meta.get('cpu', 'an unrecorded CPU')} on "
            f"{meta['machine']}, no GPU; 1/5/15-min load average "
            f"{meta['load_before']} before, {meta['load_after']} after). Dry-run flags: `{' '.join(meta['flags'])}` "
            f"(plus `--distribution zipf --zipf-alpha A` on the zipf configs where the dry-run cannot read the "
            f"config's zipf_exponent). Each config: {meta['pairs']} rounds of three dry-runs, ours, "
            "TorchRec's and ours again, the order rotated by one each round (round 1: ours, TorchRec's, ours again; "
            "round 2: TorchRec's, ours again, ours; ...), so each takes every position; a pair is the two runs of "
            "one round. A plan's time is its slowest rank's measured_ms.", "", *_summarized_lines(meta),
            *_fit_lines(meta, records), *_table_cost_lines(meta, records),
            "Ratios: ours / TorchRec's measured slowest rank, pair by pair (median and interquartile range); A/A: "
            "ours again / ours, the noise floor, in the same round and across rounds (ours again of the next round "
            "over ours; the last round's over the first's). Verdict: the median ratio outside the A/A band (the A/A "
            "quartile furthest from 1, mirrored, the wider of the two) is faster or slower, else within noise. Two "
            "runs of one plan in the same round can share what the machine gave that round; across rounds they "
            "do not, as two plans' runs do not. Estimate columns use the dry-run's "
            "estimated_ms (priced for cpu); a plan's measured per-rank time is the rank's median over its runs.", ""]
    label = "defaults" if meta.get("baseline") == "defaults" else "TorchRec"
    if bench:
        text += ["Bench configs:", "", tally(bench), "", table_markdown(bench, label), ""]
    if later:
        text += ["Held-out configs (added later; settings drawn from their seeds):", "", tally(later), "",
                 table_markdown(later, label), ""]
    return "\n".join(text)


def _summarized_lines(meta: dict) -> list[str]:
    m = meta.get("summarized")
    if not m:
        return []
    return [f"**Summaries made afresh** by `{m['command']}` on {m['at']} UTC at commit {m['commit']}: the verdicts, "
            "A/A bands and checks below are today's arithmetic on the dry-runs above, which were not run again.", ""]


def _table_cost_lines(meta: dict, records: list[dict]) -> list[str]:
    """What the report says of --table-costs: every table measured alone before ours is planned."""
    costs = [r["table_costs"] for r in records if "table_costs" in r]
    if not meta.get("table_costs") or not costs:
        return []
    scales = [s for c in costs for s in c["scales"].values() if s is not None]
    took = [c["wall_s"] for c in costs]
    return [f"**Every table measured alone first** (`python -m engine measure-tables`, {costs[0]['reps']} rounds, the "
            f"rounds' dry-run flags): both plans are priced, and ours planned, with each table's compute as measured "
            f"(`engine plan --table-costs`, engine.table_costs); measured / estimated {min(scales):.2f}-"
            f"{max(scales):.2f} over {len(scales)} tables; {min(took):.1f}-{max(took):.1f} s per config, not counted "
            "in the planning times.", ""]


def _guard_lines(meta: dict, records: list[dict]) -> list[str]:
    """What the report says of --min-gain: how ours was planned against TorchRec's plan, and where it was kept."""
    guards = [(r["name"], r["guard"]) for r in records if "kept" in r.get("guard", {})]
    if meta.get("min_gain") is None or not guards:
        return []
    gains = [g["min_gain"] for _, g in guards]
    kept = [n for n, g in guards if g["kept"] == "torchrec"]
    how = ("the estimate's error on the ratio of two plans' slowest ranks, median over the pairs of the other "
           "configs measured in one run of the fit's sources, each priced with terms fitted on neither "
           "(bench.measured_fit.pair_margin)" if meta["min_gain"] == "auto" and meta.get("fit_from") else
           "sqrt(2) x the estimate's median error on the config's own probe ranks, measured with its tables "
           "(engine plan --min-gain auto, engine.table_costs.gain_margin)" if meta["min_gain"] == "auto" else "given")
    return [f"**Ours is planned against TorchRec's plan** (`engine plan --baseline TORCHREC.json --min-gain F`, "
            f"`--min-gain {meta['min_gain']}`): TorchRec's plan is kept unless ours is estimated faster by more than "
            f"F = {100 * min(gains):.1f}-{100 * max(gains):.1f}% ({how}). TorchRec's plan was kept for "
            f"{len(kept)} of {len(guards)} configs" + (f" ({', '.join(kept)}): identical plans, A/A only." if kept
                                                       else "."), ""]


def _fit_lines(meta: dict, records: list[dict]) -> list[str]:
    """What the report says of the fitted terms (--fit-from), if any, and of a baseline other than TorchRec's."""
    if not meta.get("fit_from"):
        return _guard_lines(meta, records)
    against = ["**The baseline is ours on the default terms, not TorchRec's** (`--baseline defaults`): wherever "
               "this report says TorchRec's (its rounds, and the JSON's `torchrec` series), read our planner's plan "
               "of the config as it is, priced with the default CPU terms; a ratio under 1 says fitting the terms "
               "made our plan faster when run.", ""] if meta.get("baseline") == "defaults" else []
    fitted = [r["fit"] for r in records if "fit" in r]
    counts = f"{min(f['plans'] for f in fitted)}-{max(f['plans'] for f in fitted)}" if fitted else "no"
    return [f"**Ours is planned with fitted terms**: each config's own CPU terms, fitted (engine.fit_terms, as `python "
            f"-m db calibrate --terms` fits) on the measured ranks of {counts} plans of the other configs in "
            f"{', '.join(f'`{f}`' for f in meta['fit_from'])} (runs of this machine)"
            + (f" and the one-rank cost-term cases of {', '.join(f'`{f}`' for f in meta['fit_cases'])} (timed on this "
               "machine)" if meta.get("fit_cases") else "")
            + ", never on its own; both plans are dry-run with those terms, so the estimate columns are the fitted "
            "estimate. The baseline is planned on the config as it is.", "", *against,
            *_guard_lines(meta, records)]


def write_report(out: Path, meta: dict, records: list[dict], start: float, planned: int) -> str:
    """The Markdown report and the JSON beside it, written atomically after every config (a run cut short keeps
    what it measured, and says so)."""
    meta.update(wall_s=time.perf_counter() - start, load_after=load_average(),
                configs_done=len(records), configs_planned=planned)
    text = report_markdown(meta, records)
    if len(records) < planned:
        text = f"**Partial: {len(records)} of {planned} configs measured so far.**\n\n" + text
    out.parent.mkdir(parents=True, exist_ok=True)
    engine.write_json_file(out.with_suffix(".json"), {"meta": meta, "configs": records})
    engine.write_text_file(out, text)
    return text


def resummarize(path: Path, out: Optional[Path]) -> str:
    """A stored run's summaries made afresh from its dry-runs (bench.measured_report.summarize as it is now: a rule
    changed since the run, say) and its report written again (beside the JSON, or at `out` and its JSON beside it).
    Nothing is measured; the meta says which commit summarized it."""
    data = read_run(path, "--resummarize ")
    records, meta = data["configs"], data.get("meta", {})
    for rec in records:
        if rec.get("series", {}).get("ours") and rec["series"].get("ours_again"):
            rec["summary"] = summarize(rec["series"])
    command = f"python -m bench.measured --resummarize {path}" + (f" --out {out}" if out else "")
    meta["summarized"] = {"commit": git_commit(), "at": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                          "command": command}
    md = out or path.with_suffix(".md")
    text = report_markdown(meta, records)
    engine.write_json_file(md.with_suffix(".json"), {"meta": meta, "configs": records})
    engine.write_text_file(md, text)
    return text


def _gain_ok(text: str) -> bool:
    try:
        return text == "auto" or 0 <= float(text) < 0.9
    except ValueError:
        return False


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.measured", description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="*", help="only these configs (default: all)")
    p.add_argument("--pairs", type=int, help="rounds per config (default 7; 2 with --quick)")
    p.add_argument("--iters", type=int, help="the dry-run's timed steps (default 20; 5 with --quick)")
    p.add_argument("--batches", type=int, default=0, help="the dry-run's --batches, where it has it: distinct "
                   "batches the steps cycle through, 0 fresh ids every step (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="one small config, 2 rounds (for tests)")
    p.add_argument("--torchrec-timeout", type=float, default=600, metavar="S", help="default %(default)s")
    p.add_argument("--out", type=Path, help="the Markdown report; the JSON goes beside it (default "
                   "bench/results/measured.md)")
    p.add_argument("--fit-from", type=Path, nargs="+", metavar="RUN.json", help="plan ours with the CPU terms fitted "
                   "on these stored runs of this machine, each config left out of its own fit (bench.measured_fit)")
    p.add_argument("--fit-cases", type=Path, nargs="+", metavar="CASES.jsonl", default=[], help="with --fit-from: "
                   "one-rank cost-term cases timed on this machine (python -m bench.cost_terms measure) join every fit")
    p.add_argument("--min-gain", metavar="auto|F", help="plan ours against TorchRec's plan, kept unless ours is "
                   "estimated faster by more than F (engine plan --baseline --min-gain); auto: the estimate's held-out "
                   "error on two plans' ratio (bench.measured_fit.pair_margin with --fit-from; with --table-costs "
                   "sqrt(2) x its median error on the config's probe ranks, engine.table_costs.gain_margin)")
    p.add_argument("--table-costs", action="store_true", help="dry-run every table alone first (python -m engine "
                   "measure-tables) and price both plans, and plan ours, with each table's compute as measured")
    p.add_argument("--baseline", choices=("torchrec", "defaults"), default="torchrec", help="the plan ours is "
                   "measured against: TorchRec's (default), or with --fit-from ours on the default terms (the JSON "
                   "keeps the series name 'torchrec' for it)")
    p.add_argument("--resummarize", type=Path, metavar="RUN.json", help="measure nothing: make a stored run's "
                   "summaries afresh from its dry-runs and write its report again (with --out: there)")
    args = p.parse_args(argv)
    if args.resummarize:
        try:
            print(resummarize(args.resummarize, args.out))
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
        return 0
    pool = quick_cases() if args.quick else cases()
    selected = [c for c in pool if not args.configs or c.name in args.configs]
    pairs, iters = args.pairs or (2 if args.quick else 7), args.iters or (5 if args.quick else 20)
    if args.baseline == "defaults" and not args.fit_from:
        print("error: --baseline defaults compares ours on fitted terms with ours on the defaults: give --fit-from "
              "RUN.json too", file=sys.stderr)
        return 2
    if not selected or pairs < 1 or iters < 1:
        print(f"error: no config matches --configs, or --pairs/--iters below 1; configs: "
              f"{', '.join(c.name for c in pool)}", file=sys.stderr)
        return 2
    if (args.fit_cases or (args.min_gain == "auto" and not args.table_costs)) and not args.fit_from:
        print("error: --fit-cases needs --fit-from RUN.json (the runs the terms are fitted on), and --min-gain auto "
              "needs --fit-from or --table-costs (the probe ranks it reads the estimate's error from)",
              file=sys.stderr)
        return 2
    if args.min_gain is not None and (args.baseline == "defaults" or not _gain_ok(args.min_gain)):
        print(f"error: --min-gain must be auto or a fraction from 0 to 0.9 (against TorchRec's plan, not with "
              f"--baseline defaults), got {args.min_gain!r}", file=sys.stderr)
        return 2
    fit_from, fit_cases = None, []
    if args.fit_from:
        from bench.measured_fit import fit_cases as read_cases
        from bench.measured_fit import fit_sources

        fit_from, fit_cases = fit_sources(args.fit_from), read_cases(args.fit_cases) if args.fit_cases else []
    help_text, log = dryrun_help(), (lambda m: print(m, file=sys.stderr, flush=True))
    meta = {"command": ("python -m bench.measured " + " ".join(argv if argv is not None else sys.argv[1:])).strip(),
            "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": git_commit(),
            "cpus": os.cpu_count(), **machine_meta(), "pairs": pairs,
            "load_before": load_average(),
            "flags": dryrun_flags(iters, args.batches, MeasuredCase("", {}, None), help_text),
            "fit_from": [str(f) for f in args.fit_from or []], "baseline": args.baseline,
            "fit_cases": [str(f) for f in args.fit_cases], "min_gain": args.min_gain,
            "table_costs": args.table_costs}
    start = time.perf_counter()
    records: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in selected:
            records.append(measure_case(case, Path(tmp), pairs, dryrun_flags(iters, args.batches, case, help_text),
                                        args.torchrec_timeout, log, fit_from, args.baseline, fit_cases,
                                        args.min_gain, args.table_costs))
            log(f"{case.name}: {records[-1].get('summary', {}).get('verdict', records[-1].get('error', 'done'))}")
            text = write_report(args.out or RESULTS, meta, records, start, len(selected))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
