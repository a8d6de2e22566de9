"""JSON from outside (files, uploads, bundles), decoded with bounds: nesting depth, number length, no NaN.

Python's decoder alone turns a 1,000-deep file into a RecursionError, a 5,000-digit integer into a ValueError
and `1e999` into infinity; here each becomes one JsonError naming what is wrong. Every loader of the
engine, the store and the dashboard reads user JSON through `loads`.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32  # a config is 5 levels deep, a bundle 7; 32 leaves room and stays far from the recursion limit
MAX_NUMBER_CHARS = 40  # digits of an int64 plus sign and exponent with room; longer numbers are not data


class JsonError(ValueError):
    """JSON that cannot be read within the bounds; the message is one line saying where and why."""

    def __init__(self, message: str, token: str = ""):
        super().__init__(message)
        self.token = token  # the text at fault, to find its line and column


def _number(kind: str, convert: type):
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise JsonError(f"a number of {len(text)} characters ({text[:12]}...); at most "
                            f"{MAX_NUMBER_CHARS} are read", text)
        value = convert(text)
        if kind == "float" and value in (float("inf"), float("-inf")):
            raise JsonError(f"the number {text} is too large to be a finite double", text)
        return value

    return parse


def _constant(name: str) -> Any:
    raise JsonError(f"{name} is not a JSON number; write a finite value", name)


def _depth_ok(data: Any) -> bool:
    """Iterative (never recursive) check that containers nest at most MAX_DEPTH deep: one level at a time, each
    container visited once."""
    level, depth = ([data] if isinstance(data, (dict, list)) else []), 1
    while level:
        if depth > MAX_DEPTH:
            return False
        inner = []
        for value in level:
            inner += [v for v in (value.values() if type(value) is dict else value) if type(v) in (dict, list)]
        level, depth = inner, depth + 1
    return True


def _where(text: str, token: str) -> str:
    at = text.find(token) if token else -1
    if at < 0:
        return ""
    line = text.count("\n", 0, at) + 1
    return f"line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1}: "


def loads(text: str | bytes, source: str = "input") -> Any:
    """Decoded JSON, or JsonError: "<source> is not valid JSON (line L, column C: why)" or the bound it broke."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonError(f"{source} is not UTF-8 text (byte {e.start})") from None
    try:
        data = json.loads(text, parse_int=_number("int", int), parse_float=_number("float", float),
                          parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise JsonError(f"{source} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise JsonError(f"{source} nests objects or lists more than {MAX_DEPTH} deep") from None
    except JsonError as e:
        raise JsonError(f"{source} is not valid JSON ({_where(text, e.token)}{e})") from None
    if not _depth_ok(data):
        raise JsonError(f"{source} nests objects or lists more than {MAX_DEPTH} deep")
    return data
