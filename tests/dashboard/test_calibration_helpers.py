"""dashboard.plans.calibration (pure): applying a fit and TorchRec's defaults, when a topology still holds a fit,
and the lines that say a plan's estimates are calibrated."""

from __future__ import annotations

import dataclasses

import pytest

import engine
from dashboard.plans import analysis
from dashboard.tables import presets
from dashboard.plans import calibration as calib
from engine import constants as C
from engine.calibrate import fit
from engine.types import Device
from tests.factories import synthetic_step_runs

CAL = engine.Calibration.from_dict({
    "device": "cpu", "device_name": None, "patch": {"ddr_mem_bw": 2.0e6, "intra_host_bw": 3.0e7}, "r2": 0.98123,
    "n_runs": 4, "run_ids": [1, 2, 3, 4], "notes": []})
CPU = {"world_size": 2, "local_world_size": 2, "compute_device": "cpu"}


def test_calibrated_topology_takes_the_fit_and_keeps_the_rest():
    topo = calib.calibrated_topology(CPU, CAL)
    assert topo["ddr_mem_bw"] == 2.0e6 and topo["intra_host_bw"] == 3.0e7
    assert topo["world_size"] == 2 and "hbm_mem_bw" not in topo  # the rest is left as it was
    assert calib.holds(CAL, topo)
    assert "ddr_mem_bw" not in CPU  # the input is not changed


def test_calibrated_topology_of_a_bad_topology_is_one_config_error():
    with pytest.raises(engine.ConfigError, match="local_world_size"):
        calib.calibrated_topology({**CPU, "local_world_size": 3}, CAL)


def test_a_whole_engine_calibration_applies_with_its_profile():
    cal = fit(synthetic_step_runs(), Device.CPU)
    assert calib.is_calibration(cal.as_dict()) and calib.read(cal.as_dict()).as_dict() == cal.as_dict()
    topo = calib.calibrated_topology(CPU, cal)
    assert topo["ddr_mem_bw"] == pytest.approx(5e6) and topo["intra_host_bw"] == pytest.approx(2e6)
    assert topo["profile"]["step_ms"] == pytest.approx(3.0) and topo["compute_device"] == "cpu"
    assert calib.holds(cal, topo) and calib.holds(cal, presets.form_topology(presets.topology_form(topo)))
    assert not calib.holds(cal, {k: v for k, v in topo.items() if k != "profile"})  # the fixed costs are gone
    assert calib.profile_text(cal).startswith("Fixed costs (cpu/gloo, 1 host, 2 cores per host): 3 ms per step, ")
    assert calib.profile_text(CAL) is None
    back = calib.with_default_bandwidths(topo)
    assert "profile" not in back and calib.has_default_bandwidths(back) and not calib.has_default_bandwidths(topo)


def test_the_topology_form_keeps_the_profile_while_the_device_stays():
    topo = calib.calibrated_topology(CPU, fit(synthetic_step_runs(), Device.CPU))
    form = {k: v for k, v in topo.items() if k != "profile"}
    assert calib.keep_profile(topo, form)["profile"] == topo["profile"]
    assert "profile" not in calib.keep_profile(topo, {**form, "compute_device": "cuda"})
    assert calib.keep_profile(CPU, form) == form


def test_holds_survives_the_topology_forms_unit_round_trip():
    topo = calib.calibrated_topology(CPU, CAL)
    assert calib.holds(CAL, presets.form_topology(presets.topology_form(topo)))


@pytest.mark.parametrize("change", [
    {"ddr_mem_bw": 2.0e6 * 1.001},  # a hand edit
    {"intra_host_bw": None},  # back to the default
    {"compute_device": "cuda"},  # another device kind
])
def test_holds_fails_once_the_topology_moved(change):
    topo = {**calib.calibrated_topology(CPU, CAL), **change}
    topo = {k: v for k, v in topo.items() if v is not None}
    assert not calib.holds(CAL, topo)


def test_holds_refuses_what_is_no_calibration():
    topo = calib.calibrated_topology(CPU, CAL)
    assert not calib.holds(None, topo)
    assert not calib.holds(dataclasses.replace(CAL, patch={}), topo)
    assert calib.read({"patch": CAL.patch}) is None and not calib.is_calibration({"patch": CAL.patch})


def test_default_bandwidths_are_torchrecs_constants():
    assert calib.default_bandwidths() == pytest.approx({
        "hbm_mem_bw": C.HBM_MEM_BW, "ddr_mem_bw": C.DDR_MEM_BW, "hbm_to_ddr_mem_bw": C.HBM_TO_DDR_MEM_BW,
        "intra_host_bw": C.INTRA_NODE_BW, "inter_host_bw": C.CROSS_NODE_BW})
    calibrated = calib.calibrated_topology(CPU, CAL)
    assert not calib.has_default_bandwidths(calibrated)
    back = calib.with_default_bandwidths(calibrated)
    assert calib.has_default_bandwidths(back) and calib.has_default_bandwidths(CPU)
    assert back["world_size"] == 2 and not calib.holds(CAL, back)


def test_the_lines_that_say_estimates_are_calibrated():
    assert calib.note(CAL) == "Estimates calibrated from 4 runs on cpu (R^2 0.981)"
    one = dataclasses.replace(CAL, n_runs=1, r2=None, device=Device.CUDA, device_name="H100")
    assert calib.note(one) == "Estimates calibrated from 1 run on cuda (H100) (R^2 n/a)"
    assert calib.estimates_label({"planner": "ours", "calibration": CAL.as_dict()}) == \
        "calibrated: 4 runs on cpu, R^2 0.981"
    assert calib.estimates_label({"planner": "ours"}) == "configured bandwidths"
    assert calib.estimates_label(None) == "configured bandwidths"
    assert calib.of_settings({"calibration": {"patch": "not one"}}) is None


def test_fitted_rows_put_current_and_fitted_in_gibps():
    rows = calib.fitted_rows(CPU, CAL)
    assert [r["field"] for r in rows] == ["ddr_mem_bw", "intra_host_bw"]
    assert rows[0]["current GiB/s"] == pytest.approx(51.0) and rows[1]["current GiB/s"] == pytest.approx(600.0)
    assert rows[0]["fitted GiB/s"] == pytest.approx(2.0e6 / presets.GBPS_TO_BYTES_PER_MS)
    assert rows[0]["fitted bytes/ms"] == 2.0e6 and rows[0]["bandwidth"] == "DDR"


def test_summary_frame_adds_the_estimates_column_only_when_asked():
    plan = engine.plan(engine.parse_config(presets.tutorial()))
    assert "estimates" not in analysis.summary_frame({"a": plan}).columns
    frame = analysis.summary_frame({"a": plan, "b": plan}, {"a": "calibrated: 4 runs on cpu, R^2 0.981"})
    assert frame["estimates"].tolist() == ["calibrated: 4 runs on cpu, R^2 0.981", ""]
