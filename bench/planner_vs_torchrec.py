"""Our planner vs TorchRec's EmbeddingShardingPlanner, side by side in one run on one machine.

Each planner runs as the command a user would run (`python -m engine plan` / `torchrec-plan`), in its own
process with a time limit; both plans are scored twice, by our estimator and by TorchRec's own
(EmbeddingPerfEstimator, engine.torchrec_costs.torchrec_rank_costs, in this process after the timed runs).
Writes a Markdown table (bench/results/).
Usage: python -m bench [--quick] [--torchrec-timeout S] [--cases NAME ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

if __package__ in (None, ""):  # run as a script: python bench/planner_vs_torchrec.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.suite import ROOT, Case, cases  # noqa: E402
import engine

RESULTS = ROOT / "bench" / "results"
SCORINGS = ("Both plans are scored twice: \"max ms\" by our estimator (`engine.evaluate`, the slowest rank's cost), "
            "\"(TorchRec est.)\" by TorchRec 1.8's own EmbeddingPerfEstimator (`engine.torchrec_compat."
            "torchrec_rank_costs`: the slowest rank's summed shard `Perf.total`, the sum TorchRec's partitioner "
            "balances; it leaves out the input distribution, and the deliberate differences of docs/estimator.md "
            "apply).")


@dataclass
class Run:
    ok: bool
    wall_s: float
    plan: Optional[dict] = None
    error: str = ""


@dataclass
class Row:
    case: Case
    ours: Run
    torchrec: Run
    dryrun: dict = field(default_factory=dict)
    torchrec_est: dict = field(default_factory=dict)  # "ours" / "torchrec": max-rank ms by TorchRec's estimator


def run_planner(command: str, config_path: Path, timeout_s: float, extra: Sequence[str] = ()) -> Run:
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "engine", command, str(config_path), "--json", *extra], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Run(False, time.perf_counter() - start, error=f"no plan within {timeout_s:.0f} s")
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip() or "failed").splitlines()
        return Run(False, wall, error=lines[-1][:160] + ("..." if len(lines[-1]) > 160 else ""))
    return Run(True, wall, plan=json.loads(proc.stdout))


def _fmt_s(run: Run, key: str = "wall") -> str:
    if not run.ok:
        return "failed"
    if key == "inner":
        return f"{run.plan['planning_seconds']:.2f}"
    return f"{run.wall_s:.2f}"


def _ratio(x: float) -> str:
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def _peak_hbm(plan: dict) -> str:
    r = max(plan["ranks"], key=lambda r: r["hbm_bytes"])
    cap = r["hbm_cap_bytes"] or 1
    return f"{r['hbm_bytes'] / cap:.0%}"


def torchrec_estimates(config: dict, plans: dict[str, Optional[dict]]) -> dict:
    """Each plan's slowest rank (ms) as TorchRec's estimator prices it; {"error": ...} where one cannot be priced."""
    import engine  # engine.torchrec_rank_costs imports torch: only here, after the timed runs

    cfg, out = engine.parse_config(config), {}
    for who, plan in plans.items():
        if plan is None:
            continue
        try:
            out[who] = float(engine.torchrec_rank_costs(cfg, engine.parse_plan(plan, cfg)).max())
        except engine.EngineError as e:
            out["error"] = "; ".join(x for x in (out.get("error", ""), f"{who}: {str(e)[:160]}") if x)
    return out


def _ms(x: Optional[float]) -> str:
    return f"{x:.4f}" if x is not None else "-"


def _div(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.3f}" if a and b else "-"


def table_markdown(rows: list[Row]) -> str:
    head = ("| case | tables | ranks | ours s (process) | TorchRec s (plan()) | speed-up | ours max ms "
            "| TorchRec max ms | ours / TorchRec | ours max ms (TorchRec est.) | TorchRec max ms (TorchRec est.) "
            "| ours / TorchRec (TorchRec est.) | lower bound ms | ours / bound | TorchRec / bound "
            "| peak HBM ours / TorchRec | notes |")
    lines = [head, "|" + "|".join(["---"] * 17) + "|"]
    for row in rows:
        o, t = row.ours, row.torchrec
        lb = o.plan["lower_bound_ms"] if o.ok else None
        speed = _ratio(t.plan["planning_seconds"] / o.wall_s) if o.ok and t.ok else (
            ">" + _ratio(t.wall_s / o.wall_s) if o.ok and "within" in t.error else "-")
        om = o.plan["max_rank_cost_ms"] if o.ok else None
        tm = t.plan["max_rank_cost_ms"] if t.ok else None
        ot, tt = row.torchrec_est.get("ours"), row.torchrec_est.get("torchrec")
        notes = "; ".join(x for x in (f"ours: {o.error}" if not o.ok else "",
                                      f"TorchRec: {t.error}" if not t.ok else "",
                                      f"TorchRec est. {row.torchrec_est['error']}" if "error" in row.torchrec_est
                                      else "") if x)
        lines.append("| " + " | ".join([
            row.case.name, str(len(row.case.config["tables"])), str(row.case.config["topology"]["world_size"]),
            _fmt_s(o), _fmt_s(t, "inner"), speed,
            _ms(om), _ms(tm), _div(om, tm), _ms(ot), _ms(tt), _div(ot, tt), f"{lb:.4f}" if lb else "-",
            f"{om / lb:.3f}" if om and lb else "-", f"{tm / lb:.3f}" if tm and lb else "-",
            f"{_peak_hbm(o.plan) if o.ok else '-'} / {_peak_hbm(t.plan) if t.ok else '-'}", notes or "",
        ]) + " |")
    return "\n".join(lines)


def run_dryrun(config_path: Path, plan: dict, iters: int) -> dict:
    """Measure a plan with the kernel dry-run (`python -m engine dryrun`); {} if it could not run."""
    plan_path = config_path.with_suffix(f".{plan['planner']}.plan.json")
    plan_path.write_text(json.dumps(plan))
    proc = subprocess.run([sys.executable, "-m", "engine", "dryrun", str(config_path), "--plan", str(plan_path),
                           "--json", "--iters", str(iters)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:160]}
    return json.loads(proc.stdout)


def run_suite(selected: list[Case], torchrec_timeout_s: float, dryrun_iters: int = 20, log=print) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(selected):
            path = Path(tmp) / f"case{i}.json"
            path.write_text(json.dumps(case.config))
            ours = run_planner("plan", path, 120)
            log(f"{case.name}: ours {'%.2f s' % ours.wall_s if ours.ok else ours.error}")
            theirs = run_planner("torchrec-plan", path, torchrec_timeout_s)
            log(f"{case.name}: TorchRec {'%.2f s' % theirs.plan['planning_seconds'] if theirs.ok else theirs.error}")
            row = Row(case, ours, theirs)
            row.torchrec_est = torchrec_estimates(case.config, {"ours": ours.plan, "torchrec": theirs.plan})
            log(f"{case.name}: by TorchRec's estimator {row.torchrec_est}")
            if case.dryrun and ours.ok and theirs.ok:
                row.dryrun = {"ours": run_dryrun(path, ours.plan, dryrun_iters),
                              "torchrec": run_dryrun(path, theirs.plan, dryrun_iters)}
                log(f"{case.name}: dry-run done")
            rows.append(row)
    return rows


def dryrun_markdown(rows: list[Row]) -> str:
    head = ("| case | ours measured max-rank ms | TorchRec measured max-rank ms | ours / TorchRec | "
            "estimate-vs-measured rank correlation (ours / TorchRec plan) | notes |")
    lines = [head, "|" + "|".join(["---"] * 6) + "|"]
    for row in rows:
        if not row.dryrun:
            continue
        o, t = row.dryrun["ours"], row.dryrun["torchrec"]
        om, tm = o.get("max_rank_measured_ms"), t.get("max_rank_measured_ms")
        corr = "/".join("-" if d.get("estimate_rank_correlation") is None else f"{d['estimate_rank_correlation']:.2f}"
                        for d in (o, t))
        notes = "; ".join(d["error"] for d in (o, t) if "error" in d)
        lines.append(f"| {row.case.name} | {om:.3f} | {tm:.3f} | {om / tm:.3f} | {corr} | {notes} |" if om and tm
                     else f"| {row.case.name} | - | - | - | - | {notes} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="only the cases TorchRec plans in under a minute")
    p.add_argument("--cases", nargs="*", help="run only these case names")
    p.add_argument("--torchrec-timeout", type=float, default=900, metavar="S",
                   help="give up on TorchRec's planner after this many seconds (default %(default)s)")
    p.add_argument("--out", type=Path, default=RESULTS / "latest.md", help="where to write the table")
    args = p.parse_args(argv)
    selected = [c for c in cases(quick=args.quick) if not args.cases or c.name in args.cases]
    if not selected:
        print("error: no case matches --cases", file=sys.stderr)
        return 2
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = run_suite(selected, args.torchrec_timeout, log=lambda m: print(m, file=sys.stderr, flush=True))
    text = table_markdown(rows)
    measured = dryrun_markdown(rows)
    if measured.count("\n") > 1:
        text += ("\n\nMeasured by the kernel dry-run (`python -m engine dryrun --iters 20`, fbgemm on CPU, one "
                 "thread, ranks timed in turns):\n\n" + measured)
    cmd = "python -m bench" + (" --quick" if args.quick else "") + (
        f" --cases {' '.join(args.cases)}" if args.cases else "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    engine.write_text_file(args.out, f"Made by `{cmd}` on {started} (2 cores, no GPU).\n\n{SCORINGS}\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
