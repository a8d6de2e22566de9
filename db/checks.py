"""Checks at the store's door: every value a caller hands in, turned into a StoreError naming the field.

Values that go into columns are bounded so that every backend stores them as given: integers below 2**53,
times between 1970 and 9998 in UTC, text that is valid Unicode without NUL, share tokens as the server makes them.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import math
import secrets
from datetime import UTC, datetime
from typing import Any, TypeVar

from db.errors import StoreError
from db.models import LABEL_LEN, NAME_LEN, SHORT_LEN
from engine import MAX_WORLD_SIZE, ConfigError, JsonError, config_to_dict, json_loads, parse_config

E = TypeVar("E", bound=enum.Enum)
TOKEN_BYTES = 16  # 128 random bits: unguessable
TOKEN_CHARS = 22  # len(secrets.token_urlsafe(TOKEN_BYTES)): 16 bytes in unpadded URL-safe base64
TOKEN_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
MAX_INT = 2**53 - 1  # every integer a column holds: exact as a double too, so JSON readers agree on it
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)  # exclusive: a year-9999 time with an offset overflows datetime
SHOWN_CHARS = 60  # a value quoted in a message is cut to this length, so the message stays one short line


def type_name(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


def shown(v: Any) -> str:
    """repr(v) cut to SHOWN_CHARS, for messages (a 5,000-digit number or a long string stays short)."""
    try:
        text = repr(v)
    except ValueError:  # an int too long for repr
        return f"an integer of {v.bit_length()} bits"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def new_token() -> str:
    """An unguessable share token that never starts with '-' (it would read as an option on a command line)."""
    while True:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not token.startswith("-"):
            return token


def is_token(v: Any) -> bool:
    """True for exactly what new_token makes: 22 URL-safe characters that decode to 16 bytes, no leading '-'."""
    if not isinstance(v, str) or len(v) != TOKEN_CHARS or not set(v) <= TOKEN_ALPHABET or v.startswith("-"):
        return False
    try:
        raw = base64.urlsafe_b64decode(v + "==")
    except (binascii.Error, ValueError):
        return False
    # The last character carries 2 bits of data; 4 more set bits would be a second spelling of the same bytes.
    return len(raw) == TOKEN_BYTES and base64.urlsafe_b64encode(raw).decode().rstrip("=") == v


def check_token(v: Any, field: str = "token") -> str:
    if not is_token(v):
        raise StoreError(f"{field}: {shown(v)} is not a share token (expected {TOKEN_CHARS} URL-safe characters "
                         "as the server makes them, e.g. as printed by `python -m db save`)")
    return v


def check_str(v: Any, field: str, max_len: int = NAME_LEN, empty_ok: bool = True) -> str:
    if not isinstance(v, str):
        raise StoreError(f"{field}: must be a string, got {type_name(v)}")
    if not empty_ok and not v.strip():
        raise StoreError(f"{field}: must not be empty")
    if "\x00" in v:  # PostgreSQL text cannot hold NUL; refuse it on every backend alike
        raise StoreError(f"{field}: must not contain NUL (\\x00) characters")
    if len(v) > max_len:
        raise StoreError(f"{field}: is {len(v)} characters long; the limit is {max_len}")
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise StoreError(f"{field}: is not valid Unicode text (a lone surrogate at character {e.start})") \
                from None
    return v


def check_int(v: Any, field: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= maximum:
        raise StoreError(f"{field}: must be an integer from {minimum} to {maximum}, got {shown(v)}")
    return v


def check_number(v: Any, field: str, minimum: float | None = None) -> float:
    try:
        x = float(v) if not isinstance(v, bool) and isinstance(v, (int, float)) else math.nan
    except OverflowError:  # an int beyond any double
        x = math.nan
    if not math.isfinite(x):
        raise StoreError(f"{field}: must be a finite number, got {shown(v)}")
    if minimum is not None and x < minimum:
        raise StoreError(f"{field}: must be >= {minimum:g}, got {shown(v)}")
    return x


def check_enum(v: Any, field: str, cls: type[E]) -> E:
    try:
        return cls(v)
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise StoreError(f"{field}: {shown(v)} is not one of {choices}") from None


def check_json_object(v: Any, field: str) -> dict:
    """A dict that survives JSON on every backend and reads back within engine.jsonsafe's bounds (nesting,
    number length, no NaN or infinity, valid Unicode)."""
    if not isinstance(v, dict):
        raise StoreError(f"{field}: must be a JSON object, got {type_name(v)}")
    try:
        json_loads(json.dumps(v, allow_nan=False, ensure_ascii=False).encode("utf-8"), field)
    except JsonError as e:
        raise StoreError(str(e)) from None
    except (TypeError, ValueError, RecursionError) as e:
        reason = "it nests too deep" if isinstance(e, RecursionError) else str(e).splitlines()[0]
        raise StoreError(f"{field}: cannot be stored as JSON ({reason})") from None
    return v


def check_time(v: Any, field: str, optional: bool = False) -> datetime | None:
    if v is None and optional:
        return None
    try:
        t = datetime.fromisoformat(v)
    except (TypeError, ValueError):
        raise StoreError(f"{field}: must be an ISO 8601 time such as 2026-01-31T12:00:00+00:00, "
                         f"got {shown(v)}") from None
    try:
        utc: datetime | None = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    except OverflowError:  # year 9999 with a negative offset (or year 1 with a positive one)
        utc = None
    if utc is None or not EARLIEST <= utc < LATEST:
        raise StoreError(f"{field}: {shown(v)} is outside the years {EARLIEST.year} to {LATEST.year - 1} in UTC")
    return utc


def content_hash(data: Any) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def normalize_config(config: Any, field: str = "config") -> dict:
    """The config with every default written out, as engine.config_to_dict gives it."""
    if not isinstance(config, dict):
        raise StoreError(f"{field}: must be a JSON object with tables, constraints and topology, "
                         f"got {type_name(config)}")
    try:
        return config_to_dict(parse_config(config))
    except ConfigError as e:
        raise StoreError(f"{field}: {e}") from None


def check_labels(label: Any, author: Any, config_name: Any, prefix: str = "") -> tuple[str, str, str]:
    return (check_str(label, f"{prefix}label", LABEL_LEN), check_str(author, f"{prefix}author", NAME_LEN),
            check_str(config_name, f"{prefix}config_name", NAME_LEN, empty_ok=False))


def check_metrics(metrics: Any, field: str = "metrics") -> list[dict]:
    """(rank, name, value, unit) tuples as rows for the metrics table."""
    if isinstance(metrics, (str, bytes, dict)) or not hasattr(metrics, "__iter__"):
        raise StoreError(f"{field}: must be a list of (rank, name, value, unit) tuples, got {type_name(metrics)}")
    rows = []
    for i, m in enumerate(metrics):
        f = f"{field}[{i}]"
        if not isinstance(m, (tuple, list)) or len(m) != 4:
            raise StoreError(f"{f}: must be a (rank, name, value, unit) tuple, got {shown(m)}")
        rank, name, value, unit = m
        rows.append({"rank": check_int(rank, f"{f}.rank", maximum=MAX_WORLD_SIZE - 1),
                     "name": check_str(name, f"{f}.name", NAME_LEN, empty_ok=False),
                     "value": check_number(value, f"{f}.value"), "unit": check_str(unit, f"{f}.unit", SHORT_LEN)})
    return rows
