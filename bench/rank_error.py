"""The per-rank estimate against stored measurements (issue 24): every rank of a measured-quality run (`python -m
bench.measured`'s JSON: each config, both plans, each rank's measured ms in every round) re-estimated with the
current engine, offline. Reports the per-rank error, whether the estimate names the measured slowest rank, the
Spearman correlation of each plan's ranks, and a leave-one-config-out fit of the named CPU terms (the fit `python -m
db calibrate --terms` makes: engine.held_out_predictions, each config's ranks priced with the terms fitted on the
other configs' runs). No timing is taken here, so the machine's load does not enter.

  python -m bench.rank_error [--json RUN.json [RUN.json ...]] [--candidates] [--out FILE.md]

--candidates adds candidate changes to the estimate judged held out on these plans and on the one-rank cost-term
cases (bench.rank_error_candidates).

A rank's measured time is its median over the plan's runs (ours: the "ours" and "ours again" series); its
estimate is the estimate's forward + backward compute (what the dry-run times: the rank's kernels alone, no
collectives). Noise: two ranks are compared within each run, so the noise of their order is that of their ratio:
the standard error of the median over n runs of log(rank i / rank j), 1.2533 x (IQR / 1.349) / sqrt(n) (normal
errors); a plan's noise is the median over its pairs of ranks. A drift of the machine's speed that moves every rank
of a run alike does not enter it (a dry-run times the ranks in turns for that reason, engine.dryrun.measure); until
2026-11-29 it was each rank's own standard error times sqrt(2), which took the ranks' errors as independent and
read 1.5-1.8x this on the stored runs, so fewer plans counted as resolved. A plan's ranks are "resolved" where the
measured spread (slowest / fastest - 1) exceeds twice that.
Where every run of a plan also recorded each rank's 25th percentile step (`measured_p25_ms`, dry-runs since
2026-11-27), the estimate is also held to that statistic (the one the CPU terms were fitted to), beside the median.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

if __package__ in (None, ""):  # run as a script: python bench/rank_error.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.measured import read_run  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "measured.json"
FIT_BACKEND = "fbgemm"  # the kernels the CPU terms describe; other backends' ranks are reported, not fitted
SE_OF_MEDIAN = 1.2533  # the standard error of a median over that of a mean, normal errors
IQR_PER_SD = 1.349


@dataclass(frozen=True)
class PlanRanks:
    """One stored plan of one config: its runs' per-rank measured ms and the current engine's estimate."""

    config: str
    who: str  # "ours" or "torchrec"
    later: bool  # a config added after the model was last changed ("held_out" in measured.json)
    backend: str
    cfg: engine.Config
    tables: dict
    measured: np.ndarray  # (runs, ranks) ms
    estimate: np.ndarray  # (ranks,) forward + backward compute ms, the current engine
    stored_estimate: np.ndarray  # (ranks,) the same as the run recorded it
    measured_p25: Optional[np.ndarray] = None  # (runs, ranks) ms, each run's 25th percentile step; None: not recorded
    run: str = ""  # which stored run (file) the plan comes from, where several are read
    fitted: bool = False  # dry-run with terms fitted on other configs' runs (bench.measured --fit-from)

    @property
    def key(self) -> tuple[str, ...]:
        """(config, who), and the run where several stored runs are read (the same config may be in each)."""
        return (self.config, self.who) + ((self.run,) if self.run else ())

    @property
    def p25(self) -> Optional[np.ndarray]:
        """Each rank's median over runs of its 25th percentile step, where the runs recorded it."""
        return None if self.measured_p25 is None else np.median(self.measured_p25, axis=0)

    @property
    def median(self) -> np.ndarray:
        return np.median(self.measured, axis=0)

    def pair_noise(self, i: int, j: int) -> float:
        """Relative standard error of ranks i and j's ratio: that of the median over the runs of log(i / j), each run
        timing both (the module's docstring)."""
        ratio = np.log(self.measured[:, i] / self.measured[:, j])
        q1, q3 = np.percentile(ratio, [25, 75])
        return float(SE_OF_MEDIAN * (q3 - q1) / IQR_PER_SD / math.sqrt(len(self.measured)))

    @property
    def noise(self) -> float:
        """Relative standard error of the ratio of two ranks' medians: the median over the plan's pairs of ranks."""
        k = self.measured.shape[1]
        pairs = [self.pair_noise(i, j) for i in range(k) for j in range(i + 1, k)]
        return float(np.median(pairs)) if pairs else 0.0

    def swaps(self, estimate: np.ndarray) -> list[tuple[int, int, float, float, bool]]:
        """Every pair of ranks the estimate orders the other way round from the medians, or calls equal (to 1e-9)
        where they measured apart: (the rank measured slower, the one measured faster, how much slower, relative,
        twice the pair's noise, whether the estimate called them equal), the widest gap first."""
        m, out = self.median, []
        for i in range(len(m)):
            for j in range(len(m)):
                if m[i] <= m[j]:
                    continue
                tie = bool(abs(estimate[i] - estimate[j]) <= 1e-9 * max(abs(estimate[i]), abs(estimate[j])))
                if tie or estimate[i] < estimate[j]:
                    out.append((i, j, float(m[i] / m[j] - 1.0), 2.0 * self.pair_noise(i, j), tie))
        return sorted(out, key=lambda s: -s[2])

    @property
    def spread(self) -> float:
        m = self.median
        return float(m.max() / m.min() - 1.0)

    @property
    def resolved(self) -> bool:
        return self.spread > 2.0 * self.noise


def on_cpu(cfg: engine.Config) -> engine.Config:
    """Priced for the CPU the dry-run measured on (engine.pricing's rule; these configs already say cpu)."""
    return replace(cfg, topology=replace(cfg.topology, compute_device=engine.Device.CPU))


def _p25(runs: list[dict]) -> Optional[np.ndarray]:
    if not all("measured_p25_ms" in r for run in runs for r in run["ranks"]):
        return None
    return np.array([[r["measured_p25_ms"] for r in run["ranks"]] for run in runs], dtype=np.float64)


def _priced_config(c: dict, reprice: bool) -> engine.Config:
    """The config a stored config's plans are priced with: as the run priced them (a --table-costs run's config with
    the tables as measured and their probed pressure), or with reprice, made again by this engine from the config
    and the measure-tables file the run kept (`table_costs.file`), so a change to how the measured costs compose is
    judged on stored runs; a config without the file is priced as the run priced it."""
    kept = (c.get("table_costs") or {}).get("file") if reprice else None
    if kept is None:
        return on_cpu(engine.parse_config(c.get("measured_config") or c["config"]))
    cfg, _ = engine.apply_table_costs(engine.parse_config(c["config"]), kept, f"{c['name']}'s measure-tables file")
    return on_cpu(cfg)


def plans_of(data: dict, run: str = "", reprice: bool = False) -> list[PlanRanks]:
    """Every measured plan of the stored run (configs that failed are left out); reprice: the configs' measured
    costs applied again by this engine (_priced_config)."""
    out = []
    for c in data["configs"]:
        if c.get("error") or "series" not in c:
            continue
        cfg = _priced_config(c, reprice)
        for who in ("ours", "torchrec"):
            runs = c["series"].get(who, []) + (c["series"].get("ours_again", []) if who == "ours" else [])
            if not runs or f"{who}_plan" not in c:
                continue
            tables = engine.parse_plan(c[f"{who}_plan"], cfg)
            ranks = engine.evaluate(cfg, tables, planner="file").ranks
            out.append(PlanRanks(
                c["name"], who, bool(c.get("held_out")), runs[0]["backend"], cfg, tables,
                np.array([[r["measured_ms"] for r in run["ranks"]] for run in runs], dtype=np.float64),
                np.array([r.perf.fwd_compute + r.perf.bwd_compute for r in ranks]),
                np.array([r["estimated_compute_ms"] for r in runs[0]["ranks"]], dtype=np.float64), _p25(runs), run,
                "fitted_config" in c))
    return out


def rank_checks(p: PlanRanks, estimate: np.ndarray, meas: Optional[np.ndarray] = None) -> dict:
    """One plan's ranks under an estimate against a statistic of the measured ranks (default their median): errors,
    the slowest rank named or not, Spearman."""
    meas = p.median if meas is None else meas
    return {"errors": np.abs(estimate - meas) / meas, "names_slowest": int(np.argmax(estimate)) == int(np.argmax(meas)),
            "spearman": engine.spearman(list(estimate), list(meas))}


def held_out(plans: list[PlanRanks], p25: bool = False) -> dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]:
    """{(config, who): (the defaults' per-rank ms, the ms with the terms fitted on the other configs)} for the plans
    measured with FIT_BACKEND, as `db calibrate --terms` fits (engine.held_out_predictions, grouped by config); fitted
    to each rank's median step, or with p25 to its 25th percentile step (plans that recorded it only)."""
    fit = [p for p in plans if p.backend == FIT_BACKEND and (not p25 or p.p25 is not None)]
    runs = [engine.term_run(p.cfg, p.tables, p.p25 if p25 else p.median, i, p.config, "stored", p.backend)
            for i, p in enumerate(fit)]
    preds = engine.held_out_predictions(runs, by_group=True) if len({p.config for p in fit}) > 1 else []
    return {p.key: pr for p, pr in zip(fit, preds)}


def _q(values: list[float] | np.ndarray) -> str:
    """median (IQR) in percent."""
    if len(values) == 0:
        return "n/a"
    q1, med, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 50, 75])
    return f"{100 * med:.1f}% ({100 * q1:.1f}-{100 * q3:.1f}%)"


def _share(flags: list[bool]) -> str:
    return f"{sum(flags)} of {len(flags)}" if flags else "n/a"


def _spearmen(checks: list[dict]) -> str:
    vals = [c["spearman"] for c in checks if c["spearman"] is not None]
    if not vals:
        return "n/a"
    return f"median {np.median(vals):.2f}, >= 0.9 in {sum(v >= 0.9 for v in vals)} of {len(vals)}"


def summary_rows(plans: list[PlanRanks], estimates: dict[tuple[str, ...], np.ndarray]) -> list[list[str]]:
    """Per subset (bench, later, all), the estimate's error, naming and Spearman (plans with an estimate only)."""
    rows = []
    for label, keep in (("bench configs", lambda p: not p.later), ("added later", lambda p: p.later),
                        ("all", lambda p: True)):
        sel = [p for p in plans if keep(p) and p.key in estimates]
        checks = [rank_checks(p, estimates[p.key]) for p in sel]
        res = [c for p, c in zip(sel, checks) if p.resolved]
        errs = np.concatenate([c["errors"] for c in checks]) if checks else []
        rows.append([label, str(len(sel)), str(len(errs)), _q(errs), _share([c["names_slowest"] for c in checks]),
                     _share([c["names_slowest"] for c in res]), _spearmen(checks), _spearmen(res)])
    return rows


SUMMARY_HEAD = ["configs", "plans", "ranks", "per-rank error, median (IQR)", "names slowest rank",
                "names it where resolved", "Spearman", "Spearman where resolved"]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _ms(values: np.ndarray) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def plan_rows(plans: list[PlanRanks], loco: dict) -> list[list[str]]:
    rows = []
    for p in plans:
        now = rank_checks(p, p.estimate)
        after = rank_checks(p, loco[p.key][1]) if p.key in loco else None
        sp = now["spearman"]
        name = p.config + (" (later)" if p.later else "") + (f" [{p.run}]" if p.run else "")
        rows.append([name, p.who, p.backend, _ms(p.median), _ms(p.estimate),
                     f"{100 * np.median(now['errors']):.1f}%",
                     f"{100 * p.spread:.1f}% / {100 * 2 * p.noise:.1f}%" + (" resolved" if p.resolved else ""),
                     "yes" if now["names_slowest"] else "no", "n/a" if sp is None else f"{sp:.2f}",
                     "n/a" if after is None else f"{100 * np.median(after['errors']):.1f}%",
                     "n/a" if after is None else ("yes" if after["names_slowest"] else "no")])
    return rows


PLAN_HEAD = ["config", "plan", "backend", "measured ms per rank (median of runs)", "estimated compute ms",
             "median error", "measured spread / 2 x noise", "names slowest", "Spearman", "held-out fit: median error",
             "held-out fit: names slowest"]


def _signed(values: list[np.ndarray]) -> str:
    """The median of estimate / measured - 1, in percent: where the estimate sits against the statistic."""
    return f"{100 * np.median(np.concatenate(values)):+.1f}%"


def statistic_rows(plans: list[PlanRanks]) -> list[list[str]]:
    """Per subset, the current estimate held to each rank's median step and to its 25th percentile step, on the
    plans whose runs recorded both: error, bias, ranks closer to each, and the slowest rank named under each."""
    rows = []
    loco = {False: held_out(plans), True: held_out(plans, p25=True)}
    for label, keep in ((f"{FIT_BACKEND}, bench configs", lambda p: not p.later and p.backend == FIT_BACKEND),
                        (f"{FIT_BACKEND}, added later", lambda p: p.later and p.backend == FIT_BACKEND),
                        (f"{FIT_BACKEND}, all", lambda p: p.backend == FIT_BACKEND), ("every backend", lambda p: True)):
        sel = [p for p in plans if keep(p) and p.p25 is not None]
        if not sel:
            continue
        med = [rank_checks(p, p.estimate) for p in sel]
        q25 = [rank_checks(p, p.estimate, p.p25) for p in sel]
        em, eq = np.concatenate([c["errors"] for c in med]), np.concatenate([c["errors"] for c in q25])
        same = [int(np.argmax(p.median)) == int(np.argmax(p.p25)) for p in sel]
        fitted = [p for p in sel if p.key in loco[False] and p.key in loco[True]]
        fm = [rank_checks(p, loco[False][p.key][1]) for p in fitted]
        fq = [rank_checks(p, loco[True][p.key][1], p.p25) for p in fitted]
        rows.append([label, str(len(sel)), str(len(em)), _q(em), _q(eq), f"{int(np.sum(eq < em))} of {len(em)}",
                     _signed([p.estimate / p.median - 1 for p in sel]), _signed([p.estimate / p.p25 - 1 for p in sel]),
                     _share([c["names_slowest"] for c in med]), _share([c["names_slowest"] for c in q25]),
                     _share(same), _q(np.concatenate([c["errors"] for c in fm])) if fm else "n/a",
                     _q(np.concatenate([c["errors"] for c in fq])) if fq else "n/a",
                     _share([c["names_slowest"] for c in fm]), _share([c["names_slowest"] for c in fq])])
    return rows


STATISTIC_HEAD = ["plans", "count", "ranks", "error vs median step, median (IQR)", "error vs 25th percentile step",
                  "ranks closer to the 25th percentile", "estimate / median - 1, median",
                  "estimate / 25th percentile - 1, median", "names slowest (median)", "names slowest (25th percentile)",
                  "same slowest rank under both", "held-out fit to the median: error", "held-out fit to the 25th "
                  "percentile: error", "held-out fit: names slowest (median)", "(25th percentile)"]


def _source_line(source: str, meta: dict) -> str:
    return (f"{source} (measured by `{meta.get('command', '?')}` on {meta.get('started', '?')} UTC at commit "
            f"{meta.get('commit', '?')}, 1-min load average {meta.get('load_before', '?')} before, "
            f"{meta.get('load_after', '?')} after)")


def report(data: dict, source: str, command: str, candidates: bool = False) -> str:
    return report_runs([(source, data)], command, candidates)


def report_runs(runs: list[tuple[str, dict]], command: str, candidates: bool = False) -> str:
    """The report over one or several stored runs (several: each plan labelled with its run's file)."""
    plans = [p for source, data in runs for p in plans_of(data, source if len(runs) > 1 else "")]
    if not plans:
        raise SystemExit(f"error: {', '.join(s for s, _ in runs)} hold no measured plan (every config failed or has "
                         "no series)")
    loco = held_out(plans)
    now = {p.key: p.estimate for p in plans}
    fbgemm = {k: v for k, v in now.items() if k in loco}
    changed = sum(not np.allclose(p.estimate, p.stored_estimate, rtol=1e-9, atol=1e-12) for p in plans)
    text = [f"Made by `{command}` from " + "; ".join(_source_line(s, d.get("meta", {})) for s, d in runs)
            + ". Nothing is timed here.",
            f"{len(plans)} plans of {len({p.config for p in plans})} configs; the current engine's estimate differs "
            f"from the one the run recorded on {changed} of them.", "",
            "**The estimate as it is** (every plan; ranks measured with the torch fallback included):", "",
            *_table(SUMMARY_HEAD, summary_rows(plans, now)), "",
            f"**The estimate as it is, {FIT_BACKEND} ranks only** (the kernels the CPU terms describe):", "",
            *_table(SUMMARY_HEAD, summary_rows(plans, fbgemm)), ""]
    fitted = {p.key: p.stored_estimate for p in plans if p.backend == FIT_BACKEND and p.fitted}
    if fitted:
        text += [f"**The estimate the run recorded, where ours was planned with fitted terms** (`bench.measured "
                 f"--fit-from`; {FIT_BACKEND} ranks of the {len(fitted)} plans dry-run with the terms fitted on the "
                 "other configs' earlier runs of this machine: held out by config and by run):", "",
                 *_table(SUMMARY_HEAD, summary_rows(plans, fitted)), ""]
    stats = statistic_rows(plans)
    if stats:
        text += ["**Median step or 25th percentile step** (the plans whose runs recorded each rank's 25th percentile; "
                 "a rank's figure is its median over the plan's runs):", "", *_table(STATISTIC_HEAD, stats), ""]
    text += [f"**Leave one config out** ({FIT_BACKEND} plans: each config's ranks priced with the terms `db calibrate "
             "--terms` fits on the other configs' runs, engine.held_out_predictions):", "",
             *_table(SUMMARY_HEAD, summary_rows(plans, {k: v[1] for k, v in loco.items()})), "",
             "Per plan:", "", *_table(PLAN_HEAD, plan_rows(plans, loco)), ""]
    if candidates:
        from bench.rank_error_candidates import candidates_markdown, residual_markdown

        text += [residual_markdown(plans), "", candidates_markdown(plans), ""]
    return "\n".join(text)


def read_named(path: Path) -> tuple[str, dict]:
    """(its name, relative to the repository where it is inside it, the stored run)."""
    data = read_run(path, "--json ")
    return (str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)), data


def report_main(prog: str, description: str, make: Callable[[list[tuple[str, dict]], str, argparse.Namespace], str],
                argv: Optional[list[str]], options: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> int:
    """The command line of a report over stored runs (this one, bench.targets): --json RUN.json ..., --out FILE.md,
    `options` adding its own; a file that is not a stored run is one line on stderr and exit 2."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--json", type=Path, nargs="+", default=[DEFAULT_JSON], help="one or more `python -m "
                   "bench.measured` JSON files (default bench/results/measured.json)")
    options(p)
    p.add_argument("--out", type=Path, help="also write the Markdown report to this file")
    args = p.parse_args(argv)
    try:
        runs = [read_named(path) for path in args.json]
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    command = (prog + " " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    text = make(runs, command, args)
    if args.out:
        engine.write_text_file(args.out, text)
    print(text)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    return report_main(
        "python -m bench.rank_error", __doc__.splitlines()[0],
        lambda runs, command, args: report_runs(runs, command, args.candidates), argv,
        lambda p: p.add_argument("--candidates", action="store_true", help="also judge candidate changes to the "
                                 "estimate held out (bench.rank_error_candidates)"))


if __name__ == "__main__":
    sys.exit(main())
