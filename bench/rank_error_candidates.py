"""Candidate changes to the CPU estimate, judged held out on two stored quiet data sets (issue 24): the measured
plans' ranks (a `python -m bench.measured` JSON, held out per config) and the one-rank cost-term cases
(bench/results/cost_terms.jsonl, held out per case group), each rank's time the median of its steps, as the dry-run
reports it. A candidate refits some named terms (engine.CPU_TERM_DEFAULTS: the estimate's CPU terms and the
intercept `db calibrate --terms` fits beside them) and may add terms no estimate has yet; every group is predicted
by the candidate fitted on all the other groups of both sets (non-negative least squares on relative errors,
engine.nnls; every term not refitted at its default). Printed by `python -m bench.rank_error --candidates`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.cost_terms import DATA as COST_TERMS_DATA
from bench.cost_terms import case_config, case_group, table_wise_plan
from bench.cost_terms_fit import load_rows
import engine

NAMED = tuple(engine.CPU_TERM_DEFAULTS)  # the columns of a TermRun's design
EXTRA = {  # terms no estimate has: bytes of work at the DDR bandwidth per unit, as the named terms are
    "row_miss_work": "bytes per row read past the cache, whatever its width (per id forward, per touched row "
                     "twice in backward, x min(decades, 1) as the first-decade row term)",
    "sgd_row_work": "bytes per touched row under sgd (its update beside the row terms)",
    "piece_work": "bytes per piece per rank-step",
    **{f"workset_row_work_{k}mib": f"bytes per touched row past a {k} MiB knee (as cpu_workset_row_work past 1 MiB)"
       for k in (2, 4, 8)},
}
COLUMNS = (*NAMED, *EXTRA)


@dataclass(frozen=True)
class Candidate:
    label: str
    refit: tuple[str, ...]  # named terms fitted again, or EXTRA terms added (default 0)
    drop: tuple[str, ...] = ()  # named terms set to 0 (replaced by an added one)


ALL_FBGEMM = ("cpu_id_work", "cpu_row_first_decade", "cpu_row_later_decades", "cpu_output_work",
              "cpu_optimizer_row_work_adagrad", "cpu_optimizer_work_adagrad", "cpu_optimizer_row_work_rowwise_adagrad",
              "cpu_workset_row_work")
CANDIDATES = (
    Candidate("the estimate as it is", ()),
    Candidate("a fixed cost per rank-step", ("rank_step_ms",)),
    Candidate("a fixed cost per piece", ("piece_work",)),
    Candidate("a row miss costs per row, not per byte (dim effect)", ("row_miss_work",)),
    Candidate("the same, the row terms refitted beside it",
              ("row_miss_work", "cpu_row_first_decade", "cpu_row_later_decades")),
    Candidate("sgd's update per touched row", ("sgd_row_work",)),
    Candidate("the touched working set refitted", ("cpu_workset_row_work",)),
    *(Candidate(f"the working set's knee at {k} MiB, its row work refitted", (f"workset_row_work_{k}mib",),
                ("cpu_workset_row_work",)) for k in (2, 4, 8)),
    Candidate("the optimizers' row work refitted", ("cpu_optimizer_row_work_adagrad",
                                                     "cpu_optimizer_row_work_rowwise_adagrad")),
    Candidate("every term fbgemm runs refitted", ALL_FBGEMM),
)


@dataclass(frozen=True)
class Ranks:
    """One plan's (or one case's) ranks: the design over COLUMNS (ms per unit of each term), the rest, measured."""

    source: str  # "measured" or "cost_terms"
    group: str  # held out together: a config, or a case group
    design: np.ndarray  # (W, len(COLUMNS))
    offset: np.ndarray  # (W,) what no term scales
    measured: np.ndarray  # (W,) ms
    resolved: bool = False  # the measured spread beats twice the noise (bench.rank_error)


def extra_features(cfg: engine.Config, tables: dict) -> np.ndarray:
    """(W, len(EXTRA)): per rank, each extra term's ms per byte of work, from the pieces the dry-run builds (a table's
    ids: its features' pooling factors x the global batch; per-feature batch sizes and num_poolings, which none of
    these configs set, are not read)."""
    topo = cfg.topology
    bw, world, batch = topo.ddr_mem_bw, topo.world_size, topo.batch_size
    out = []
    stats = engine.evaluate(cfg, tables, planner="file").ranks
    for rank, st in zip(engine.rank_pieces(cfg, tables), stats):
        miss = sgd = 0.0
        for p in rank:
            t, c = cfg.table(p.table), cfg.constraint(p.table)
            share = p.rows / t.num_embeddings if p.sharding_type.splits_rows else 1.0
            ids = sum(c.pooling_factors or (1.0,)) * batch * world
            touched = engine.distinct_rows(ids, t.num_embeddings, c.zipf_exponent) * share
            d = float(engine.cost_decades(np.array([p.rows * p.cols * float(t.data_type.bytes)]))[0])
            miss += (ids * share + engine.BWD_COMPUTE_MULTIPLIER * touched) * min(d, 1.0)
            sgd += touched if topo.optimizer is engine.Optimizer.SGD else 0.0
        past = [st.workset_rows * max(st.workset_bytes - k * 2**20, 0.0) / max(st.workset_bytes, 1.0)
                for k in (2, 4, 8)]  # the rows past each knee, as engine.workset.rows_beyond counts them
        out.append([miss / bw, sgd / bw, len(rank) / bw, *(x / bw for x in past)])
    return np.array(out)


def ranks_of(source: str, group: str, cfg: engine.Config, tables: dict, measured: np.ndarray,
             resolved: bool = False) -> Ranks:
    run = engine.term_run(cfg, tables, measured)
    return Ranks(source, group, np.hstack([run.design, extra_features(cfg, tables)]), run.offset,
                 np.asarray(measured, dtype=np.float64), resolved)


def cost_term_cases(path: Path = COST_TERMS_DATA) -> list[Ranks]:
    """The one-rank cases, each the median over repetitions of its steps' median (the dry-run's statistic); a case's
    group is its name up to the last '/' for opt/ and optdim/ (opt/adagrad), else its first part (ws, dim, ...)."""
    out = []
    for r in load_rows(path, "median_ms"):
        name = r["case"]
        cfg = case_config(r)
        group = case_group(name)
        out.append(ranks_of("cost_terms", group, cfg, table_wise_plan(cfg), np.array([r["measured_ms"]])))
    return out


def _base(cand: Candidate) -> np.ndarray:
    """Every column's value before the fit: the named terms' defaults (dropped ones 0), the extra terms 0."""
    return np.array([0.0 if n in cand.drop else engine.CPU_TERM_DEFAULTS.get(n, 0.0) for n in COLUMNS])


def held_out(data: list[Ranks], cand: Candidate) -> list[np.ndarray]:
    """Each entry's per-rank ms under the candidate fitted on every other group of both sets."""
    base = _base(cand)
    fit = [COLUMNS.index(n) for n in cand.refit]
    rest = [j for j in range(len(COLUMNS)) if j not in fit]
    preds: list[np.ndarray] = [np.zeros(0)] * len(data)
    for key in sorted({(d.source, d.group) for d in data}):
        values = base.copy()
        if fit:
            train = [d for d in data if (d.source, d.group) != key]
            x = np.vstack([d.design for d in train])
            y = np.concatenate([d.measured for d in train])
            off = np.concatenate([d.offset for d in train])
            values[fit] = engine.nnls(x[:, fit] / y[:, None], 1.0 - (off + x[:, rest] @ base[rest]) / y)
        for i, d in enumerate(data):
            if (d.source, d.group) == key:
                preds[i] = d.offset + d.design @ values
    return preds


def fitted_values(data: list[Ranks], cand: Candidate) -> dict[str, float]:
    """The candidate's terms fitted on all of both sets (what a change would put in engine.constants)."""
    if not cand.refit:
        return {}
    base = _base(cand)
    fit = [COLUMNS.index(n) for n in cand.refit]
    rest = [j for j in range(len(COLUMNS)) if j not in fit]
    x = np.vstack([d.design for d in data])
    y = np.concatenate([d.measured for d in data])
    off = np.concatenate([d.offset for d in data])
    return dict(zip(cand.refit, (float(v) for v in engine.nnls(x[:, fit] / y[:, None],
                                                                  1.0 - (off + x[:, rest] @ base[rest]) / y))))


def _pct(e: np.ndarray) -> str:
    q1, med, q3 = np.percentile(e, [25, 50, 75])
    return f"{100 * med:.1f}% ({100 * q1:.1f}-{100 * q3:.1f}%)"


def scores(data: list[Ranks], preds: list[np.ndarray]) -> list[str]:
    """Measured plans: per-rank error, slowest rank named (all, resolved), median Spearman; cost-term cases: error."""
    m = [(d, p) for d, p in zip(data, preds) if d.source == "measured"]
    c = [(d, p) for d, p in zip(data, preds) if d.source == "cost_terms"]
    cells = []
    for part in (m, c):
        errs = np.concatenate([np.abs(p - d.measured) / d.measured for d, p in part]) if part else np.zeros(0)
        cells.append(_pct(errs) if len(errs) else "n/a")
    named = [int(np.argmax(p)) == int(np.argmax(d.measured)) for d, p in m]
    res = [ok for ok, (d, _) in zip(named, m) if d.resolved]
    rho = [s for s in (engine.spearman(list(p), list(d.measured)) for d, p in m) if s is not None]
    return [cells[0], f"{sum(named)} of {len(named)}", f"{sum(res)} of {len(res)}",
            f"{np.median(rho):.2f}" if rho else "n/a", cells[1]]


HEAD = ["candidate", "fitted on both sets", "measured ranks, held out per config: error median (IQR)",
        "names slowest", "where resolved", "Spearman median", "one-rank cases, held out per group: error"]


def _value(name: str, v: float) -> str:
    if name == "rank_step_ms":
        return f"{name} {v:.3g} ms"
    default = engine.CPU_TERM_DEFAULTS.get(name)
    return f"{name} {v:.3g}" + (f" (now {default:.4g})" if default is not None else "")


def candidates_markdown(plans: list, path: Path = COST_TERMS_DATA) -> str:
    """The candidates' table over the fbgemm plans of bench.rank_error.plans_of and the cost-term cases."""
    data = [ranks_of("measured", p.config, p.cfg, p.tables, p.median, p.resolved) for p in plans
            if p.backend == "fbgemm"] + cost_term_cases(path)
    rows = []
    plans_only = [d for d in data if d.source == "measured"]
    cases_only = [d for d in data if d.source == "cost_terms"]
    for cand in CANDIDATES:
        fitted = "; ".join(_value(n, v) for n, v in fitted_values(data, cand).items()) or "-"
        if len(cand.refit) == 1:  # one term: does each set alone ask for the same value?
            alone = [fitted_values(part, cand)[cand.refit[0]] for part in (plans_only, cases_only)]
            fitted += f" (plans alone {alone[0]:.3g}, one-rank cases alone {alone[1]:.3g})"
        rows.append([cand.label, fitted, *scores(data, held_out(data, cand))])
    n_plans = sum(d.source == "measured" for d in data)
    n_cases = len(data) - n_plans
    lines = [f"Candidates, each fitted on all groups but the one predicted ({n_plans} fbgemm plans of "
             f"{len({d.group for d in data if d.source == 'measured'})} configs and {n_cases} one-rank cases of "
             f"{len({d.group for d in data if d.source == 'cost_terms'})} groups from {path.name}; terms in bytes of "
             "work at ddr_mem_bw unless said):", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "Extra terms: " + "; ".join(f"`{k}`: {v}" for k, v in EXTRA.items()) + "."]
    return "\n".join(lines)


SHARES = {"per id": ("cpu_id_work",), "row reads": ("cpu_row_first_decade", "cpu_row_later_decades"),
          "output": ("cpu_output_work",), "optimizer": tuple(n for n in NAMED if n.startswith("cpu_optimizer")),
          "working set": ("cpu_workset_row_work",)}


def rank_features(p) -> dict[str, np.ndarray]:
    """Per rank of a plan (bench.rank_error.PlanRanks): what the residual is set against. Shares are of the
    estimate's compute, from its terms (engine.term_run: the design times the defaults)."""
    cfg, topo = p.cfg, p.cfg.topology
    run = engine.term_run(cfg, p.tables, p.median)
    part = run.design * np.array([engine.CPU_TERM_DEFAULTS[n] for n in NAMED])
    total = run.offset + part.sum(axis=1)
    stats = engine.evaluate(cfg, p.tables, planner="file").ranks
    ids, dim_ids, outputs, pieces = (np.zeros(topo.world_size) for _ in range(4))
    for r, rank in enumerate(engine.rank_pieces(cfg, p.tables)):
        for piece in rank:
            t, c = cfg.table(piece.table), cfg.constraint(piece.table)
            share = piece.rows / t.num_embeddings if piece.sharding_type.splits_rows else 1.0
            n = sum(c.pooling_factors or (1.0,)) * topo.batch_size * topo.world_size * share
            ids[r] += n
            dim_ids[r] += n * piece.cols
            outputs[r] += topo.batch_size * topo.world_size * len(t.feature_names) * share
            pieces[r] += 1
    out = {"log touched working set": np.log([max(s.workset_bytes, 1.0) for s in stats]),
           "log ids": np.log(np.maximum(ids, 1.0)), "log mean dim (per id)": np.log(dim_ids / np.maximum(ids, 1.0)),
           "log mean pooling (ids per output)": np.log(ids / np.maximum(outputs, 1.0)),
           "log pieces": np.log(np.maximum(pieces, 1.0))}
    for name, cols in SHARES.items():
        out[f"{name} share of the estimate"] = part[:, [NAMED.index(n) for n in cols]].sum(axis=1) / total
    return out


def residual_markdown(plans: list) -> str:
    """Within each plan, the log error log(measured / estimated) less the plan's mean against each feature less
    its plan mean: what sets a plan's ranks apart that the estimate does not see (the level of a plan drops out)."""
    fb = [p for p in plans if p.backend == "fbgemm" and len(p.median) > 1]
    res, feats = [], {}
    for p in fb:
        r = np.log(p.median / p.estimate)
        res.append(r - r.mean())
        for k, v in rank_features(p).items():
            feats.setdefault(k, []).append(v - v.mean())
    y = np.concatenate(res)
    dof = len(y) - len(fb)
    noise = float(np.median([p.noise / np.sqrt(2.0) for p in fb]))
    lines = [f"What sets a plan's ranks apart (fbgemm plans, {len(y)} ranks of {len(fb)} plans): the within-plan "
             f"log error has RMS {np.sqrt(np.mean(y ** 2)):.3f}; a rank's median alone has standard error "
             f"{noise:.3f} (median over plans), so about {np.sqrt(max(np.mean(y ** 2) - noise ** 2, 0.0)):.3f} is "
             f"the estimate's. Correlation with each feature within plans ({dof} degrees of freedom: |r| over "
             f"{1.96 / np.sqrt(dof):.2f} is unlikely by chance at 5%); slope: change of the log error per unit:", "",
             "| feature | r | slope |", "|---|---|---|"]
    for k, parts in feats.items():
        x = np.concatenate(parts)
        r = float(np.corrcoef(x, y)[0, 1]) if np.ptp(x) > 0 else float("nan")
        lines.append(f"| {k} | {r:+.2f} | {float(x @ y / (x @ x)) if x @ x > 0 else float('nan'):+.3g} |")
    return "\n".join(lines)
