"""Fitting the CPU estimator's terms to bench.cost_terms measurements, and reporting how well each model explains
them: in-sample and leave-one-group-out (every case of a group, e.g. all `opt/...` cases, held out together).

The design matrix is built with the engine's own functions (engine.distinct_rows, engine.cost_decades), so the
fitted constants mean exactly what engine.estimate computes with them. Non-negative least squares on relative
errors (each case's row divided by its measured time); the working-set knee by grid search.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

import engine

TERMS = ("id", "id_decade", "row", "row_first_decade", "row_later_decades", "output", "piece",
         "opt_adagrad", "opt_rowwise_adagrad", "opt_adagrad_row", "opt_rowwise_adagrad_row", "workset",
         "workset_rows")
OPTIMIZER_TERMS = ("opt_adagrad", "opt_rowwise_adagrad", "opt_adagrad_row", "opt_rowwise_adagrad_row")
KNEES_MIB = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32)
STATE_PER_WEIGHT = {"sgd": 0.0, "adagrad": 1.0, "rowwise_adagrad": None, "adam": 2.0}  # None: one per row


def load_rows(path: Path, stat: str = "p25_ms") -> list[dict]:
    """One row per case: the median over repetitions of each repetition's 25th-percentile step time (`stat`: another
    of a repetition's figures, e.g. median_ms, the dry-run's)."""
    by = defaultdict(list)
    for line in path.read_text().splitlines():
        r = json.loads(line)
        by[r["case"]].append(r)
    out = []
    for case, rs in sorted(by.items()):
        out.append({**rs[0], "measured_ms": float(np.median([r[stat] for r in rs])),
                    "spread": float(np.ptp([r[stat] for r in rs]) / max(np.median([r[stat] for r in rs]), 1e-9)),
                    "reps": len(rs)})
    return out


def features(row: dict, knee_bytes: float) -> np.ndarray:
    """The case's work per term, in bytes (what a fitted constant turns into bytes at the DDR bandwidth)."""
    f = dict.fromkeys(TERMS, 0.0)
    tdt = 4.0
    ws = ws_rows = 0.0
    for rows, dim, pf, zipf in row["tables"]:
        ids = pf * row["batch_size"]
        touched = engine.distinct_rows(ids, rows, zipf)
        d = float(engine.cost_decades(np.array([rows * dim * tdt]))[0])
        reads = ids + engine.BWD_COMPUTE_MULTIPLIER * touched
        fb = 1.0 + engine.BWD_COMPUTE_MULTIPLIER
        f["id"] += fb * ids
        f["id_decade"] += fb * ids * d
        f["row"] += reads * dim * tdt
        f["row_first_decade"] += reads * dim * tdt * min(d, 1.0)
        f["row_later_decades"] += reads * dim * tdt * max(d - 1.0, 0.0)
        f["output"] += fb * row["batch_size"] * dim * tdt
        f["piece"] += 1.0
        if row["optimizer"] in ("adagrad", "rowwise_adagrad"):
            f[f"opt_{row['optimizer']}"] += touched * dim
            f[f"opt_{row['optimizer']}_row"] += touched
        per_weight = STATE_PER_WEIGHT[row["optimizer"]]
        state = engine.OPTIMIZER_STATE_BYTES * (dim * per_weight if per_weight is not None else 1.0)
        ws += touched * (dim * tdt + state)
        ws_rows += touched
    f["workset"] = max(ws - knee_bytes, 0.0)
    f["workset_rows"] = f["workset"] * ws_rows / ws if ws else 0.0  # the rows beyond the knee, not their bytes
    return np.array([f[t] for t in TERMS])


def fit(rows: list[dict], terms: tuple[str, ...], knee_bytes: float) -> np.ndarray:
    """Coefficients (bytes of work per unit of each term) minimising the relative squared error."""
    use = [TERMS.index(t) for t in terms]
    bw = engine.DDR_MEM_BW
    a = np.array([features(r, knee_bytes)[use] / bw / r["measured_ms"] for r in rows])
    coef = engine.nnls(a, np.ones(len(rows)))
    full = np.zeros(len(TERMS))
    full[use] = coef
    return full


def predict(row: dict, coef: np.ndarray, knee_bytes: float) -> float:
    return float(features(row, knee_bytes) @ coef / engine.DDR_MEM_BW)


def log_errors(rows: list[dict], coef: np.ndarray, knee_bytes: float) -> np.ndarray:
    return np.array([np.log(max(predict(r, coef, knee_bytes), 1e-9) / r["measured_ms"]) for r in rows])


def group(name: str) -> str:
    return name.split("/")[0]


def held_out(rows: list[dict], terms: tuple[str, ...], knee_bytes: float) -> np.ndarray:
    """Each case's log error when its whole group is left out of the fit."""
    err = np.zeros(len(rows))
    for g in sorted({group(r["case"]) for r in rows}):
        train = [r for r in rows if group(r["case"]) != g]
        coef = fit(train, terms, knee_bytes)
        for i, r in enumerate(rows):
            if group(r["case"]) == g:
                err[i] = np.log(max(predict(r, coef, knee_bytes), 1e-9) / r["measured_ms"])
    return err


def best_knee(rows: list[dict], terms: tuple[str, ...]) -> float:
    if not any(t.startswith("workset") for t in terms):
        return 0.0
    return min((k * 2**20 for k in KNEES_MIB),
               key=lambda kb: float(np.sqrt(np.mean(log_errors(rows, fit(rows, terms, kb), kb) ** 2))))


BASE = ("id", "id_decade", "row", "row_first_decade", "row_later_decades", "output")
MODELS = {
    "rows and ids only (the form before)": BASE,
    "+ optimizer": BASE + OPTIMIZER_TERMS,
    "+ optimizer + working set": BASE + OPTIMIZER_TERMS + ("workset",),
    "+ optimizer + working set + per piece": TERMS[:-1],
    "+ optimizer + working set in bytes and rows": BASE + OPTIMIZER_TERMS + ("workset", "workset_rows"),
    "+ optimizer + rows past the knee": BASE + OPTIMIZER_TERMS + ("workset_rows",),
}
CHOSEN = "+ optimizer + rows past the knee"  # what engine.estimate computes


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)))) if len(x) else 0.0


def report(path: Path) -> str:
    rows = load_rows(path)
    groups = sorted({group(r["case"]) for r in rows})
    loads = [r["load1"] for r in rows]
    lines = [f"{len(rows)} cases from {path.name}, load average {min(loads):.1f}-{max(loads):.1f}; RMS log error "
             "(0.1 is about 10%), in sample / held out by group", "",
             "| model | knee | in sample | held out | " + " | ".join(f"{g} (held out)" for g in groups) + " |",
             "|---|---|---|---|" + "---|" * len(groups)]
    fitted = {}
    for name, terms in MODELS.items():
        knee = best_knee(rows, terms)
        coef = fit(rows, terms, knee)
        fitted[name] = (coef, knee)
        ins, out = log_errors(rows, coef, knee), held_out(rows, terms, knee)
        per = [rms(out[[group(r["case"]) == g for r in rows]]) for g in groups]
        lines.append(f"| {name} | {knee / 2**20:g} MiB | {rms(ins):.3f} | {rms(out):.3f} | "
                     + " | ".join(f"{x:.3f}" for x in per) + " |")
    lines += ["", "Fitted constants (bytes of work at the DDR bandwidth per unit of each term):", ""]
    for name, (coef, knee) in fitted.items():
        lines.append(f"- {name}: " + ", ".join(f"{t} {c:.4g}" for t, c in zip(TERMS, coef) if c)
                     + (f"; knee {knee / 2**20:g} MiB" if knee else ""))
    coef, knee = fitted[CHOSEN]
    lines += ["", "Constants for engine/constants.py (the chosen model):", "", "```",
              f"CPU_ID_FIXED_BYTES = {coef[0]:.4g}",
              f"CPU_FIXED_PER_DECADE = {coef[1] / coef[0] if coef[0] else 0.0:.4g}",
              f"CPU_ROW_IN_CACHE = {coef[2]:.4g}", f"CPU_ROW_FIRST_DECADE = {coef[3]:.4g}",
              f"CPU_ROW_LATER_DECADES = {coef[4]:.4g}", f"CPU_OUTPUT_WORK = {coef[5]:.4g}",
              f"CPU_OPTIMIZER_WORK adagrad {coef[7]:.4g}, rowwise_adagrad {coef[8]:.4g}",
              f"CPU_OPTIMIZER_ROW_WORK adagrad {coef[9]:.4g}, rowwise_adagrad {coef[10]:.4g}",
              f"CPU_WORKSET_KNEE_BYTES = {knee / 2**20:g} MiB", f"CPU_WORKSET_ROW_WORK = {coef[12]:.4g}", "```"]
    lines += ["", f"Per case under '{CHOSEN}' (measured p25 ms, predicted, ratio, the estimate when measured):",
              "", "| case | measured | predicted | ratio | estimate today | ratio today | spread of reps |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = predict(r, coef, knee)
        lines.append(f"| {r['case']} | {r['measured_ms']:.3f} | {pred:.3f} | {pred / r['measured_ms']:.2f} | "
                     f"{r['estimated_ms']:.3f} | {r['estimated_ms'] / r['measured_ms']:.2f} | {r['spread']:.0%} |")
    return "\n".join(lines)
