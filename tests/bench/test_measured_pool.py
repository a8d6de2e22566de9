"""bench.measured_pool on synthetic runs where the truth is known (a real 0.85x under drift between runs, drift alone,
plans that differ between runs) and on the stored quiet runs, end to end through its command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import measured_pool as mp
from bench.suite import ROOT

STORED = [ROOT / "bench" / "results" / f for f in ("measured.json", "measured_bench_rerun.json",
                                                     "measured_later.json")]
CONFIG = {"topology": {"world_size": 2}, "tables": [{"name": "t0"}, {"name": "t1"}]}


def plan(ranks: tuple[int, int]) -> dict:
    return {"plan": {t: {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [r],
                         "shards": [{"offsets": [0, 0], "sizes": [100, 16], "rank": r}]}
                     for t, r in zip(("t0", "t1"), ranks)}}


def runs_of(ms: np.ndarray) -> list[dict]:
    return [{"max_rank_measured_ms": float(x)} for x in ms]


def config_record(name: str, ratio: float, drift: float, rng: np.random.Generator, pairs: int = 7,
                  torchrec_ranks: tuple[int, int] = (1, 1)) -> dict:
    """One config in one run: TorchRec's slowest rank about 10 ms, ours `ratio` x `drift` of it, 3% noise per run."""
    theirs = 10.0 * np.exp(rng.normal(0, 0.03, pairs))
    ours = ratio * drift * 10.0 * np.exp(rng.normal(0, 0.03, pairs))
    again = ratio * drift * 10.0 * np.exp(rng.normal(0, 0.03, pairs))
    return {"name": name, "held_out": False, "config": CONFIG, "ours_plan": plan((0, 1)),
            "torchrec_plan": plan(torchrec_ranks), "summary": {"verdict": "from the run"},
            "series": {"ours": runs_of(ours), "torchrec": runs_of(theirs), "ours_again": runs_of(again)}}


DRIFTS = (1.07, 0.93, 1.03)  # between-run drift of the ratio, larger than a run's own A/A noise


@pytest.fixture()
def synthetic(tmp_path):
    """Three runs: 'real' is 0.85x with drift, 'drift' is 1.0x with the same drift, 'moved' has TorchRec's plan
    changed in the third run."""
    rng = np.random.default_rng(7)
    paths = []
    for i, d in enumerate(DRIFTS):
        configs = [config_record("real", 0.85, d, rng), config_record("drift", 1.0, d, rng),
                   config_record("moved", 1.0, 1.0, rng, torchrec_ranks=(1, 1) if i < 2 else (0, 0))]
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({"meta": {"started": f"2026-11-2{i} 12:00", "command": "synthetic"},
                                    "configs": configs}))
        paths.append(path)
    return paths


def test_a_real_effect_under_drift_is_faster_and_drift_alone_is_within_noise(synthetic):
    meta, rows = mp.pool(synthetic)
    by = {(r["name"], r["group"]): r for r in rows}
    real, drift = by[("real", 1)], by[("drift", 1)]
    assert len(real["runs"]) == len(drift["runs"]) == 3 and real["ab"]["pairs"] == 21
    assert real["verdict"] == "faster" and real["ab"]["hi"] < 1
    assert real["ab"]["median"] == pytest.approx(0.85, rel=0.06)
    assert drift["verdict"] == "within noise" and drift["ab"]["lo"] < 1 < drift["ab"]["hi"]
    # each run alone claims what the drift says: 1.07 slower and 0.93 faster, beyond its own pair noise
    own = [p["hi"] < 1 or p["lo"] > 1 for p in drift["per_run"]]
    assert own[:2] == [True, True] and drift["runs_agree"] == "no"
    assert all(r["aa"]["median"] == pytest.approx(1.0, abs=0.03) for r in (real, drift))  # same plan: 1
    assert meta["drift"]["drift_log_sd"] > 0.03  # the 7% drift is seen beyond the 3% noise


def test_different_plans_across_runs_are_not_pooled(synthetic):
    _, rows = mp.pool(synthetic)
    moved = [r for r in rows if r["name"] == "moved"]
    assert [(r["group"], len(r["runs"]), r["plans_differ"]) for r in moved] == [(1, 2, True), (2, 1, True)]
    assert moved[1]["runs"] == ["2026-11-22 12:00 (run2.json)"]
    text = mp.report_markdown(*mp.pool(synthetic))
    assert "| moved (plans 2: plans differ between runs, not pooled) | 1 | 7 |" in text
    assert "drift not sampled" in text


def test_seeded_and_deterministic(synthetic):
    a, b = mp.pool(synthetic, seed=3), mp.pool(synthetic, seed=3)
    assert json.dumps(a) == json.dumps(b)
    c = mp.pool(synthetic, seed=4)[1]
    assert [r.get("verdict") for r in c] == [r.get("verdict") for r in a[1]]
    assert [r["ab"]["median"] for r in c] == [r["ab"]["median"] for r in a[1]]  # the point does not resample


def test_the_bootstrap_draws_runs_then_pairs():
    """Two runs of constant values: a resample's median is one run's value (one run drawn twice, about half the
    time) or between them; a drawn run brings its own number of pairs, so 5 pairs of 0.8 with 9 of 1.2 give 1.2."""
    meds = mp.resampled_medians([np.full(6, 0.8), np.full(6, 1.2)], np.random.default_rng(0), 4000)
    assert set(np.round(meds, 6)) == {0.8, 1.0, 1.2}
    assert 0.45 < np.mean(np.isclose(meds, 1.0)) < 0.55
    meds = mp.resampled_medians([np.full(5, 0.8), np.full(9, 1.2)], np.random.default_rng(0), 4000)
    assert 0.2 < np.mean(np.isclose(meds, 0.8)) < 0.3 and set(np.round(meds, 6)) == {0.8, 1.2}
    iv = mp.interval([np.full(6, 0.8), np.full(6, 1.2)], 0, 4000)
    assert (iv["lo"], iv["hi"]) == (pytest.approx(0.8), pytest.approx(1.2)) and mp.verdict(iv) == "within noise"


def test_the_stored_quiet_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "pooled.md"
    assert mp.main([*map(str, STORED), "--out", str(out), "--resamples", "2000"]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    rows = {r["name"]: r for r in data["configs"]}
    assert len(rows) == 14 and not any(r["plans_differ"] for r in rows.values())  # the stored plans match
    assert len(rows["m2-4r-rowwise_adagrad-uniform"]["runs"]) == 2 and len(rows["later-5"]["runs"]) == 1
    assert rows["m2-4r-rowwise_adagrad-uniform"]["verdict"] == "within noise"  # 1.102 then 0.877
    assert rows["m2-4r-rowwise_adagrad-uniform"]["runs_agree"] == "no"
    assert rows["later-1"]["verdict"] == "faster"  # 0.915 then 0.824
    assert out.read_text().strip() == capsys.readouterr().out.strip()
    assert out.read_text().startswith("Made by `python -m bench.measured_pool ")
    assert "**The runs were made on 2 different machines**" in out.read_text()  # fc-v782, then fc-v657


@pytest.mark.parametrize("content, why", [("{", "give a file"), ('{"configs": [{"x": 1}]}', "named configs")])
def test_bad_input_is_one_line(tmp_path, capsys, content, why):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert mp.main([str(path), "--out", str(tmp_path / "o.md")]) == 2
    err = capsys.readouterr().err
    assert why in err and str(path) in err and err.count("\n") == 1
    assert not (tmp_path / "o.md").exists()
