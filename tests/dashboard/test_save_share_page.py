"""Save & share: save with a label, the share link opens the plan read-only with its runs and measured figures,
the saved plans list every whole link with one to copy, unknown tokens say so."""

from __future__ import annotations

import json

import dataclasses

from streamlit.testing.v1 import AppTest

import engine
from dashboard.text import ms_text

from tests.dashboard.conftest import APP, RUN_TIMEOUT_S
from tests.dashboard.helpers import goto, plotly_specs, shown, workspace
from tests.dashboard.test_runs_page import _slow_run


def _save(app, label: str, author: str = "", config_name: str = "tutorial") -> str:
    goto(app, "plan")
    goto(app, "save_share")
    app.text_input(key="save_label").set_value(label)
    app.text_input(key="save_author").set_value(author)
    app.text_input(key="save_config_name").set_value(config_name)
    app.button(key="save_run").click().run()
    assert not app.exception, app.exception
    return app.session_state["ws_saved_token"]


def _open(token: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    at.query_params["plan"] = token
    at.run()
    assert not at.exception, at.exception
    return at


def test_a_first_open_has_its_plan_to_save_and_nothing_saved(app):
    goto(app, "save_share")  # the tutorial's tables are planned on a first open
    assert not shown(app, "info") and app.button(key="save_run")
    assert "Nothing saved yet." in shown(app, "caption")


def test_save_stores_the_plan_and_shows_its_link(app, store):
    token = _save(app, "tutorial, first try", author="ada")
    rec = store.get_plan(token)
    assert rec.label == "tutorial, first try" and rec.author == "ada" and rec.config_name == "tutorial"
    assert rec.plan["plan"] == engine.plan_to_dict(app.session_state["ws_plan"].plan)["plan"]
    assert [c.value for c in app.code] == [f"?plan={token}"] * 2  # the share box, and the saved plans' link
    assert any("Saved 'tutorial, first try'" in t for t in shown(app, "toast"))
    saved = app.dataframe[0].value
    assert saved["label"].tolist() == ["tutorial, first try"] and saved["tables"].tolist() == [4]


def test_author_and_config_name_come_back_and_the_form_says_whose_plan_it_saves(app, store):
    _save(app, "first", author="ada", config_name="tutorial-2gpu")
    goto(app, "topology")  # another page: Streamlit forgets the form's widgets
    goto(app, "save_share")
    assert app.text_input(key="save_author").value == "ada"
    assert app.text_input(key="save_config_name").value == "tutorial-2gpu"
    assert any(m.startswith("Saving the current plan by **Ours (engine)**: 4 tables on 2 ranks, slowest rank ")
               for m in shown(app, "markdown"))
    app.session_state["ws_plan"] = dataclasses.replace(app.session_state["ws_plan"], planner="torchrec", token=None)
    app.run()
    assert any(m.startswith("Saving the current plan by **TorchRec's EmbeddingShardingPlanner (baseline)**")
               for m in shown(app, "markdown"))


def test_share_link_opens_the_same_plan_read_only(app, store):
    token = _save(app, "shared tutorial")
    plan = store.get_plan(token).plan
    shared = _open(token)
    assert shared.title[0].value == "shared tutorial"
    assert shared.caption[0].value.startswith("Read-only")
    assert shared.metric[0].value == ms_text(plan["max_rank_cost_ms"])
    assert shared.dataframe[0].value["sharding"].tolist() == [plan["plan"][t]["sharding_type"]
                                                             for t in shared.dataframe[0].value["table"]]
    assert len(plotly_specs(shared)) >= 3
    assert not shared.get("data_editor") and not [b for b in shared.button if b.key == "plan_run"]


def test_open_a_shared_plan_in_the_workspace(app, store):
    token = _save(app, "to copy")
    shared = _open(token)
    shared.button(key="shared_open").click().run()
    assert not shared.exception
    assert "plan" not in shared.query_params
    assert workspace(shared) == store.get_plan(token).config
    assert shared.session_state["ws_plan"].token == token
    assert shared.title[0].value == "Tables & constraints"


def test_unknown_and_malformed_tokens_say_so(store):
    for token in ("AAAAAAAAAAAAAAAAAAAAAA", "not a token!"):
        at = _open(token)
        assert shown(at, "error") == [f"No saved plan has the token '{token}' in this database: the link may be "
                                      "mistyped, or the plan was saved in another database."]
        assert not plotly_specs(at)


def test_public_url_sets_the_share_links_address(app, monkeypatch):
    monkeypatch.setenv("PLANNER_PUBLIC_URL", "https://planner.example.org/tools/planner/")
    token = _save(app, "public")
    assert [c.value for c in app.code] == [f"https://planner.example.org/tools/planner/?plan={token}"] * 2
    assert app.dataframe[0].value["share link"].tolist() == [f"https://planner.example.org/tools/planner/?plan={token}"]


def test_saved_plans_show_each_whole_link_and_one_to_copy(app, store, monkeypatch):
    monkeypatch.setenv("PLANNER_PUBLIC_URL", "https://planner.example.org/")
    first = _save(app, "first")
    second = _save(app, "second")
    links = app.dataframe[0].value.set_index("label")["share link"]
    assert links.to_dict() == {"second": f"https://planner.example.org/?plan={second}",
                               "first": f"https://planner.example.org/?plan={first}"}
    assert app.code[-1].value == f"https://planner.example.org/?plan={second}"  # the plan just saved
    columns = json.loads(app.dataframe[0].proto.columns)  # the slowest rank to 3 significant digits with its unit
    assert columns["slowest rank"]["type_config"]["format"] == "%.3g ms", columns
    app.selectbox(key="save_link_pick").set_value(first).run()
    assert app.code[-1].value == f"https://planner.example.org/?plan={first}"


def test_the_share_view_shows_the_plans_runs_and_what_they_measured(app, store):
    token = _save(app, "measured")
    assert shown(_open(token), "caption")[-1] == "No run has measured this plan yet."
    run_id = _slow_run(store, token)
    shared = _open(token)
    runs = shared.dataframe[1].value  # after the per-table sharding
    assert runs["run"].tolist() == [run_id] and runs["status"].tolist() == ["succeeded"]
    metrics = {m.label: m.value for m in shared.metric}
    assert metrics["Time, measured / estimated"] == "44x-59x"
    assert metrics["Memory, measured / estimated"] == "9.19x"
    assert metrics["Shards match the plan"] == "yes, all 2 ranks"
    assert any(w.startswith("Time: on rank 1 a step took 59x the estimate") for w in shown(shared, "warning"))
    titles = [s["layout"].get("title", {}).get("text") for s in plotly_specs(shared)]
    assert titles[-2].startswith("Measured / estimated per rank") and titles[-1] == "Measured vs estimated per rank"
    table = shared.dataframe[2].value
    assert table["measured"].tolist() == ["10.9 ms", "14.7 ms"] and table["time ratio"].tolist() == ["44x", "59x"]
    assert not [b for b in shared.button if "calibrate" in (b.key or "")]  # read-only: no workspace change here
