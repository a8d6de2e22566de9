"""An import into the workspace, all or nothing: read the input, check every imported table, constraint and
topology field by the engine's own rules (every problem, each naming its grid row or field), and only then
build the new workspace config. Pure (no Streamlit): the Tables page's Import tool calls `run`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Optional

import engine
from dashboard.tables import grid, importers, row_checks
from dashboard.tables.importers import one_line, shown

MAX_PROBLEMS_PER_TABLE = 12
MAX_PROBLEMS = 500  # listed for one import; past them the check stops (a hostile file could hold millions)
STOPPED = f"... the check stopped after {MAX_PROBLEMS} problems: fix these and import again"
UNEXPECTED = "the importer could not read this input"
FORMAT_NAMES = {"json": "JSON", "csv": "CSV", "torchrec": "TorchRec snippet"}
_TABLE_FIELD = re.compile(r"^tables\[(\d+)\](?:\.(\w+))?")
_FIXED = {"name": "t", "num_embeddings": 1, "embedding_dim": 1, "world_size": 1}  # stand-ins to look past a problem
_PROBE_TABLE = {"name": "t", "num_embeddings": 1, "embedding_dim": 1}


@dataclass(frozen=True)
class Outcome:
    """What an import did: the new workspace config, or None when refused with its problems (one line each)."""

    config: Optional[dict]
    message: str
    problems: tuple[str, ...] = ()


def run(fmt: str, data: str | bytes, workspace: dict, mode: str) -> Outcome:
    """Import `data` in format `fmt` into a copy of `workspace` ("replace" or "append" its tables). Never
    raises: a refusal is an Outcome without config, and the caller's workspace is never touched."""
    try:
        got = importers.read(fmt, data)
        return _merge(got, copy.deepcopy(workspace), mode, FORMAT_NAMES.get(fmt, fmt))
    except importers.ImportFormatError as e:
        if e.readable is None or not e.readable.tables:
            return _refused(list(e.problems))
        # the lines that could be read are checked too: every problem at once, in file order
        existing = grid.config_to_rows(workspace) if mode == "append" else []
        return _refused(sorted([*e.problems, *_problems(e.readable, existing, None)], key=_row_of))
    except Exception as e:  # noqa: BLE001 - the page must show one message, whatever the input does
        return _refused([f"{UNEXPECTED} ({type(e).__name__}); please report the input"])


def _refused(problems: list[str]) -> Outcome:
    lines = tuple(one_line(p) for p in problems)
    if len(lines) == 1:
        return Outcome(None, f"Cannot import: {lines[0]} (nothing was changed)", lines)
    if len(lines) > MAX_PROBLEMS:
        lines = (*lines[:MAX_PROBLEMS], STOPPED)
        return Outcome(None, f"Cannot import (more than {MAX_PROBLEMS} problems); nothing was changed:", lines)
    return Outcome(None, f"Cannot import ({len(lines):,} problems); nothing was changed:", lines)


# ---- per table: every problem, looking past each one with a stand-in value ----------------------


def _key_of(rest: str, d: dict) -> Optional[str]:
    """The key of `d` a ConfigError path names (as the error writes it, engine.one_line; keys may hold dots or
    brackets: the longest that fits)."""
    written = {engine.one_line(k): k for k in d if isinstance(k, str)}
    if rest in written:
        return written[rest]
    fits = [w for w in written if rest.startswith((w + "[", w + "."))]
    return written[max(fits, key=len)] if fits else None


def _label(key: str) -> str:
    """A field as the grid labels it and as the file names it ("dim (embedding_dim)"; "name" once), else the
    engine's name, else the user's key quoted: a JSON or CSV user finds the key they typed."""
    if key in grid.FIELD_COLUMNS:
        label = grid.LABELS[grid.FIELD_COLUMNS[key]]
        return label if label.replace(" ", "_") == key else f"{label} ({key})"
    return key if key in engine.TABLE_FIELDS + engine.CONSTRAINT_FIELDS else shown(key)


def _repair(table: dict, cons: Optional[dict], name: str, field: str) -> Optional[str]:
    """Put a stand-in for (or drop) the field a ConfigError names; its label, or None when it is not a field."""
    for prefix, d in (("tables[0].", table), (f"constraints.{engine.one_line(name)}.", cons)):
        key = _key_of(field[len(prefix):], d) if d is not None and field.startswith(prefix) else None
        if key is None:
            continue
        if key in _FIXED and d is table:
            d[key] = _FIXED[key]
        else:
            d.pop(key)
        return _label(key)
    if field.startswith("tables[0].") and field[len("tables[0]."):] in _FIXED:  # a required field, missing
        key = field[len("tables[0]."):]
        table[key] = _FIXED[key]
        return _label(key)
    return None


def _table_problems(raw: Any, raw_cons: Any, where: str) -> list[str]:
    if not isinstance(raw, dict):
        return [f"{where}: must be an object with name, num_embeddings, embedding_dim; got {shown(raw)}"]
    table, cons = dict(raw), dict(raw_cons) if isinstance(raw_cons, dict) else raw_cons
    problems: list[str] = []
    for _ in range(MAX_PROBLEMS_PER_TABLE):
        key = table["name"] if isinstance(table.get("name"), str) else "t"
        cfg = {"tables": [table], "constraints": {} if cons is None else {key: cons}, "topology": {"world_size": 1}}
        try:
            engine.parse_config(cfg)
            return problems
        except engine.ConfigError as e:
            if e.field == f"constraints.{engine.one_line(key)}":
                problems.append(f"{where}: constraints: {e.message}")
                cons = None
                continue
            label = _repair(table, cons, key, e.field)
            problems.append(f"{where}: {label}: {e.message}" if label else f"{where}: {_plain(e)}")
            if label is None:
                return problems
    return problems


def _where(row: int, table: Any, lines: tuple[int, ...] = (), offset: int = 0) -> str:
    """Where a problem is: an imported table's file line where the input has lines (a CSV: the numbering its
    reading problems use), else its row in the grid (`row`, counted over the kept rows and the imported ones)."""
    name = table.get("name") if isinstance(table, dict) else None
    at = f"line {lines[row - offset]}" if lines and row >= offset else f"row {row + 1}"
    return at + (f" ({shown(name)})" if isinstance(name, str) else "")


def _features(table: Any) -> list[str]:
    if not isinstance(table, dict) or not isinstance(table.get("name"), str):
        return []
    f = table.get("feature_names", [table["name"]])
    return [x for x in f if isinstance(x, str)] if isinstance(f, list) else []


def _clashes(tables: list, existing: list[dict], offset: int, lines: tuple[int, ...] = ()) -> list[str]:
    """Names and features used twice, among the imported tables or with the tables kept (append)."""

    def other(i: int) -> str:  # the other row of a clash: an imported table's place, or a kept row of the grid
        if i >= offset:
            return _where(i, None, lines, offset)
        return f"the grid's row {i + 1}" if lines else f"row {i + 1}"

    names: dict[str, int] = {r["name"]: i for i, r in enumerate(existing) if isinstance(r.get("name"), str)}
    owner: dict[str, int] = {}
    for i, r in enumerate(existing):
        for f in str(r.get("features") or r.get("name") or "").split(","):
            owner.setdefault(f.strip(), i)
    problems = []
    name_of = {i: r.get("name") for i, r in enumerate(existing)}
    for i, t in enumerate(tables, start=offset):
        name = t.get("name") if isinstance(t, dict) else None
        if not isinstance(name, str):
            continue
        name_of[i] = name
        if name in names:
            problems.append(f"{_where(i, t, lines, offset)}: name: duplicate table name (also {other(names[name])})")
        names.setdefault(name, i)
        for f in _features(t):
            if "," in f or f != f.strip():
                problems.append(f"{_where(i, t, lines, offset)}: features: feature {shown(f)} has a comma or "
                                "surrounding spaces, "
                                "which the grid cannot hold; rename it")
            elif f in owner and owner[f] != i and name_of.get(owner[f]) != name:  # one name: flagged by name
                problems.append(f"{_where(i, t, lines, offset)}: features: feature {shown(f)} is already used by "
                                f"{other(owner[f])}")
            owner.setdefault(f, i)
    return problems


def _orphans(got: importers.Imported) -> list[str]:
    names = {t.get("name") for t in got.tables if isinstance(t, dict) and isinstance(t.get("name"), str)}
    return [f"constraints for {shown(k)}: no imported table has this name" for k in got.constraints if k not in names]


def _topology_problems(topo: dict) -> list[str]:
    topo, problems, stand_in = dict(topo), [], False
    for _ in range(len(topo) + 2):
        try:
            engine.parse_config({"tables": [_PROBE_TABLE], "topology": topo})
            return problems
        except engine.ConfigError as e:
            rest = e.field[len("topology."):] if e.field.startswith("topology.") else ""
            key = "world_size" if rest == "world_size" else _key_of(rest, topo)
            if not (stand_in and key == "local_world_size"):  # it only fails to divide the stand-in
                problems.append(row_checks.outside_text(e, with_key=True))
            if key is None:
                return problems
            if key == "world_size":
                topo[key], stand_in = 1, True
            else:
                topo.pop(key)
    return problems


# ---- the whole import ---------------------------------------------------------------------------


def _constraints(cfg: engine.Config, name: str) -> engine.Constraints:
    return cfg.constraints.get(name) or engine.Constraints()


def _valid(config: dict) -> bool:
    try:
        engine.parse_config(config)
        return True
    except engine.ConfigError:
        return False


def _plain(e: engine.ConfigError) -> str:
    """An engine error without its engine path: the field as the grid labels it, or the topology's."""
    m = _TABLE_FIELD.match(e.field)
    if m:
        return f"{_label(m.group(2))}: {e.message}" if m.group(2) else e.message
    if e.field.startswith("constraints."):
        return f"constraints: {e.message}"
    return row_checks.outside_text(e, with_key=True)


def _located(e: engine.ConfigError, offset: int, tables: list) -> str:
    m = _TABLE_FIELD.match(e.field)
    if m:
        i = int(m.group(1))
        return f"{_where(offset + i, tables[i] if i < len(tables) else None)}: {_plain(e)}"
    return _plain(e)


def _problems(got: importers.Imported, existing: list[dict], topology: Optional[dict]) -> list[str]:
    offset = len(existing)
    if not got.tables:
        return ["no tables to import"]
    problems, named = [], set()
    for i, t in enumerate(got.tables):
        name = t.get("name") if isinstance(t, dict) and isinstance(t.get("name"), str) else None
        cons = got.constraints.get(name) if name is not None and name not in named else None  # a name's first table
        named.add(name)
        problems += _table_problems(t, cons, _where(offset + i, t, got.lines, offset))
        if len(problems) > MAX_PROBLEMS:
            break
    problems += _clashes(got.tables, existing, offset, got.lines)
    problems.sort(key=_row_of)  # stable: each row's problems together, in the engine's order
    problems += _orphans(got)
    if topology is not None:
        problems += _topology_problems(topology)
    return problems


def _row_of(problem: str) -> int:
    m = re.match(r"(?:row|line) (\d+)", problem)
    return int(m.group(1)) if m else 0


def _merge(got: importers.Imported, workspace: dict, mode: str, fmt_name: str) -> Outcome:
    existing = grid.config_to_rows(workspace) if mode == "append" else []
    new_topology = got.topology if mode == "replace" and got.topology is not None else None
    problems = _problems(got, existing, new_topology)
    if problems:
        return _refused(problems)
    topology = new_topology if new_topology is not None else dict(workspace.get("topology") or {})
    probe_topology = topology if _valid({"tables": [_PROBE_TABLE], "topology": topology}) else {"world_size": 1}
    try:
        parsed = engine.parse_config({"tables": got.tables, "constraints": got.constraints,
                                      "topology": probe_topology})
    except engine.ConfigError as e:
        return _refused([_located(e, len(existing), got.tables)])
    canonical = engine.config_to_dict(parsed)
    if new_topology is not None:
        topology = canonical["topology"]
    rows = existing + grid.config_to_rows(canonical)
    config = grid.rows_to_config(rows, topology)
    if not existing or _valid(workspace):
        try:
            merged = engine.parse_config({**config, "topology": probe_topology})
        except engine.ConfigError as e:
            return _refused([_located(e, 0, config["tables"])])
        if merged.tables[len(existing):] != parsed.tables or any(
                _constraints(merged, t.name) != _constraints(parsed, t.name) for t in parsed.tables):
            return _refused(["the grid cannot hold these tables as written; please report the input"])
    return Outcome(config, _success(got, fmt_name, mode))


def _success(got: importers.Imported, fmt_name: str, mode: str) -> str:
    notes = list(got.notes)
    if got.topology is not None and mode == "append":
        notes.append("its topology was not used: appending keeps the workspace's")
    elif got.topology is not None:
        notes.append("topology replaced")
    note = f" ({'; '.join(notes)})" if notes else ""
    n = len(got.tables)
    return one_line(f"Imported {n} table{'s' if n != 1 else ''} from {fmt_name}{note}.")
