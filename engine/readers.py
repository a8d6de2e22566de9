"""The checking readers a config, a plan file and a workload block are read with: each returns the value or raises
ConfigError naming the path (`tables[3].num_embeddings`) and what to give. engine.config builds every field's
reader from its declaration (engine.fields) out of these.
"""

from __future__ import annotations

import enum
import math
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from engine import fields as F
from engine import limits as L
from engine.errors import ConfigError, human_bytes
from engine.jsonsafe import JsonError, loads

E = TypeVar("E", bound=enum.Enum)
MAX_FILE_BYTES = 256 * 2**20  # 100,000 tables with constraints take about 40 MiB of JSON


def type_name(v: Any) -> str:
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__
    )


def shown(v: Any) -> str:
    """A number as an error message shows it: exact when short, else in scientific notation."""
    if isinstance(v, int) and abs(v) >= 10**15:
        return f"{float(v):.3g}" if abs(v) < 10**300 else f"a {len(str(abs(v)))}-digit number"
    return f"{v:g}" if isinstance(v, float) else str(v)


def read_int(v: Any, path: str, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        got = shown(v) if isinstance(v, float) else type_name(v)
        raise ConfigError(path, f"must be an integer, got {got}")
    if v < minimum or (maximum is not None and v > maximum):
        rng = f">= {minimum:,}" if maximum is None else f"from {minimum:,} to {maximum:,}"
        raise ConfigError(path, f"must be {rng}, got {shown(v)}")
    return int(v)


def read_float(v: Any, path: str, lo: float = 0.0, hi: float = math.inf, lo_open: bool = False) -> float:
    if hi == math.inf:
        rng = f"{'>' if lo_open else '>='} {lo:g}"
    else:
        rng = f"above {lo:g} and at most {hi:g}" if lo_open else f"from {lo:g} to {hi:g}"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(path, f"must be a number, got {type_name(v)}")
    if isinstance(v, int) and abs(v) > 10**300:
        raise ConfigError(path, f"must be {rng}, got {shown(v)}")
    if not math.isfinite(v):
        raise ConfigError(path, f"must be a finite number, got {v}")
    if v < lo or v > hi or (lo_open and v == lo):
        raise ConfigError(path, f"must be {rng}, got {shown(v)}")
    return float(v)


def read_str(v: Any, path: str) -> str:
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a non-empty string, got {type_name(v)}")
    if not v.strip():
        raise ConfigError(path, "must not be empty: give it a name" if v == "" else
                          "must not be blank (only spaces): give it a name")
    return v


def read_name(v: Any, path: str) -> str:
    """A table or feature name: any text a user likes, but one line of at most MAX_NAME_CHARS."""
    v = read_str(v, path)
    if len(v) > L.MAX_NAME_CHARS:
        raise ConfigError(path, f"is {len(v):,} characters long; at most {L.MAX_NAME_CHARS} are allowed")
    if not v.isprintable():  # control, separator and surrogate characters
        bad = next(c for c in v if not c.isprintable())
        raise ConfigError(path, f"contains the character {bad!r}; names are one line of printable text")
    return v


def read_enum(v: Any, path: str, cls: type[E], aliases: Optional[dict[str, str]] = None,
              refused: Optional[dict[str, str]] = None) -> E:
    """One value of `cls` (an older name through `aliases`); `refused`: values TorchRec knows that we do not plan,
    each with why, so the message says that rather than 'unknown'."""
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a string, one of: {', '.join(m.value for m in cls)}")
    key = v.strip().lower()
    key = (aliases or {}).get(key, key)
    try:
        return cls(key)
    except ValueError:
        ours = ', '.join(m.value for m in cls)
        if refused and key in refused:
            raise ConfigError(path, f"{key!r} {refused[key]}; use one of: {ours}") from None
        raise ConfigError(path, f"unknown value {v!r}; use one of: {ours}") from None


def read_list(v: Any, path: str, item: Callable[[Any, str], Any], allow_scalar: bool = False,
          max_len: int = L.MAX_FEATURES_PER_TABLE) -> tuple:
    if allow_scalar and not isinstance(v, list):
        v = [v]
    if not isinstance(v, list) or not v:
        raise ConfigError(path, f"must be a non-empty list, got {type_name(v)}")
    if len(v) > max_len:
        raise ConfigError(path, f"has {len(v):,} items; at most {max_len:,} are allowed")
    return tuple(item(x, f"{path}[{i}]") for i, x in enumerate(v))


def read_object(v: Any, path: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(v, dict):
        raise ConfigError(path, f"must be an object, got {type_name(v)}")
    unknown = [k for k in v if k not in allowed]
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(f"{where}{unknown[0]}", f"unknown field; known fields: {', '.join(allowed)}")
    return v


def read_per_feature(v: Any, path: str, n_features: int, item: Callable[[Any, str], Any]) -> tuple:
    values = read_list(v, path, item, allow_scalar=True)
    if len(values) == 1 and n_features > 1:
        values = values * n_features
    if len(values) != n_features:
        raise ConfigError(path, f"has {len(values)} values but the table has {n_features} features; give one "
                          "value per feature or a single value for all")
    return values


def read_ids(v: Any, path: str, f: F.Field) -> tuple[int, ...]:
    """A non-empty list of distinct rank or host numbers, sorted (their upper bound is checked with the topology)."""
    values = read_list(v, path, lambda x, p: read_int(x, p, f.lo, f.hi))
    if not values:
        raise ConfigError(path, "must list at least one; leave the field out to let the planner choose")
    return tuple(sorted(set(values)))


def read_caps(v: Any, path: str, world_size: int) -> tuple[Optional[tuple[int, ...]], ...]:
    """custom_topology_data: per-rank hbm_cap, ddr_cap and ssd_cap lists (engine.fields.CUSTOM_CAPS' order; None where
    absent), one whole number of bytes per rank."""
    f = F.CUSTOM_TOPOLOGY_FIELD
    d = read_object(v, path, F.CUSTOM_CAPS)
    out = []
    for key in F.CUSTOM_CAPS:
        caps = d.get(key)
        if caps is None:
            out.append(None)
            continue
        if not isinstance(caps, list) or len(caps) != world_size:
            got = f"{len(caps):,} entries" if isinstance(caps, list) else type_name(caps)
            raise ConfigError(f"{path}.{key}", f"must list one capacity in bytes per rank (world_size {world_size:,} "
                              f"entries), got {got}")
        out.append(tuple(read_int(x, f"{path}.{key}[{i}]", f.lo, f.hi) for i, x in enumerate(caps)))
    return tuple(out)


def read_table_names(v: Any, path: str) -> tuple[str, ...]:
    values = read_list(v, path, lambda x, p: x if isinstance(x, str) and x else fail(p, "must be a table name"))
    if not values:
        raise ConfigError(path, "must list at least one table name")
    return tuple(dict.fromkeys(values))


def fail(path: str, message: str) -> Any:
    raise ConfigError(path, message)


def read_bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(path, f"must be true or false, got {type_name(v)}")
    return v


def read_json(path: str | Path, what: str) -> Any:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError("", f"{what} file {str(p)!r} is {human_bytes(p.stat().st_size)}; at most "
                              f"{human_bytes(MAX_FILE_BYTES)} are read")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("", f"{what} file {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("", f"cannot read {what} file {str(p)!r}: {e}") from None
    try:
        return loads(text, repr(str(p)))
    except JsonError as e:
        raise ConfigError("", str(e)) from None
