"""Runs page: start a real kernel dry-run of a saved plan in the background, follow it, see measured vs
estimated; a failing run shows its one-line error; a running one can be cancelled."""

from __future__ import annotations

import sys

import pytest

import engine
from dashboard import presets, runner
from tests.dashboard.helpers import goto, plotly_specs, shown, values
from tests.factories import tutorial

RUN_WAIT_S = 240


def _save(store, cfg: dict, label: str) -> str:
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    return store.save_plan(cfg, plan, label=label)


def _start(app, kind: str = "dryrun", iters: int = 2) -> int:
    goto(app, "runs")
    app.radio(key="runs_kind").set_value(kind)
    app.selectbox(key="runs_device").set_value("cpu")
    app.number_input(key="runs_iters").set_value(iters).run()
    app.button(key="runs_start").click().run()
    assert not app.exception, app.exception
    run_id = app.session_state["ws_runs"][-1]
    assert runner.wait(run_id, RUN_WAIT_S), "the run did not finish in time"
    app.run()
    assert not app.exception, app.exception
    return run_id


def test_runs_need_a_saved_plan(app):
    goto(app, "runs")
    assert shown(app, "info") == ["Runs measure saved plans: save one on Save & share first."]


@pytest.mark.timeout(600)
def test_a_dry_run_measures_every_rank(app, store):
    token = _save(store, tutorial(), "tutorial")
    run_id = _start(app)
    rec = store.get_run(run_id)
    assert str(rec.status) == "succeeded", rec.error
    assert rec.plan_token == token and rec.device == "cpu" and "dryrun" in rec.log
    measured = {m.rank: m.value for m in store.metrics(run_id) if m.name == "step_ms"}
    assert sorted(measured) == [0, 1] and all(v > 0 for v in measured.values())
    assert any(f"Run {run_id}" in s and "succeeded" in s for s in shown(app, "success"))
    chart = next(s for s in plotly_specs(app) if s["layout"]["title"]["text"] == "Measured vs estimated per rank")
    assert values(chart["data"][1]["y"]) == pytest.approx([measured[0], measured[1]])
    assert "step_ms [ms]" in app.dataframe[-1].value.columns


@pytest.mark.timeout(600)
def test_a_failing_run_shows_its_error(app, store):
    _save(store, presets.dlrm_criteo_1tb(), "dlrm")  # 40M x 128 fp32 tables: over the dry-run's memory guard
    run_id = _start(app)
    rec = store.get_run(run_id)
    assert str(rec.status) == "failed" and rec.error.startswith("error: rank")
    assert "--max-bytes" in rec.error
    assert any(rec.error in e for e in shown(app, "error"))


def test_cancel_a_running_run(app, store, tmp_path):
    token = _save(store, tutorial(), "tutorial")
    run_id = store.create_run(token, "dryrun", "torch", "cpu")
    code = "import sys, time; print('rank', 1, '/', 4, file=sys.stderr, flush=True); time.sleep(120)"
    runner.launch(store, run_id, [sys.executable, "-c", code], tmp_path)
    goto(app, "runs")
    for _ in range(100):  # the log line arrives through the watcher thread
        if "rank 1 / 4" in store.get_run(run_id).log:
            break
        runner.wait(run_id, 0.05)
    app.run()
    assert app.progress[0].value == 25  # "rank 1 / 4" read from the log
    app.button(key="runs_cancel").click().run()
    assert runner.wait(run_id, 30)
    assert str(store.get_run(run_id).status) == "cancelled"
    app.run()
    assert any("cancelled" in w for w in shown(app, "warning"))


@pytest.mark.timeout(600)
def test_a_validation_run_or_why_there_is_none(app, store):
    _save(store, tutorial(), "tutorial")
    goto(app, "runs")
    app.radio(key="runs_kind").set_value("validation").run()
    reason = runner.unavailable_reason("validation")
    if reason:  # an install without `python -m engine validate`: the page says so and cannot start one
        assert any("not available" in w for w in shown(app, "warning"))
        assert app.button(key="runs_start").disabled
        return
    run_id = _start(app, "validation")
    rec = store.get_run(run_id)
    assert str(rec.status) == "succeeded", rec.error
    assert rec.backend == "gloo" and rec.device_info.get("nproc") == 2
    got = {(m.rank, m.name): m.value for m in store.metrics(run_id)}
    assert got[(0, "step_ms")] > 0 and got[(1, "step_ms")] > 0
    assert got[(0, "shards_match")] == 1.0 and got[(1, "shards_match")] == 1.0
    chart = next(s for s in plotly_specs(app) if s["layout"]["title"]["text"] == "Measured vs estimated per rank")
    assert values(chart["data"][0]["y"]) == pytest.approx([got[(0, "estimated_ms")], got[(1, "estimated_ms")]])
