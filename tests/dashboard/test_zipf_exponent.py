"""zipf_exponent through the dashboard, with no dashboard code naming it: a grid column on the Tables page (its
cells checked like every other), a CSV column ("zipf" or "zipf_exponent"), the bulk edit, and the config export."""

from __future__ import annotations

import engine
from dashboard.plans import exports
from dashboard.tables import grid, importers, row_checks
from dashboard.ui import table_tools
from tests.dashboard.helpers import edit, workspace
from tests.factories import tutorial


def test_a_constraints_grid_column():
    assert "zipf_exponent" in grid.CONSTRAINT_COLUMNS and grid.LABELS["zipf_exponent"] == "zipf exponent"
    assert grid.FIELD_COLUMNS["zipf_exponent"] == "zipf_exponent" and "zipf_exponent" in grid.FLOAT_COLUMNS
    assert "zipf_exponent" in table_tools.BULK_COLUMNS
    raw = tutorial()
    raw.setdefault("constraints", {}).setdefault("large_table_0", {})["zipf_exponent"] = 1.5
    rows = grid.config_to_rows(raw)
    assert rows[0]["zipf_exponent"] == 1.5 and rows[1]["zipf_exponent"] is None
    assert grid.constraints_frame(rows, [])["zipf_exponent"].tolist()[0] == 1.5
    back = grid.rows_to_config(rows, raw["topology"])
    assert back["constraints"]["large_table_0"]["zipf_exponent"] == 1.5
    assert "zipf_exponent" not in back["constraints"].get("large_table_1", {})


def test_a_bad_cell_is_named_in_its_row():
    rows = grid.config_to_rows(tutorial())
    rows[2]["zipf_exponent"] = 9
    issues, outside = row_checks.row_issues(rows, tutorial()["topology"])
    assert issues == ["", "", "zipf exponent: must be from 0 to 5, got 9", ""] and outside is None


def test_csv_import_by_alias():
    for header in ("zipf", "zipf_exponent", "Zipf Exponent"):
        got = importers.read("csv", f"name,rows,dim,{header}\nt1,100,8,1.1\nt2,100,8,\n")
        assert got.constraints == {"t1": {"zipf_exponent": 1.1}}
    assert "zipf_exponent" in table_tools.IMPORT_HELP["csv"]
    try:
        importers.read("csv", "name,rows,dim,zipf\nt1,100,8,steep\n")
    except importers.ImportFormatError as e:
        assert str(e) == "line 2, column zipf: 'steep' is not a number"
    else:
        raise AssertionError("a word in a number column was read")


def test_exported_with_the_config():
    raw = tutorial()
    raw.setdefault("constraints", {}).setdefault("large_table_0", {})["zipf_exponent"] = 0.9
    text = exports.config_json(engine.parse_config(raw))
    assert '"zipf_exponent": 0.9' in text
    imported = importers.read("json", text)  # and imported again
    assert imported.constraints["large_table_0"]["zipf_exponent"] == 0.9


def test_edited_on_the_tables_page(app):
    assert "zipf_exponent" in app.dataframe[1].value.columns
    edit(app, "tables_constraints_grid", edited={1: {"zipf_exponent": 1.2}})
    assert workspace(app)["constraints"]["large_table_1"]["zipf_exponent"] == 1.2
    edit(app, "tables_constraints_grid", edited={1: {"zipf_exponent": 6}})
    assert app.dataframe[1].value["issue"].tolist()[1] == "zipf exponent: must be from 0 to 5, got 6"
