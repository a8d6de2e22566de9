"""Tables from outside: a config or table list in JSON, a CSV sheet, or a pasted TorchRec snippet.

The snippet is read with `ast` and never executed: only EmbeddingBagConfig(...) calls with literal
arguments, names bound to literals, range()/enumerate() comprehensions, str() and f-strings are understood.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

TABLE_KEYS = ("name", "num_embeddings", "embedding_dim", "feature_names", "pooling", "data_type")
MAX_TABLES = 10_000


class ImportFormatError(ValueError):
    """Input that cannot be read; the message is one line naming where and what."""


@dataclass
class Imported:
    tables: list[dict]
    constraints: dict[str, dict] = field(default_factory=dict)
    topology: Optional[dict] = None
    notes: list[str] = field(default_factory=list)


# ---- JSON ---------------------------------------------------------------------------------------


def from_json(text: str) -> Imported:
    """A whole config ({"tables", "constraints", "topology"}), {"tables": [...]}, or a bare list of tables."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImportFormatError(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if isinstance(data, list):
        data = {"tables": data}
    if not isinstance(data, dict) or not isinstance(data.get("tables"), list):
        raise ImportFormatError('expected a config object with a "tables" list, or a list of tables')
    constraints = data.get("constraints") or {}
    if not isinstance(constraints, dict):
        raise ImportFormatError('"constraints" must be an object keyed by table name')
    topology = data.get("topology")
    if topology is not None and not isinstance(topology, dict):
        raise ImportFormatError('"topology" must be an object')
    return Imported(tables=list(data["tables"]), constraints=dict(constraints), topology=topology)


# ---- CSV ----------------------------------------------------------------------------------------

CSV_ALIASES = {
    "name": "name", "table": "name",
    "num_embeddings": "num_embeddings", "rows": "num_embeddings",
    "embedding_dim": "embedding_dim", "dim": "embedding_dim",
    "feature_names": "feature_names", "features": "feature_names",
    "pooling": "pooling", "data_type": "data_type", "dtype": "data_type",
    "pooling_factor": "pooling_factors", "pooling_factors": "pooling_factors",
    "sharding_types": "sharding_types", "compute_kernels": "compute_kernels", "kernels": "compute_kernels",
    "min_partition": "min_partition", "cache_load_factor": "cache_load_factor",
}
CSV_INTS = ("num_embeddings", "embedding_dim", "min_partition")
CSV_FLOATS = ("cache_load_factor",)
CSV_LISTS = ("feature_names", "sharding_types", "compute_kernels", "pooling_factors")
_SPLIT = re.compile(r"[;|,\s]+")


def _csv_number(raw: str, where: str, kind: type) -> Any:
    try:
        v = float(raw)
    except ValueError:
        raise ImportFormatError(f"{where}: {raw!r} is not a number") from None
    if kind is int:
        if not v.is_integer():
            raise ImportFormatError(f"{where}: {raw!r} is not a whole number")
        return int(v)
    return v


def _csv_row(row: dict[str, str], line: int) -> tuple[dict, dict]:
    table: dict[str, Any] = {}
    cons: dict[str, Any] = {}
    for col, raw in row.items():
        key = CSV_ALIASES[col]
        raw = (raw or "").strip()
        if not raw:
            continue
        where = f"line {line}, column {col}"
        if key in CSV_LISTS:
            items = [x for x in _SPLIT.split(raw) if x]
            value: Any = [_csv_number(x, where, float) for x in items] if key == "pooling_factors" else items
        elif key in CSV_INTS:
            value = _csv_number(raw, where, int)
        elif key in CSV_FLOATS:
            value = _csv_number(raw, where, float)
        else:
            value = raw
        (table if key in TABLE_KEYS else cons)[key] = value
    return table, cons


def from_csv(text: str) -> Imported:
    """One table per line; a header names the columns (name, rows/num_embeddings, dim/embedding_dim, ...)."""
    reader = csv.DictReader(io.StringIO(text.strip()))
    header = [h.strip().lower().replace(" ", "_") for h in (reader.fieldnames or [])]
    if not header:
        raise ImportFormatError("the CSV is empty: the first line must name the columns, e.g. name,rows,dim")
    unknown = [h for h in header if h not in CSV_ALIASES]
    if unknown:
        raise ImportFormatError(f"unknown CSV column {unknown[0]!r}; known: {', '.join(sorted(set(CSV_ALIASES)))}")
    reader.fieldnames = header
    tables, constraints = [], {}
    for i, row in enumerate(reader):
        if None in row:
            raise ImportFormatError(f"line {i + 2}: more values than columns")
        table, cons = _csv_row(row, i + 2)
        if not table:
            continue
        tables.append(table)
        if cons and table.get("name"):
            constraints[str(table["name"])] = cons
    if not tables:
        raise ImportFormatError("the CSV has a header but no tables")
    return Imported(tables=tables, constraints=constraints)


# ---- TorchRec snippet ---------------------------------------------------------------------------

CONFIG_CALLS = ("EmbeddingBagConfig", "EmbeddingConfig")


class _Unsupported(Exception):
    def __init__(self, node: ast.AST, what: str):
        super().__init__(f"line {getattr(node, 'lineno', '?')}: {what}")


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _binop(node: ast.BinOp, env: dict) -> Any:
    left, right = _value(node.left, env), _value(node.right, env)
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a**b if abs(b) <= 64 else None}
    fn = ops.get(type(node.op))
    ok = (isinstance(left, (int, float)) and isinstance(right, (int, float))) or (
        isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, (str, list)))
    if fn is None or not ok or isinstance(left, bool) or isinstance(right, bool):
        raise _Unsupported(node, "only + of strings or lists and + - * // ** of numbers are understood")
    out = fn(left, right)
    if out is None:
        raise _Unsupported(node, "exponent too large")
    return out


def _value(node: ast.AST, env: dict) -> Any:
    """The value of a literal expression; anything that would need running code raises _Unsupported."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, env) for e in node.elts]
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise _Unsupported(node, f"{node.id!r} is not bound to a literal in the snippet")
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _value(node.operand, env)
        if isinstance(v, (int, float)):
            return -v
    if isinstance(node, ast.BinOp):
        return _binop(node, env)
    if isinstance(node, ast.JoinedStr):
        return "".join(str(_value(v.value, env)) if isinstance(v, ast.FormattedValue) else str(v.value)
                       for v in node.values)
    if isinstance(node, ast.Call) and _call_name(node.func) == "str" and len(node.args) == 1 and not node.keywords:
        return str(_value(node.args[0], env))
    if isinstance(node, ast.Subscript):
        seq, idx = _value(node.value, env), _value(node.slice, env)
        if isinstance(seq, list) and isinstance(idx, int) and -len(seq) <= idx < len(seq):
            return seq[idx]
        raise _Unsupported(node, "index out of range or not a list")
    if isinstance(node, ast.Attribute) and _call_name(node.value) in ("PoolingType", "DataType"):
        return node.attr.lower()
    raise _Unsupported(node, f"cannot read {type(node).__name__} (only literals are understood; nothing is run)")


def _iterable(node: ast.AST, env: dict) -> list:
    if isinstance(node, ast.Call) and _call_name(node.func) in ("range", "enumerate") and not node.keywords:
        args = [_value(a, env) for a in node.args]
        if _call_name(node.func) == "enumerate" and len(args) == 1 and isinstance(args[0], list):
            return [[i, v] for i, v in enumerate(args[0])]
        if _call_name(node.func) == "range" and 1 <= len(args) <= 3 and all(isinstance(a, int) for a in args):
            r = range(*args)
            if len(r) > MAX_TABLES:
                raise _Unsupported(node, f"range of {len(r)} values (at most {MAX_TABLES} tables)")
            return list(r)
    value = _value(node, env)
    if not isinstance(value, list):
        raise _Unsupported(node, "a loop must go over range(...), enumerate(...) or a list")
    return value


def _bind(target: ast.AST, value: Any, env: dict) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, list) and len(value) == len(target.elts):
        for t, v in zip(target.elts, value):
            _bind(t, v, env)
    else:
        raise _Unsupported(target, "cannot unpack the loop variable")


def _envs(gens: list[ast.comprehension], env: dict) -> list[dict]:
    """One environment per iteration of the comprehension's for-clauses (no if-clauses)."""
    out = [dict(env)]
    for g in gens:
        if g.ifs or g.is_async:
            raise _Unsupported(g.iter, "comprehensions with if-clauses are not understood")
        nxt = []
        for e in out:
            for v in _iterable(g.iter, e):
                e2 = dict(e)
                _bind(g.target, v, e2)
                nxt.append(e2)
                if len(nxt) > MAX_TABLES:
                    raise _Unsupported(g.iter, f"more than {MAX_TABLES} tables")
        out = nxt
    return out


def _table_from_call(call: ast.Call, env: dict, ignored: set[str]) -> dict:
    if call.args:
        raise _Unsupported(call, "EmbeddingBagConfig arguments must be given by keyword")
    table: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg in TABLE_KEYS:
            table[kw.arg] = _value(kw.value, env)
        elif kw.arg is not None:
            ignored.add(kw.arg)
    if "name" not in table:
        raise _Unsupported(call, "EmbeddingBagConfig without name=")
    return table


def _config_calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and _call_name(n.func) in CONFIG_CALLS]


def _module_env(tree: ast.Module) -> dict:
    env: dict = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                env[stmt.targets[0].id] = _value(stmt.value, env)
            except _Unsupported:
                env.pop(stmt.targets[0].id, None)
    return env


def from_torchrec_snippet(text: str) -> Imported:
    """Tables from EmbeddingBagConfig(...) calls in Python source, read with `ast` (never executed)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise ImportFormatError(f"line {e.lineno}: not valid Python ({e.msg})") from None
    env = _module_env(tree)
    found: list[tuple[tuple[int, int], dict]] = []
    in_comp: set[int] = set()
    ignored: set[str] = set()
    try:
        for comp in (n for n in ast.walk(tree) if isinstance(n, (ast.ListComp, ast.GeneratorExp))):
            calls = _config_calls(comp.elt)
            if not calls:
                continue
            in_comp.update(id(c) for c in _config_calls(comp))
            for i, e in enumerate(_envs(comp.generators, env)):
                for c in calls:
                    found.append(((c.lineno, c.col_offset, i), _table_from_call(c, e, ignored)))
        for c in _config_calls(tree):
            if id(c) not in in_comp:
                found.append(((c.lineno, c.col_offset, 0), _table_from_call(c, env, ignored)))
    except _Unsupported as e:
        raise ImportFormatError(str(e)) from None
    if not found:
        raise ImportFormatError("no EmbeddingBagConfig(...) calls found in the snippet")
    tables = [t for _, t in sorted(found, key=lambda x: x[0])]
    notes = [f"ignored arguments: {', '.join(sorted(ignored))}"] if ignored else []
    return Imported(tables=tables[:MAX_TABLES], notes=notes)


IMPORTERS = {"json": from_json, "csv": from_csv, "torchrec": from_torchrec_snippet}
