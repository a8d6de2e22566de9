"""Per-term calibration: the CPU estimate's cost terms (engine.fields.PROFILE_TERMS) fitted to per-rank times that
ranks measured on one device (dry-runs: each rank's kernels alone, not synchronised away), each with its standard
error, and refused where the runs cannot identify it.

A rank's estimated compute is linear in the terms: `offset + sum_k term_k x feature_k`, feature_k being what the
estimate prices per byte of term k (engine.estimate read with every term 0 but k: no formula is copied here), and
offset what no term scales (index reads). Adding a constant per rank-step (rank_step_ms: what calling the kernels
costs whatever they do), non-negative least squares on relative errors fits the identifiable terms; a refused term
keeps its default inside the offset. A term is identifiable when its column is not zero on every rank and, added to
the terms before it (TERMS' order), keeps the condition number of the unit-scaled design under COND_MAX, with
MIN_DOF measurements to spare; and it is fitted when its standard error (from the residuals) is at most REL_SE_MAX
of max(value, default). Each fitted term also gets a percentile interval from a bootstrap over the runs (whole runs
resampled with replacement, seeded, refitted with the same terms: `bootstrap`), beside its standard
error. Pure numpy on plain numbers: db.calibration turns stored runs into TermRuns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.errors import EngineError
from engine.evaluate import evaluate
from engine.fields import FITTED_TERM_NAMES, PROFILE_TERM_NAMES, PROFILE_TERMS
from engine.fitting import nnls_active_set, standard_errors
from engine.profile import BACKEND
from engine.terms import DEFAULTS
from engine.types import Config, Device, DeviceProfile, TablePlan

INTERCEPT = "rank_step_ms"  # ms per rank-step: fitted beside the terms, not written to a profile
TERMS = (*FITTED_TERM_NAMES, INTERCEPT)  # the order identifiability is decided in: the intercept last
UNITS = {**{f.name: f.unit for f in PROFILE_TERMS}, INTERCEPT: "ms per rank-step"}
TERM_DEFAULTS = {**{n: DEFAULTS[n] for n in FITTED_TERM_NAMES}, INTERCEPT: 0.0}
COND_MAX = 1e3  # a term whose column takes the unit-scaled design's condition number past this is not fitted
REL_SE_MAX = 0.5  # a term whose standard error is over this share of max(value, default) is not fitted
MIN_DOF = 2  # measurements (ranks) beyond the fitted terms, for the residuals to give an uncertainty
PROBE = 1000.0  # bytes of a term priced to read its feature (the estimate is linear in it)
MIN_RUNS = 2
RESAMPLES = 400  # bootstrap resamples of the runs
BOOTSTRAP_SEED = 0  # the same runs give the same intervals
LEVEL = 0.95  # the bootstrap interval's coverage: its 2.5th to 97.5th percentile


def _hint(name: str) -> str:
    """The runs that would identify a term."""
    if name.startswith("cpu_optimizer_work_"):
        opt = name.removeprefix("cpu_optimizer_work_")
        return (f"dry-runs with optimizer {opt} on tables of different dims (its per-row and per-weight work then "
                "differ)")
    if name.startswith("cpu_optimizer_row_work_"):
        return f"a dry-run of a config with optimizer {name.removeprefix('cpu_optimizer_row_work_')}"
    return {
        "cpu_id_work": "dry-runs whose ranks look up different numbers of ids per pooled output (pooling factors "
                       "other than 1 on some tables)",
        "cpu_row_first_decade": "a dry-run with a rank holding a piece larger than 1 MiB, and pieces of different dims",
        "cpu_row_later_decades": "a dry-run with a rank holding a piece larger than 10 MiB",
        "cpu_output_work": "dry-runs with different pooling factors or dims across ranks",
        "cpu_workset_row_work": "a dry-run of a plan with a rank touching more than 1 MiB per step (distinct rows x "
                                "row and optimizer-state bytes)",
        INTERCEPT: "ranks with more and less work in the runs",
    }[name]


@dataclass(frozen=True)
class TermRun:
    """One run: per rank, the ms each term prices per byte (features), the ms no term scales, and the measured ms."""

    features: np.ndarray  # (W, len(FITTED_TERM_NAMES))
    offset: np.ndarray  # (W,)
    measured_ms: np.ndarray  # (W,)
    run_id: int = 0
    group: str = ""  # the config's name
    device_name: str = ""
    backend: str = ""  # the dry-run's kernels (fbgemm, or the torch fallback)

    @property
    def design(self) -> np.ndarray:
        """(W, len(TERMS)): the features and a 1 per rank-step for the intercept."""
        return np.hstack([self.features, np.ones((len(self.measured_ms), 1))])


def _compute_ms(cfg: Config, tables: dict[str, TablePlan], values: dict[str, float]) -> np.ndarray:
    """Per rank, the estimate's forward + backward compute with these terms (a profile holding only them)."""
    topo = cfg.topology
    prof = DeviceProfile(Device.CPU, BACKEND[Device.CPU], topo.num_hosts, None, terms=tuple(sorted(values.items())))
    ranks = evaluate(replace(cfg, topology=replace(topo, profile=prof)), tables, planner="file").ranks
    return np.array([r.perf.fwd_compute + r.perf.bwd_compute for r in ranks])


def term_features(cfg: Config, tables: dict[str, TablePlan]) -> tuple[np.ndarray, np.ndarray]:
    """(features (W, K), offset (W,)) of a plan priced on CPU at the config's ddr_mem_bw: rank r's compute is
    offset[r] + features[r] @ terms."""
    cfg = replace(cfg, topology=replace(cfg.topology, compute_device=Device.CPU, profile=None))
    zero = dict.fromkeys(PROFILE_TERM_NAMES, 0.0)
    base = _compute_ms(cfg, tables, zero)
    cols = [(_compute_ms(cfg, tables, {**zero, name: PROBE}) - base) / PROBE for name in FITTED_TERM_NAMES]
    return np.stack(cols, axis=1), base


def term_run(cfg: Config, tables: dict[str, TablePlan], measured_ms: Sequence[float], run_id: int = 0,
             group: str = "", device_name: str = "", backend: str = "") -> TermRun:
    x, off = term_features(cfg, tables)
    return TermRun(x, off, np.asarray(measured_ms, dtype=np.float64), run_id, group, device_name, backend)


@dataclass(frozen=True)
class TermResult:
    name: str
    value: float  # the fitted value, or the default when refused
    se: float | None  # its standard error; None when refused
    default: float
    refused: str = ""  # why it was not fitted ("" when fitted)
    hint: str = ""  # which runs would identify it (when refused)
    interval: tuple[float, float] | None = None  # the bootstrap's percentile interval (fitted terms only)

    @property
    def fitted(self) -> bool:
        return not self.refused

    @property
    def unit(self) -> str:
        return UNITS[self.name]

    def as_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "se": self.se, "unit": self.unit,
                "default": self.default, "fitted": self.fitted, "refused": self.refused or None,
                "identify_with": self.hint or None,
                "interval": list(self.interval) if self.interval is not None else None}


def identify(a: np.ndarray, names: Sequence[str] = TERMS) -> tuple[list[int], dict[int, str]]:
    """(the columns of a that can be fitted, {column: why not}) by the rule the module's docstring states."""
    norms = np.linalg.norm(a, axis=0)
    top = float(norms.max()) if norms.size else 0.0
    kept: list[int] = []
    why: dict[int, str] = {}
    for j in range(a.shape[1]):
        if not norms[j] > 1e-12 * top:
            why[j] = "no run exercises it (its feature is zero on every rank)"
            continue
        if len(kept) + 1 > a.shape[0] - MIN_DOF:
            why[j] = f"too few measurements: {a.shape[0]} ranks for {len(kept) + 1} terms and {MIN_DOF} to spare"
            continue
        u = a[:, kept + [j]] / norms[kept + [j]]
        cond = float(np.linalg.cond(u))
        if cond > COND_MAX:
            w = np.linalg.lstsq(u[:, :-1], u[:, -1], rcond=None)[0]
            partners = [names[kept[i]] for i in np.argsort(-np.abs(w), kind="stable")[:2] if abs(w[i]) > 1e-3]
            why[j] = (f"the runs cannot tell it from {' and '.join(partners)} (condition number {cond:.3g} over "
                      f"{COND_MAX:g})")
            continue
        kept.append(j)
    return kept, why


def _system(runs: Sequence[TermRun]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(design, measured, offset) of every rank of the runs, stacked."""
    return (np.vstack([r.design for r in runs]), np.concatenate([r.measured_ms for r in runs]),
            np.concatenate([r.offset for r in runs]))


def _relative(x: np.ndarray, y: np.ndarray, off: np.ndarray, kept: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): the kept terms' columns and the target of the fit on relative errors, every other term at its
    default."""
    default = np.array([TERM_DEFAULTS[n] for n in TERMS])
    rest = [j for j in range(len(TERMS)) if j not in kept]
    b = 1.0 - (off + x[:, rest] @ default[rest]) / y  # a term not fitted prices at its default
    return x[:, kept] / y[:, None], b


def _fit(x: np.ndarray, y: np.ndarray, off: np.ndarray, kept: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(values, standard errors) of the kept terms, every other term at its default, by NNLS on relative errors."""
    if not kept:
        return np.zeros(0), np.zeros(0)
    a, b = _relative(x, y, off, kept)
    coef = nnls_active_set(a, b)
    return coef, standard_errors(a, b, coef)


def solve(runs: Sequence[TermRun]) -> list[TermResult]:
    """Each term of TERMS fitted, or refused with its default: unidentifiable (identify), or too uncertain (its
    standard error over REL_SE_MAX of max(value, default); the worst refused first and the rest refitted; the
    intercept is kept whatever its error, so that no fixed cost leaks into the terms)."""
    x, y, off = _system(runs)
    kept, why = identify(x / y[:, None])
    while True:
        coef, se = _fit(x, y, off, kept)
        scale = np.maximum(coef, [TERM_DEFAULTS[TERMS[j]] for j in kept])
        rel = np.where(scale > 0, se / np.maximum(scale, 1e-300), np.inf)
        loose = [i for i, j in enumerate(kept) if TERMS[j] != INTERCEPT and se[i] > REL_SE_MAX * scale[i]]
        if not loose:
            break
        i = max(loose, key=lambda k: (rel[k], -k))
        why[kept[i]] = (f"too uncertain: fitted {coef[i]:.4g} +- {se[i]:.2g} {UNITS[TERMS[kept[i]]]}, a standard "
                        f"error over {REL_SE_MAX:.0%} of max(value, default)")
        kept.pop(i)
    out = []
    for j, name in enumerate(TERMS):
        if j in why:
            hint = _hint(name) if not why[j].startswith("too uncertain") else f"more runs like {_hint(name)}"
            out.append(TermResult(name, TERM_DEFAULTS[name], None, TERM_DEFAULTS[name], why[j], hint))
        else:
            i = kept.index(j)
            out.append(TermResult(name, float(coef[i]), float(se[i]), TERM_DEFAULTS[name]))
    return out


def predict(results: Sequence[TermResult], run: TermRun) -> np.ndarray:
    """Per rank ms under these terms (and intercept)."""
    return run.offset + run.design @ np.array([r.value for r in results])


def _errors(pred: np.ndarray, run: TermRun) -> np.ndarray:
    return np.abs(pred - run.measured_ms) / run.measured_ms


def held_out_predictions(runs: Sequence[TermRun], by_group: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per run, (its ranks priced with the defaults, priced with the terms fitted on the other runs): with by_group,
    on the runs of the other groups (configs), so that no run of the same config, another plan of it, is fitted on."""
    defaults = [TermResult(n, TERM_DEFAULTS[n], None, TERM_DEFAULTS[n]) for n in TERMS]
    keys = [r.group if by_group else i for i, r in enumerate(runs)]
    fits: dict = {}
    out = []
    for run, key in zip(runs, keys):
        if key not in fits:
            fits[key] = solve([r for r, k in zip(runs, keys) if k != key])
        out.append((predict(defaults, run), predict(fits[key], run)))
    return out


def leave_one_run_out(runs: Sequence[TermRun]) -> dict:
    """Each run's ranks predicted by the terms fitted on the other runs ("after") and by the defaults ("before",
    the estimate as it is): per run and over every rank, the median |predicted - measured| / measured."""
    per_run, before, after = [], [], []
    for run, (pb, pa) in zip(runs, held_out_predictions(runs)):
        b, a = _errors(pb, run), _errors(pa, run)
        before.append(b)
        after.append(a)
        per_run.append({"run_id": run.run_id, "config": run.group, "median_error_before": float(np.median(b)),
                        "median_error_after": float(np.median(a))})
    return {"median_error_before": float(np.median(np.concatenate(before))),
            "median_error_after": float(np.median(np.concatenate(after))), "runs": per_run}


def bootstrap(runs: Sequence[TermRun], results: Sequence[TermResult], resamples: int = RESAMPLES,
              seed: int = BOOTSTRAP_SEED) -> tuple[list[TermResult], int]:
    """(the results with a percentile interval (LEVEL) on each fitted term, resamples left out): `resamples` draws
    of len(runs) whole runs with replacement (a run's ranks stay together: they share its config and its machine's
    state) from a seeded generator, each refitted with the terms the point fit kept (the others at their defaults,
    as there). A draw whose runs cannot identify every kept term (a rank-deficient design: one run drawn again and
    again) is left out: it has no fit of those terms to count."""
    kept = [j for j, t in enumerate(results) if t.fitted]
    if not kept or resamples < 1:
        return list(results), 0
    rng = np.random.default_rng(seed)
    systems = [_system([r]) for r in runs]
    draws = []
    for _ in range(resamples):
        pick = rng.integers(0, len(runs), len(runs))
        a, b = _relative(*(np.concatenate([systems[i][k] for i in pick]) for k in range(3)), kept)
        if np.linalg.matrix_rank(a / np.maximum(np.linalg.norm(a, axis=0), 1e-300)) == len(kept):
            draws.append(nnls_active_set(a, b))
    if not draws:
        return list(results), resamples
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(np.array(draws), [tail, 100 - tail], axis=0)
    out = list(results)
    for i, j in enumerate(kept):
        out[j] = replace(results[j], interval=(float(low[i]), float(high[i])))
    return out, resamples - len(draws)


@dataclass(frozen=True)
class TermFit:
    device_name: str
    terms: tuple[TermResult, ...]
    run_ids: tuple[int, ...]
    n_ranks: int
    ddr_mem_bw: float  # the bandwidth the terms' bytes are at (every run priced at it)
    held_out: dict
    notes: tuple[str, ...] = ()
    backend: str = ""
    resamples: int = RESAMPLES  # the bootstrap's (its intervals: TermResult.interval)
    seed: int = BOOTSTRAP_SEED

    @property
    def level(self) -> float:
        """The coverage of the terms' bootstrap intervals."""
        return LEVEL

    def values(self) -> dict[str, float]:
        """The fitted profile terms (the intercept is not one)."""
        return {t.name: t.value for t in self.terms if t.fitted and t.name != INTERCEPT}

    def as_dict(self) -> dict:
        return {"kind": "cpu_terms", "device": Device.CPU.value, "device_name": self.device_name,
                "backend": self.backend,
                "ddr_mem_bw": self.ddr_mem_bw, "run_ids": list(self.run_ids), "n_runs": len(self.run_ids),
                "n_ranks": self.n_ranks, "cond_max": COND_MAX, "terms": [t.as_dict() for t in self.terms],
                "bootstrap": {"resamples": self.resamples, "seed": self.seed, "level": LEVEL, "resampled": "runs"},
                "values": self.values(), "leave_one_run_out": self.held_out, "notes": list(self.notes)}


def fit_terms(runs: Sequence[TermRun], ddr_mem_bw: float, notes: Sequence[str] = (), resamples: int = RESAMPLES,
              seed: int = BOOTSTRAP_SEED) -> TermFit:
    """The terms fitted to runs of one device (sorted by run id, so the same runs give the same fit), each fitted
    term with its bootstrap interval (`resamples` draws from `seed`); raises
    EngineError (one line) for no runs, one run or runs of several devices."""
    runs = sorted(runs, key=lambda r: r.run_id)
    names = sorted({r.device_name for r in runs})
    if len(names) > 1:
        counts = ", ".join(f"{n or 'unnamed'!r}: {sum(r.device_name == n for r in runs)} runs" for n in names)
        raise EngineError(f"the runs are on {len(names)} devices ({counts}): terms are fitted per device; pick one "
                          "with --device-name TEXT")
    backends = sorted({r.backend for r in runs})
    if len(backends) > 1:
        counts = ", ".join(f"{b or 'unknown'}: {sum(r.backend == b for r in runs)} runs" for b in backends)
        raise EngineError(f"the runs used {len(backends)} backends ({counts}): terms are fitted per backend "
                          "(a dry-run's, or torchrec for validation runs); pick one with --backend NAME")
    if len(runs) < MIN_RUNS:
        have = f"found {len(runs)}" + (f" (run {runs[0].run_id})" if runs else "")
        raise EngineError(f"fitting the CPU terms needs at least {MIN_RUNS} succeeded runs with per-rank times on one "
                          f"device, {have}; record dry-runs with `python -m db dryrun CONFIG.json --plan PLAN.json`")
    if backends[0] not in ("fbgemm", "torchrec"):
        notes = [*notes, f"fitted on {backends[0] or 'unknown'}-backend dry-runs: TorchRec trains with fbgemm's "
                 "kernels, which the defaults were fitted to"]
    terms, dropped = bootstrap(runs, solve(runs), resamples, seed)
    if dropped:
        notes = [*notes, f"bootstrap: {dropped} of {resamples} resamples of the runs left out (they could not identify "
                 "every fitted term)" + ("; no interval" if dropped == resamples else "")]
    return TermFit(names[0], tuple(terms), tuple(r.run_id for r in runs), sum(len(r.measured_ms) for r in runs),
                   ddr_mem_bw, leave_one_run_out(runs), tuple(notes), backends[0], resamples, seed)


__all__ = ["BOOTSTRAP_SEED", "COND_MAX", "INTERCEPT", "LEVEL", "RESAMPLES", "TERMS", "TermFit", "TermResult", "TermRun",
           "bootstrap", "fit_terms", "held_out_predictions", "identify", "leave_one_run_out", "predict", "solve",
           "term_features", "term_run"]
