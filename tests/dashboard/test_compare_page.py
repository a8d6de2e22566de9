"""Compare page: saved plans side by side, TorchRec's plan for the same config, moved tables, measured vs
estimated where runs exist."""

from __future__ import annotations

import pytest

import engine
from tests.dashboard.helpers import goto, plain, plotly_specs, shown, values
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


def test_measured_where_a_run_exists(app, store):
    a, _ = _save_two(store)
    run = store.create_run(a, "dryrun", "torch", "cpu")
    store.add_metrics(run, [(0, "step_ms", 0.25, "ms"), (1, "step_ms", 0.5, "ms")])
    store.update_run(run, status="succeeded")
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}"]).run()
    measured = [s for s in plotly_specs(app) if "measured vs estimated" in s["layout"]["title"]["text"]]
    assert len(measured) == 1
    assert [t["name"] for t in measured[0]["data"]] == ["estimated", "measured"]
    assert values(measured[0]["data"][1]["y"]) == [0.25, 0.5]


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
