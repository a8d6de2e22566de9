"""JSON files the `python -m db` commands read and write: read within engine.jsonsafe's bounds, errors one line."""

from __future__ import annotations

from pathlib import Path

from db.errors import StoreError
from engine import EngineError, JsonError, write_json_file
from engine import json_loads as loads


def read_json_object(path: str, flag: str) -> dict:
    try:
        data = loads(Path(path).read_bytes(), f"{flag} {path!r}")
    except OSError as e:
        raise EngineError(f"{flag} {path!r}: cannot read it ({e.strerror or e})") from None
    except JsonError as e:  # deep nesting, a 5,000-digit number, NaN: one line, as for any JSON
        raise StoreError(str(e)) from None
    if not isinstance(data, dict):
        raise EngineError(f"{flag} {path!r}: must hold a JSON object")
    return data


def write_json(path: Path, data: dict, flag: str) -> None:
    try:
        write_json_file(path, data)
    except OSError as e:
        raise EngineError(f"{flag} {str(path)!r}: cannot write there ({e.strerror or e})") from None
