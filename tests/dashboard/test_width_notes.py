"""The tables grid says on the row, as it is typed, what a dim that is not a multiple of 4 means for the plan."""

from __future__ import annotations

from dashboard import grid
from tests.dashboard.helpers import edit, shown, workspace

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
    issues, _ = grid.row_issues(rows, {"world_size": 2})
    text = grid.issue_column(issues, grid.row_notes(rows))[0]
    assert text.startswith("rows: must be from 1") and text.endswith("a dim of 4 or 8 can be sharded")
