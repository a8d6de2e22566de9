"""Bulk edit on the Tables page: no pattern picks every table by default, deletes ask for a confirmation, the
pattern empties after each action, and Undo takes back workspace edits (the last state.MAX_HISTORY of them)."""

from __future__ import annotations

from dashboard.ui import state
from tests.dashboard.helpers import edit, goto, shown, workspace

TUTORIAL_NAMES = ["large_table_0", "large_table_1", "small_table_0", "small_table_1"]


def names(app) -> list[str]:
    return [t["name"] for t in workspace(app)["tables"]]


def test_the_pattern_starts_empty_and_picks_nothing(app):
    assert app.text_input(key="tables_bulk_pattern").value == ""
    assert app.button(key="tables_bulk_apply").disabled and app.button(key="tables_bulk_delete").disabled
    assert "Type a pattern to pick tables: * picks them all." in shown(app, "caption")


def test_a_delete_asks_first_and_cancel_keeps_the_tables(app):
    app.text_input(key="tables_bulk_pattern").set_value("small_*").run()
    app.button(key="tables_bulk_delete").click().run()
    assert names(app) == TUTORIAL_NAMES  # nothing deleted yet
    (ask,) = [w for w in shown(app, "warning") if w.startswith("Delete 2 tables")]
    assert "small_table_0, small_table_1" in ask
    app.button(key="tables_bulk_delete_cancel").click().run()
    assert names(app) == TUTORIAL_NAMES and not [w for w in shown(app, "warning") if w.startswith("Delete")]
    assert app.text_input(key="tables_bulk_pattern").value == "small_*"  # cancelled: the pick stays


def test_a_confirmed_delete_deletes_empties_the_pattern_and_undo_brings_the_tables_back(app):
    app.text_input(key="tables_bulk_pattern").set_value("small_*").run()
    app.button(key="tables_bulk_delete").click().run()
    app.button(key="tables_bulk_delete_confirm").click().run()
    assert not app.exception, app.exception
    assert names(app) == ["large_table_0", "large_table_1"]
    assert app.text_input(key="tables_bulk_pattern").value == ""
    assert app.button(key="tables_bulk_delete").disabled
    app.button(key="tables_undo").click().run()
    assert names(app) == TUTORIAL_NAMES
    assert app.dataframe[0].value["name"].tolist() == TUTORIAL_NAMES  # the grid shows it too
    assert any("Undid delete 2 tables" in t for t in shown(app, "toast"))


def test_a_changed_pick_drops_the_waiting_delete(app):
    app.text_input(key="tables_bulk_pattern").set_value("small_*").run()
    app.button(key="tables_bulk_delete").click().run()
    app.text_input(key="tables_bulk_pattern").set_value("large_*").run()
    assert not [w for w in shown(app, "warning") if w.startswith("Delete")]
    assert names(app) == TUTORIAL_NAMES


def test_apply_empties_the_pattern_and_undo_takes_back_grid_and_bulk_edits(app):
    app.text_input(key="tables_bulk_pattern").set_value("large_*").run()
    app.selectbox(key="tables_bulk_column").set_value("dim").run()
    app.number_input(key="tables_bulk_value_dim").set_value(32).run()
    app.button(key="tables_bulk_apply").click().run()
    assert [t["embedding_dim"] for t in workspace(app)["tables"]] == [32, 32, 64, 64]
    assert app.text_input(key="tables_bulk_pattern").value == ""
    edit(app, "tables_grid", edited={3: {"dim": 16}})
    assert [t["embedding_dim"] for t in workspace(app)["tables"]] == [32, 32, 64, 16]
    assert app.session_state[state.HISTORY][-1][0] == "a grid edit"
    app.button(key="ws_undo").click().run()  # the sidebar's Undo, the same history
    assert [t["embedding_dim"] for t in workspace(app)["tables"]] == [32, 32, 64, 64]
    assert app.dataframe[0].value["dim"].tolist() == [32, 32, 64, 64]
    app.button(key="tables_undo").click().run()
    assert [t["embedding_dim"] for t in workspace(app)["tables"]] == [64, 64, 64, 64]
    assert app.button(key="tables_undo").disabled  # nothing left: opening the page was no edit


def test_undo_keeps_the_last_twenty_edits(app):
    for i in range(state.MAX_HISTORY + 5):
        edit(app, "tables_grid", edited={0: {"rows": 100 + i}})
    assert len(app.session_state[state.HISTORY]) == state.MAX_HISTORY
    for _ in range(state.MAX_HISTORY):
        app.button(key="tables_undo").click().run()
    assert workspace(app)["tables"][0]["num_embeddings"] == 104  # the 5 oldest edits are gone
    assert app.button(key="tables_undo").disabled


def test_opening_the_topology_page_is_no_edit_and_undo_puts_its_inputs_back(app):
    goto(app, "topology")
    assert state.HISTORY not in app.session_state or not app.session_state[state.HISTORY]
    app.number_input(key="topology_world_size").set_value(16)
    app.number_input(key="topology_hosts").set_value(2)
    app.run()
    assert (workspace(app)["topology"]["world_size"], workspace(app)["topology"]["local_world_size"]) == (16, 8)
    app.button(key="ws_undo").click().run()
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (2, 2)
    assert app.number_input(key="topology_world_size").value == 2 and app.number_input(key="topology_hosts").value == 1
    assert app.button(key="ws_undo").disabled
