"""The common case of a config at C speed: a table or constraint whose every field has the plain type and range is
built here without the checking path's per-field calls (100,000 tables parse in about a second); anything else
(None) goes through engine.config's checking path, which alone writes error messages.
tests/engine/test_config_fast.py holds the two equal.
"""

from __future__ import annotations

import math
from typing import Any

from engine import fields as F
from engine import limits as L
from engine.types import Constraints, TableConfig


_TABLE_KEYS = frozenset(F.TABLE_FIELDS) - {"total_num_buckets", "virtual_table_eviction_policy"}  # checked there
_POOLING, _DATA_TYPE = F.BY_NAME["pooling"], F.BY_NAME["data_type"]
_POOLINGS = {m.value: m for m in _POOLING.choices}
_DATA_TYPES = {m.value: m for m in _DATA_TYPE.choices}
_POOLING_DEFAULT, _DATA_TYPE_DEFAULT = _POOLING.json_default, _DATA_TYPE.json_default
_ROWS_LO, _ROWS_HI = F.BY_NAME["num_embeddings"].lo, F.BY_NAME["num_embeddings"].hi
_DIM_LO, _DIM_HI = F.BY_NAME["embedding_dim"].lo, F.BY_NAME["embedding_dim"].hi
_MAX_FEATURES = F.BY_NAME["feature_names"].hi
# Constraints of these kinds, with a finite range, take the fast path: (kind, lo, hi, lo_open) by name.
_FAST_KINDS = (F.INT, F.FLOAT, F.BOOL, F.FLOATS, F.INTS)
_FAST_CONSTRAINTS = {f.name: (f.kind, f.lo, f.hi, f.lo_open) for f in F.CONSTRAINT
                     if f.kind in _FAST_KINDS and (f.kind == F.BOOL or math.isfinite(f.hi))}
_FAST_CONSTRAINT_KEYS = frozenset(_FAST_CONSTRAINTS)


def _plain_name(v: Any) -> bool:
    return type(v) is str and 0 < len(v) <= L.MAX_NAME_CHARS and v.isprintable() and not v.isspace()


def table_fast(raw: Any) -> TableConfig | None:
    if type(raw) is not dict or not raw.keys() <= _TABLE_KEYS:
        return None
    name, rows, dim = raw.get("name"), raw.get("num_embeddings"), raw.get("embedding_dim")
    if not (_plain_name(name) and type(rows) is int and _ROWS_LO <= rows <= _ROWS_HI
            and type(dim) is int and _DIM_LO <= dim <= _DIM_HI):
        return None
    features = raw.get("feature_names", None)
    if features is None:
        if "feature_names" in raw:
            return None
        features = (name,)
    elif type(features) is list and 0 < len(features) <= _MAX_FEATURES and all(map(_plain_name, features)):
        features = tuple(features)
    else:
        return None
    pooling, data_type = raw.get("pooling", _POOLING_DEFAULT), raw.get("data_type", _DATA_TYPE_DEFAULT)
    if type(pooling) is not str or type(data_type) is not str:
        return None
    pooling, data_type = _POOLINGS.get(pooling), _DATA_TYPES.get(data_type)
    if pooling is None or data_type is None:
        return None
    virtual = raw.get("use_virtual_table", False)
    if type(virtual) is not bool:
        return None
    table = TableConfig(name=name, num_embeddings=rows, embedding_dim=dim, feature_names=features, pooling=pooling,
                        data_type=data_type, use_virtual_table=virtual)
    return table if table.weight_bytes <= L.MAX_TABLE_BYTES else None


def _numbers_fast(v: Any, n: int, lo: float, hi: float, ints: bool = False) -> tuple | None:
    """A per-feature list (one value, or one per feature) of plain numbers in [lo, hi]; None otherwise."""
    if type(v) is not list or len(v) not in (1, n):
        return None
    for x in v:
        if not ((type(x) is int or (type(x) is float and not ints)) and lo <= x <= hi):
            return None
    values = tuple(int(x) for x in v) if ints else tuple(float(x) for x in v)
    return values * n if len(values) == 1 and n > 1 else values


def constraint_fast(raw: Any, table: TableConfig) -> Constraints | None:
    if type(raw) is not dict or not raw.keys() <= _FAST_CONSTRAINT_KEYS:
        return None
    n = len(table.feature_names)
    out: dict[str, Any] = {}
    for key, v in raw.items():
        kind, lo, hi, lo_open = _FAST_CONSTRAINTS[key]
        if kind == F.FLOATS or kind == F.INTS:
            v = _numbers_fast(v, n, lo, hi, kind == F.INTS)
            if v is None:
                return None
        elif kind == F.INT:
            if not (type(v) is int and lo <= v <= hi):
                return None
        elif kind == F.FLOAT:
            if not ((type(v) is int or type(v) is float) and (lo < v if lo_open else lo <= v) and v <= hi):
                return None
            v = float(v)
        elif type(v) is not bool:
            return None
        out[key] = v
    return Constraints(**out)
