"""How a rank's tables slow each other down beyond their times alone (issue 24): the evidence for the pressure ramp
(engine.workset.pressure, engine.table_costs.pressure_fit), from stored `python -m bench.measured --table-costs`
runs, where every table was dry-run alone and every plan's ranks whole in one session.

Each measured rank is predicted as the fixed step plus each piece's share of its table's time alone (the share of the
table's estimated compute the piece has), plus a x a feature of the rank's touched working set (the pieces' distinct
rows and their bytes, engine.estimate.piece_workset):

- none: no feature (what `plan --table-costs` priced before the probes);
- knee K: the rank's rows past a knee, less each piece's rows past it at its table's whole working set;
- ramp F-T: each piece's rows x (how far the rank's bytes are up a ramp from F to T MiB, less how far its table's
  own are);
- ramp F-T on touched bytes: the same with each piece's touched bytes for its rows (wide rows evict more).

`a` is fitted through 0 by least squares on relative errors, held out per config (every rank of a config predicted by
the `a` of all the other configs), per backend: fbgemm's kernels and the torch fallback differ in kind. The last
table fits `a` per config on one plan of another run of the same config, as measure-tables' probe ranks do.
Printed as markdown: `python -m bench.interplay [RUN.json ...]` (default: bench/results/measured_tables*.json).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import engine

RESULTS = Path(__file__).resolve().parent / "results"
MIB = float(2**20)
KNEES = (0.5, 1.0, 2.0, 4.0, 8.0)
RAMPS = ((0.5, 4.5), (0.5, 8.5), (0.5, 16.5), (0.5, 32.5), (1.0, 17.0), (2.0, 18.0), (4.0, 20.0))


@dataclass
class Rank:
    """One measured rank of one plan: its time, the sum of its pieces alone, and its pieces' working sets."""

    config: str
    run: str
    plan: str
    measured: float
    alone: float
    pieces: list[tuple[float, float, float, float]]  # (bytes, rows, table bytes, table rows)


def ranks_of(path: Path) -> list[list[Rank]]:
    """Per plan, its ranks (plans of configs measured with --table-costs)."""
    out = []
    for rec in json.loads(path.read_text())["configs"]:
        tc = rec.get("table_costs")
        if not tc or "tables" not in tc:
            continue
        cfg = engine.parse_config(rec["config"])
        alone, fixed = tc["tables"], float(tc["fixed_ms"])
        for side in ("ours", "torchrec"):
            if not rec.get(f"{side}_plan") or not rec["series"].get(side):
                continue
            plan = engine.read_plan_file(rec[f"{side}_plan"], cfg)
            measured = np.median([[r["measured_ms"] for r in run["ranks"]] for run in rec["series"][side]], axis=0)
            ranks = engine.pressure_pieces(cfg, plan.tables)
            out.append([Rank(rec["name"], path.name, side, float(m),
                             fixed + sum(share * (float(alone[name]) - fixed) for name, *_, share in pieces),
                             [(b, r, tb, tr) for _, b, r, tb, tr, _ in pieces])
                        for m, pieces in zip(measured, ranks)])
    return out


def _knee(b: float, k: float) -> float:
    return max(b - k, 0.0) / b if b > 0 else 0.0


def _ramp(b: float, lo: float, hi: float) -> float:
    return min(max((b - lo) / (hi - lo), 0.0), 1.0)


def feature(r: Rank, form: tuple) -> float:
    kind, *at = form
    if kind == "none":
        return 0.0
    total = sum(p[0] for p in r.pieces)
    if kind == "knee":
        k = at[0] * MIB
        return sum(p[1] for p in r.pieces) * _knee(total, k) - sum(p[1] * _knee(p[2], k) for p in r.pieces)
    lo, hi = at[0] * MIB, at[1] * MIB
    weight = 0 if kind == "bytes" else 1  # a piece's touched bytes, or its touched rows, up the ramp
    return sum(p[weight] * (_ramp(total, lo, hi) - _ramp(p[2], lo, hi)) for p in r.pieces)


def fit(plans: list[list[Rank]], form: tuple) -> float:
    x = np.array([feature(r, form) / r.measured for p in plans for r in p])
    y = np.array([(r.measured - r.alone) / r.measured for p in plans for r in p])
    return max(float(x @ y / (x @ x)), 0.0) if x @ x > 0 else 0.0


def score(plans: list[list[Rank]], form: tuple, a_of) -> tuple[float, float, int, int]:
    """(median and 75th percentile per-rank error, plans whose slowest rank the prediction names, plans of 2+)."""
    errs, named, n = [], 0, 0
    for p in plans:
        a = a_of(p)
        pred = np.array([r.alone + a * feature(r, form) for r in p])
        meas = np.array([r.measured for r in p])
        errs.extend(np.abs(pred - meas) / meas)
        if len(p) > 1:
            n += 1
            named += int(np.argmax(pred) == np.argmax(meas))
    return float(np.median(errs)), float(np.percentile(errs, 75)), named, n


def _label(form: tuple) -> str:
    return {"none": lambda: "none", "knee": lambda: f"knee {form[1]:g} MiB",
            "ramp": lambda: f"ramp {form[1]:g}-{form[2]:g} MiB",
            "bytes": lambda: f"ramp {form[1]:g}-{form[2]:g} MiB on touched bytes"}[form[0]]()


def backend_of(plans: list[Rank]) -> str:
    return "torch" if plans[0].config.split("-")[0] in ("m3", "m7") else "fbgemm"  # adam: the torch fallback


def report(paths: list[Path]) -> str:
    plans = [p for path in paths for p in ranks_of(path)]
    lines = [f"Made by `python -m bench.interplay {' '.join(str(p.relative_to(RESULTS.parent.parent)) for p in paths)}`"
             f": {len(plans)} plans, {sum(len(p) for p in plans)} ranks of "
             f"{len({p[0].config for p in plans})} configs, each rank the median of its runs.", ""]
    forms = [("none",), *(("knee", k) for k in KNEES), *(("ramp", lo, hi) for lo, hi in RAMPS),
             *(("bytes", lo, hi) for lo, hi in RAMPS)]
    for be in ("fbgemm", "torch"):
        sub = [p for p in plans if backend_of(p) == be]
        if not sub:
            continue
        lines += [f"**{be}** ({len(sub)} plans), `a` held out per config:", "",
                  "| form | median error | 75th pct | slowest rank named | a fitted on all (bytes per row at "
                  "ddr_mem_bw) |", "|---|---|---|---|---|"]
        bw = engine.parse_config(json.loads(paths[0].read_text())["configs"][0]["config"]).topology.ddr_mem_bw
        for form in forms:
            held = {c: fit([p for p in sub if p[0].config != c], form) for c in {p[0].config for p in sub}}
            med, p75, named, n = score(sub, form, lambda p: held[p[0].config])
            lines.append(f"| {_label(form)} | {med:.1%} | {p75:.1%} | {named} of {n} | {fit(sub, form) * bw:,.0f} |")
        chosen, own = ("ramp", 0.5, 16.5), {}
        for p in sub:
            others = [q for q in sub if q[0].config == p[0].config and q[0].run != p[0].run]
            first = sorted({q[0].run for q in others})[0] if others else None
            own[id(p)] = fit([q for q in others if q[0].run == first and q[0].plan == "torchrec"]
                             or [q for q in others if q[0].run == first], chosen) if first else 0.0
        med, p75, named, n = score(sub, chosen, lambda p: own[id(p)])
        lines += ["", f"Ramp 0.5-16.5 MiB with `a` fitted per config on one plan's ranks of another run (as "
                      f"measure-tables' probe ranks fit it): median {med:.1%}, 75th percentile {p75:.1%}, "
                      f"slowest rank named in {named} of {n}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.interplay", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="bench.measured --table-costs JSON runs")
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.runs] or sorted(RESULTS.glob("measured_tables*.json"))
    text = report(paths)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
