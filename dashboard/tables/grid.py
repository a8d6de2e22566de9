"""The tables-and-constraints grid as rows: config JSON <-> rows <-> data frames, editor deltas and bulk edits (the
rows' checks are dashboard.tables.row_checks). Pure (pandas and engine only).
"""

from __future__ import annotations

import fnmatch
import math
import re
from typing import Any, Optional

import pandas as pd

import engine

K = engine.FieldKind
# The grid's columns, derived from the field declarations (engine.fields): every field with a grid column, the
# Tables tab's then the Constraints tab's, in declaration order.
_SHOWN = tuple(f for f in (*engine.TABLE_FIELD_DECLS, *engine.CONSTRAINT_FIELD_DECLS) if f.column)
_ON_TABLES_TAB = tuple(f for f in _SHOWN if f.tab == K.TABLES_TAB)
_ON_CONSTRAINTS_TAB = tuple(f for f in _SHOWN if f.tab == K.CONSTRAINTS_TAB)
GRID_FIELDS = (*_ON_TABLES_TAB, *_ON_CONSTRAINTS_TAB)
COLUMN_FIELDS = {f.column: f for f in GRID_FIELDS}  # grid column -> its field
TABLE_COLUMNS = (*(f.column for f in _ON_TABLES_TAB), "issue")
CONSTRAINT_COLUMNS = ("table", *(f.column for f in _ON_CONSTRAINTS_TAB), "issue")
# placement rules, typed as text: "0, 2-3", "t1, t2"
RULE_COLUMNS = tuple(f.column for f in GRID_FIELDS if f.kind in (K.IDS, K.TABLE_NAMES))
NUMBER_RULES = tuple(f.column for f in GRID_FIELDS if f.kind == K.IDS)
EDITABLE = tuple(f.column for f in GRID_FIELDS)
INT_COLUMNS = tuple(f.column for f in GRID_FIELDS if f.kind == K.INT)
FLOAT_COLUMNS = tuple(f.column for f in GRID_FIELDS if f.kind in (K.FLOAT, K.FLOATS))
LIST_COLUMNS = tuple(f.column for f in GRID_FIELDS if f.kind == K.ENUMS)
# per-feature constraints shown as one number (their mean); the config's own list rides in _extra
FEATURE_COLUMNS = tuple(f.column for f in GRID_FIELDS if f.per_feature)
LABELS = {f.column: f.grid_label for f in GRID_FIELDS}
# Engine field names -> grid columns.
FIELD_COLUMNS = {f.name: f.column for f in GRID_FIELDS}
EXTRA_CONSTRAINT_FIELDS = tuple(f.name for f in engine.CONSTRAINT_FIELD_DECLS if not f.column)


ROW_PX = 35  # Streamlit's grid row (and header) height
GRID_MAX_PX = 480


def grid_height(rows: int, adds_rows: bool) -> int:
    """A grid's height fitted to its rows (header, rows, the add row when it has one, borders), at most GRID_MAX_PX:
    4 tables get 4 rows, not 4 rows and 8 empty ones."""
    return min(GRID_MAX_PX, ROW_PX * (1 + rows + (1 if adds_rows else 0)) + 3)


def blank(f: engine.Field) -> Any:
    """A column's cell when the field is absent: its default choice, no list items, or empty."""
    if f.kind == K.ENUM:
        return f.json_default
    return [] if f.kind == K.ENUMS else None


BLANK_ROW = {f.column: blank(f) for f in GRID_FIELDS}
TABLE_FIELD = re.compile(r"^tables\[(\d+)\]\.(\w+)")
ANY_TABLE = re.compile(r"tables\[(\d+)\]")
# A cell's stand-in once its problem is recorded, to look past it for the row's next problem.
# Topology fields as the Topology page labels them.


def clean(v: Any) -> Any:
    """Editor values as JSON: NaN/NA -> None, whole floats -> int, numpy scalars -> Python."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item") and not isinstance(v, (list, tuple, str)):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


# ---- config <-> rows ----------------------------------------------------------------------------


def _pooling_factor(values: Optional[list]) -> Optional[float]:
    if not values:
        return None
    return float(values[0]) if len(set(values)) == 1 else float(sum(values) / len(values))


def _cell(f: engine.Field) -> Any:
    """How a constraint's cell is made from the config's constraint object."""
    name = f.name
    if f.per_feature:
        return lambda c: _pooling_factor(c.get(name))
    if f.kind == K.ENUMS:
        return lambda c: list(c.get(name) or [])
    if f.column in RULE_COLUMNS:
        numbers = f.column in NUMBER_RULES
        return lambda c: rule_text(c.get(name), numbers)
    return lambda c: c.get(name)


# (column, field name, default as a file writes it, is a list of names) of the table fields
# (a field with no column, use_virtual_table or a virtual table's buckets and policy, rides in the row under its own
# name, not shown)
_TABLE_CELLS = tuple((f.column or f.name, f.name, f.json_default, f.kind == K.NAMES) for f in engine.TABLE_FIELD_DECLS)
_CONSTRAINT_CELLS = tuple((f.column, _cell(f)) for f in GRID_FIELDS if f.name in engine.CONSTRAINT_FIELDS)
_EXTRA_KEYS = (*EXTRA_CONSTRAINT_FIELDS, *(COLUMN_FIELDS[c].name for c in FEATURE_COLUMNS))


def config_to_rows(config: dict) -> list[dict]:
    """One row per table, with its constraints; constraint fields the grid does not show ride in _extra."""
    rows = []
    cons = config.get("constraints") or {}
    for t in config.get("tables") or []:
        c = cons.get(t.get("name"), {}) if isinstance(t, dict) else {}
        t = t if isinstance(t, dict) else {}
        row: dict[str, Any] = {}
        for column, name, default, names in _TABLE_CELLS:
            v = t.get(name, default)
            row[column] = ", ".join(str(x) for x in v) if names and isinstance(v, list) else v
        for column, cell in _CONSTRAINT_CELLS:
            row[column] = cell(c)
        row["_extra"] = {k: c[k] for k in _EXTRA_KEYS if k in c}
        rows.append(row)
    return rows


def rule_text(value: Any, numbers: bool) -> Optional[str]:
    """A placement rule's list as the grid shows it: ranks as "0, 2-4", names as "t1, t2"; None when absent."""
    if not isinstance(value, list) or not value:
        return None if value is None else str(value)
    if not numbers or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return ", ".join(str(v) for v in value)
    values, parts, i = sorted(set(value)), [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if j == i else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(parts)


def rule_values(text: Any, numbers: bool) -> Optional[list]:
    """A rule cell's text as the config's list: "0, 2-4" -> [0, 2, 3, 4]; names split on commas. What is not a
    number or a range stays as typed, for the engine to name (row 3: ranks: ... must be an integer)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not numbers:
        return items
    out: list = []
    for item in items:
        m = re.fullmatch(r"(\d{1,6})\s*-\s*(\d{1,6})", item)
        if m and int(m.group(1)) <= int(m.group(2)) and int(m.group(2)) - int(m.group(1)) < 65_536:
            out.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        elif re.fullmatch(r"\d{1,9}", item):
            out.append(int(item))
        else:
            out.append(item)
    return out


def _table_of(row: dict) -> dict:
    table: dict[str, Any] = {}
    for f in engine.TABLE_FIELD_DECLS:
        v = row.get(f.column or f.name)
        if f.column is None:  # no column (use_virtual_table, the virtual tables' fields): written where set
            if v is not None and v != f.json_default:
                table[f.name] = v
        elif f.kind == K.NAMES:
            if isinstance(v, str) and v.strip():
                table[f.name] = [x.strip() for x in v.split(",") if x.strip()]
        elif f.kind == K.ENUM:
            table[f.name] = v or f.json_default
        else:
            table[f.name] = v
    return table


_SCALAR_CONSTRAINT_COLUMNS = tuple(f.column for f in GRID_FIELDS if f.kind in (K.INT, K.FLOAT)
                                   and f.name in engine.CONSTRAINT_FIELDS)


def _constraint_of(row: dict) -> dict:
    extra = row.get("_extra") or {}
    c: dict[str, Any] = {k: extra[k] for k in EXTRA_CONSTRAINT_FIELDS if k in extra}
    for key in LIST_COLUMNS:
        if row.get(key):
            c[COLUMN_FIELDS[key].name] = list(row[key])
    for key in _SCALAR_CONSTRAINT_COLUMNS:
        if row.get(key) is not None:
            c[COLUMN_FIELDS[key].name] = row[key]
    for key in RULE_COLUMNS:
        values = rule_values(row.get(key), key in NUMBER_RULES)
        if values is not None:
            c[COLUMN_FIELDS[key].name] = values
    for key in FEATURE_COLUMNS:
        pf = row.get(key)
        if pf is not None:
            name = COLUMN_FIELDS[key].name
            original = extra.get(name)
            c[name] = list(original) if original and _pooling_factor(original) == pf else [pf]
    return c


def rows_to_config(rows: list[dict], topology: dict) -> dict:
    constraints = {}
    for r in rows:
        c = _constraint_of(r)
        if c and isinstance(r.get("name"), str) and r["name"]:
            constraints[r["name"]] = c
    return {"tables": [_table_of(r) for r in rows], "constraints": constraints, "topology": dict(topology)}


# ---- frames and editor deltas -------------------------------------------------------------------


def tables_frame(rows: list[dict], issues: list[str]) -> pd.DataFrame:
    df = pd.DataFrame({c: [r.get(c) for r in rows] for c in TABLE_COLUMNS[:-1]})
    for f in _ON_TABLES_TAB:
        c = f.column
        if c in INT_COLUMNS:
            df[c] = pd.array([clean(v) if isinstance(clean(v), int) else None for v in df[c]], dtype="Int64")
        elif c in FLOAT_COLUMNS:
            df[c] = pd.array([_num(v) for v in df[c]], dtype="Float64")
    df["issue"] = list(issues) if issues else [""] * len(rows)
    df = df.astype({**{f.column: "string" for f in _ON_TABLES_TAB if f.kind in (K.NAME, K.NAMES, K.ENUM)},
                    "issue": "string"})
    df.index = row_numbers(len(rows))
    return df


def _constraint_series(f: engine.Field, rows: list[dict]) -> Any:
    values = [r.get(f.column) for r in rows]
    if f.kind == K.ENUMS:
        return [list(v or []) for v in values]
    if f.column in INT_COLUMNS:
        return pd.array([_int_or_none(v) for v in values], dtype="Int64")
    if f.column in FLOAT_COLUMNS:
        return pd.array([_num(v) for v in values], dtype="Float64")
    return pd.array([v if isinstance(v, str) else None for v in values], dtype="string")


def constraints_frame(rows: list[dict], issues: list[str]) -> pd.DataFrame:
    df = pd.DataFrame({
        "table": pd.array([r.get("name") for r in rows], dtype="string"),
        **{f.column: _constraint_series(f, rows) for f in _ON_CONSTRAINTS_TAB},
    })
    df["issue"] = pd.array(list(issues) if issues else [""] * len(rows), dtype="string")
    df.index = row_numbers(len(rows))
    return df


def row_numbers(n: int) -> pd.RangeIndex:
    """The grids' index: rows numbered from 1, as every message names them ("row 3")."""
    return pd.RangeIndex(1, n + 1, name="row")


def _num(v: Any) -> Optional[float]:
    v = clean(v)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int_or_none(v: Any) -> Optional[int]:
    v = clean(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _edit(row: dict, changes: dict) -> dict:
    out = dict(row)
    for col, v in changes.items():
        if col == "table":
            continue
        if col in EDITABLE:
            v = clean(v)
            out[col] = list(v) if col in LIST_COLUMNS and v is not None else v
    return out


def apply_edits(rows: list[dict], delta: Optional[dict], allow_structure: bool = True) -> list[dict]:
    """rows after a data_editor's state: {"edited_rows": {pos: {col: v}}, "added_rows": [...],
    "deleted_rows": [pos]}; positions refer to `rows`."""
    if not delta:
        return [dict(r) for r in rows]
    out = [dict(r) for r in rows]
    for pos, changes in (delta.get("edited_rows") or {}).items():
        i = int(pos)
        if 0 <= i < len(out):
            out[i] = _edit(out[i], changes)
    if not allow_structure:
        return out
    deleted = {int(p) for p in delta.get("deleted_rows") or []}
    out = [r for i, r in enumerate(out) if i not in deleted]
    for added in delta.get("added_rows") or []:
        out.append(_edit({**BLANK_ROW, "_extra": {}}, added))
    return out


def changes_structure(delta: Optional[dict]) -> bool:
    return bool(delta and (delta.get("added_rows") or delta.get("deleted_rows")))


# ---- bulk edits ---------------------------------------------------------------------------------


def matching(rows: list[dict], pattern: str) -> list[int]:
    """Positions of the rows whose name matches a glob (* matches every row; an empty pattern none)."""
    pattern = (pattern or "").strip()
    if not pattern:
        return []
    return [i for i, r in enumerate(rows) if fnmatch.fnmatchcase(str(r.get("name") or ""), pattern)]


def bulk_set(rows: list[dict], pattern: str, column: str, value: Any) -> tuple[list[dict], int]:
    if column not in EDITABLE or column == "name":
        raise ValueError(f"column {column!r} cannot be bulk edited")
    hits = set(matching(rows, pattern))
    out = [_edit(r, {column: value}) if i in hits else dict(r) for i, r in enumerate(rows)]
    return out, len(hits)


def bulk_delete(rows: list[dict], pattern: str) -> tuple[list[dict], int]:
    return delete_rows(rows, matching(rows, pattern))


def delete_rows(rows: list[dict], positions: list[int]) -> tuple[list[dict], int]:
    gone = set(positions)
    return [dict(r) for i, r in enumerate(rows) if i not in gone], len(gone)


def new_table_row(rows: list[dict], num_embeddings: int = 1000, dim: int = 64) -> dict:
    names = {r.get("name") for r in rows}
    i = len(rows)
    while f"table_{i}" in names:
        i += 1
    blank = {k: v for k, v in BLANK_ROW.items() if k not in RULE_COLUMNS}
    return {**blank, "name": f"table_{i}", "rows": num_embeddings, "dim": dim, "features": f"feature_{i}",
            "_extra": {}}


def weight_bytes(rows: list[dict]) -> int:
    """Total embedding weights of the rows that have a valid shape (a quick size for the page header)."""
    total = 0.0
    for r in rows:
        n, d = clean(r.get("rows")), clean(r.get("dim"))
        if isinstance(n, int) and isinstance(d, int) and n > 0 and d > 0:
            total += n * d * engine.DATA_TYPE_BYTES.get(str(r.get("data_type") or "fp32"), 4)
    return int(total)


def only_written_out(old: dict, new: dict) -> bool:
    """True when `new` is `old` as the grid writes it (an imported config's first view): not an edit."""
    try:
        return rows_to_config(config_to_rows(old), old.get("topology") or {}) == new
    except (TypeError, ValueError, AttributeError):
        return False
