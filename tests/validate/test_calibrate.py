"""Calibration: non-negative least squares recovers known bandwidths exactly, real stored runs give positive
constants, and a calibrated config changes what the estimator says about a plan.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import engine
from db.calibration import calibrate_from_store, observations_from_store
from db.store import Store
from engine.calibrate import Observation, apply_calibration, fit, nnls, observation
from engine.types import Device
from tests.factories import tutorial, write
from tests.validate.conftest import SHARDING_TYPES, run_db_cli


def synthetic(compute_bw: float, intra_bw: float, inter_bw: float) -> list[Observation]:
    """Runs whose measured time is exactly what those bandwidths predict (estimates assumed other ones)."""
    assumed_c, assumed_m = 5e7, 6e8
    out = []
    for i, (c_ms, m_ms, multi) in enumerate([(0.2, 0.1, False), (1.0, 0.05, False), (0.3, 0.9, False),
                                             (0.5, 0.4, True), (0.1, 0.7, True)]):
        work_c, work_m = c_ms * assumed_c, m_ms * assumed_m
        measured = work_c / compute_bw + work_m / (inter_bw if multi else intra_bw)
        out.append(Observation(c_ms, m_ms, measured, assumed_c, assumed_m, multi, run_id=i + 1))
    return out


def test_fit_recovers_known_bandwidths_exactly():
    cal = fit(synthetic(2e5, 3e6, 4e5), Device.CPU)
    assert cal.patch.keys() == {"ddr_mem_bw", "intra_host_bw", "inter_host_bw"}
    assert cal.patch["ddr_mem_bw"] == pytest.approx(2e5, rel=1e-9)
    assert cal.patch["intra_host_bw"] == pytest.approx(3e6, rel=1e-9)
    assert cal.patch["inter_host_bw"] == pytest.approx(4e5, rel=1e-9)
    assert cal.r2 == pytest.approx(1.0) and cal.n_runs == 5 and cal.run_ids == (1, 2, 3, 4, 5)


def test_fit_on_cuda_patches_hbm_and_leaves_out_terms_no_run_used():
    single_host = [o for o in synthetic(1e7, 2e7, 1e6) if not o.multi_host]
    cal = fit(single_host, Device.CUDA)
    assert cal.patch.keys() == {"hbm_mem_bw", "intra_host_bw"}
    assert cal.patch["hbm_mem_bw"] == pytest.approx(1e7, rel=1e-9)


def test_nnls_clips_at_zero_and_notes_what_the_runs_do_not_determine():
    x = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    y = np.array([3.0, 2.0, 1.0])  # unconstrained least squares wants a negative slope
    c = nnls(x, y)
    assert c[0] == 0 and c[1] == pytest.approx(2.0)
    obs = [Observation(cm, 1.0, m, 1.0, 1.0) for cm, m in ((1.0, 3.0), (2.0, 2.0), (3.0, 1.0))]
    cal = fit(obs, Device.CPU)
    assert "ddr_mem_bw" not in cal.patch and cal.patch["intra_host_bw"] == pytest.approx(0.5)
    assert any("ddr_mem_bw" in n for n in cal.notes)


def test_fit_without_runs_says_what_to_do():
    with pytest.raises(engine.EngineError, match="python -m db validate"):
        fit([], Device.CPU)


def test_an_observation_is_the_bottleneck_rank_against_the_slowest_measured_time():
    info = {"estimate_compute_bw_bytes_per_ms": 2.0, "estimate_comms_bw_bytes_per_ms": 3.0,
            "estimate_multi_host": True}
    per_rank = {0: {"estimated_compute_ms": 1.0, "estimated_comms_ms": 1.0, "estimated_ms": 2.0, "step_ms": 9.0},
                1: {"estimated_compute_ms": 4.0, "estimated_comms_ms": 1.0, "estimated_ms": 5.0, "step_ms": 7.0}}
    assert observation(per_rank, info, run_id=3) == Observation(4.0, 1.0, 9.0, 2.0, 3.0, True, 3)
    assert observation(per_rank, {}, run_id=3) is None  # no assumed bandwidths: nothing to scale by
    assert observation({0: {"step_ms": 1.0}}, info) is None


def test_stored_runs_give_positive_constants(recorded_runs):
    store = Store(recorded_runs.database_url)
    obs = observations_from_store(store, Device.CPU)
    assert len(obs) == len(SHARDING_TYPES)
    assert all(o.measured_ms > 0 and o.estimated_compute_ms > 0 for o in obs)
    cal = calibrate_from_store(store, Device.CPU)
    assert cal.n_runs == len(SHARDING_TYPES) and cal.patch
    assert all(v > 0 and math.isfinite(v) for v in cal.patch.values())
    assert cal.r2 is not None
    assert observations_from_store(store, Device.CUDA) == []
    assert observations_from_store(store, Device.CPU, device_name="no such device") == []


def test_calibrate_command_writes_the_calibration_and_a_calibrated_config(recorded_runs, tmp_path):
    config = write(tmp_path, tutorial())
    p = run_db_cli(recorded_runs.database_url, "calibrate", "--device", "cpu", "--json",
                   "--out", str(tmp_path / "cal.json"), "--config", str(config), "--config-out",
                   str(tmp_path / "calibrated.json"))
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data == json.loads((tmp_path / "cal.json").read_text())
    assert data["device"] == "cpu" and data["n_runs"] == len(SHARDING_TYPES)
    calibrated = json.loads((tmp_path / "calibrated.json").read_text())
    for name, value in data["patch"].items():
        assert calibrated["topology"][name] == value


def test_calibrate_text_names_each_fitted_bandwidth(recorded_runs):
    p = run_db_cli(recorded_runs.database_url, "calibrate")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"Calibration of cpu from {len(SHARDING_TYPES)} runs (R^2 ")
    assert "bytes/ms" in p.stdout and "GiB/s" in p.stdout


@pytest.mark.parametrize("args, message", [
    (["--device", "cuda"], "no succeeded validation runs on cuda"),
    (["--config", "c.json"], "--config and --config-out go together"),
    (["--device", "tpu"], "--device"),
])
def test_calibrate_errors_are_one_line(tmp_path, args, message):
    p = run_db_cli(f"sqlite:///{tmp_path / 'empty.db'}", "calibrate", *args)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr


def test_apply_calibration_changes_the_estimates_of_a_plan():
    cfg = tutorial("row_wise")
    cfg["topology"]["compute_device"] = "cpu"
    before_cfg = engine.parse_config(cfg)
    tables = engine.plan(before_cfg).tables
    ddr = before_cfg.topology.ddr_mem_bw
    patched = apply_calibration(cfg, {"ddr_mem_bw": ddr / 4})
    assert cfg["topology"].get("ddr_mem_bw") is None  # the input is not changed
    before = engine.evaluate(before_cfg, tables).ranks
    after = engine.evaluate(engine.parse_config(patched), tables).ranks
    for b, a in zip(before, after):
        assert a.perf.fwd_compute == pytest.approx(4 * b.perf.fwd_compute)
        assert a.cost_ms > b.cost_ms


def test_apply_calibration_accepts_a_whole_calibration_and_refuses_other_fields():
    cal = fit(synthetic(2e5, 3e6, 4e5), Device.CPU).as_dict()
    assert apply_calibration(tutorial(), cal)["topology"]["inter_host_bw"] == pytest.approx(4e5)
    with pytest.raises(engine.ConfigError, match="calibration.batch_size"):
        apply_calibration(tutorial(), {"batch_size": 3})
    with pytest.raises(engine.ConfigError, match="calibration.ddr_mem_bw"):
        apply_calibration(tutorial(), {"ddr_mem_bw": -1.0})
