"""Runs page: start a real kernel dry-run of a saved plan in the background, follow it, see measured vs
estimated; a failing run shows its one-line error; a running one can be cancelled."""

from __future__ import annotations

import sys
import time

import pytest

import engine
from dashboard.serve import runner
from dashboard.text import ms_text
from dashboard.tables import presets
from dashboard.ui import services
from db import runsink
from tests.dashboard.helpers import goto, plotly_specs, shown, values
from tests.factories import tutorial

RUN_WAIT_S = 240
NOTE = "the config says cuda; this validation run measures on cpu, so the plan is priced for cpu (same placement)"


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
    assert str(rec.status) == "failed" and rec.error.startswith("rank 0 needs")  # recorded by python -m db dryrun
    assert "--max-bytes" in rec.error and "error: rank 0 needs" in rec.log
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


def _held_run(store, token: str, tmp_path, name: str) -> int:
    """A run whose command writes `name`.started, then waits until `name`.go exists."""
    run_id = store.create_run(token, "dryrun", "torch", "cpu")
    code = (f"import pathlib, time; d = pathlib.Path({str(tmp_path)!r}); (d / '{name}.started').touch()\n"
            f"while not (d / '{name}.go').exists(): time.sleep(0.05)")
    workdir = tmp_path / name
    workdir.mkdir()
    runner.launch(store, run_id, [sys.executable, "-c", code], workdir)
    return run_id


def _until(check, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_runs_take_turns_and_a_waiting_run_is_cancelled_before_it_starts(app, store, tmp_path):
    """The server's gate lets one run measure at a time (PLANNER_RUNS unset): the others stay queued, first come
    first served, their place shown on the page; Cancel takes a queued run out of line and it never starts."""
    assert runner.RUNS.size == 1
    token = _save(store, tutorial(), "tutorial")
    first, second, third = (_held_run(store, token, tmp_path, n) for n in ("first", "second", "third"))
    status = lambda r: str(store.get_run(r).status)  # noqa: E731
    _until(lambda: status(first) == "running")  # its command may start before the server records it
    assert [status(r) for r in (first, second, third)] == ["running", "queued", "queued"]
    assert (runner.ahead(first), runner.ahead(second), runner.ahead(third)) == (None, 0, 1)
    assert "waiting for a free run slot" in store.get_run(third).log

    goto(app, "runs")
    app.selectbox(key="runs_pick").set_value(third).run()
    assert any(f"Run {third} (" in i and "waiting for a free run slot, 1 run ahead" in i for i in shown(app, "info"))
    app.button(key="runs_cancel").click().run()
    rec = store.get_run(third)
    assert str(rec.status) == "cancelled" and "cancelled by the user before it started" in rec.log
    assert not runner.is_active(third) and runner.ahead(second) == 0

    (tmp_path / "first.go").touch()  # the first ends: the second starts, the third never does
    _until(lambda: (tmp_path / "second.started").exists() and status(second) == "running")
    assert runner.wait(first, 30)
    (tmp_path / "second.go").touch()
    assert runner.wait(second, 30)
    time.sleep(0.3)
    assert not (tmp_path / "third.started").exists() and runner.RUNS.busy == 0 and runner.RUNS.waiting == 0
    assert status(third) == "cancelled"


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
    # each rank's own embedding work, timed inside the real step, beside the step and the estimate
    assert 0 < got[(0, "embedding_ms")] and 0 < got[(1, "embedding_ms")]
    table = next(d.value for d in app.dataframe if "embedding work" in d.value.columns)
    assert table["embedding work"].tolist() == [ms_text(got[(r, "embedding_ms")]) for r in (0, 1)]
    slow = max((0, 1), key=lambda r: got[(r, "step_ms")])
    line = next(m for m in shown(app, "markdown") if "Slowest rank" in m)
    assert line.startswith(f"Slowest rank {slow}: a step took {ms_text(got[(slow, 'step_ms')])} (its embedding work "
                           f"{ms_text(got[(slow, 'embedding_ms')])}); estimated "
                           f"{ms_text(got[(slow, 'estimated_ms')])} for cpu, ")
    assert "Ids: generated: config distribution, seed 0" in line


def _slow_run(store, token: str, match: tuple[bool, bool] = (True, True)) -> int:
    """A 2-rank CPU validation of a CUDA plan, recorded as `python -m db validate` records it: 10.9 and 14.7 ms
    a step against 0.25 ms estimated for cpu (44-59x), 17 MB peak against 1.85 MB (issue 10's numbers)."""
    ranks = [{"rank": r, "iteration_ms": ms, "measured_ms": ms, "peak_bytes": 17_000_000, "state_bytes": 1_310_720,
              "shards_match": ok, "mismatches": [] if ok else ["large_table_0: plan x; holds y"],
              "estimated_ms": 0.25, "estimated_compute_ms": 0.2, "estimated_comms_ms": 0.05,
              "estimated_bytes": 1_850_000} for r, ms, ok in ((0, 10.9, match[0]), (1, 14.7, match[1]))]
    error = None if all(match) else "rank 1 holds other shards than the plan: large_table_0: plan x; holds y"
    result = {"status": "succeeded" if all(match) else "failed", "error": error, "ranks": ranks, "backend": "gloo",
              "device": "cpu", "nproc": 2, "shards_match": all(match), "estimate_compute_bw_bytes_per_ms": 5.5e7,
              "estimate_comms_bw_bytes_per_ms": 6.4e8, "estimate_multi_host": False, "estimated_device": "cpu",
              "config_device": "cuda", "notes": [NOTE]}
    run_id = store.create_run(token, "validation", "gloo", "cpu")
    runsink.record_result(store, run_id, result)
    return run_id


def test_a_run_40x_slower_than_estimated_is_flagged_with_the_calibration_one_click_away(app, store):
    token = _save(store, tutorial(), "tutorial")
    _slow_run(store, token)
    goto(app, "runs")
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Time, measured / estimated"] == "44x-59x"
    assert metrics["Memory, measured / estimated"] == "9.19x"
    assert metrics["Shards match the plan"] == "yes, all 2 ranks"
    # walked at 1280x720: the ratio chart's title ran into the next chart; short enough for half the page now
    titles = [s["layout"]["title"]["text"] for s in plotly_specs(app) if s["layout"].get("title")]
    assert "Measured / estimated per rank (green: holds)" in titles and max(map(len, titles)) <= 45, titles
    time_flag = next(w for w in shown(app, "warning") if w.startswith("Time:"))
    assert "rank 1 a step took 59x the estimate (14.7 ms measured, 0.25 ms estimated for cpu)" in time_flag
    assert "calibrate the bandwidths from the validation runs on cpu" in time_flag
    assert any(w.startswith("Memory: rank 0's peak was 9.19x the estimate") for w in shown(app, "warning"))
    captions = shown(app, "caption")
    assert "This run's estimates: priced for cpu, the device it measured, by TorchRec's default constants for cpu." \
        in captions
    assert f"Note: {NOTE}" in captions
    assert any(c.startswith("Estimates priced by TorchRec's default constants for cuda") for c in captions)
    ratios = next(s for s in plotly_specs(app) if s["layout"]["title"]["text"].startswith("Measured / estimated"))
    assert values(ratios["data"][0]["y"]) == pytest.approx([10.9 / 0.25, 14.7 / 0.25])
    button = app.button(key="runs_calibrate")
    assert button.label == "Calibrate cpu estimates from these runs (1 run)"
    button.click().run()
    assert not app.exception, app.exception
    cal = services.calibration("cpu").calibration.as_dict()  # the fit the button used: every succeeded run on cpu
    assert cal["device"] == "cpu" and cal["n_runs"] == 1
    topo = app.session_state["ws_config"]["topology"]
    assert topo["compute_device"] == "cpu" and all(topo[f] == v for f, v in cal["patch"].items())
    assert topo.get("profile") == cal.get("profile")  # the fixed costs the runs show, when the fit has them
    assert any("Estimates calibrated from 1 run on cpu" in t for t in shown(app, "toast"))


def test_shards_that_differ_are_shown_first(app, store):
    token = _save(store, tutorial(), "tutorial")
    _slow_run(store, token, match=(True, False))
    goto(app, "runs")
    kinds = [type(e).__name__ for e in app.main if type(e).__name__ in ("Metric", "PlotlyChart", "UnknownElement")]
    assert {m.label: m.value for m in app.metric}["Shards match the plan"] == "no: rank 1 differs"
    assert any(e.startswith("Shards: rank 1 held other shards") for e in shown(app, "error"))
    first_chart = next(i for i, e in enumerate(app.main) if getattr(e, "type", "") == "plotly_chart")
    shards = next(i for i, e in enumerate(app.main) if getattr(e, "label", "") == "Shards match the plan")
    assert shards < first_chart and kinds


def test_each_ranks_embedding_work_the_slowest_ranks_error_and_the_ids_are_shown(app, store):
    token = _save(store, tutorial(), "tutorial")
    run_id = store.create_run(token, "validation", "gloo", "cpu")
    ranks = [{"rank": r, "iteration_ms": ms, "embedding_ms": emb, "estimated_ms": 0.25, "peak_bytes": 3 * 2**20}
             for r, ms, emb in ((0, 10.9, 3.21), (1, 14.7, 4.56))]
    ids = {"source": "sample", "file": "clicks <b>.parquet", "bytes": 3 * 2**20, "rows_used": 4096, "batches": 4,
           "cycled": False}
    runsink.record_result(store, run_id, {"status": "succeeded", "ranks": ranks, "device": "cpu",
                                          "estimated_device": "cpu", "ids": ids})
    goto(app, "runs")
    table = next(d.value for d in app.dataframe if "embedding work" in d.value.columns)
    assert table["measured"].tolist() == ["10.9 ms", "14.7 ms"]
    assert table["embedding work"].tolist() == ["3.21 ms", "4.56 ms"]
    assert table["estimated"].tolist() == ["0.250 ms", "0.250 ms"]  # 3 significant digits
    line = next(m for m in shown(app, "markdown") if "Slowest rank" in m)
    assert "Slowest rank 1: a step took 14.7 ms (its embedding work 4.56 ms); estimated 0.250 ms for cpu, 98.3% low." \
        in line
    assert "Ids: sample clicks <b>.parquet (3.00 MiB, 4,096 rows in 4 batches)" in line
    listing = next(d.value for d in app.dataframe if "ids" in d.value.columns)
    assert listing["ids"].tolist() == ["sample clicks <b>.parquet (3.00 MiB, 4,096 rows in 4 batches)"]


def test_a_sample_run_without_a_file_is_one_line_and_starts_nothing(app, store):
    token = _save(store, tutorial(), "tutorial")
    goto(app, "runs")
    app.radio(key="runs_ids").set_value("sample").run()
    assert app.selectbox(key="runs_distribution").disabled
    app.button(key="runs_start").click().run()
    assert not app.exception, app.exception
    assert shown(app, "error") == ["Ids: upload a sample file (.parquet, .csv or .npz) above, or pick generated ids."]
    assert store.runs_for_plan(token) == []
