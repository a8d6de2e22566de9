"""Tables from outside: a config or table list in JSON, a CSV sheet, or a pasted TorchRec snippet (read by
dashboard.tables.snippet, never run). Inputs are bounded (size, nesting, numbers); every failure is one
ImportFormatError whose message is one line naming where and what.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import engine
from dashboard.tables import snippet

TABLE_KEYS = snippet.TABLE_KEYS
MAX_TABLES = snippet.MAX_TABLES
MAX_INPUT_BYTES = 20 * 2**20
# a sample of ids uploaded on the Workload or Runs page: refused above this before it is read, and its file types
MAX_SAMPLE_BYTES = 64 * 2**20
SAMPLE_SUFFIXES = ("parquet", "pq", "csv", "npz")
MAX_NUMBER_CHARS = 40
MAX_INT = 2**63
MAX_SHOWN_CHARS = 40  # of a user's value quoted in a message
MAX_MESSAGE_CHARS = 500
TOP_FIELDS = ("tables", "constraints", "topology")
MAX_CSV_PROBLEMS = 500  # cells listed; past them the reading stops


class ImportFormatError(ValueError):
    """Input that cannot be read; the message is one line naming where and what, `problems` every such line
    when there are several (each bad CSV cell)."""

    def __init__(self, message: str, problems: tuple[str, ...] = (), readable: Optional[Imported] = None):
        super().__init__(message)
        self.problems = tuple(problems) or (message,)
        self.readable = readable  # what could be read around the problems (a CSV's other lines), to check too


@dataclass
class Imported:
    tables: list[dict]
    constraints: dict[str, dict] = field(default_factory=dict)
    topology: Optional[dict] = None
    notes: list[str] = field(default_factory=list)
    lines: tuple[int, ...] = ()  # a CSV's: the file line of each table, the one numbering of its problems


def shown(value: Any) -> str:
    """A user's value quoted for a message: repr (one line, escaped), cut to MAX_SHOWN_CHARS."""
    if isinstance(value, str) and len(value) > MAX_SHOWN_CHARS:
        return repr(value[:MAX_SHOWN_CHARS]) + "..."
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS + 2 else text[:MAX_SHOWN_CHARS] + "..."


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` as one printable line: any line break or control character written as its escape."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text)[:limit])
    return out if len(text) <= limit else out + "..."


def decode(data: str | bytes) -> str:
    """Text of an upload (UTF-8, with or without BOM) or a paste, refused past MAX_INPUT_BYTES."""
    too_big = len(data) > MAX_INPUT_BYTES  # a character is at least one byte
    if too_big or (isinstance(data, str) and len(data.encode("utf-8", "surrogatepass")) > MAX_INPUT_BYTES):
        raise ImportFormatError(f"the input is larger than {MAX_INPUT_BYTES // 2**20} MB; split it or import "
                                "fewer tables")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ImportFormatError(f"the file is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    try:
        data.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ImportFormatError(f"the text holds an unpaired surrogate at character {e.start}") from None
    return data.removeprefix("\ufeff")


# ---- JSON ---------------------------------------------------------------------------------------


def from_json(text: str) -> Imported:
    """A whole config ({"tables", "constraints", "topology"}), {"tables": [...]}, or a bare list of tables."""
    try:
        data = engine.json_loads(text, "the text")
    except engine.JsonError as e:
        raise ImportFormatError(str(e)) from None
    if isinstance(data, list):
        data = {"tables": data}
    if not isinstance(data, dict) or not isinstance(data.get("tables"), list):
        raise ImportFormatError('expected a config object with a "tables" list, or a list of tables')
    unknown = [k for k in data if k not in TOP_FIELDS]
    if unknown:
        raise ImportFormatError(f"unknown top-level field {shown(unknown[0])}; a config has "
                                '"tables", "constraints" and "topology"')
    if len(data["tables"]) > MAX_TABLES:
        raise ImportFormatError(f"{len(data['tables']):,} tables; at most {MAX_TABLES:,} are imported at once")
    constraints = {} if data.get("constraints") is None else data["constraints"]
    if not isinstance(constraints, dict):
        raise ImportFormatError('"constraints" must be an object keyed by table name')
    topology = data.get("topology")
    if topology is not None and not isinstance(topology, dict):
        raise ImportFormatError('"topology" must be an object')
    return Imported(tables=list(data["tables"]), constraints=dict(constraints), topology=topology)


# ---- CSV ----------------------------------------------------------------------------------------

# CSV column names -> fields, and how each field's cells are read: all from the declarations (engine.fields)
_CSV_FIELDS = tuple(f for f in engine.FIELDS.values() if f.csv)
CSV_ALIASES = {alias: f.name for f in _CSV_FIELDS for alias in f.csv}
CSV_INTS = tuple(f.name for f in _CSV_FIELDS if f.kind == engine.FieldKind.INT)
CSV_FLOATS = tuple(f.name for f in _CSV_FIELDS if f.kind == engine.FieldKind.FLOAT)
CSV_LISTS = tuple(f.name for f in _CSV_FIELDS if f.kind in (engine.FieldKind.NAMES, engine.FieldKind.ENUMS)
                  or f.per_feature)
_CSV_NUMBER_LISTS = {f.name: int if f.kind == engine.FieldKind.INTS else float for f in _CSV_FIELDS if f.per_feature}
_SPLIT = re.compile(r"[;|,\s]+")
_WHOLE = re.compile(r"[+-]?\d+")


def _csv_number(raw: str, where: str, kind: type) -> Any:
    """A bounded number: finite, |n| < 2**63; for whole-number columns an exact int."""
    if len(raw) > MAX_NUMBER_CHARS:
        raise ImportFormatError(f"{where}: {shown(raw)} is too long to be a number")
    try:
        v = float(raw)
    except ValueError:
        raise ImportFormatError(f"{where}: {shown(raw)} is not a number") from None
    if not math.isfinite(v):
        raise ImportFormatError(f"{where}: {shown(raw)} is not a finite number")
    if kind is int:
        if not v.is_integer():
            raise ImportFormatError(f"{where}: {shown(raw)} is not a whole number")
        v = int(raw) if _WHOLE.fullmatch(raw) else int(v)
    if abs(v) >= MAX_INT:
        raise ImportFormatError(f"{where}: {shown(raw)} is too large (numbers must be below 2**63)")
    return v


def _csv_row(row: list[str], header: list[str], line: int) -> tuple[dict, dict]:
    table: dict[str, Any] = {}
    cons: dict[str, Any] = {}
    for col, raw in zip(header, row):
        key = CSV_ALIASES[col]
        raw = raw.strip()
        if not raw:
            continue
        where = f"line {line}, column {col}"
        if key in CSV_LISTS:
            items = [x for x in _SPLIT.split(raw) if x]
            kind = _CSV_NUMBER_LISTS.get(key)
            value: Any = [_csv_number(x, where, kind) for x in items] if kind else items
        elif key in CSV_INTS:
            value = _csv_number(raw, where, int)
        elif key in CSV_FLOATS:
            value = _csv_number(raw, where, float)
        else:
            value = raw
        (table if key in TABLE_KEYS else cons)[key] = value
    return table, cons


def _csv_header(reader) -> list[str]:
    for row in reader:
        if any(cell.strip() for cell in row):
            header = [h.strip().lower().replace(" ", "_") for h in row]
            while header and not header[-1]:
                header.pop()
            unknown = [h for h in header if h not in CSV_ALIASES]
            if unknown:
                raise ImportFormatError(f"line {reader.line_num}: unknown CSV column {shown(unknown[0])}; known: "
                                        f"{', '.join(sorted(CSV_ALIASES))}")
            keys = [CSV_ALIASES[h] for h in header]
            twice = next((h for h, k in zip(header, keys) if keys.count(k) > 1), None)
            if twice is not None:
                raise ImportFormatError(f"line {reader.line_num}: column {twice!r} is given twice (or with an alias)")
            return header
    raise ImportFormatError("the CSV is empty: the first line must name the columns, e.g. name,rows,dim")


def _csv_tables(reader) -> Imported:
    """Every table of the sheet; every line that cannot be read is listed (ImportFormatError.problems), not only
    the first."""
    header = _csv_header(reader)
    tables, constraints, problems, lines = [], {}, [], []
    for row in reader:
        line = reader.line_num
        try:
            if any(cell.strip() for cell in row[len(header):]):
                raise ImportFormatError(f"line {line}: more values than columns ({len(header)})")
            table, cons = _csv_row(row, header, line)
        except ImportFormatError as e:
            problems.append(str(e))
            if len(problems) > MAX_CSV_PROBLEMS:
                break
            continue
        if not table and not cons:
            continue
        if len(tables) >= MAX_TABLES:
            raise ImportFormatError(f"line {line}: more than {MAX_TABLES:,} tables; import at most {MAX_TABLES:,}")
        tables.append(table)
        lines.append(line)
        if cons and isinstance(table.get("name"), str):
            constraints[table["name"]] = cons
    got = Imported(tables=tables, constraints=constraints, lines=tuple(lines))
    if problems:
        raise ImportFormatError(problems[0], tuple(problems), got if len(problems) <= MAX_CSV_PROBLEMS else None)
    if not tables:
        raise ImportFormatError("the CSV has a header but no tables")
    return got


def from_csv(text: str) -> Imported:
    """One table per line; a header names the columns (name, rows/num_embeddings, dim/embedding_dim, ...)."""
    reader = csv.reader(io.StringIO(text))
    try:
        return _csv_tables(reader)
    except csv.Error as e:
        message = str(e)
        if "field larger than field limit" in message:
            message = f"a value longer than {csv.field_size_limit():,} characters"
        raise ImportFormatError(f"line {max(reader.line_num, 1)}: not readable as CSV ({message})") from None


# ---- TorchRec snippet ---------------------------------------------------------------------------


def from_torchrec_snippet(text: str) -> Imported:
    """Tables from EmbeddingBagConfig(...) calls in Python source, read with `ast` (never executed)."""
    try:
        tables, notes = snippet.read(text)
    except snippet.SnippetError as e:
        raise ImportFormatError(str(e)) from None
    return Imported(tables=tables, notes=notes)


IMPORTERS = {"json": from_json, "csv": from_csv, "torchrec": from_torchrec_snippet}


def read(fmt: str, data: str | bytes) -> Imported:
    """The tables in `data` (text or an upload's bytes) in format `fmt`; ImportFormatError (one line) if not."""
    if fmt not in IMPORTERS:
        raise ImportFormatError(f"unknown format {shown(fmt)}; use one of: {', '.join(IMPORTERS)}")
    text = decode(data)
    if not text.strip():
        raise ImportFormatError('nothing to import: paste text or choose a file (a chosen file is in once '
                                '"Ready to import" names it)')
    try:
        got = IMPORTERS[fmt](text)
    except (RecursionError, MemoryError):
        raise ImportFormatError("the input is nested too deeply or too large to read") from None
    _no_surrogates([got.tables, got.constraints, got.topology])
    return got


def _no_surrogates(data: Any) -> None:
    """Refuse strings that are not Unicode text (a lone surrogate written as an escape, \\ud800): no page could
    show or store them."""
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ImportFormatError(f"{shown(v)} holds an unpaired surrogate (an escape such as \\ud800); "
                                        "write the character itself") from None
