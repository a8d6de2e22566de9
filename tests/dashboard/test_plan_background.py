"""Issue 12, point 4: a plan that no longer matches the config is never shown as the current one; TorchRec's planner
runs in the background (another process) with its elapsed time and a Cancel, the app usable meanwhile, and its
plan becomes the current one only if the config is still the one it planned."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.dashboard.helpers import edit, goto, plain, plotly_specs, shown, workspace

pytestmark = pytest.mark.timeout(300)
JOB_WAIT_S = 240  # TorchRec's planner on the tutorial: torch's import and a few seconds, on a busy machine more


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


def _start_torchrec(app):
    goto(app, "plan")
    app.radio(key="plan_planner").set_value("torchrec").run()
    app.button(key="plan_run").click().run()
    assert not app.exception, app.exception
    job = app.session_state["ws_plan_job"]
    return job


def test_a_plan_for_an_earlier_config_is_never_shown_as_current(app):
    app.selectbox(key="tables_preset").set_value("synthetic").run()
    app.number_input(key="tables_syn_count").set_value(60).run()
    app.button(key="tables_load_preset").click().run()
    goto(app, "plan")
    assert len(app.session_state["ws_plan"].plan.tables) == 60 and app.dataframe
    goto(app, "tables")
    app.selectbox(key="tables_preset").set_value("tutorial").run()
    app.button(key="tables_load_preset").click().run()
    edit(app, "tables_grid", edited={1: {"dim": 0}})  # the case: an error right after, 4 tables
    goto(app, "plan")
    assert shown(app, "error")[0].startswith("The config has a problem: tables[1].embedding_dim")
    assert not app.dataframe and not plotly_specs(app) and not app.get("download_button")
    [expander] = app.expander
    assert "earlier config" in expander.label and "not this config's" in expander.label
    assert all("60 tables" not in c or "earlier" in c for c in shown(app, "caption"))
    sidebar = [plain(c.value) for c in app.sidebar.caption]
    assert not any(c.startswith("Plan: slowest rank") for c in sidebar)


def test_torchrec_runs_in_the_background_and_its_plan_becomes_current(app):
    ours = app.session_state["ws_plan"]
    job = _start_torchrec(app)
    assert job.job.running and job.planner == "torchrec"
    running = [m for m in shown(app, "markdown") if "in the background" in m]
    assert running and running[0].startswith(":material/hourglass_top: TorchRec's EmbeddingShardingPlanner "
                                             "(baseline) is planning 4 tables in the background: ")
    assert app.button(key="plan_job_cancel")
    assert app.session_state["ws_plan"] is ours and app.dataframe  # meanwhile the current plan is shown as it was
    assert any("planning in the background" in plain(c.value) for c in app.sidebar.caption)
    assert job.job.wait(JOB_WAIT_S).value == "done", job.job.text("stderr.txt")
    app.run()
    current = app.session_state["ws_plan"]
    assert current.planner == "torchrec" and current.matches(workspace(app))
    assert "ws_plan_job" not in app.session_state and not job.job.workdir.exists() and _gone(job.job.pid)
    assert any(t.startswith("TorchRec's EmbeddingShardingPlanner (baseline) finished in ") for t in shown(app, "toast"))
    assert app.metric[2].value == "n/a"  # TorchRec's plans carry no lower bound
    assert app.session_state["ws_previous_plan"] is ours


def test_cancel_ends_the_process_and_the_app_stays_usable(app):
    job = _start_torchrec(app)
    goto(app, "tables")  # usable meanwhile: an edit replans with ours, the headline follows
    edit(app, "tables_grid", edited={0: {"rows": 50000}})
    assert app.session_state["ws_plan"].matches(workspace(app)) and job.job.running
    goto(app, "plan")
    assert app.button(key="plan_job_cancel")
    app.button(key="plan_job_cancel").click().run()
    assert not app.exception, app.exception
    assert "ws_plan_job" not in app.session_state and _gone(job.job.pid) and not job.job.workdir.exists()
    assert any(t.startswith("Cancelled TorchRec's EmbeddingShardingPlanner (baseline) after ")
               for t in shown(app, "toast"))
    assert not [m for m in shown(app, "markdown") if "in the background" in m]
    assert app.session_state["ws_plan"].planner == "ours"


def test_a_baseline_finished_for_an_earlier_config_is_not_the_current_plan(app):
    job = _start_torchrec(app)
    goto(app, "tables")
    edit(app, "tables_grid", edited={0: {"rows": 50000}})
    ours = app.session_state["ws_plan"]
    assert job.job.wait(JOB_WAIT_S).value == "done", job.job.text("stderr.txt")
    app.run()
    assert app.session_state["ws_plan"] is ours and ours.planner == "ours"
    warnings = shown(app, "warning")
    assert any("but for an earlier config" in w and "not the current plan" in w for w in warnings), warnings
    assert "TorchRec for an earlier config (4 tables)" in app.session_state["ws_extra_plans"]
