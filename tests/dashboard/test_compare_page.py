"""Compare page: saved plans side by side (with the constants that priced each), TorchRec's plan for the same
config, moved tables, measured over estimated per rank where runs exist, flagged with the calibration at hand."""

from __future__ import annotations

import pytest

import engine
from db import runsink
from tests.dashboard.helpers import goto, plain, plotly_specs, shown, values
from tests.dashboard.test_runs_page import _slow_run
from tests.factories import tutorial


def _save_two(store) -> tuple[str, str]:
    free = tutorial()
    rw = tutorial("row_wise")
    a = store.save_plan(free, engine.plan_to_dict(engine.plan(engine.parse_config(free))), label="free choice")
    b = store.save_plan(rw, engine.plan_to_dict(engine.plan(engine.parse_config(rw))), label="all row-wise")
    return a, b


def test_nothing_to_compare(app):
    goto(app, "compare")
    assert shown(app, "info") == ["Nothing to compare yet: make a plan, save it, then come back."]


def test_two_saved_plans_side_by_side(app, store):
    a, b = _save_two(store)
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}", f"saved:{b}"]).run()
    summary = app.dataframe[0].value
    assert [p.split(" (")[0] for p in summary["plan"]] == ["free choice", "all row-wise"]
    assert summary["slowest rank ms"].tolist() == pytest.approx(
        [store.get_plan(a).max_rank_cost_ms, store.get_plan(b).max_rank_cost_ms])
    titles = [s["layout"]["title"]["text"] for s in plotly_specs(app)]
    assert titles == ["Estimated cost per rank", "HBM per rank"]
    assert [t["name"].split(" (")[0] for t in plotly_specs(app)[0]["data"]] == ["free choice", "all row-wise"]
    moved = plain(app.expander[0].label)
    assert moved.startswith("all row-wise") and "4 of 4 tables placed differently" in moved
    assert app.dataframe[1].value.iloc[:, 2].str.startswith("row_wise").all()
    assert app.dataframe[1].value.columns[2].startswith("in all row-wise (ours")
    assert any(c.startswith("No run has measured these plans yet") for c in shown(app, "caption"))
    assert summary["estimates"].tolist() == ["TorchRec's default constants for cuda"] * 2


def test_measured_over_estimated_where_a_run_exists(app, store):
    a, b = _save_two(store)
    run = store.create_run(a, "dryrun", "fbgemm", "cpu")  # the plan is for cuda; the dry-run priced it for cpu
    runsink.record_result(store, run, {"ranks": [
        {"rank": 0, "measured_ms": 0.25, "estimated_ms": 0.3, "estimated_compute_ms": 0.2},
        {"rank": 1, "measured_ms": 0.5, "estimated_ms": 0.3, "estimated_compute_ms": 0.25}],
        "device": "cpu", "estimated_device": "cpu"})
    old = store.create_run(b, "dryrun", "torch", "cpu")  # no estimate of its own: never compared with cuda's
    runsink.record_result(store, old, {"ranks": [{"rank": 0, "measured_ms": 0.4}, {"rank": 1, "measured_ms": 0.4}]})
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}", f"saved:{b}"]).run()
    ratios = next(s for s in plotly_specs(app) if s["layout"]["title"]["text"].startswith("Measured / estimated"))
    assert [t["name"].split(" (")[0] for t in ratios["data"]][:2] == ["free choice", "all row-wise"]
    assert values(ratios["data"][0]["y"]) == pytest.approx([1.25, 2.0])  # a dry-run: kernels over compute
    flagged = next(w for w in shown(app, "warning") if w.startswith("**free choice"))
    assert "time 1.25x-2.00x" in flagged and "shards not checked" in flagged
    assert any(t.startswith("**all row-wise") and "time n/a" in t for t in shown(app, "success"))
    table = app.dataframe[-1].value
    assert table["time ratio"].tolist() == ["1.25x", "2.00x", "n/a", "n/a"]


def test_a_run_40x_slower_than_estimated_is_flagged_on_compare_too(app, store):
    a, _ = _save_two(store)
    _slow_run(store, a)
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}"]).run()
    flagged = next(w for w in shown(app, "warning") if w.startswith("**free choice"))
    assert "time 44x-59x · peak memory 9.19x · shards yes, all 2 ranks" in flagged
    assert any(c.startswith("Time outside 0.8x-1.25x: calibrate") for c in shown(app, "caption"))
    app.button(key="compare_calibrate_cpu").click().run()
    assert not app.exception and app.session_state["ws_config"]["topology"]["compute_device"] == "cpu"


@pytest.mark.timeout(300)
def test_add_torchrecs_plan_for_the_same_config(app, store):
    a, _ = _save_two(store)
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}"]).run()
    app.button(key="compare_add_torchrec").click().run()
    assert not app.exception and not shown(app, "error"), shown(app, "error")
    picked = app.multiselect(key="compare_pick").value
    assert len(picked) == 2 and picked[1] == "extra:TorchRec for free choice"
    summary = app.dataframe[0].value
    assert summary["planner"].tolist() == ["engine", "torchrec"]
