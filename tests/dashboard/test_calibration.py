"""Calibration in the workspace: the Topology page fits the bandwidths to validation runs recorded in the
database, "Use this calibration" puts them in the topology, plans say their estimates are calibrated (Plan,
sidebar, saved settings, shared view, Compare), and a hand edit or TorchRec's defaults drop the mark.
"""

from __future__ import annotations

import sqlite3

import pytest
from streamlit.testing.v1 import AppTest

import engine
from dashboard.tables import presets
from db import runsink
from engine.calibrate import apply_calibration
from tests.factories import tutorial
from tests.dashboard.conftest import APP, RUN_TIMEOUT_S
from tests.dashboard.helpers import goto, plain, shown, workspace

HBM_BW, INTRA_BW = 4.0e8, 2.0e8  # bytes/ms the seeded runs measure (the tutorial assumes 897 and 600 GiB/s)
FIXED = {"step_ms": 0.5, "collective_ms": 0.03, "launch_ms": 0.01, "piece_ms": 0.002}
PLANS = (("table_wise", 2), ("row_wise", 2), ("data_parallel", 2), ("column_wise", 4), (None, 4),
         ("table_row_wise", 4), ("row_wise", 4), ("table_column_wise", 2))  # (forced sharding type, ranks)
NOTE = f"Estimates calibrated from {len(PLANS)} runs on cuda (R^2 1.000)"


def seed_runs(store, device: str = "cuda", flat: bool = False) -> list[int]:
    """Eight saved plans of the tutorial's tables (a sharding type forced, 2 or 4 ranks) and one succeeded
    validation run of each, recorded as `python -m db validate` does, whose every rank measured the step the
    estimator gives under HBM_BW (or DDR on cpu), INTRA_BW and FIXED; flat: every run measured 5 ms."""
    truth = {"patch": {"hbm_mem_bw" if device == "cuda" else "ddr_mem_bw": HBM_BW, "intra_host_bw": INTRA_BW},
             "profile": {"device": device, "backend": "nccl" if device == "cuda" else "gloo", "hosts": 1, **FIXED}}
    ids = []
    for name, ws in PLANS:
        cfg = tutorial(name)
        cfg["topology"].update(compute_device=device, world_size=ws, local_world_size=ws)
        parsed = engine.parse_config(cfg)
        plan = engine.plan(parsed, engine.PlannerSettings(search=False))
        step = 5.0 if flat else engine.evaluate(engine.parse_config(apply_calibration(cfg, truth)),
                                                 plan.tables).max_rank_cost_ms
        token = store.save_plan(engine.config_to_dict(parsed), engine.plan_to_dict(plan), label="validated",
                                config_name=f"tutorial-{name}-{ws}", settings={"source": runsink.SOURCE})
        data = {"status": "succeeded", "backend": "nccl" if device == "cuda" else "gloo", "device": device,
                "device_name": "NVIDIA H100" if device == "cuda" else "cpu",
                "ranks": [{"rank": r, "iteration_ms": step, "shards_match": True} for r in range(ws)]}
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
    runs = ", ".join(map(str, ids))
    assert any(f"Fitted to **8 succeeded validation runs** on cuda: **R^2 1.000** (runs {runs})"
               in m for m in shown(app, "markdown"))
    assert any(m.startswith("Fixed costs (cuda/nccl, 1 host): ") for m in shown(app, "markdown"))
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
    default_ms = app.session_state["ws_plan"].plan.max_rank_cost_ms
    use_calibration(app)
    topo = workspace(app)["topology"]
    assert topo["hbm_mem_bw"] == pytest.approx(HBM_BW, rel=1e-12)
    assert topo["intra_host_bw"] == pytest.approx(INTRA_BW, rel=1e-12)
    assert topo["ddr_mem_bw"] == pytest.approx(engine.constants.DDR_MEM_BW)  # not fitted: left alone
    cal = app.session_state["ws_calibration"]
    assert (cal["device"], cal["n_runs"], cal["r2"]) == ("cuda", len(PLANS), pytest.approx(1.0))
    assert topo["profile"] == cal["profile"] and topo["profile"]["collective_ms"] == pytest.approx(0.03)
    assert app.number_input(key="topology_hbm_mem_bw").value == pytest.approx(HBM_BW / presets.GBPS_TO_BYTES_PER_MS)
    assert shown(app, "success")[-1] == f"In use: {NOTE}."
    assert app.button(key="topology_calibration_use").disabled
    assert NOTE in sidebar_captions(app)

    goto(app, "plan")  # auto-replan on the calibrated config
    current = app.session_state["ws_plan"]
    assert current.settings["calibration"] == cal
    assert current.plan.max_rank_cost_ms > default_ms + FIXED["step_ms"] / 2  # fixed costs, slower HBM and NVLink
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
    assert summary["estimates"].tolist() == [f"a calibration from {len(PLANS)} runs on cuda (R^2 1.000)",
                                             "TorchRec's default constants for cuda"]


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
    seed_runs(store, flat=True)  # every step 5 ms: a fixed cost per step, no bandwidth, explains it
    goto(app, "topology")
    assert any("hbm_mem_bw: the runs do not determine it" in c for c in shown(app, "caption"))
    fixed = [m for m in shown(app, "markdown") if m.startswith("Fixed costs (cuda/nccl, 1 host): ")]
    assert len(fixed) == 1 and " ms per step, " in fixed[0]
    assert not app.dataframe  # no bandwidth to show
    use_calibration(app)
    assert 4.0 < workspace(app)["topology"]["profile"]["step_ms"] <= 5.0  # the rest: TorchRec's bandwidth terms


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
