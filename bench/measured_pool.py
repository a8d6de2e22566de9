"""Measured quality pooled over runs (issue 24): the ours / TorchRec pair ratios of several `python -m bench.measured`
runs of the same configs, judged with a seeded hierarchical bootstrap (runs resampled, then pairs within each run),
so that a verdict accounts for the drift between runs on different days, not only the noise between adjacent pairs.

  python -m bench.measured_pool RUN.json [RUN.json ...] [--seed 0] [--resamples 10000] [--out FILE.md]
Writes FILE.md (default bench/results/measured_pooled.md) and FILE.json beside it. Nothing is timed here.

A config is pooled over the runs whose config and both plans (sharding of every table) are the same; where they
differ between runs, each set of runs with the same plans is reported apart. Verdict: "faster" / "slower" only where
the 90% interval of the pooled median ratio excludes 1. With two or three runs the run level of the bootstrap makes
the interval reach close to each run's own median, so a verdict says every run leaned the same way.
"""

from __future__ import annotations

import argparse
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):  # run as a script: python bench/measured_pool.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.measured import read_run, same_sharding  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "measured_pooled.md"
RESAMPLES = 10_000
LEVEL = 0.90  # two-sided: the 5th and 95th percentiles of the resampled medians
TARGET = 0.90  # issue 24: our slowest rank <= 0.90x TorchRec's


@dataclass(frozen=True)
class RunSeries:
    """One config in one run: its pair ratios ours / TorchRec (None for identical plans) and ours again / ours."""

    run: str  # the run's label: its start time and file
    ab: Optional[np.ndarray]
    aa: np.ndarray
    single_verdict: str  # the run's own verdict (bench.measured_report: median against the A/A band)
    ours_ms: float  # our plan's slowest rank, median over the run's "ours" dry-runs: the run's scale


def run_label(path: Path, data: dict) -> str:
    return f"{data.get('meta', {}).get('started', '?')} ({path.name})"


def _ratios(num: list[dict], den: list[dict]) -> np.ndarray:
    return np.array([a["max_rank_measured_ms"] / b["max_rank_measured_ms"] for a, b in zip(num, den)])


def series_of(label: str, rec: dict) -> Optional[RunSeries]:
    """A config's ratios in one run, or None where it failed or was not measured."""
    s = rec.get("series")
    if rec.get("error") or not s or not s.get("ours") or not s.get("ours_again"):
        return None
    ab = _ratios(s["ours"], s["torchrec"]) if s.get("torchrec") else None
    verdict = rec.get("summary", {}).get("verdict", "identical plans" if ab is None else "?")
    return RunSeries(label, ab, _ratios(s["ours_again"], s["ours"]), verdict,
                     float(np.median([r["max_rank_measured_ms"] for r in s["ours"]])))


def same_plans(a: dict, b: dict) -> bool:
    """Whether two runs of a config measured the same config and the same two plans (sharding of every table)."""
    if a["config"] != b["config"] or ("torchrec_plan" in a) != ("torchrec_plan" in b):
        return False
    return same_sharding(a["ours_plan"], b["ours_plan"]) and (
        "torchrec_plan" not in a or same_sharding(a["torchrec_plan"], b["torchrec_plan"]))


def gather(runs: list[tuple[str, dict]]) -> list[dict]:
    """Per config (in order of first appearance) and per set of runs with the same plans: {"name", "held_out",
    "plans_differ", "group", "series": [RunSeries, ...]}."""
    by_name: dict[str, list[tuple[dict, list[RunSeries]]]] = {}
    for label, data in runs:
        for rec in data["configs"]:
            s = series_of(label, rec)
            if s is None:
                continue
            groups = by_name.setdefault(rec["name"], [])
            home = next((g for g in groups if same_plans(g[0], rec)), None)
            if home is None:
                groups.append((rec, [s]))
            else:
                home[1].append(s)
    out = []
    for name, groups in by_name.items():
        for i, (rec, series) in enumerate(groups):
            out.append({"name": name, "held_out": bool(rec.get("held_out")), "plans_differ": len(groups) > 1,
                        "group": i + 1, "series": series})
    return out


def resampled_medians(groups: list[np.ndarray], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Hierarchical bootstrap: each resample draws as many runs as there are, with replacement, then within each
    drawn run as many pairs as it has, with replacement; its statistic is the median of all the drawn pairs."""
    n = np.array([len(g) for g in groups])
    table = np.full((len(groups), n.max()), np.nan)
    for i, g in enumerate(groups):
        table[i, : len(g)] = g
    runs = rng.integers(0, len(groups), size=(resamples, len(groups)))
    sizes = n[runs][..., None]
    picks = np.floor(rng.random((resamples, len(groups), n.max())) * sizes).astype(int)
    values = table[runs[..., None], picks]
    values[np.arange(n.max()) >= sizes] = np.nan  # a drawn run contributes its own number of pairs
    return np.nanmedian(values.reshape(resamples, -1), axis=1)


def interval(groups: list[np.ndarray], seed: int, resamples: int) -> dict:
    """The pooled median of all pairs and its LEVEL interval from the hierarchical bootstrap."""
    meds = resampled_medians(groups, np.random.default_rng(seed), resamples)
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(meds, [tail, 100 - tail])
    return {"median": float(np.median(np.concatenate(groups))), "lo": float(lo), "hi": float(hi),
            "pairs": int(sum(len(g) for g in groups))}


def verdict(iv: dict) -> str:
    return "faster" if iv["hi"] < 1 else "slower" if iv["lo"] > 1 else "within noise"


def target(iv: dict) -> str:
    """Against issue 24's 0.90x: the whole interval at or under it, the median only, or not."""
    return "yes" if iv["hi"] <= TARGET else "median only" if iv["median"] <= TARGET else "no"


def config_seed(seed: int, name: str, what: str) -> int:
    """A config's own stream, so that its figures do not depend on which other configs or files are read."""
    return seed + zlib.crc32(f"{name}/{what}".encode())


def drift(rows: list[dict]) -> dict:
    """The between-run drift these runs show, in log terms: per config with 2+ runs, the variance of its runs'
    log median ratios less what each run's own pair noise explains (its bootstrap interval read as +-1.645 standard
    errors), averaged over configs; and the spread of the pair ratios within a run (median over runs of their
    standard deviation in logs)."""
    excess, pair_sd = [], []
    for r in rows:
        if r["identical_plans"]:
            continue
        pair_sd += r["pair_log_sd"]
        if len(r["per_run"]) > 1:
            meds = np.log([p["median"] for p in r["per_run"]])
            se2 = [((np.log(p["hi"]) - np.log(p["lo"])) / (2 * 1.645)) ** 2 for p in r["per_run"]]
            excess.append(float(np.var(meds, ddof=1) - np.mean(se2)))
    return {"drift_log_sd": float(np.sqrt(max(0.0, np.mean(excess)))) if excess else None, "configs": len(excess),
            "pair_log_sd": float(np.median(pair_sd)) if pair_sd else None}


def call_rates(runs: int, pairs: int, drift_sd: float, pair_sd: float, seed: int, trials: int = 200,
               resamples: int = 2000) -> dict:
    """How often this module's verdict calls a difference on seeded synthetic pools of `runs` runs x `pairs` pairs
    with log-normal drift between runs and noise between pairs: with no effect (false calls; nominal 1 - LEVEL)
    and with a real 0.85x (found)."""
    rng = np.random.default_rng(seed)
    out = {}
    for label, effect in (("no_effect", 1.0), ("effect_0.85", 0.85)):
        calls = 0
        for t in range(trials):
            groups = [effect * np.exp(rng.normal(rng.normal(0.0, drift_sd), pair_sd, pairs)) for _ in range(runs)]
            v = verdict(interval(groups, seed + t, resamples))
            calls += v != "within noise" if effect == 1.0 else v == "faster"
        out[label] = calls / trials
    return out


def agreement(per_run: list[dict]) -> str:
    """Do the runs agree: their own intervals (pairs resampled within the run) share a point."""
    if len(per_run) < 2:
        return "one run"
    return "yes" if max(r["lo"] for r in per_run) <= min(r["hi"] for r in per_run) else "no"


def pool_config(entry: dict, seed: int, resamples: int) -> dict:
    """One config's pooled figures: the A/A series always, ours / TorchRec where the plans differ."""
    series: list[RunSeries] = entry["series"]
    key = f"{entry['name']}#{entry['group']}"
    out = {k: entry[k] for k in ("name", "held_out", "plans_differ", "group")}
    out["runs"] = [s.run for s in series]
    out["aa"] = interval([s.aa for s in series], config_seed(seed, key, "aa"), resamples)
    out["aa_excludes_1"] = out["aa"]["hi"] < 1 or out["aa"]["lo"] > 1
    out["ours_ms"] = [s.ours_ms for s in series]
    if any(s.ab is None for s in series):
        out["identical_plans"] = True
        return out
    out["identical_plans"] = False
    out["ab"] = interval([s.ab for s in series], config_seed(seed, key, "ab"), resamples)
    out["verdict"], out["target"] = verdict(out["ab"]), target(out["ab"])
    out["per_run"] = [{"run": s.run, "single_run_verdict": s.single_verdict,
                       **interval([s.ab], config_seed(seed, f"{key}/{i}", "ab"), resamples)}
                      for i, s in enumerate(series)]
    out["runs_agree"] = agreement(out["per_run"])
    out["pair_log_sd"] = [float(np.std(np.log(s.ab), ddof=1)) for s in series if len(s.ab) > 1]
    return out


def _iv(iv: dict) -> str:
    return f"{iv['median']:.3f} [{iv['lo']:.3f}-{iv['hi']:.3f}]"


HEAD = ("| config | runs | pairs | ours / TorchRec pooled, median [90% interval] | verdict | <= 0.90x | "
        "A/A pooled, median [90% interval] | each run: median [90% interval], its own verdict | runs agree | "
        "our plan's slowest rank per run, ms |")


def row_markdown(r: dict) -> str:
    name = r["name"] + (f" (plans {r['group']}: plans differ between runs, not pooled)" if r["plans_differ"] else "")
    aa = _iv(r["aa"]) + (" (excludes 1)" if r["aa_excludes_1"] else "")
    if r["identical_plans"]:
        cells = [name, str(len(r["runs"])), str(r["aa"]["pairs"]), "identical plans", "-", "-", aa, "-", "-",
                 " / ".join(f"{x:.2f}" for x in r["ours_ms"])]
    else:
        each = "; ".join(f"{p['run'].split(' (')[0]}: {_iv(p)}, {p['single_run_verdict']}" for p in r["per_run"])
        v = r["verdict"] + (" (one run: drift not sampled)" if len(r["runs"]) < 2 else "")
        cells = [name, str(len(r["runs"])), str(r["ab"]["pairs"]), _iv(r["ab"]), v, r["target"], aa, each,
                 r["runs_agree"], " / ".join(f"{x:.2f}" for x in r["ours_ms"])]
    return "| " + " | ".join(cells) + " |"


def tally(rows: list[dict]) -> str:
    pooled = [r for r in rows if not r["identical_plans"] and len(r["runs"]) > 1]
    v = [r["verdict"] for r in pooled]
    return (f"{len(pooled)} pooled over 2+ runs: {v.count('faster')} faster (the whole interval under 1; "
            f"{sum(r['target'] == 'yes' for r in pooled)} of them at or under 0.90x), {v.count('slower')} slower, "
            f"{v.count('within noise')} within noise; the runs disagree on "
            f"{sum(r['runs_agree'] == 'no' for r in pooled)}.")


def report_markdown(meta: dict, rows: list[dict]) -> str:
    text = [f"Made by `{meta['command']}` (seed {meta['seed']}, {meta['resamples']} resamples). Nothing is timed: "
            "the pair ratios stored by these runs of `python -m bench.measured` are pooled:", ""]
    text += [f"- {s['label']}: `{s['command']}` at commit {s['commit']} on {s['machine']}, 1/5/15-min load "
             f"{s['load_before']} before, {s['load_after']} after" for s in meta["sources"]]
    machines = sorted({s["machine"] for s in meta["sources"]})
    if len(machines) > 1:
        text += ["", f"**The runs were made on {len(machines)} different machines** ({', '.join(machines)}; the "
                 "platform string each run recorded): where a config's slowest-rank times (last column) differ "
                 "several-fold between runs, the drift between them includes a change of machine, not only of day."]
    text += ["", "A pair ratio is ours / TorchRec's measured slowest rank in one round of one run (A/A: ours again / "
             "ours). Pooled median: over every pair of every run whose config and plans match. Its 90% interval: "
             "the 5th-95th percentiles of the median over a seeded hierarchical bootstrap (draw the runs with "
             "replacement, then each drawn run's pairs with replacement), so the drift between runs widens it. "
             "Verdict: faster / slower only where the interval excludes 1. <= 0.90x: the issue's target, met by the "
             "whole interval (yes), by the median only, or not. Each run's own interval resamples its pairs only; "
             "the runs agree where those intervals share a point. With 2-3 runs the interval is coarse (a resample "
             "draws one run twice a third to a half of the time): a verdict says each run leaned the same way.", ""]
    d = meta["drift"]
    if "calls" in meta:
        c, c3 = meta["calls"][2], meta["calls"][3]
        text += [f"Drift between runs, from the {d['configs']} configs run twice: a log standard deviation of "
                 f"{d['drift_log_sd']:.3f} beyond what each run's pair noise explains; within a run the pair ratios "
                 f"spread {d['pair_log_sd']:.3f} (median log standard deviation). On seeded synthetic pools of 2 runs "
                 f"x 7 pairs with that drift and noise, this verdict calls a difference where there is none in "
                 f"{100 * c['no_effect']:.0f}% of 200 trials (nominal {100 * (1 - LEVEL):.0f}%: two runs cannot "
                 f"measure the drift well) and finds a real 0.85x in {100 * c['effect_0.85']:.0f}%; with 3 runs "
                 f"{100 * c3['no_effect']:.0f}% and {100 * c3['effect_0.85']:.0f}%. Read a pooled verdict from two "
                 "runs as a lean, not a proof.", ""]
    for label, keep in (("Bench configs", False), ("Held-out configs", True)):
        part = [r for r in rows if r["held_out"] is keep]
        if part:
            text += [f"{label}: {tally(part)}", "", HEAD, "|" + "---|" * (HEAD.count("|") - 1),
                     *[row_markdown(r) for r in part], ""]
    return "\n".join(text)


def load_run(path: Path) -> tuple[str, dict]:
    data = read_run(path)
    return run_label(path, data), data


def pool(paths: list[Path], seed: int = 0, resamples: int = RESAMPLES, command: str = "") -> tuple[dict, list]:
    runs = [load_run(p) for p in paths]
    sources = [{"label": label, **{k: data.get("meta", {}).get(k, "?") for k in
                                   ("command", "started", "commit", "load_before", "load_after", "machine")}}
               for label, data in runs]
    meta = {"command": command, "seed": seed, "resamples": resamples, "level": LEVEL, "target": TARGET,
            "sources": sources}
    rows = [pool_config(e, seed, resamples) for e in gather(runs)]
    meta["drift"] = drift(rows)
    if meta["drift"]["drift_log_sd"] is not None and meta["drift"]["pair_log_sd"] is not None:
        meta["calls"] = {n: call_rates(n, 7, meta["drift"]["drift_log_sd"], meta["drift"]["pair_log_sd"], seed)
                         for n in (2, 3)}
    return meta, rows


def _rel(p: Path) -> str:
    return str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else str(p)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.measured_pool", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="JSON files `python -m bench.measured` wrote")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default %(default)s)")
    p.add_argument("--resamples", type=int, default=RESAMPLES, help="default %(default)s")
    p.add_argument("--out", type=Path, default=RESULTS, help="the Markdown report; the JSON goes beside it")
    args = p.parse_args(argv)
    if args.resamples < 100:
        print("error: --resamples below 100; give 1000 or more", file=sys.stderr)
        return 2
    parts = [_rel(x) for x in args.runs] + (["--out", _rel(args.out)] if args.out != RESULTS else [])
    parts += [f"--seed {args.seed}"] * (args.seed != 0) + [f"--resamples {args.resamples}"] * (
        args.resamples != RESAMPLES)
    try:
        meta, rows = pool(args.runs, args.seed, args.resamples, "python -m bench.measured_pool " + " ".join(parts))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    text = report_markdown(meta, rows)
    engine.write_json_file(args.out.with_suffix(".json"), {"meta": meta, "configs": rows})
    engine.write_text_file(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
