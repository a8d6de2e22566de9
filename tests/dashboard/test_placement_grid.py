"""Placement rules in the constraints grid (issue 13): typed as text ("0, 2-3", "t1, t2"), written to the config
as lists, kept through other edits, honoured by the working view's plan; a bad cell named on its row, never a
false problem on the rows it names."""

from __future__ import annotations

from dashboard.tables import grid
from tests.dashboard.helpers import edit, workspace


def test_rules_typed_in_the_grid_reach_the_config_and_the_plan(app):
    edit(app, "tables_constraints_grid", edited={0: {"ranks": "1"}, 2: {"colocate": "small_table_1"},
                                                 3: {"apart": "large_table_0"}})
    cons = workspace(app)["constraints"]
    assert cons["large_table_0"]["ranks"] == [1]
    assert cons["small_table_0"]["colocate"] == ["small_table_1"]
    assert cons["small_table_1"]["apart"] == ["large_table_0"]
    assert app.dataframe[1].value["ranks"].tolist()[0] == "1"
    plan = app.session_state["ws_plan"].plan.tables  # the working view replanned with the rules
    assert plan["large_table_0"].ranks == (1,)
    assert plan["small_table_0"].ranks == plan["small_table_1"].ranks
    assert not set(plan["small_table_1"].ranks) & set(plan["large_table_0"].ranks)
    edit(app, "tables_grid", edited={1: {"dim": 32}})  # another edit keeps the rules
    assert workspace(app)["constraints"]["large_table_0"]["ranks"] == [1]


def test_a_bad_rule_is_named_on_its_row_only(app):
    edit(app, "tables_constraints_grid", edited={0: {"colocate": "large_table_1"}, 1: {"ranks": "0, x"}})
    issues = app.dataframe[1].value["issue"].tolist()
    assert issues[1] == "ranks: 'x' is not a number or a range (e.g. 0, 2-3)"
    assert issues[0] == ""  # it names row 2's table, whose own cell is at fault: not a problem of row 1
    edit(app, "tables_constraints_grid", edited={0: {"colocate": "large_table_1"}, 1: {"ranks": "5"}})
    assert app.dataframe[1].value["issue"].tolist()[1] == "ranks: rank 5 is outside world_size 2 (ranks 0-1)"


def test_rule_text_round_trip():
    assert grid.rule_text([0, 2, 3, 4, 7], True) == "0, 2-4, 7"
    assert grid.rule_values("0, 2-4, 7", True) == [0, 2, 3, 4, 7]
    assert grid.rule_values("t1, t2 ,", False) == ["t1", "t2"]
    assert grid.rule_values("  ", True) is None and grid.rule_values("1-x", True) == ["1-x"]
