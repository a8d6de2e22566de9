"""Save & share: save with a label, the share link opens the plan read-only, unknown tokens say so."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.dashboard.conftest import APP, RUN_TIMEOUT_S
from tests.dashboard.helpers import goto, plotly_specs, shown, workspace


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


def test_nothing_to_save_before_planning(app):
    goto(app, "save_share")
    assert shown(app, "info") == ["No plan to save yet: make one on the Plan page."]
    assert shown(app, "caption")[0] == "Nothing saved yet."


def test_save_stores_the_plan_and_shows_its_link(app, store):
    token = _save(app, "tutorial, first try", author="ada")
    rec = store.get_plan(token)
    assert rec.label == "tutorial, first try" and rec.author == "ada" and rec.config_name == "tutorial"
    assert rec.plan["plan"] == app.session_state["ws_plan"].plan["plan"]
    assert [c.value for c in app.code] == [f"?plan={token}"]
    assert any("Saved 'tutorial, first try'" in t for t in shown(app, "toast"))
    saved = app.dataframe[0].value
    assert saved["label"].tolist() == ["tutorial, first try"] and saved["tables"].tolist() == [4]


def test_share_link_opens_the_same_plan_read_only(app, store):
    token = _save(app, "shared tutorial")
    plan = store.get_plan(token).plan
    shared = _open(token)
    assert shared.title[0].value == "shared tutorial"
    assert shared.caption[0].value.startswith("Read-only")
    assert shared.metric[0].value == f"{plan['max_rank_cost_ms']:.4g} ms"
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
    assert [c.value for c in app.code] == [f"https://planner.example.org/tools/planner/?plan={token}"]
