"""The Workload page in AppTest: the generated example sample measured (figures with the numbers of a direct count),
"Apply to tables" writes the measured pooling and workload blocks into the workspace config and the headline
replans; undo goes back. Bad and too-big uploads: tests/dashboard/test_workload_plans.py (AppTest has no file
uploader) and the browser walk in tests/e2e/test_workload_e2e.py."""

import io

import numpy as np
import pyarrow.parquet as pq
import pytest

import engine
from tests.dashboard.helpers import goto, plotly_specs, shown, workspace
from tests.waits import until


def _example_counts(config: dict) -> dict:
    cfg = engine.parse_config(config)
    data = engine.generated_sample_bytes(cfg, 4000, 1, "parquet")
    table = pq.read_table(io.BytesIO(data))
    return {f: [len(c) for c in table.column(f).to_pylist()] for t in cfg.tables for f in t.feature_names}


def measured(app) -> None:
    """Click the example sample and run the page until its figures are in: the click's own run only starts the
    measuring in a worker process (the page is not blocked by it) and shows it in the works."""
    app.button(key="workload_example").click().run()
    assert not app.exception, app.exception
    assert "workload_measured" not in app.session_state or app.session_state["workload_measured"] is None
    assert "workload_task" in app.session_state
    until(lambda: not app.session_state["workload_task"]["task"].live, "the measuring task to end", 60)
    app.run()
    assert "workload_task" not in app.session_state and app.session_state["workload_measured"] is not None


def test_example_sample_figures_and_apply_replans(app):
    goto(app, "workload")
    assert not plotly_specs(app)  # nothing measured yet
    measured(app)
    assert not app.error, [e.value for e in app.error]
    config = workspace(app)
    lengths = _example_counts(config)
    specs = plotly_specs(app)
    titles = [s["layout"]["title"]["text"] for s in specs]
    for t in config["tables"]:
        assert any(t["name"] in x and "miss ratio" in x for x in titles)
    for f, ls in lengths.items():
        hist = next(s for s in specs if s["layout"]["title"]["text"].startswith(f"{f}: ids per sample"))
        assert hist["data"][0]["y"] == np.bincount(ls).tolist()
        rank = next(s for s in specs if s["layout"]["title"]["text"].startswith(f"{f}: rank-frequency"))
        assert rank["layout"]["xaxis"]["type"] == "log"
    # the chosen cache marked at the default cache load factor x rows
    t0 = config["tables"][0]
    miss = next(s for s in specs if s["layout"]["title"]["text"].startswith(f"{t0['name']}: LRU"))
    assert miss["data"][1]["x"] == [round(engine.FIELDS["cache_load_factor"].default * t0["num_embeddings"])]

    before_plan = app.session_state["ws_plan"]
    app.button(key="workload_apply").click().run()
    assert not app.exception, app.exception
    after = workspace(app)
    for t in after["tables"]:
        c = after["constraints"][t["name"]]
        want = [sum(lengths[f]) / 4000 for f in t["feature_names"]]
        assert c["pooling_factors"] == pytest.approx(want)
        assert c["workload"]["from"]["file"] == "generated.parquet"
    plan = app.session_state["ws_plan"]
    assert plan is not before_plan and plan.matches(after)  # the headline replanned on the applied config
    assert any("Applied" in m for m in shown(app, "markdown"))
    assert any("pooling_factors" in str(d.value["field"].tolist()) for d in app.dataframe)


def test_apply_is_undone_by_undo(app):
    goto(app, "workload")
    before = workspace(app)
    assert not any("workload" in c for c in (before.get("constraints") or {}).values())
    measured(app)
    app.button(key="workload_apply").click().run()
    assert workspace(app) != before and all("workload" in c for c in workspace(app)["constraints"].values())
    app.sidebar.button(key="ws_undo").click().run()
    assert not app.exception, app.exception
    assert not any("workload" in c for c in workspace(app)["constraints"].values())
