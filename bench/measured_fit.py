"""Our plans priced with CPU terms fitted on this machine, each config left out of its own fit (issue 24):
`python -m bench.measured --fit-from RUN.json ...` plans ours for each config with the terms `db calibrate --terms`
would fit on the other configs' measured ranks of those stored runs (engine.fit_terms over engine.term_run, every
rank priced at the reference DDR bandwidth, as db.calibration does), written into the config's profile
(engine.apply_terms). The measured comparison with TorchRec's plan then tests the planner placing against fitted
terms on configs the fit never saw. Only runs of this machine are read (the platform, CPU, caches and libraries
they recorded): the same plans measured 3-17x apart on two VMs that both call themselves "AMD EPYC", so terms fitted
on another machine are refused, naming what differs.

`--fit-cases CASES.jsonl` adds the one-rank cost-term cases `python -m bench.cost_terms measure` timed on this machine
(each row records the machine) to every config's fit: cases vary one factor at a time, so they identify the row and
working-set terms that the plans' ranks, each a mix of everything, barely do. `--min-gain auto` asks of ours the
estimate's held-out error on the ratio of two plans' slowest ranks (pair_margin) before it replaces TorchRec's plan.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
import json
from typing import Sequence

import numpy as np

from bench.cost_terms import case_group
from bench.measured import machine_meta as this_machine
from bench.measured import read_run
from bench.rank_error import FIT_BACKEND, PlanRanks, plans_of
import db.calibration
import engine


def fit_sources(paths: Sequence[Path], here: dict | None = None) -> list[PlanRanks]:
    """The measured plans of stored runs of this machine (`here`, default bench.measured.machine_meta()): the platform
    must match, and the CPU, caches and library versions wherever the run recorded them (runs before 2026-11-27
    recorded the platform only). SystemExit with one line naming the file, what differs and the fix where a run was made
    elsewhere or recorded no platform."""
    here = here or this_machine()
    plans: list[PlanRanks] = []
    for path in paths:
        data = read_run(path, "--fit-from ")
        meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
        differ = _differ(meta, here)
        if differ:
            said = "; ".join(f"its {k} {meta.get(k) or 'unrecorded'!r}, here {here[k]!r}" for k in differ)
            raise SystemExit(f"error: --fit-from {path} was measured on another machine ({said}): terms are fitted "
                             "per machine; measure here first (python -m bench.measured) and fit on that run")
        plans += plans_of(data, str(path))
    return plans


def _differ(meta: dict, here: dict) -> list[str]:
    """The keys of this machine's record that a stored one contradicts (the platform must be recorded)."""
    return [k for k in here if (meta.get(k) or k == "machine") and meta.get(k) != here[k]]


def fit_cases(paths: Sequence[Path], here: dict | None = None) -> list[tuple[str, engine.Config, dict, float]]:
    """The one-rank cost-term cases of `python -m bench.cost_terms measure` JSONL files, each (name, config, plan,
    measured ms: the median over repetitions of each one's median step, the dry-run's statistic). Every row must say
    it was timed on this machine (its "machine" record, as bench.measured.machine_meta writes it): SystemExit with
    one line naming the file, the line and what differs otherwise."""
    from bench.cost_terms import case_config, table_wise_plan

    here = here or this_machine()
    by: dict[str, list[dict]] = {}
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as e:
            raise SystemExit(f"error: --fit-cases {path}: {engine.one_line(str(e))}") from None
        for n, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
                meta = row.get("machine") if isinstance(row.get("machine"), dict) else {}
                _ = (row["case"], row["tables"], row["optimizer"], row["batch_size"], float(row["median_ms"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                raise SystemExit(f"error: --fit-cases {path} line {n} is not a case `python -m bench.cost_terms "
                                 "measure` wrote") from None
            differ = _differ(meta, here)
            if differ:
                said = "; ".join(f"its {k} {meta.get(k) or 'unrecorded'!r}, here {here[k]!r}" for k in differ)
                raise SystemExit(f"error: --fit-cases {path} line {n} was timed on another machine ({said}): time "
                                 "the cases here first (python -m bench.cost_terms measure --out FILE)")
            by.setdefault(row["case"], []).append(row)
    out = []
    for name, rows in sorted(by.items()):
        cfg = case_config(rows[0])
        out.append((name, cfg, table_wise_plan(cfg), float(np.median([x["median_ms"] for x in rows]))))
    return out


def _runs(plans: Sequence[PlanRanks], cases: Sequence = ()) -> list:
    """The TermRuns of the plans (fbgemm only) and cases, every rank priced at the reference DDR bandwidth."""
    def at(cfg: engine.Config) -> engine.Config:
        return replace(cfg, topology=replace(cfg.topology, ddr_mem_bw=db.calibration.REFERENCE_DDR_BW))

    runs = [engine.term_run(at(p.cfg), p.tables, p.median, i, p.config, engine.cpu_name(), p.backend)
            for i, p in enumerate(plans)]
    return runs + [engine.term_run(at(cfg), tables, [ms], len(runs) + i, "case:" + case_group(name),
                                   engine.cpu_name(), FIT_BACKEND) for i, (name, cfg, tables, ms) in enumerate(cases)]


def fitted_config(name: str, config: dict, plans: Sequence[PlanRanks], cases: Sequence = ()) -> tuple[dict, dict]:
    """`config` (the case `name`) with the terms fitted on every plan of another config measured with FIT_BACKEND
    (and the one-rank `cases` of fit_cases), and what the fit was: its values, runs, ranks, configs and
    leave-one-run-out error. Raises engine.EngineError where the other configs cannot identify a fit
    (engine.fit_terms says which)."""
    others = [p for p in plans if p.config != name and p.backend == FIT_BACKEND]
    fit = engine.fit_terms(_runs(others, cases), db.calibration.REFERENCE_DDR_BW)
    out = engine.apply_terms(config, fit.as_dict())
    return out, {"values": fit.values(), "plans": len(others), "cases": len(cases), "ranks": fit.n_ranks,
                 "configs": sorted({p.config for p in others}), "sources": sorted({p.run for p in others}),
                 "leave_one_run_out": fit.held_out, "notes": list(fit.notes)}


def pair_margin(name: str, plans: Sequence[PlanRanks], cases: Sequence = ()) -> dict:
    """The estimate's error on which of two plans is faster, as `name`'s fit would make it: over every pair of plans
    of another config measured side by side (the same stored run, FIT_BACKEND), |log(estimated ratio of the two
    slowest ranks / measured ratio)|, each config predicted by terms fitted on neither it nor `name`
    (engine.held_out_predictions by config, cases in every fit). {"min_gain": exp(median) - 1, "pairs": n, "p75"}."""
    others = [p for p in plans if p.config != name and p.backend == FIT_BACKEND]
    preds = [fitted for _, fitted in engine.held_out_predictions(_runs(others, cases), by_group=True)]
    slowest = {(p.run, p.config, p.who): (float(np.max(pred)), float(np.max(p.median)))
               for p, pred in zip(others, preds)}
    errors = [abs(np.log((est_a / est_b) / (meas_a / meas_b)))
              for (run, config, who), (est_a, meas_a) in sorted(slowest.items()) if who == "ours"
              for est_b, meas_b in [slowest.get((run, config, "torchrec"), (0.0, 0.0))] if est_b > 0]
    if not errors:
        raise engine.EngineError(f"no other config than {name} has two plans measured in one run: the estimate's "
                                 "error on a pair cannot be known; give --min-gain as a number")
    return {"min_gain": float(np.expm1(np.median(errors))), "p75": float(np.expm1(np.percentile(errors, 75))),
            "pairs": len(errors)}


__all__ = ["fit_cases", "fit_sources", "fitted_config", "pair_margin", "this_machine"]
