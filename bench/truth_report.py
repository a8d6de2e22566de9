"""The truth benchmark's tables, from the runs stored by `python -m bench.truth measure`: per config, plan and rank
the measured step and memory beside the estimates before calibration and after calibration on the other configs;
the leave-one-config-out errors; the rank correlation within runs; the plan-order check.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import engine
from db.calibration import observations_from_store
from db.models import RunKind, RunStatus
from db.store import Store
from engine import Device, median_error

MIB = 2**20
ORDER_MARGIN = 1.10  # "plan A is at least 10% faster than plan B"


@dataclass
class Measured:
    """One (config, plan): per-run, per-rank figures (runs x ranks arrays) and the estimates (per rank)."""

    case: str
    plan: str
    step_ms: np.ndarray  # (runs, W) measured
    peak_bytes: np.ndarray  # (runs, W)
    state_bytes: np.ndarray  # (runs, W)
    before_ms: np.ndarray  # (W,) default estimate of each rank (no profile)
    est_bytes: np.ndarray  # (W,)
    after_step_ms: float = float("nan")  # estimated step by the fit on the other configs
    after_rank_ms: np.ndarray | None = None  # (W,) each rank's estimate by that fit (at least its host's work/cores)
    after_busy_ms: np.ndarray | None = None  # (W,) each rank's own work by that fit

    @property
    def measured(self) -> np.ndarray:
        return np.median(self.step_ms, axis=0)

    @property
    def noise_ms(self) -> float:
        """Run-to-run noise: the median over ranks of the range of a rank's step over the runs."""
        return float(np.median(self.step_ms.max(axis=0) - self.step_ms.min(axis=0)))

    @property
    def spread_ms(self) -> float:
        return float(self.measured.max() - self.measured.min())


def _before(rec, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    cfg = engine.parse_config(rec.config)
    topo = replace(cfg.topology, compute_device=Device.CPU, local_world_size=world_size, profile=None)
    cfg = replace(cfg, topology=topo)
    plan = engine.evaluate(cfg, engine.parse_plan(rec.plan, cfg))
    return (np.array([r.cost_ms for r in plan.ranks]), np.array([r.hbm_bytes + r.ddr_bytes for r in plan.ranks]))


def collect(store: Store) -> tuple[list[Measured], dict[int, str]]:
    """Every truth plan with its succeeded runs; and run id -> "case plan"."""
    out, names = [], {}
    for summary in store.list_plans(limit=10_000):
        parts = summary.label.split(" ")
        if len(parts) != 3 or parts[0] != "truth":
            continue
        runs = [r for r in store.runs_for_plan(summary.token)
                if r.kind == RunKind.VALIDATION and r.status == RunStatus.SUCCEEDED]
        if not runs:
            continue
        rec = store.get_plan(summary.token)
        w = summary.world_size
        rows = {k: [] for k in ("step_ms", "peak_bytes", "state_bytes")}
        for run in runs:
            per = {(m.rank, m.name): m.value for m in store.metrics(run.id)}
            for k in rows:
                rows[k].append([per.get((r, k), np.nan) for r in range(w)])
            names[run.id] = f"{parts[1]} {parts[2]}"
        before, est_bytes = _before(rec, w)
        out.append(Measured(parts[1], parts[2], *(np.array(rows[k]) for k in rows), before, est_bytes))
    return sorted(out, key=lambda m: (m.case, m.plan)), names


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation; values equal to 3 significant digits (of the largest) are ties: estimates of
    ranks that hold the same work (a row-wise split's unequal last rows) differ by less, and no more is claimed."""
    def ranks(x):
        x = np.round(x / max(float(np.abs(x).max()), 1e-300), 3)
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):  # ties share their mean rank
            r[x == v] = r[x == v].mean()
        return r
    ra, rb = ranks(np.asarray(a)), ranks(np.asarray(b))
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def truth_table(items: list[Measured]) -> str:
    lines = ["| config | plan | rank | measured step ms (median, range) | before: est ms (error) | after (LOO): "
             "step ms (error) | after: rank's own ms | measured peak MiB | state MiB | estimated MiB |",
             "|" + "---|" * 10]
    for m in items:
        meas = m.measured
        for r in range(len(meas)):
            before_step = m.before_ms.max()
            lines.append(
                f"| {m.case} | {m.plan} | {r} | {meas[r]:.2f} ({m.step_ms[:, r].min():.2f}-{m.step_ms[:, r].max():.2f})"
                f" | {m.before_ms[r]:.3f} ({(before_step - meas[r]) / meas[r]:+.0%})"
                f" | {_fmt(m.after_step_ms)} ({(m.after_step_ms - meas[r]) / meas[r]:+.0%})"
                f" | {_fmt(m.after_busy_ms[r] if m.after_busy_ms is not None else np.nan)}"
                f" | {np.median(m.peak_bytes[:, r]) / MIB:.1f} | {np.median(m.state_bytes[:, r]) / MIB:.2f}"
                f" | {m.est_bytes[r] / MIB:.2f} |")
    return "\n".join(lines)


def spearman_table(items: list[Measured]) -> tuple[str, list[float]]:
    lines = ["| config | plan | ranks | runs | spread ms | noise ms | applies | Spearman (own estimate vs measured) |",
             "|---|---|---|---|---|---|---|---|"]
    values = []
    for m in items:
        applies = len(m.step_ms) > 1 and m.spread_ms > m.noise_ms and len(m.measured) > 1
        rho = spearman(m.after_busy_ms, m.measured) if m.after_busy_ms is not None else None
        if applies and rho is not None:
            values.append(rho)
        lines.append(f"| {m.case} | {m.plan} | {len(m.measured)} | {len(m.step_ms)} | {m.spread_ms:.2f} | "
                     f"{m.noise_ms:.2f} | "
                     f"{'yes' if applies else 'no'} | {_fmt(rho)} |")
    return "\n".join(lines), values


def order_check(items: list[Measured], before: bool) -> tuple[int, int, list[str]]:
    """(pairs where the estimate says one plan is >= 10% faster, pairs the measurement agrees on, disagreements)."""
    total = agree = 0
    wrong = []
    by_case: dict[str, list[Measured]] = {}
    for m in items:
        by_case.setdefault(m.case, []).append(m)
    for case, ms in by_case.items():
        for a, b in itertools.permutations(ms, 2):
            ea, eb = (a.before_ms.max(), b.before_ms.max()) if before else (a.after_step_ms, b.after_step_ms)
            if not ea * ORDER_MARGIN <= eb:
                continue
            total += 1
            ma, mb = float(np.median(a.measured)), float(np.median(b.measured))
            if ma < mb:
                agree += 1
            else:
                wrong.append(f"{case}: {a.plan} est {ea:.2f} < {b.plan} est {eb:.2f} ms, measured {ma:.2f} vs {mb:.2f}")
    return total, agree, wrong


def _load_line(journal: Path, tokens: set[str]) -> str:
    """The runs' dates, iterations and the machine's load during them (the journal's runs of this database)."""
    rows = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()] if journal.exists() else []
    rows = [r for r in rows if r.get("token") in tokens]
    if not rows:
        return "load not recorded"
    its = sorted({(r["iters"], r["warmup"]) for r in rows})
    its_text = "; ".join(f"{i} timed iterations after {w} warm-up" for i, w in its)
    loads = np.array([r[k] for r in rows for k in ("load1_before", "load1_after")])
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(min(r["started"] for r in rows)))
    return (f"{len(rows)} runs from {when} ({its_text}); 1-minute load average during them min {loads.min():.1f}, "
            f"median {np.median(loads):.1f}, max {loads.max():.1f} on {os.cpu_count()} cores")


def read_phases(journal: Path) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """(case, plan) -> phase -> (runs, W) medians, from `python -m bench.truth phases`."""
    out: dict[tuple[str, str], dict[str, list]] = {}
    if not journal.exists():
        return {}
    for line in journal.read_text().splitlines():
        row = json.loads(line)
        if row["rc"] != 0 or not row["ranks"]:
            continue
        slot = out.setdefault((row["case"], row["plan"]), {})
        for k in row["ranks"][0]:
            slot.setdefault(k, []).append([r[k] for r in row["ranks"]])
    return {key: {k: np.array(v) for k, v in d.items()} for key, d in out.items()}


def phases_table(items: list[Measured], phases: dict) -> tuple[str, list[float], int]:
    """Per plan: each rank's CPU time per step beside its estimated own work, Spearman where the CPU spread
    between ranks exceeds the run-to-run noise, and the busiest rank's phases."""
    lines = ["| config | plan | runs | CPU ms per rank (median) | estimated own ms per rank | CPU spread / noise ms | "
             "Spearman | busiest rank: wall / forward / lookups / backward / optimizer ms |", "|" + "---|" * 8]
    rhos, applicable = [], 0
    for m in items:
        ph = phases.get((m.case, m.plan))
        if ph is None or m.after_busy_ms is None:
            continue
        cpu = np.median(ph["cpu"], axis=0)
        noise = float(np.median(ph["cpu"].max(axis=0) - ph["cpu"].min(axis=0)))
        spread = float(cpu.max() - cpu.min())
        applies = len(ph["cpu"]) > 1 and spread > noise and len(cpu) > 1
        rho = spearman(m.after_busy_ms, cpu)
        if applies:
            applicable += 1
            rhos.append(rho)  # None: the estimate ties every rank where the measurement does not
        b = int(np.argmax(cpu))
        parts = " / ".join(f"{np.median(ph[k][:, b]):.1f}" for k in ("wall", "forward", "lookup", "backward",
                                                                        "optimizer"))
        lines.append(f"| {m.case} | {m.plan} | {len(ph['cpu'])} | {' '.join(f'{c:.1f}' for c in cpu)} | "
                     f"{' '.join(f'{c:.1f}' for c in m.after_busy_ms)} | {spread:.1f} / {noise:.1f}"
                     f"{' (applies)' if applies else ''} | {_fmt(rho)} | {parts} |")
    return "\n".join(lines), rhos, applicable


def loo_table(items: list[Measured], names: dict[int, str], held) -> str:
    lines = ["| config held out | plans | median error before | median error after (LOO) | worst rank after |",
             "|---|---|---|---|---|"]
    for case in sorted({m.case for m in items}):
        ms = [m for m in items if m.case == case]
        before = np.concatenate([np.abs(m.before_ms.max() - m.measured) / m.measured for m in ms])
        hs = [h for h in held if h.group == case]
        after = np.concatenate([h.errors for h in hs]) if hs else np.array([np.nan])
        lines.append(f"| {case} | {len(hs)} | {np.median(before):.0%} | {np.median(after):.0%} | "
                     f"{np.max(after):.0%} |")
    return "\n".join(lines)


def write_report(db_url: str, out: Path, journal: Path, phases_journal: Path) -> str:
    """Fit, leave one config out, and write the tables (Markdown) to `out`; returns the text."""
    store = Store(db_url)
    items, names = collect(store)
    obs = observations_from_store(store, Device.CPU)
    cal = engine.fit_calibration(obs, Device.CPU)
    held = engine.calibration_leave_one_out(obs, Device.CPU)
    by_plan = {names[h.run_ids[0]]: h for h in held if h.run_ids}
    for m in items:
        h = by_plan.get(f"{m.case} {m.plan}")
        if h is not None:
            m.after_step_ms, m.after_rank_ms, m.after_busy_ms = h.step_ms, h.rank_ms, h.busy_ms
    spear, rhos = spearman_table(items)
    ph_text, ph_rhos, ph_n = phases_table(items, read_phases(phases_journal))
    checks = [order_check(items, before) for before in (True, False)]
    prof = cal.profile
    fixed = ", ".join(f"{k} {getattr(prof, k):.3f}" for k in ("step_ms", "collective_ms", "launch_ms", "piece_ms"))
    bws = ", ".join(f"{k} {v:.3g} bytes/ms ({v * 1000 / 2**30:.2f} GiB/s)" for k, v in cal.patch.items())
    all_before = np.concatenate([np.abs(m.before_ms.max() - m.measured) / m.measured for m in items])
    reps = sorted({len(m.step_ms) for m in items})
    text = "\n\n".join([
        f"Made by `python -m bench.truth report` on {time.strftime('%Y-%m-%d %H:%M')} from the runs of "
        f"`python -m bench.truth measure` ({'-'.join(map(str, (reps[0], reps[-1]) if len(reps) > 1 else reps))} "
        "runs of every plan, repetition-major, each rank's step the median of its iterations) and `python -m "
        "bench.truth phases` (each rank's CPU time), on a shared 2-core VM (no GPU) while other work ran.",
        f"Runs: {_load_line(journal, {p.token for p in store.list_plans(limit=10_000)})}.",
        f"**Profile fitted on all {cal.n_runs} runs** (in-sample): {fixed}; {bws}; cores per host "
        f"{prof.cores_per_host}; R^2 {_fmt(cal.r2, 3)}, median error {cal.median_error:.0%}."
        + ("" if not cal.notes else " Notes: " + "; ".join(cal.notes) + "."),
        f"**Leave one config out**: median absolute per-rank step error {median_error(held):.0%} over "
        f"{sum(len(h.measured_ms) for h in held)} held-out ranks of {len(held)} plans (each rank's step the median "
        f"of its runs); before calibration {np.median(all_before):.0%}.",
        loo_table(items, names, held),
        f"**Spearman within a run** (the rank's own estimated part vs its measured step) where the spread between "
        f"ranks exceeds the run-to-run noise: {len(rhos)} of {len(items)} plans"
        + (f", values {', '.join(_fmt(r) for r in rhos)}" if rhos else "") + ".",
        spear,
        f"**Per-rank CPU time** (`python -m bench.truth phases`: each rank's process CPU time per step, gloo's "
        f"threads included, and the wall time of its phases): Spearman of the estimated own work against it where "
        f"the CPU spread between ranks exceeds the run-to-run noise: {ph_n} plans"
        + (f", values {', '.join('ties' if r is None else _fmt(r) for r in ph_rhos)}" if ph_rhos else "")
        + " (ties: the estimate gives every rank the same own work).",
        ph_text,
        "**Plan order** (pairs of plans of one config where the estimate says one is at least 10% faster): before "
        f"calibration {checks[0][1]} of {checks[0][0]} agree with the measurement; after (LOO) {checks[1][1]} of "
        f"{checks[1][0]}." + "".join(f"\n- after, disagrees: {w}" for w in checks[1][2])
        + "".join(f"\n- before, disagrees: {w}" for w in checks[0][2]),
        "**Truth table** (step: median of the runs, range in brackets; errors are the estimated step against "
        "each rank's measured step):",
        truth_table(items),
    ])
    out.parent.mkdir(parents=True, exist_ok=True)
    engine.write_text_file(out, text + "\n")
    return text


__all__ = ["collect", "order_check", "spearman", "write_report"]
