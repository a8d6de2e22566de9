"""The grid's row checks: each row checked alone by the engine's own rules (remembered by content), then the clean
rows together, every ConfigError pinned to its row and column in the user's words; the issue column, notes (dims
only data_parallel runs) and the lines that list the problems. Pure (pandas and engine only).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Optional

import engine
from dashboard.tables.grid import (
    FIELD_COLUMNS,
    GRID_FIELDS,
    LABELS,
    NUMBER_RULES,
    RULE_COLUMNS,
    ANY_TABLE,
    TABLE_FIELD,
    blank,
    clean,
    rows_to_config,
    rule_values,
)

ROW_ISSUE_ENTRIES = 20_000  # rows checked alone, remembered by content
MAX_ROW_PROBLEMS = 8  # per row; a row has 11 cells
MAX_WHOLE_PASSES = 5  # checks of the clean rows together; each finds one problem only the whole config shows
MAX_LISTED_ROWS = 5  # rows named in one message ("also the name of rows 2, 5 and 9")
MAX_QUOTED_CHARS = 80  # of a name quoted in a message (names may hold 256)
STAND_INS = {f.column: blank(f) if f.grid_stand_in is None else f.grid_stand_in for f in GRID_FIELDS}
PROBE_ROW = {"name": "t", "rows": 1, "dim": 1}  # checks a topology when no row is clean
TOPOLOGY_LABELS = {"world_size": "world size", "local_world_size": "ranks per host", "compute_device": "device",
                   "hbm_cap": "HBM", "ddr_cap": "DDR", "hbm_mem_bw": "HBM bandwidth", "ddr_mem_bw": "DDR bandwidth",
                   "hbm_to_ddr_mem_bw": "HBM to DDR bandwidth", "intra_host_bw": "bandwidth within a host",
                   "inter_host_bw": "bandwidth across hosts", "batch_size": "batch size per rank",
                   "storage_reservation": "HBM reserved", "optimizer": "optimizer", "profile": "device profile",
                   "custom_topology_data": "memory by host group", "rank_devices": "device by host group",
                   "ssd_cap": "SSD", "ssd_mem_bw": "SSD bandwidth"}



def locate(field: str, rows: list[dict]) -> tuple[Optional[int], Optional[str]]:
    """(row, column) of an engine ConfigError field such as tables[3].embedding_dim or
    constraints.t1.min_partition; (None, None) for fields outside the grid (topology...)."""
    m = TABLE_FIELD.match(field)
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
    """One issue text per row ("" when fine: every problem of the row, "; "-separated) and one problem outside
    the rows (the topology, or all tables together), if any. A config the engine accepts whole has none;
    otherwise each row is checked alone (remembered by its content: an edit checks the edited row again, not a
    thousand), names and features are compared across rows, and the rows without a problem are checked together
    for what only the whole config shows (load over the topology's batch, tables x ranks)."""
    try:
        engine.parse_config(rows_to_config(rows, topology))
        return [""] * len(rows), None
    except engine.ConfigError:
        pass
    problems = [list(_row_problems(_row_key(r))) for r in rows]
    _clashes(rows, problems)
    outside = _together(rows, problems, topology)
    return ["; ".join(p) for p in problems], outside


def row_notes(rows: list[dict]) -> list[str]:
    """Per row, what the plan does about a value the config accepts but that limits the row ("" when nothing):
    a dim that is not a multiple of 4 plans data_parallel only (engine.dim_note)."""
    return [f"note: {n}" if (n := engine.dim_note(clean(r.get("dim")))) else "" for r in rows]


def issue_column(issues: list[str], notes: list[str]) -> list[str]:
    """The issue column's text per row: its problems, then its note."""
    return ["; ".join(t for t in pair if t) for pair in zip(issues, notes)]


def _row_key(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=repr)


@lru_cache(maxsize=ROW_ISSUE_ENTRIES)
def _row_problems(row_json: str) -> tuple[str, ...]:
    """Every problem of one row (its JSON) in a config of that row alone: after each, the cell at fault gets a
    stand-in value and the row is checked again, so a row with a bad dim and a bad pooling shows both."""
    row, found = json.loads(row_json), []
    for key in RULE_COLUMNS:  # placement rules name other rows and ranks: the rows together check them
        for item in (rule_values(row.get(key), True) or []) if key in NUMBER_RULES else []:
            if not isinstance(item, int):
                found.append(_describe(key, f"{_quoted(str(item))} is not a number or a range (e.g. 0, 2-3)"))
                break
        row[key] = None
    for _ in range(MAX_ROW_PROBLEMS):
        try:
            engine.parse_config(rows_to_config([row], {"world_size": 1}))
            break
        except engine.ConfigError as e:
            _, col = locate(e.field, [row])
            found.append(_describe(col, _user_text(e.message, [0])))
            if col is not None:
                row[col] = STAND_INS[col]
            elif e.field.startswith("constraints.") and row.get("_extra"):
                row["_extra"] = {}  # a constraint the grid does not show (num_poolings...)
            else:
                break
    return tuple(found)


def _quoted(text: str) -> str:
    return repr(text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + "...")


def rows_text(positions: list[int]) -> str:
    numbers = [str(p + 1) for p in positions]
    if len(numbers) == 1:
        return f"row {numbers[0]}"
    shown = numbers[:MAX_LISTED_ROWS]
    more = f" and {len(numbers) - len(shown)} more" if len(numbers) > len(shown) else ""
    return f"rows {', '.join(shown[:-1])} and {shown[-1]}" if not more else f"rows {', '.join(shown)}{more}"


def features_of(row: dict) -> list[str]:
    """The feature names a row gives its table (its name when the features cell is empty)."""
    features = row.get("features")
    if isinstance(features, str) and features.strip():
        return [f.strip() for f in features.split(",") if f.strip()]
    name = row.get("name")
    return [name] if isinstance(name, str) and name.strip() else []


def _clashes(rows: list[dict], problems: list[list[str]]) -> None:
    """Flag every row of a name used twice, and every row of a feature two tables use (each row names the
    others), whatever else is wrong with them."""
    by_name: dict[str, list[int]] = {}
    by_feature: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        name = r.get("name")
        if isinstance(name, str) and name.strip():
            by_name.setdefault(name, []).append(i)
        for f in dict.fromkeys(features_of(r)):
            by_feature.setdefault(f, []).append(i)
    for name, where in by_name.items():
        for i in where if len(where) > 1 else ():
            others = [j for j in where if j != i]
            problems[i].append(f"name: {_quoted(name)} is also the name of {rows_text(others)}; "
                               "table names must be unique")
    for feature, where in by_feature.items():
        for i in where if len(where) > 1 else ():
            others = [j for j in where if j != i and rows[j].get("name") != rows[i].get("name")]
            if others:  # rows of one name are flagged once, by name
                problems[i].append(f"features: {_quoted(feature)} is also a feature of {rows_text(others)}; "
                                   "feature names must be unique")


def _together(rows: list[dict], problems: list[list[str]], topology: dict) -> Optional[str]:
    """Check the rows without a problem as one config; a problem found lands on its row (and that row is left
    out for the next pass), or is returned when it is outside the rows."""
    clean = [i for i, p in enumerate(problems) if not p]
    everyone = {r.get("name") for r in rows}
    for _ in range(MAX_WHOLE_PASSES):
        subset = _without_absent([rows[i] for i in clean], everyone) or [PROBE_ROW]
        try:
            engine.parse_config(rows_to_config(subset, topology))
            return None
        except engine.ConfigError as e:
            pos, col = locate(e.field, subset) if clean else (None, None)
            if pos is None:
                return outside_text(e, clean)
            problems[clean[pos]].append(_describe(col, _user_text(e.message, clean)))
            del clean[pos]
    return None


def _without_absent(subset: list[dict], everyone: set) -> list[dict]:
    """The rows with their co-locate and apart names limited to tables in `subset`, or to no table at all (a
    name of a row left out for its own problem is not this row's problem)."""
    present = {r.get("name") for r in subset}
    out = []
    for r in subset:
        if r.get("colocate") or r.get("apart"):
            r = dict(r)
            for key in ("colocate", "apart"):
                names = rule_values(r.get(key), False)
                if names:
                    kept = [n for n in names if n in present or n not in everyone]
                    r[key] = ", ".join(kept) or None
        out.append(r)
    return out


def outside_text(e: engine.ConfigError, positions: Optional[list[int]] = None, with_key: bool = False) -> str:
    """An error outside the rows in the words of the pages: the topology field as the Topology page labels it
    (with_key: and as a config file names it), or the tables together; never an engine path."""
    if e.field.startswith("topology."):
        key = e.field[len("topology."):]
        label = TOPOLOGY_LABELS.get(key.split(".")[0].split("[")[0], key)
        named = f"{label} ({key})" if with_key and label != key else label
        return f"Topology, {named}: {_user_text(e.message, positions)}"
    if e.field.startswith("topology") or e.field.startswith("config"):
        return f"Topology: {_user_text(e.message, positions)}"
    return f"Tables: {_user_text(e.message, positions)}"


def _user_text(message: str, positions: Optional[list[int]]) -> str:
    """An engine message with its paths (tables[3]) written as grid rows (row 4); positions maps the checked
    config's tables to grid rows."""
    def row(m: re.Match) -> str:
        i = int(m.group(1))
        return f"row {(positions[i] if positions and i < len(positions) else i) + 1}"
    return ANY_TABLE.sub(row, message)


def issue_lines(rows: list[dict], issues: list[str]) -> list[str]:
    """One line per row with an issue, as the summary above the grids lists them: row number as the grid
    shows it, the table's name, the issue."""
    out = []
    for i, text in enumerate(issues):
        if text:
            name = rows[i].get("name")
            label = f" ({_quoted(name)})" if isinstance(name, str) and name.strip() else ""
            out.append(f"row {i + 1}{label}: {text}")
    return out


def clear_row_checks() -> None:
    """Forget the rows checked alone (the server's last session went)."""
    _row_problems.cache_clear()
