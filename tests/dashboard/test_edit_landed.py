"""Issue 28 (a walk leftover): an edit that leaves the plan as it was (a value set to what it already was, a
constraint the plan already kept) still shows that it landed: the working view's change line says the edit was
planned and nothing changed, and counts such edits in a row, so each one shows. Driven through the Tables page's
bulk edit: AppTest fires no widget callback for a grid edit, and in the browser Streamlit's grid drops a value typed
over itself before it reaches the app; a grid edit that leaves the plan as it was is
tests/e2e/test_walk28_browser.py's."""

from __future__ import annotations

from tests.dashboard.helpers import goto, shown, workspace
from tests.dashboard.test_workspace import _ms, _strip


def _bulk_set(app, pattern: str, column: str, value) -> None:
    app.text_input(key="tables_bulk_pattern").set_value(pattern).run()
    app.selectbox(key="tables_bulk_column").set_value(column).run()
    widget = app.multiselect if isinstance(value, list) else app.number_input
    widget(key=f"tables_bulk_value_{column}").set_value(value).run()
    app.button(key="tables_bulk_apply").click().run()
    assert not app.exception, app.exception


def test_an_edit_that_changes_nothing_says_it_was_planned(app):
    first = app.session_state["ws_plan"]
    config = workspace(app)
    _bulk_set(app, "large_*", "dim", 64)  # they are 64 already: the config is as it was
    assert workspace(app) == config and app.session_state["ws_plan"] is first
    same = f"Edit planned: same plan, slowest rank {_ms(first.plan)} (same)."
    assert _strip(app)[1].endswith(f". {same}"), _strip(app)

    _bulk_set(app, "small_*", "dim", 64)  # again: the count shows that this one landed too
    assert _strip(app)[1].endswith(f". 2 edits in a row planned: same plan, slowest rank {_ms(first.plan)} (same)."), \
        _strip(app)

    _bulk_set(app, "large_*", "dim", 32)  # a change: what changed, as before
    second = app.session_state["ws_plan"]
    assert second.plan.tables != first.plan.tables
    assert "Since the last plan: slowest rank" in _strip(app)[1] and "edits in a row" not in _strip(app)[1]

    _bulk_set(app, "large_*", "dim", 32)  # no change after a change: one edit, not three
    assert _strip(app)[1].endswith(f". Edit planned: same plan, slowest rank {_ms(second.plan)} (same)."), \
        _strip(app)


def test_a_constraint_the_plan_already_keeps_is_planned_and_said_so(app):
    first = app.session_state["ws_plan"]
    kind = first.plan.tables["large_table_0"].sharding_type.value
    _bulk_set(app, "large_table_0", "sharding_types", [kind])  # the config changes, the plan does not
    assert workspace(app)["constraints"]["large_table_0"]["sharding_types"] == [kind]
    now = app.session_state["ws_plan"]
    assert now is not first and now.plan.tables == first.plan.tables
    assert _strip(app)[1].endswith(f". Edit planned: same plan, slowest rank {_ms(first.plan)} (same)."), \
        _strip(app)
    goto(app, "plan")  # the Plan page's line under its title says the same
    assert f"Edit planned: same plan, slowest rank {_ms(first.plan)} (same)" in shown(app, "caption")
