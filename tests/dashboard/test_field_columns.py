"""The dashboard's grid, importers and bulk edit read the field declarations (engine.fields): every declared grid
column is on the grid with its label, every CSV name imports its field, and the CSV help names only columns the
importer reads."""

from __future__ import annotations

import engine
from dashboard.tables import grid, importers, row_checks, snippet
from dashboard.ui import table_tools


def test_every_declared_column_is_on_the_grid():
    declared = [f for f in engine.FIELDS.values() if f.column]
    assert set(grid.EDITABLE) == {f.column for f in declared}
    assert set(grid.TABLE_COLUMNS + grid.CONSTRAINT_COLUMNS) == {f.column for f in declared} | {"table", "issue"}
    for f in declared:
        assert grid.FIELD_COLUMNS[f.name] == f.column and grid.LABELS[f.column] == f.grid_label
        assert f.width and f.column in row_checks.STAND_INS
    assert set(grid.EXTRA_CONSTRAINT_FIELDS) == {f.name for f in engine.CONSTRAINT_FIELD_DECLS if not f.column}


def test_every_csv_name_imports_its_field():
    for f in engine.FIELDS.values():
        for alias in f.csv:
            assert importers.CSV_ALIASES[alias] == f.name
    named = table_tools.IMPORT_HELP["csv"].split(": ", 1)[1].split(";")[0].replace("[", "").replace("]", "")
    assert all(c in importers.CSV_ALIASES for c in named.split(","))
    assert snippet.TABLE_KEYS == engine.TABLE_FIELDS


def test_bulk_edit_opens_on_dim_and_offers_every_declared_column():
    assert table_tools.BULK_COLUMNS[0] == "dim"
    assert set(table_tools.BULK_COLUMNS) == {f.column for f in engine.FIELDS.values() if f.bulk is not None}
