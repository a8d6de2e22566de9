"""Two plans of one config in real training steps: `python -m engine validate` (torchrun, TorchRec DMP, gloo on CPU)
of each, alternating in rounds of three rotated by one each round (A, B, A again; B, A again, A; ...) as
bench.measured alternates its dry-runs. Per run: the step (the slowest rank's iteration, what training waits for)
and the slowest rank's embedding time inside it (lookups, backward and the fused update); per pair, B over A and
the A/A pair for the noise. The dry-run bench (bench.measured) times kernels only; this is the check that a plan
faster there is faster in a step, collectives and DMP's own work included.

  python -m bench.dmp_ab CONFIG.json A.json B.json [--rounds 9] [--iters 10] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.measured_report import aa_band, median_iqr, next_round, verdict
from bench.suite import ROOT

ORDER = ("a", "b", "a_again")


def validate(config: Path, plan: Path, iters: int, warmup: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "engine", "validate", str(config), "--plan", str(plan), "--iters",
                          str(iters), "--warmup", str(warmup), "--json"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        data = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"validate {plan} printed no JSON: {out.stderr.strip()[-400:]}") from None
    if data.get("status") != "succeeded":
        raise SystemExit(f"validate {plan}: {data.get('status')}: {data.get('error')}")
    return {"step_ms": data["max_rank_iteration_ms"],
            "embedding_ms": max(r["embedding_ms"] for r in data["ranks"]),
            "ranks_embedding_ms": [r["embedding_ms"] for r in data["ranks"]]}


def rotated(i: int) -> tuple[str, ...]:
    k = i % len(ORDER)
    return ORDER[k:] + ORDER[:k]


def run(config: Path, a: Path, b: Path, rounds: int, iters: int, warmup: int, log=print) -> dict:
    plans = {"a": a, "b": b, "a_again": a}
    series: dict[str, list[dict]] = {k: [] for k in ORDER}
    load = [os.getloadavg()[0]]
    for i in range(rounds):
        for who in rotated(i):
            series[who].append(validate(config, plans[who], iters, warmup))
            log(f"round {i + 1}/{rounds} {who}: step {series[who][-1]['step_ms']:.2f} ms, embedding "
                f"{series[who][-1]['embedding_ms']:.2f} ms")
    load.append(os.getloadavg()[0])
    out = {"config": str(config), "a": str(a), "b": str(b), "rounds": rounds, "iters": iters, "load": load}
    for key in ("step_ms", "embedding_ms"):
        ab = [x[key] / y[key] for x, y in zip(series["b"], series["a"])]
        aa = [x[key] / y[key] for x, y in zip(series["a_again"], series["a"])]
        across = [x[key] / y[key] for x, y in zip(next_round(series["a_again"]), series["a"])]
        med = median_iqr(ab)
        out[key] = {"b_over_a": med, "a_a": median_iqr(aa), "a_a_across": median_iqr(across),
                    "b_faster": sum(x < 1 for x in ab), "verdict": verdict(med[0], aa_band(aa, across))}
    out["series"] = series
    return out


def _across(s: dict) -> str:
    q = s.get("a_a_across")  # runs stored before it was recorded have none
    return f"; across rounds {q[0]:.3f} ({q[1]:.3f}-{q[2]:.3f})" if q else ""


def markdown(r: dict, label_a: str, label_b: str) -> str:
    rows = []
    for key, what in (("step_ms", "step (slowest rank's iteration)"), ("embedding_ms", "slowest rank's embedding "
                                                                                         "time")):
        s = r[key]
        q = s["b_over_a"]
        aa = s["a_a"]
        rows.append(f"| {what} | {q[0]:.3f} ({q[1]:.3f}-{q[2]:.3f}) | {s['b_faster']} of {r['rounds']} | "
                    f"{aa[0]:.3f} ({aa[1]:.3f}-{aa[2]:.3f}){_across(s)} | "
                    f"{s['verdict'].replace('faster', f'{label_b} faster')} |")
    return "\n".join([f"{label_b} / {label_a}, {r['rounds']} rounds of `engine validate --iters {r['iters']}` "
                      f"(1-minute load {r['load'][0]:.1f} -> {r['load'][1]:.1f}):", "",
                      "| figure | median (IQR) | faster in | A/A (noise): same round; across rounds | verdict |",
                      "|---|---|---|---|---|", *rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dmp_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path)
    p.add_argument("a", type=Path, help="the baseline plan (TorchRec's, say)")
    p.add_argument("b", type=Path, help="the plan compared with it (ours)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--labels", nargs=2, default=("A", "B"), metavar=("A", "B"))
    p.add_argument("--json", type=Path, help="also write every run here")
    args = p.parse_args(argv)
    started = time.perf_counter()
    r = run(args.config, args.a, args.b, args.rounds, args.iters, args.warmup,
            log=lambda line: print(line, file=sys.stderr))
    print(markdown(r, *args.labels))
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
