"""The tables-and-constraints grid as rows: config JSON <-> rows <-> data frames, editor deltas, bulk edits,
and validation that pins each engine ConfigError to its row and column. Pure (pandas and engine only).
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from functools import lru_cache
from typing import Any, Optional

import pandas as pd

import engine

TABLE_COLUMNS = ("name", "rows", "dim", "features", "pooling", "data_type", "pooling_factor", "issue")
CONSTRAINT_COLUMNS = ("table", "sharding_types", "compute_kernels", "min_partition", "cache_load_factor", "issue")
EDITABLE = ("name", "rows", "dim", "features", "pooling", "data_type", "pooling_factor", "sharding_types",
            "compute_kernels", "min_partition", "cache_load_factor")
INT_COLUMNS = ("rows", "dim", "min_partition")
FLOAT_COLUMNS = ("pooling_factor", "cache_load_factor")
LIST_COLUMNS = ("sharding_types", "compute_kernels")
LABELS = {"name": "name", "rows": "rows", "dim": "dim", "features": "features", "pooling": "pooling",
          "data_type": "data type", "pooling_factor": "pooling factor", "sharding_types": "sharding types",
          "compute_kernels": "kernels", "min_partition": "min partition", "cache_load_factor": "cache load factor"}
# Engine field names -> grid columns.
FIELD_COLUMNS = {"name": "name", "num_embeddings": "rows", "embedding_dim": "dim", "feature_names": "features",
                 "pooling": "pooling", "data_type": "data_type", "pooling_factors": "pooling_factor",
                 "sharding_types": "sharding_types", "compute_kernels": "compute_kernels",
                 "min_partition": "min_partition", "cache_load_factor": "cache_load_factor"}
EXTRA_CONSTRAINT_FIELDS = ("num_poolings", "batch_sizes", "is_weighted")
_TABLE_FIELD = re.compile(r"^tables\[(\d+)\]\.(\w+)")
ROW_ISSUE_ENTRIES = 20_000  # rows checked alone, remembered by content


def _clean(v: Any) -> Any:
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


def config_to_rows(config: dict) -> list[dict]:
    """One row per table, with its constraints; constraint fields the grid does not show ride in _extra."""
    rows = []
    cons = config.get("constraints") or {}
    for t in config.get("tables") or []:
        c = cons.get(t.get("name"), {}) if isinstance(t, dict) else {}
        t = t if isinstance(t, dict) else {}
        features = t.get("feature_names")
        rows.append({
            "name": t.get("name"), "rows": t.get("num_embeddings"), "dim": t.get("embedding_dim"),
            "features": ", ".join(str(f) for f in features) if isinstance(features, list) else features,
            "pooling": t.get("pooling", "sum"), "data_type": t.get("data_type", "fp32"),
            "pooling_factor": _pooling_factor(c.get("pooling_factors")),
            "sharding_types": list(c.get("sharding_types") or []),
            "compute_kernels": list(c.get("compute_kernels") or []),
            "min_partition": c.get("min_partition"), "cache_load_factor": c.get("cache_load_factor"),
            "_extra": {k: c[k] for k in (*EXTRA_CONSTRAINT_FIELDS, "pooling_factors") if k in c},
        })
    return rows


def _table_of(row: dict) -> dict:
    table: dict[str, Any] = {"name": row.get("name"), "num_embeddings": row.get("rows"),
                             "embedding_dim": row.get("dim")}
    features = row.get("features")
    if isinstance(features, str) and features.strip():
        table["feature_names"] = [f.strip() for f in features.split(",") if f.strip()]
    table["pooling"] = row.get("pooling") or "sum"
    table["data_type"] = row.get("data_type") or "fp32"
    return table


def _constraint_of(row: dict) -> dict:
    extra = row.get("_extra") or {}
    c: dict[str, Any] = {k: extra[k] for k in EXTRA_CONSTRAINT_FIELDS if k in extra}
    for key in LIST_COLUMNS:
        if row.get(key):
            c[key] = list(row[key])
    for key in ("min_partition", "cache_load_factor"):
        if row.get(key) is not None:
            c[key] = row[key]
    pf = row.get("pooling_factor")
    if pf is not None:
        original = extra.get("pooling_factors")
        c["pooling_factors"] = list(original) if original and _pooling_factor(original) == pf else [pf]
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
    for c in ("rows", "dim"):
        df[c] = pd.array([_clean(v) if isinstance(_clean(v), int) else None for v in df[c]], dtype="Int64")
    df["pooling_factor"] = pd.array([_num(v) for v in df["pooling_factor"]], dtype="Float64")
    df["issue"] = list(issues) if issues else [""] * len(rows)
    return df.astype({"name": "string", "features": "string", "pooling": "string", "data_type": "string",
                      "issue": "string"})


def constraints_frame(rows: list[dict], issues: list[str]) -> pd.DataFrame:
    df = pd.DataFrame({
        "table": pd.array([r.get("name") for r in rows], dtype="string"),
        "sharding_types": [list(r.get("sharding_types") or []) for r in rows],
        "compute_kernels": [list(r.get("compute_kernels") or []) for r in rows],
        "min_partition": pd.array([_int_or_none(r.get("min_partition")) for r in rows], dtype="Int64"),
        "cache_load_factor": pd.array([_num(r.get("cache_load_factor")) for r in rows], dtype="Float64"),
    })
    df["issue"] = pd.array(list(issues) if issues else [""] * len(rows), dtype="string")
    return df


def _num(v: Any) -> Optional[float]:
    v = _clean(v)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int_or_none(v: Any) -> Optional[int]:
    v = _clean(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _edit(row: dict, changes: dict) -> dict:
    out = dict(row)
    for col, v in changes.items():
        if col == "table":
            continue
        if col in EDITABLE:
            v = _clean(v)
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
        base = {"name": None, "rows": None, "dim": None, "features": None, "pooling": "sum", "data_type": "fp32",
                "pooling_factor": None, "sharding_types": [], "compute_kernels": [], "min_partition": None,
                "cache_load_factor": None, "_extra": {}}
        out.append(_edit(base, added))
    return out


def changes_structure(delta: Optional[dict]) -> bool:
    return bool(delta and (delta.get("added_rows") or delta.get("deleted_rows")))


# ---- validation ---------------------------------------------------------------------------------


def locate(field: str, rows: list[dict]) -> tuple[Optional[int], Optional[str]]:
    """(row, column) of an engine ConfigError field such as tables[3].embedding_dim or
    constraints.t1.min_partition; (None, None) for fields outside the grid (topology...)."""
    m = _TABLE_FIELD.match(field)
    if m:
        return int(m.group(1)), FIELD_COLUMNS.get(m.group(2))
    if field.startswith("constraints."):
        rest = field[len("constraints."):]
        for i, r in enumerate(rows):
            name = r.get("name")
            if isinstance(name, str) and (rest == name or rest.startswith(name + ".")):
                key = rest[len(name) + 1:].split("[")[0]
                return i, FIELD_COLUMNS.get(key)
    return None, None


def _describe(column: Optional[str], message: str) -> str:
    return f"{LABELS.get(column, column)}: {message}" if column else message


def row_issues(rows: list[dict], topology: dict) -> tuple[list[str], Optional[str]]:
    """One issue text per row ("" when fine) and an error outside the rows (topology), if any. A config the
    engine accepts whole has none; otherwise each row is checked alone (remembered by its content: an edit
    checks the edited row again, not a thousand), then the whole config for what no row shows alone."""
    try:
        engine.parse_config(rows_to_config(rows, topology))
        return [""] * len(rows), None
    except engine.ConfigError as e:
        whole = e
    issues = [_row_issue(_row_key(r)) for r in rows]
    if any(issues):
        return issues, None
    i, col = locate(whole.field, rows)
    if i is None:
        return issues, str(whole)
    issues[i] = _describe(col, whole.message)
    return issues, None


def _row_key(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=repr)


@lru_cache(maxsize=ROW_ISSUE_ENTRIES)
def _row_issue(row_json: str) -> str:
    """The issue of one row (its JSON) in a config of that row alone, "" when fine."""
    row = json.loads(row_json)
    try:
        engine.parse_config(rows_to_config([row], {"world_size": 1}))
    except engine.ConfigError as e:
        _, col = locate(e.field, [row])
        return _describe(col, e.message)
    return ""


# ---- bulk edits ---------------------------------------------------------------------------------


def matching(rows: list[dict], pattern: str) -> list[int]:
    """Positions of the rows whose name matches a glob (empty or * matches every row)."""
    pattern = (pattern or "").strip() or "*"
    return [i for i, r in enumerate(rows) if fnmatch.fnmatchcase(str(r.get("name") or ""), pattern)]


def bulk_set(rows: list[dict], pattern: str, column: str, value: Any) -> tuple[list[dict], int]:
    if column not in EDITABLE or column == "name":
        raise ValueError(f"column {column!r} cannot be bulk edited")
    hits = set(matching(rows, pattern))
    out = [_edit(r, {column: value}) if i in hits else dict(r) for i, r in enumerate(rows)]
    return out, len(hits)


def bulk_delete(rows: list[dict], pattern: str) -> tuple[list[dict], int]:
    hits = set(matching(rows, pattern))
    return [dict(r) for i, r in enumerate(rows) if i not in hits], len(hits)


def new_table_row(rows: list[dict], num_embeddings: int = 1000, dim: int = 64) -> dict:
    names = {r.get("name") for r in rows}
    i = len(rows)
    while f"table_{i}" in names:
        i += 1
    return {"name": f"table_{i}", "rows": num_embeddings, "dim": dim, "features": f"feature_{i}", "pooling": "sum",
            "data_type": "fp32", "pooling_factor": None, "sharding_types": [], "compute_kernels": [],
            "min_partition": None, "cache_load_factor": None, "_extra": {}}


def weight_bytes(rows: list[dict]) -> int:
    """Total embedding weights of the rows that have a valid shape (a quick size for the page header)."""
    from engine.constants import DATA_TYPE_BYTES

    total = 0.0
    for r in rows:
        n, d = _clean(r.get("rows")), _clean(r.get("dim"))
        if isinstance(n, int) and isinstance(d, int) and n > 0 and d > 0:
            total += n * d * DATA_TYPE_BYTES.get(str(r.get("data_type") or "fp32"), 4)
    return int(total)
