"""How the dry-run orders the ranks' steps, measured: one rank after another (each built, timed and freed before the
next, the schedule before 2026-11-29) against every rank held at once and timed in turns of a few steps round the
ranks (engine.dryrun.measure.measure_ranks, the default now). On a shared VM the machine's speed drifts by tens of
percent within seconds; timed one after another, each rank's steps meet a different moment of that drift, so a
plan's ranks are ordered partly by when they ran. In turns, every rank meets the same drift.

  python -m bench.schedule [--json RUN.json] [--rounds N] [--min-ranks K] [--out FILE.md]

Every stored plan of a measured-quality run (`python -m bench.measured`'s JSON: each config's plans, ours and
TorchRec's) with at least --min-ranks ranks is dry-run --rounds times with each schedule, the two alternating (which
goes first alternates too), fresh ids every step, fbgemm or the torch fallback as `python -m engine dryrun` picks.
Per plan and schedule it reports:
- the rank share's spread: for each rank, the standard deviation over rounds of log(rank ms / the plan's mean rank
  ms of that round), the median over ranks. Two ranks' ratio moves by about sqrt(2) x this between runs; it is the
  noise that decides whether a measured order of ranks holds up;
- halves agree: whether the even and the odd rounds' per-rank medians name the same slowest rank, and their
  Spearman correlation (plans of 3 ranks or more): a second measurement's score on the estimate's rank targets;
- the median step of the plan's slowest rank, so the two schedules' levels can be compared.
The load average before and after is in the report; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional

if __package__ in (None, ""):  # run as a script: python bench/schedule.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.measured import git_commit, load_average, read_run  # noqa: E402
from bench.rank_error import on_cpu  # noqa: E402
from bench.suite import ROOT  # noqa: E402
import engine  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "measured_kept.json"
RESULTS = ROOT / "bench" / "results" / "schedule.md"
SCHEDULES = ("one rank after another", "ranks in turns")
ITERS, WARMUP = 20, 3  # as bench.measured dry-runs


def plans(data: dict, min_ranks: int) -> list[tuple[str, str, engine.Config, dict]]:
    """(config, who, config parsed for the CPU, plan) of every stored plan with min_ranks ranks or more; identical
    plans of a config (TorchRec's kept as ours) once."""
    out = []
    for c in data["configs"]:
        if c.get("error") or "config" not in c:
            continue
        cfg = on_cpu(engine.parse_config(c["config"]))
        if cfg.topology.world_size < min_ranks:
            continue
        seen = []
        for who in ("ours", "torchrec"):
            raw = c.get(f"{who}_plan")
            if raw is None or raw["plan"] in seen:
                continue
            seen.append(raw["plan"])
            out.append((c["name"], who, cfg, engine.parse_plan(raw, cfg)))
    return out


def share_spread(ms: np.ndarray) -> float:
    """(rounds, ranks) ms -> the median over ranks of the standard deviation over rounds of log(rank / round mean)."""
    share = np.log(ms / ms.mean(axis=1, keepdims=True))
    return float(np.median(share.std(axis=0, ddof=1)))


def halves(ms: np.ndarray) -> tuple[bool, Optional[float]]:
    """(the even and odd rounds' per-rank medians name the same slowest rank, their Spearman; None under 3 ranks)."""
    a, b = np.median(ms[0::2], axis=0), np.median(ms[1::2], axis=0)
    rho = engine.spearman(list(a), list(b)) if ms.shape[1] >= 3 else None
    return int(np.argmax(a)) == int(np.argmax(b)), rho


def measure(cfg: engine.Config, tables: dict, rounds: int, seed: int) -> dict[str, np.ndarray]:
    """{schedule: (rounds, ranks) measured ms}, the schedules alternating, the first of each round alternating."""
    got: dict[str, list[list[float]]] = {s: [] for s in SCHEDULES}
    for k in range(rounds):
        for name in (SCHEDULES if k % 2 == 0 else SCHEDULES[::-1]):
            s = engine.DryrunSettings(iters=ITERS, warmup=WARMUP, seed=seed + k, turns=name == SCHEDULES[1])
            res = engine.run_dryrun(cfg, tables, s)
            if res.schedule != name:
                raise SystemExit(f"error: the dry-run timed {res.schedule!r} where {name!r} was asked (memory?)")
            got[name].append([r.measured_ms for r in res.ranks])
    return {k: np.array(v) for k, v in got.items()}


def report(rows: list[dict], meta: dict) -> str:
    lines = [f"Made by `{meta['command']}` on {meta['date']} (commit {meta['commit']}; 1/5/15-min load average "
             f"{meta['load_before']} before, {meta['load_after']} after), {meta['rounds']} rounds of each schedule "
             f"per plan, alternating, {ITERS} timed steps per rank. See the module's docstring for the columns.", "",
             "| config | plan | ranks | slowest rank ms, one after another / in turns | rank share spread, one after "
             "another | in turns | halves name the same slowest, one after another / in turns | halves' Spearman, "
             "one after another / in turns |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, b = r[SCHEDULES[0]], r[SCHEDULES[1]]
        sp = " / ".join("-" if x["spearman"] is None else f"{x['spearman']:.2f}" for x in (a, b))
        lines.append(f"| {r['config']} | {r['who']} | {r['ranks']} | {a['slowest_ms']:.3f} / {b['slowest_ms']:.3f} | "
                     f"{a['spread']:.3f} | {b['spread']:.3f} | {'yes' if a['same'] else 'no'} / "
                     f"{'yes' if b['same'] else 'no'} | {sp} |")
    lines.append("")
    for name in SCHEDULES:
        spreads = [r[name]["spread"] for r in rows]
        same = sum(r[name]["same"] for r in rows)
        rho = [r[name]["spearman"] for r in rows if r[name]["spearman"] is not None]
        lines.append(f"- {name}: rank share spread median {np.median(spreads):.3f} (range {min(spreads):.3f}-"
                     f"{max(spreads):.3f}); halves name the same slowest rank in {same} of {len(rows)} plans; "
                     f"halves' Spearman >= 0.9 in {sum(x >= 0.9 for x in rho)} of {len(rho)}")
    ratio = [r[SCHEDULES[1]]["spread"] / r[SCHEDULES[0]]["spread"] for r in rows if r[SCHEDULES[0]]["spread"] > 0]
    level = [r[SCHEDULES[1]]["slowest_ms"] / r[SCHEDULES[0]]["slowest_ms"] for r in rows]
    lines.append(f"- in turns over one after another: rank share spread x{np.median(ratio):.2f} median (range "
                 f"{min(ratio):.2f}-{max(ratio):.2f}); slowest rank's step x{np.median(level):.3f} median (range "
                 f"{min(level):.3f}-{max(level):.3f})")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.schedule", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="a measured-quality run (default %(default)s)")
    p.add_argument("--rounds", type=int, default=8, help="rounds of each schedule per plan (default 8)")
    p.add_argument("--min-ranks", type=int, default=3, help="plans of this many ranks or more (default 3)")
    p.add_argument("--only", nargs="*", default=None, metavar="CONFIG", help="only these configs")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.rounds < 2:
        raise SystemExit("error: --rounds must be 2 or more (the halves need a round each)")
    data = read_run(args.json, "--json ")
    meta = {"command": "python -m bench.schedule " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(),
            "load_before": load_average(), "rounds": args.rounds}
    rows = []
    for k, (name, who, cfg, tables) in enumerate(plans(data, args.min_ranks)):
        if args.only is not None and name not in args.only:
            continue
        got = measure(cfg, tables, args.rounds, seed=1000 * k)
        row = {"config": name, "who": who, "ranks": cfg.topology.world_size}
        for s, ms in got.items():
            same, rho = halves(ms)
            row[s] = {"spread": share_spread(ms), "same": same, "spearman": rho,
                      "slowest_ms": float(np.median(ms, axis=0).max()), "ms": ms.tolist()}
        rows.append(row)
        print(f"{name} {who}: spread {row[SCHEDULES[0]]['spread']:.3f} one after another, "
              f"{row[SCHEDULES[1]]['spread']:.3f} in turns", file=sys.stderr)
    if not rows:
        raise SystemExit("error: no stored plan has --min-ranks ranks or more")
    meta["load_after"] = load_average()
    text = report(rows, meta)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "plans": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
