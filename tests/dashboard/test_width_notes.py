"""The tables grid says on the row, as it is typed, what a dim that is not a multiple of 4 means for the plan."""

from __future__ import annotations

import json

from dashboard.tables import row_checks
from tests.dashboard.helpers import edit, goto, shown, workspace

NOTE = ("note: dim 30 is not a multiple of 4, which fbgemm's fused kernels need: the table can only be data_parallel "
        "(dense kernel, a full copy on every rank); a dim of 28 or 32 can be sharded")


def test_a_dim_30_row_shows_the_note_in_its_issue_column_without_blocking(app):
    edit(app, "tables_grid", edited={2: {"dim": 30}})
    assert workspace(app)["tables"][2]["embedding_dim"] == 30
    assert app.dataframe[0].value["issue"].tolist() == ["", "", NOTE, ""]
    assert app.dataframe[1].value["issue"].tolist()[2] == NOTE  # the Constraints tab too
    assert not shown(app, "error")  # a note, not a problem to fix before planning
    edit(app, "tables_grid", edited={2: {"dim": 32}})
    assert app.dataframe[0].value["issue"].tolist() == [""] * 4


def test_a_row_with_a_problem_and_a_dim_note_shows_both():
    rows = [{"name": "t", "rows": 0, "dim": 6}]
    issues, _ = row_checks.row_issues(rows, {"world_size": 2})
    text = row_checks.issue_column(issues, row_checks.row_notes(rows))[0]
    assert text.startswith("rows: must be from 1") and text.endswith("a dim of 4 or 8 can be sharded")


def test_the_plan_page_says_why_a_forced_column_split_gave_one_piece(app):
    edit(app, "tables_constraints_grid", edited={0: {"sharding_types": ["column_wise"]}})
    goto(app, "plan")
    app.button(key="plan_run").click().run()
    assert not app.exception, app.exception
    assert len(app.session_state["ws_plan"].plan.tables["large_table_0"].shards) == 1
    notes = [m for m in shown(app, "markdown") if "column_wise on large_table_0 gave one piece" in m]
    assert notes and "min_partition 128 (the default) >= dim 64" in notes[0]
    assert "set constraints.large_table_0.min_partition to 32 for 2 pieces" in notes[0]


def test_the_min_partition_column_help_shows_the_default(app):
    (editor,) = [e for e in app.dataframe if '"min_partition"' in e.proto.columns]  # the Constraints grid
    assert "empty: 128 (TorchRec's MIN_CW_DIM)" in json.loads(editor.proto.columns)["min_partition"]["help"]
