"""Calibration in the workspace: the Topology page fits the bandwidths to validation runs recorded in the
database, "Use this calibration" puts them in the topology, plans say their estimates are calibrated (Plan,
sidebar, saved settings, shared view, Compare), and a hand edit or TorchRec's defaults drop the mark.
"""

from __future__ import annotations

import sqlite3

import pytest
from streamlit.testing.v1 import AppTest

import engine
from dashboard import presets
from db import runsink
from tests.dashboard.conftest import APP, RUN_TIMEOUT_S
from tests.dashboard.helpers import goto, plain, shown, workspace

HBM_BW, INTRA_BW = 4.0e8, 2.0e8  # bytes/ms the seeded runs measure (the tutorial assumes 897 and 600 GiB/s)
ASSUMED_COMPUTE_BW, ASSUMED_COMMS_BW = 9.0e8, 6.0e8  # bytes/ms the runs' estimates assumed
RUN_SHAPES = ((0.2, 0.1), (1.0, 0.05), (0.3, 0.9))  # (estimated compute ms, estimated comms ms) per run
NOTE = "Estimates calibrated from 3 runs on cuda (R^2 1.000)"


def result(compute_ms: float, comms_ms: float, device: str, measured_scale: float = 1.0) -> dict:
    """A validation result whose slowest rank measured exactly what HBM_BW and INTRA_BW predict."""
    measured = measured_scale * (compute_ms * ASSUMED_COMPUTE_BW / HBM_BW + comms_ms * ASSUMED_COMMS_BW / INTRA_BW)
    ranks = [{"rank": rank, "iteration_ms": measured * share, "shards_match": True,
              "estimated_ms": (compute_ms + comms_ms) * share, "estimated_compute_ms": compute_ms * share,
              "estimated_comms_ms": comms_ms * share} for rank, share in ((0, 1.0), (1, 0.5))]
    return {"status": "succeeded", "backend": "nccl" if device == "cuda" else "gloo", "device": device,
            "device_name": "NVIDIA H100" if device == "cuda" else "cpu", "estimate_multi_host": False,
            "estimate_compute_bw_bytes_per_ms": ASSUMED_COMPUTE_BW,
            "estimate_comms_bw_bytes_per_ms": ASSUMED_COMMS_BW, "ranks": ranks}


def seed_runs(store, device: str = "cuda", measured_scale: float = 1.0) -> list[int]:
    """A saved plan and three succeeded validation runs of it, recorded as `python -m db validate` does."""
    cfg = presets.tutorial()
    cfg["topology"]["compute_device"] = device
    parsed = engine.parse_config(cfg)
    token = store.save_plan(engine.config_to_dict(parsed), engine.plan_to_dict(engine.plan(parsed)),
                            label="validated", config_name="tutorial", settings={"source": runsink.SOURCE})
    ids = []
    for compute_ms, comms_ms in RUN_SHAPES:
        data = result(compute_ms, comms_ms, device, measured_scale)
        run_id = store.create_run(token, "validation", data["backend"], device)
        store.update_run(run_id, status="running")
        store.add_metrics(run_id, runsink.metrics(data))
        store.update_run(run_id, status="succeeded", device_info=runsink.device_info(data))
        ids.append(run_id)
    return ids


def use_calibration(app: AppTest) -> AppTest:
    goto(app, "topology")
    app.button(key="topology_calibration_use").click().run()
    assert not app.exception, app.exception
    return app


def fit_table(app: AppTest):
    """The fitted bandwidths' table: the Topology page's only dataframe."""
    assert len(app.dataframe) == 1
    return app.dataframe[0].value


def sidebar_captions(app: AppTest) -> list[str]:
    return [plain(c.value) for c in app.sidebar.caption]


def test_topology_page_shows_the_fit_beside_the_current_bandwidths(store, app):
    ids = seed_runs(store)
    goto(app, "topology")
    assert not shown(app, "error")
    assert any(f"Fitted to **3 succeeded validation runs** on cuda: **R^2 1.000** (runs {ids[0]}, {ids[1]}, {ids[2]})"
               in m for m in shown(app, "markdown"))
    table = fit_table(app)
    assert table["field"].tolist() == ["hbm_mem_bw", "intra_host_bw"]
    assert table["fitted bytes/ms"].tolist() == pytest.approx([HBM_BW, INTRA_BW], rel=1e-9)
    assert table["fitted GiB/s"].tolist() == pytest.approx([HBM_BW / presets.GBPS_TO_BYTES_PER_MS,
                                                            INTRA_BW / presets.GBPS_TO_BYTES_PER_MS], rel=1e-9)
    assert table["current GiB/s"].tolist() == pytest.approx([897.0, 600.0])  # the tutorial: TorchRec's defaults
    assert "ws_calibration" not in app.session_state


def test_use_this_calibration_and_every_page_says_so(store, app):
    seed_runs(store)
    goto(app, "plan")
    default_ms = app.session_state["ws_plan"].plan["max_rank_cost_ms"]
    use_calibration(app)
    topo = workspace(app)["topology"]
    assert topo["hbm_mem_bw"] == pytest.approx(HBM_BW, rel=1e-12)
    assert topo["intra_host_bw"] == pytest.approx(INTRA_BW, rel=1e-12)
    assert topo["ddr_mem_bw"] == pytest.approx(engine.constants.DDR_MEM_BW)  # not fitted: left alone
    cal = app.session_state["ws_calibration"]
    assert (cal["device"], cal["n_runs"], cal["r2"]) == ("cuda", 3, pytest.approx(1.0))
    assert app.number_input(key="topology_hbm_mem_bw").value == pytest.approx(HBM_BW / presets.GBPS_TO_BYTES_PER_MS)
    assert shown(app, "success")[-1] == f"In use: {NOTE}."
    assert app.button(key="topology_calibration_use").disabled
    assert NOTE in sidebar_captions(app)

    goto(app, "plan")  # auto-replan on the calibrated config
    current = app.session_state["ws_plan"]
    assert current.settings["calibration"] == cal
    assert current.plan["max_rank_cost_ms"] > default_ms  # slower HBM and NVLink than TorchRec assumes
    assert any(NOTE in i for i in shown(app, "info"))

    goto(app, "save_share")
    app.text_input(key="save_label").set_value("calibrated tutorial")
    app.button(key="save_run").click().run()
    assert not app.exception, app.exception
    token = app.session_state["ws_saved_token"]
    assert store.get_plan(token).settings["calibration"] == cal

    shared = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    shared.query_params["plan"] = token
    shared.run()
    assert not shared.exception, shared.exception
    assert any(NOTE in i for i in shown(shared, "info"))
    shared.button(key="shared_open").click().run()  # a copy in a fresh workspace is still calibrated
    assert shared.session_state["ws_calibration"] == cal and NOTE in sidebar_captions(shared)

    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{token}", f"saved:{store.list_plans()[-1].token}"]).run()
    summary = app.dataframe[0].value
    assert summary["estimates"].tolist() == ["calibrated: 3 runs on cuda, R^2 1.000", "configured bandwidths"]


def test_editing_a_bandwidth_by_hand_drops_the_mark(store, app):
    seed_runs(store)
    use_calibration(app)
    app.number_input(key="topology_hbm_mem_bw").set_value(500.0).run()
    assert not app.exception, app.exception
    assert workspace(app)["topology"]["hbm_mem_bw"] == pytest.approx(500.0 * presets.GBPS_TO_BYTES_PER_MS)
    assert "ws_calibration" not in app.session_state
    assert not any("In use" in s for s in shown(app, "success"))
    assert not any("calibrated" in c for c in sidebar_captions(app))
    assert not app.button(key="topology_calibration_use").disabled  # the fit can be used again
    goto(app, "plan")
    assert "calibration" not in app.session_state["ws_plan"].settings
    assert not any("calibrated" in i for i in shown(app, "info"))


def test_torchrec_defaults_undo_the_calibration(store, app):
    seed_runs(store)
    use_calibration(app)
    app.button(key="topology_calibration_defaults").click().run()
    assert not app.exception, app.exception
    topo = workspace(app)["topology"]
    assert topo["hbm_mem_bw"] == pytest.approx(engine.constants.HBM_MEM_BW)
    assert topo["intra_host_bw"] == pytest.approx(engine.constants.INTRA_NODE_BW)
    assert "ws_calibration" not in app.session_state
    assert app.number_input(key="topology_hbm_mem_bw").value == pytest.approx(897.0)
    assert app.button(key="topology_calibration_defaults").disabled


def test_no_runs_says_how_to_record_some(store, app):
    seed_runs(store, device="cpu")  # runs on another device kind do not count
    goto(app, "topology")
    infos = shown(app, "info")
    assert any(i.startswith("No succeeded validation run on cuda is recorded in this database") and "Runs page" in i
               and "python -m db validate" in i for i in infos), infos
    assert not shown(app, "error")
    assert not [b for b in app.button if b.key == "topology_calibration_use"]
    app.radio(key="topology_compute_device").set_value("cpu").run()  # the cpu runs fit the cpu topology
    table = fit_table(app)
    assert table["field"].tolist() == ["ddr_mem_bw", "intra_host_bw"]
    app.text_input(key="topology_calibration_device_name").set_value("H100").run()
    assert any("whose device name contains 'H100'" in i for i in shown(app, "info"))


def test_an_empty_database_says_there_is_nothing_to_fit(app):
    goto(app, "topology")
    assert any(i.startswith("No succeeded validation run on cuda") for i in shown(app, "info"))
    assert not shown(app, "error") and not shown(app, "warning")


def test_runs_that_determine_no_bandwidth_say_so(store, app):
    seed_runs(store, measured_scale=0.0)  # measured nothing: no bandwidth explains it
    goto(app, "topology")
    assert shown(app, "warning") == ["These runs determine no bandwidth: nothing to use."]
    assert any("hbm_mem_bw: the runs do not determine it" in c for c in shown(app, "caption"))
    assert not [b for b in app.button if b.key == "topology_calibration_use"]


def test_switching_the_device_kind_drops_the_mark(store, app):
    seed_runs(store)
    use_calibration(app)
    app.radio(key="topology_compute_device").set_value("cpu").run()
    assert "ws_calibration" not in app.session_state
    assert not any("calibrated" in c for c in sidebar_captions(app))


def test_a_database_failure_is_one_line(store, app, db_url):
    seed_runs(store)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as db:  # the runs can no longer be read
        db.execute("DROP TABLE metrics")
    goto(app, "topology")
    errors = shown(app, "error")
    assert len(errors) == 1 and errors[0].startswith("No calibration: ") and "\n" not in errors[0], errors
    assert "Traceback" not in errors[0]
