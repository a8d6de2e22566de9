"""What the fuzz corpora are made with: copies of a JSON document with one value set or dropped, every path in
it, and raw (often invalid) JSON text spliced in where a value was."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any


class Raw(str):
    """JSON text spliced into the document as it is."""


def set_at(data: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def drop_at(data: Any, path: tuple) -> Any:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def leaves(data: Any, path: tuple = ()) -> Iterator[tuple]:
    """Paths to every value of a JSON document (containers included)."""
    if path:
        yield path
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        yield from leaves(v, path + (k,))


def splice(doc: Any, **dumps_options: Any) -> str:
    """JSON text of doc with its Raw values written as they are (a Raw document is its own text)."""
    marks: dict[str, str] = {}

    def mark(v: Any) -> Any:
        if isinstance(v, Raw):
            marks[f"@@raw{len(marks)}@@"] = str(v)
            return f"@@raw{len(marks) - 1}@@"
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        return [mark(x) for x in v] if isinstance(v, list) else v

    text = json.dumps(mark(doc), **dumps_options)
    for key, raw in marks.items():
        text = text.replace(f'"{key}"', raw)
    return text
