"""The per-term fitter (engine.calibrate_terms) on features of real configs and plans: its features are what the
estimate prices; times made from known terms plus seeded noise give those terms back within the uncertainty it
reports; what the runs cannot identify is refused with the reason; a profile's terms price the plan, and a
calibration is never written over another device's profile. From real dry-runs: tests/db/test_calibrate_terms.py.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import engine
from bench.calibrate_terms import config, random_configs
from engine.calibrate_apply import apply_terms
from engine.calibrate_terms import (
    BOOTSTRAP_SEED, COND_MAX, INTERCEPT, RESAMPLES, TERMS, fit_terms, held_out_predictions, identify, predict, solve,
    term_run,
)
from engine.errors import ConfigError, EngineError
from engine.fields import FITTED_TERM_NAMES
from engine.profile import CPU_DEFAULTS_NOTE
from engine.terms import DEFAULTS, terms_of
from tests.factories import tutorial

TRUE = {**{n: DEFAULTS[n] * 1.3 for n in FITTED_TERM_NAMES}, "cpu_optimizer_work_rowwise_adagrad": 0.0, INTERCEPT: 0.2}
NOISE = 0.03  # relative, seeded


def runs_of(raws: list[dict], truth: dict, noise: float, seed: int = 1, device: str = "test cpu"):
    rng = np.random.default_rng(seed)
    coef = np.array([truth[n] for n in TERMS])
    out = []
    for i, raw in enumerate(raws):
        cfg = engine.parse_config(raw)
        run = term_run(cfg, engine.plan(cfg).tables, np.ones(cfg.topology.world_size), i + 1, f"c{i}", device)
        exact = run.offset + run.design @ coef
        out.append(replace(run, measured_ms=exact * np.exp(rng.normal(0.0, noise, len(exact)))))
    return out


@pytest.fixture(scope="module")
def synthetic():
    return runs_of(random_configs(), TRUE, NOISE)


def test_features_are_what_the_estimate_prices():
    for raw in random_configs(3)[::3]:
        cfg = engine.parse_config(raw)
        tables = engine.plan(cfg).tables
        run = term_run(cfg, tables, np.ones(2))
        ranks = engine.evaluate(cfg, tables).ranks  # no profile: the default terms
        compute = np.array([r.perf.fwd_compute + r.perf.bwd_compute for r in ranks])
        fitted = np.array([DEFAULTS[n] for n in FITTED_TERM_NAMES])
        np.testing.assert_allclose(run.offset + run.features @ fitted, compute, rtol=1e-9)


def test_known_terms_come_back_within_their_uncertainty(synthetic):
    fit = fit_terms(synthetic, 1.0)
    terms = {t.name: t for t in fit.terms}
    # rowwise_adagrad's per-weight work is 0 in truth and by default: no fit can pin a zero to 50% of itself
    assert terms["cpu_optimizer_work_rowwise_adagrad"].refused.startswith("too uncertain")
    fitted = [t for t in fit.terms if t.fitted]
    assert {t.name for t in fitted} == set(TERMS) - {"cpu_optimizer_work_rowwise_adagrad"}
    for t in fitted:
        assert abs(t.value - TRUE[t.name]) <= 3 * t.se, (t.name, t.value, t.se, TRUE[t.name])
        assert t.se <= 0.3 * TRUE[t.name] or t.name == INTERCEPT  # the intercept is kept whatever its error
    loro = fit.held_out
    assert loro["median_error_after"] < 2 * NOISE < loro["median_error_before"]


def test_held_out_by_config_never_fits_on_a_run_of_the_same_config(synthetic):
    """Two plans of one config are one group: a run's held-out prediction is the fit on the other configs' runs only,
    so a config whose runs are all off by 2x stays off held out, where leaving one run out would fit it."""
    runs = [replace(r, group=f"g{i // 2}") for i, r in enumerate(synthetic)]
    runs[0] = replace(runs[0], measured_ms=2.0 * runs[0].measured_ms)
    runs[1] = replace(runs[1], measured_ms=2.0 * runs[1].measured_ms)
    grouped = held_out_predictions(runs, by_group=True)
    np.testing.assert_allclose(grouped[0][1], predict(solve(runs[2:]), runs[0]), rtol=1e-12)
    np.testing.assert_allclose(grouped[1][1], predict(solve(runs[2:]), runs[1]), rtol=1e-12)
    fitted = np.array([DEFAULTS[n] for n in FITTED_TERM_NAMES])
    np.testing.assert_allclose(grouped[0][0], runs[0].offset + runs[0].features @ fitted)
    by_run = held_out_predictions(runs)
    np.testing.assert_allclose(by_run[0][1], predict(solve(runs[1:]), runs[0]), rtol=1e-12)
    assert np.median(grouped[0][1] / runs[0].measured_ms) < 0.6  # the truth is half what was measured


def test_the_same_runs_give_the_same_fit_byte_for_byte(synthetic):
    a = json.dumps(fit_terms(synthetic, 1.0).as_dict())
    assert json.dumps(fit_terms(list(reversed(synthetic)), 1.0).as_dict()) == a


def test_what_the_runs_cannot_identify_is_refused_with_the_runs_that_would():
    sgd = [c for c in random_configs() if c["topology"]["optimizer"] == "sgd"]
    small = [config("sgd", [32, 64, 16], [900, 1500, 3000], [1, 2, 4], batch_size=64 + 32 * i) for i in range(3)]
    fit = fit_terms(runs_of(sgd + small, TRUE, NOISE), 1.0)
    terms = {t.name: t for t in fit.terms}
    for opt in ("adagrad", "rowwise_adagrad", "adam"):
        t = terms[f"cpu_optimizer_row_work_{opt}"]
        assert not t.fitted and t.value == t.default and t.se is None
        assert t.refused.startswith("no run exercises it") and f"optimizer {opt}" in t.hint
    assert terms["cpu_id_work"].fitted and terms["cpu_output_work"].fitted


def test_collinear_columns_are_refused_naming_the_term_they_follow():
    rng = np.random.default_rng(0)
    a = rng.random((12, 3))
    names = ("a", "b", "c", "d", "e")
    twin = np.hstack([a, 2.0 * a[:, [1]] + 1e-9 * rng.random((12, 1)), np.zeros((12, 1))])
    kept, why = identify(twin, names)
    assert kept == [0, 1, 2]
    assert why[3].startswith("the runs cannot tell it from b (condition number") and f"over {COND_MAX:g}" in why[3]
    assert why[4].startswith("no run exercises it")
    near = np.hstack([a, a[:, [1]] + 0.5 * rng.random((12, 1))])  # related but separable: well under the threshold
    assert identify(near, names)[0] == [0, 1, 2, 3]
    kept, why = identify(a[:4], names)  # 4 measurements: 2 terms and 2 to spare
    assert kept == [0, 1] and why[2].startswith("too few measurements: 4 ranks for 3 terms")


def test_bad_input_is_one_line_error(synthetic):
    with pytest.raises(EngineError, match=r"at least 2 succeeded runs with per-rank times on one device, found 0;"):
        fit_terms([], 1.0)
    with pytest.raises(EngineError, match=r"found 1 \(run 1\);"):
        fit_terms(synthetic[:1], 1.0)
    other = replace(synthetic[1], device_name="other cpu")
    with pytest.raises(EngineError, match=r"on 2 devices \('other cpu': 1 runs, 'test cpu': 1 runs\).*--device-name"):
        fit_terms([synthetic[0], other], 1.0)
    other = replace(synthetic[1], backend="torch")
    with pytest.raises(EngineError, match=r"2 backends \(unknown: 1 runs, torch: 1 runs\).*--backend NAME"):
        fit_terms([synthetic[0], other], 1.0)


def test_profile_terms_price_the_plan_on_their_device_and_hosts_only(synthetic):
    raw = random_configs()[1]  # adagrad
    cfg = engine.parse_config(raw)
    tables = engine.plan(cfg).tables
    fit = fit_terms(synthetic, 1.0)
    applied = apply_terms(raw, {**fit.as_dict(), "ddr_mem_bw": cfg.topology.ddr_mem_bw})
    priced = engine.parse_config(applied)
    assert terms_of(priced.topology).by_name == {**DEFAULTS, **fit.values()}
    run = term_run(cfg, tables, np.ones(2))
    got = engine.evaluate(priced, tables).ranks
    want = predict([replace(t, value=t.value if t.fitted and t.name != INTERCEPT else t.default) for t in fit.terms],
                   run)
    np.testing.assert_allclose([r.perf.fwd_compute + r.perf.bwd_compute for r in got], want, rtol=1e-9)
    assert any("as fitted on 'test cpu'" in n for n in engine.plan(priced).notes)  # the plan says whose terms
    assert CPU_DEFAULTS_NOTE not in engine.plan(priced).notes  # this machine's terms: no warning
    unfitted = engine.plan(engine.parse_config(raw)).notes  # the defaults describe one other machine, and it says so
    assert CPU_DEFAULTS_NOTE in unfitted and "python -m db calibrate --terms" in CPU_DEFAULTS_NOTE
    assert CPU_DEFAULTS_NOTE not in engine.plan(engine.parse_config(tutorial())).notes  # a GPU topology
    two_hosts = engine.parse_config({**applied, "topology": {**applied["topology"], "local_world_size": 1}})
    assert terms_of(two_hosts.topology).by_name == DEFAULTS  # the profile is for one host: not applied


def test_applying_scales_to_the_config_bandwidth_and_refuses_another_device(synthetic):
    data = fit_terms(synthetic, 1.0).as_dict()
    data["ddr_mem_bw"] = 2e7
    raw = config("sgd", [32], [1000], [1], ddr_mem_bw=4e7)
    prof = apply_terms(raw, data)["topology"]["profile"]
    assert prof["device_name"] == "test cpu" and prof["backend"] == "gloo" and prof["hosts"] == 1
    assert {k: prof[k] for k in data["values"]} == {k: 2.0 * v for k, v in data["values"].items()}
    assert "profile" not in raw["topology"]  # the input is not changed
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "device_name": "other cpu"}
    with pytest.raises(ConfigError, match=r"topology.profile.device_name: the config's profile is for 'other cpu' but "
                                          r"these terms were fitted on 'test cpu': a planner never uses"):
        apply_terms(raw, data)
    with pytest.raises(ConfigError, match=r"topology.compute_device: is cuda; the terms are CPU terms fitted on "
                                          r"'test cpu'"):
        apply_terms(config("sgd", [32], [1000], [1], compute_device="cuda"), data)
    with pytest.raises(ConfigError, match=r"calibration.device_name: is empty: the dry-runs name no device"):
        apply_terms(config("sgd", [32], [1000], [1]), {**data, "device_name": ""})


@pytest.mark.parametrize("extra, match", [
    ({"cpu_id_work": -1.0}, r"topology.profile.cpu_id_work: must be a number from 0 to 1e\+09"),
    ({"cpu_id_work": "x"}, r"topology.profile.cpu_id_work: must be a number"),
    ({"device_name": ""}, r"topology.profile.device_name: must be one line of text"),
    ({"cpu_id_wrk": 1.0}, r"topology.profile.cpu_id_wrk: unknown field"),
    ({"set_by_table_costs": "step_ms"}, r"topology.profile.set_by_table_costs: must be a list of distinct names"),
    ({"set_by_table_costs": ["launch_ms"], "launch_ms": 1.0}, r"'launch_ms' is not a fixed cost measure-tables sets"),
    ({"set_by_table_costs": ["step_ms"]}, r"set_by_table_costs: names step_ms but the profile's step_ms is 0"),
])
def test_bad_profile_terms_name_the_field(extra, match):
    raw = config("sgd", [32], [1000], [1])
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, **extra}
    with pytest.raises(ConfigError, match=match):
        engine.parse_config(raw)


def test_a_cuda_profile_carries_no_cpu_terms():
    raw = config("sgd", [32], [1000], [1], compute_device="cuda")
    raw["topology"]["profile"] = {"device": "cuda", "backend": "nccl", "hosts": 1, "cpu_id_work": 900.0}
    with pytest.raises(ConfigError, match=r"topology.profile.cpu_id_work: is a CPU cost term; a cuda profile"):
        engine.parse_config(raw)


def test_active_set_nnls_matches_the_exhaustive_one():
    from engine.fitting import nnls, nnls_active_set

    rng = np.random.default_rng(1)
    for _ in range(100):
        x = rng.random((30, 6))
        y = rng.normal(size=30) + x @ rng.normal(size=6)  # some coefficients want to be negative
        np.testing.assert_allclose(nnls_active_set(x, y), nnls(x, y), atol=1e-7)


def test_a_bandwidth_calibration_keeps_the_terms_pricing_the_same_time(synthetic):
    from engine.calibrate_apply import apply_calibration

    data = {**fit_terms(synthetic, 1.0).as_dict(), "ddr_mem_bw": 4e7}
    raw = apply_terms(config("adagrad", [32, 64], [1000, 50000], [1, 4], ddr_mem_bw=4e7), data)
    cal = {"patch": {"ddr_mem_bw": 8e7}, "profile": {"device": "cpu", "backend": "gloo", "hosts": 1, "step_ms": 0.5}}
    for calibration in (cal, cal["patch"]):  # a whole calibration (a new profile), or the bandwidths only
        prof = apply_calibration(raw, calibration)["topology"]["profile"]
        assert prof["device_name"] == "test cpu"
        # the same time at twice the bandwidth: twice the bytes (to the last bits: the rescaling rounds)
        assert {k: prof[k] for k in data["values"]} == pytest.approx({k: 2.0 * v for k, v in data["values"].items()},
                                                                      rel=1e-12)
    assert apply_calibration(raw, cal)["topology"]["profile"]["step_ms"] == 0.5


def test_the_bootstrap_interval_is_seeded_covers_the_fit_and_holds_the_known_terms(synthetic):
    fit = fit_terms(synthetic, 1.0)
    again = fit_terms(list(reversed(synthetic)), 1.0)
    other_seed = fit_terms(synthetic, 1.0, seed=BOOTSTRAP_SEED + 1)
    fitted = [t for t in fit.terms if t.fitted]
    assert fitted and all(t.interval is not None for t in fitted)
    assert all(t.interval is None for t in fit.terms if not t.fitted)
    assert [t.interval for t in again.terms] == [t.interval for t in fit.terms]  # the same seed: the same draws
    assert [t.interval for t in other_seed.terms] != [t.interval for t in fit.terms]
    for t in fitted:
        low, high = t.interval
        assert low <= t.value <= high, (t.name, t.value, t.interval)
        assert low <= TRUE[t.name] <= high, (t.name, TRUE[t.name], t.interval)  # seeded noise: the truth inside
    assert fit.as_dict()["bootstrap"] == {"resamples": RESAMPLES, "seed": BOOTSTRAP_SEED, "level": 0.95,
                                          "resampled": "runs"}
    assert [t["interval"] for t in fit.as_dict()["terms"]] == [list(t.interval) if t.interval else None
                                                                for t in fit.terms]


def test_bootstrap_draws_that_cannot_identify_the_terms_are_left_out_and_said():
    sgd = [c for c in random_configs() if c["topology"]["optimizer"] == "sgd"][:3]
    runs = runs_of(sgd, TRUE, NOISE)
    fit = fit_terms(runs, 1.0, resamples=50)
    note = next((n for n in fit.notes if n.startswith("bootstrap: ")), None)
    # three runs drawn with replacement: some draws repeat one run, which cannot fit every term the three fit
    assert note is not None and "of 50 resamples of the runs left out" in note
