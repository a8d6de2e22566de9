"""bench.cost_terms: its cases and the fit's design matrix mean what engine.estimate computes, so constants fitted
there are the constants the estimator uses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.cost_terms import cases, config_of, table_wise_plan
from bench.cost_terms_fit import CHOSEN, MODELS, TERMS, features, fit, load_rows, predict
from engine import constants as C
from engine import parse_config
from engine.evaluate import evaluate

CHOSEN_TERMS = MODELS[CHOSEN]


def engine_coefficients() -> np.ndarray:
    by = {"id": C.CPU_ID_FIXED_BYTES, "id_decade": C.CPU_ID_FIXED_BYTES * C.CPU_FIXED_PER_DECADE,
          "row": C.CPU_ROW_IN_CACHE, "row_first_decade": C.CPU_ROW_FIRST_DECADE,
          "row_later_decades": C.CPU_ROW_LATER_DECADES, "output": C.CPU_OUTPUT_WORK, "piece": 0.0,
          "opt_adagrad": C.CPU_OPTIMIZER_WORK["adagrad"],
          "opt_rowwise_adagrad": C.CPU_OPTIMIZER_WORK["rowwise_adagrad"],
          "opt_adagrad_row": C.CPU_OPTIMIZER_ROW_WORK["adagrad"],
          "opt_rowwise_adagrad_row": C.CPU_OPTIMIZER_ROW_WORK["rowwise_adagrad"], "workset": 0.0,
          "workset_rows": C.CPU_WORKSET_ROW_WORK}  # the engine prices rows past the knee, not bytes
    return np.array([by[t] for t in TERMS])


@pytest.mark.parametrize("case", [c for c in cases() if c.name.split("/")[0] in ("ws", "opt", "zipf", "mixed")][::3],
                         ids=lambda c: c.name)
def test_the_fits_terms_with_the_engines_constants_give_the_engines_estimate(case):
    cfg = parse_config(config_of(case))
    rank = evaluate(cfg, table_wise_plan(cfg)).ranks[0]
    row = {"tables": case.tables, "optimizer": case.optimizer, "batch_size": case.batch_size}
    # the estimate also reads 8 bytes per id (the int64 ids), which the fit leaves to the per-id term
    assert predict(row, engine_coefficients(), C.CPU_WORKSET_KNEE_BYTES) == pytest.approx(
        rank.perf.fwd_compute + rank.perf.bwd_compute, rel=0.01)


def test_cases_are_seeded_and_fit_recovers_known_constants(tmp_path):
    assert [c.name for c in cases()] == [c.name for c in cases()] and cases() == cases()
    truth = engine_coefficients()
    knee = C.CPU_WORKSET_KNEE_BYTES
    lines = []
    for c in cases():
        row = {"case": c.name, "rep": 0, "tables": c.tables, "optimizer": c.optimizer, "batch_size": c.batch_size,
               "estimated_ms": 1.0, "load1": 0.0}
        ms = float(features(row, knee) @ truth / C.DDR_MEM_BW)
        lines.append(json.dumps({**row, "p25_ms": ms}))
    path = tmp_path / "synthetic.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rows = load_rows(path)
    got = fit(rows, CHOSEN_TERMS, knee)
    used = [TERMS.index(t) for t in CHOSEN_TERMS]
    pred = np.array([features(r, knee) @ got for r in rows])
    want = np.array([features(r, knee) @ truth for r in rows])
    assert np.allclose(pred, want, rtol=1e-6)
    assert got[TERMS.index("opt_adagrad")] == pytest.approx(truth[TERMS.index("opt_adagrad")], rel=1e-3)
    assert all(truth[i] == 0 for i in range(len(TERMS)) if i not in used)  # the engine has only the chosen terms
