"""Config files <-> engine types. Everything is validated here, at the door, with errors naming the field.

A config is JSON with three parts named as TorchRec names them: `tables` (EmbeddingBagConfig fields),
`constraints` (ParameterConstraints fields, keyed by table name) and `topology` (Topology fields plus
batch_size and optimizer). See README.md for every field and its default.
"""

from __future__ import annotations

import enum
import math
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from engine import fields as F
from engine import limits as L
from engine.errors import ConfigError, human_bytes
from engine.estimate import table_load
from engine.jsonsafe import JsonError, loads
from engine.profile import parse_profile
from engine.types import (
    Config,
    Constraints,
    ShardingType,
    TableConfig,
    Topology,
)

E = TypeVar("E", bound=enum.Enum)

# Every field is declared once, in engine.fields: the names, ranges and defaults below are read from there.
TABLE_FIELDS = F.TABLE_FIELDS
CONSTRAINT_FIELDS = F.CONSTRAINT_FIELDS
TOPOLOGY_FIELDS = F.TOPOLOGY_FIELDS
PROFILE_FIELD = F.PROFILE_FIELD.name  # a device profile (engine.profile): written only when there is one
TOP_FIELDS = ("tables", "constraints", "topology")
MAX_FILE_BYTES = 256 * 2**20  # 100,000 tables with constraints take about 40 MiB of JSON

# Names older TorchRec releases (and its tutorials) print for today's kernels.
KERNEL_ALIASES = F.KERNEL_ALIASES


# ---- field readers: each returns the value or raises ConfigError naming the path ----------------


def _type_name(v: Any) -> str:
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__
    )


def _shown(v: Any) -> str:
    """A number as an error message shows it: exact when short, else in scientific notation."""
    if isinstance(v, int) and abs(v) >= 10**15:
        return f"{float(v):.3g}" if abs(v) < 10**300 else f"a {len(str(abs(v)))}-digit number"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _int(v: Any, path: str, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        got = _shown(v) if isinstance(v, float) else _type_name(v)
        raise ConfigError(path, f"must be an integer, got {got}")
    if v < minimum or (maximum is not None and v > maximum):
        rng = f">= {minimum:,}" if maximum is None else f"from {minimum:,} to {maximum:,}"
        raise ConfigError(path, f"must be {rng}, got {_shown(v)}")
    return int(v)


def _float(v: Any, path: str, lo: float = 0.0, hi: float = math.inf, lo_open: bool = False) -> float:
    if hi == math.inf:
        rng = f"{'>' if lo_open else '>='} {lo:g}"
    else:
        rng = f"above {lo:g} and at most {hi:g}" if lo_open else f"from {lo:g} to {hi:g}"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(path, f"must be a number, got {_type_name(v)}")
    if isinstance(v, int) and abs(v) > 10**300:
        raise ConfigError(path, f"must be {rng}, got {_shown(v)}")
    if not math.isfinite(v):
        raise ConfigError(path, f"must be a finite number, got {v}")
    if v < lo or v > hi or (lo_open and v == lo):
        raise ConfigError(path, f"must be {rng}, got {_shown(v)}")
    return float(v)


def _str(v: Any, path: str) -> str:
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a non-empty string, got {_type_name(v)}")
    if not v.strip():
        raise ConfigError(path, "must not be empty: give it a name" if v == "" else
                          "must not be blank (only spaces): give it a name")
    return v


def _name(v: Any, path: str) -> str:
    """A table or feature name: any text a user likes, but one line of at most MAX_NAME_CHARS."""
    v = _str(v, path)
    if len(v) > L.MAX_NAME_CHARS:
        raise ConfigError(path, f"is {len(v):,} characters long; at most {L.MAX_NAME_CHARS} are allowed")
    if not v.isprintable():  # control, separator and surrogate characters
        bad = next(c for c in v if not c.isprintable())
        raise ConfigError(path, f"contains the character {bad!r}; names are one line of printable text")
    return v


def _enum(v: Any, path: str, cls: type[E], aliases: Optional[dict[str, str]] = None) -> E:
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a string, one of: {', '.join(m.value for m in cls)}")
    key = v.strip().lower()
    key = (aliases or {}).get(key, key)
    try:
        return cls(key)
    except ValueError:
        raise ConfigError(path, f"unknown value {v!r}; use one of: {', '.join(m.value for m in cls)}") from None


def _list(v: Any, path: str, item: Callable[[Any, str], Any], allow_scalar: bool = False,
          max_len: int = L.MAX_FEATURES_PER_TABLE) -> tuple:
    if allow_scalar and not isinstance(v, list):
        v = [v]
    if not isinstance(v, list) or not v:
        raise ConfigError(path, f"must be a non-empty list, got {_type_name(v)}")
    if len(v) > max_len:
        raise ConfigError(path, f"has {len(v):,} items; at most {max_len:,} are allowed")
    return tuple(item(x, f"{path}[{i}]") for i, x in enumerate(v))


def _object(v: Any, path: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(v, dict):
        raise ConfigError(path, f"must be an object, got {_type_name(v)}")
    unknown = [k for k in v if k not in allowed]
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(f"{where}{unknown[0]}", f"unknown field; known fields: {', '.join(allowed)}")
    return v


# ---- the three parts --------------------------------------------------------------------------


def _reader(f: F.Field) -> Callable[..., Any]:
    """The checking reader of a field, as its declaration (engine.fields) says: its kind and range; each raises
    ConfigError naming the path. Made once per field (_READERS): reader(value, path), and for per-feature fields
    reader(value, path, number of features)."""
    kind, lo, hi = f.kind, f.lo, f.hi
    if kind == F.INT:
        return lambda v, path: _int(v, path, lo, hi)
    if kind == F.FLOAT:
        top, lo_open = math.inf if hi is None else hi, f.lo_open
        return lambda v, path: _float(v, path, lo, top, lo_open)
    if kind == F.BOOL:
        return _bool
    if kind == F.ENUM:
        choices, aliases = f.choices, f.aliases
        return lambda v, path: _enum(v, path, choices, aliases)
    if kind == F.ENUMS:
        return lambda v, path: _list(v, path, partial(_enum, cls=f.choices, aliases=f.aliases))
    if kind == F.FLOATS:
        return lambda v, path, n: _per_feature(v, path, n, partial(_float, lo=lo, hi=hi))
    if kind == F.INTS:
        return lambda v, path, n: _per_feature(v, path, n, partial(_int, minimum=lo, maximum=hi))
    if kind == F.NAME:
        return _name
    if kind == F.NAMES:
        return lambda v, path: _list(v, path, _name, max_len=hi)
    if kind == F.IDS:
        return lambda v, path: _ids(v, path, f)
    if kind == F.TABLE_NAMES:
        return _names
    if kind == F.WORKLOAD:
        from engine import workload_block  # it reads with this module's checks

        return lambda v, path, table: workload_block.read(v, path, table)
    raise AssertionError(f"no reader for {f.name}'s kind {kind!r}")


def _read(f: F.Field, v: Any, path: str, n_features: int = 0, table: TableConfig | None = None) -> Any:
    """A field's value, checked by its reader (a workload block against its table)."""
    if f.kind == F.WORKLOAD:
        return _READERS[f.name](v, path, table)
    return _READERS[f.name](v, path, n_features) if f.per_feature else _READERS[f.name](v, path)


_REQUIRED_TABLE_FIELDS = tuple(f.name for f in F.TABLE if f.required)
# the names first (a bad feature name is reported before a bad size), then the rest in declaration order
_TABLE_READ_ORDER = sorted(F.TABLE, key=lambda f: f.kind not in (F.NAME, F.NAMES))


def _table(raw: Any, path: str) -> TableConfig:
    d = _object(raw, path, TABLE_FIELDS)
    for req in _REQUIRED_TABLE_FIELDS:
        if req not in d:
            raise ConfigError(f"{path}.{req}", "is required")
    values: dict[str, Any] = {}
    for f in _TABLE_READ_ORDER:
        if f.name in d:
            values[f.name] = _read(f, d[f.name], f"{path}.{f.name}")
        elif f.kind == F.NAMES:  # feature_names: the table's name
            values[f.name] = (values["name"],)
        else:
            values[f.name] = _read(f, f.json_default, f"{path}.{f.name}")
    table = TableConfig(**values)
    if table.weight_bytes > L.MAX_TABLE_BYTES:
        raise ConfigError(f"{path}.num_embeddings", f"the table holds {human_bytes(table.weight_bytes)} of weights; "
                          f"at most {human_bytes(L.MAX_TABLE_BYTES)} per table are planned")
    return table


# ---- the common case at C speed ---------------------------------------------------------------------
# A table or constraint whose every field has the plain type and range is built here without the checking
# path's per-field calls (100,000 tables parse in about a second); anything else (None) goes through the
# checking path, which alone writes error messages. tests/engine/test_config_fast.py holds the two equal.

_TABLE_KEYS = frozenset(TABLE_FIELDS)
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


def _table_fast(raw: Any) -> TableConfig | None:
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
    table = TableConfig(name=name, num_embeddings=rows, embedding_dim=dim, feature_names=features, pooling=pooling,
                        data_type=data_type)
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


def _constraint_fast(raw: Any, table: TableConfig) -> Constraints | None:
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


def _per_feature(v: Any, path: str, n_features: int, item: Callable[[Any, str], Any]) -> tuple:
    values = _list(v, path, item, allow_scalar=True)
    if len(values) == 1 and n_features > 1:
        values = values * n_features
    if len(values) != n_features:
        raise ConfigError(path, f"has {len(values)} values but the table has {n_features} features; give one "
                          "value per feature or a single value for all")
    return values


_CONSTRAINT_KEYS = (*CONSTRAINT_FIELDS, F.WORKLOAD_FIELD.name)


def _constraint(raw: Any, path: str, table: TableConfig) -> Constraints:
    d = _object(raw, path, _CONSTRAINT_KEYS)
    n = len(table.feature_names)
    return Constraints(**{f.name: _read(f, d[f.name], f"{path}.{f.name}", n, table)
                          for f in (*F.CONSTRAINT, F.WORKLOAD_FIELD) if f.name in d})


def _ids(v: Any, path: str, f: F.Field) -> tuple[int, ...]:
    """A non-empty list of distinct rank or host numbers, sorted (their upper bound is checked with the topology)."""
    values = _list(v, path, lambda x, p: _int(x, p, f.lo, f.hi))
    if not values:
        raise ConfigError(path, "must list at least one; leave the field out to let the planner choose")
    return tuple(sorted(set(values)))


def _names(v: Any, path: str) -> tuple[str, ...]:
    values = _list(v, path, lambda x, p: x if isinstance(x, str) and x else _fail(p, "must be a table name"))
    if not values:
        raise ConfigError(path, "must list at least one table name")
    return tuple(dict.fromkeys(values))


def _fail(path: str, message: str) -> Any:
    raise ConfigError(path, message)


def check_placement_rules(tables: tuple[TableConfig, ...], constraints: dict[str, Constraints],
                          topology: Topology) -> None:
    """Placement rules that cannot hold are refused before planning, naming the tables: ranks or hosts the
    topology does not have, a table co-located with or kept apart from itself or from an unknown table, two
    tables both co-located and kept apart, co-located tables pinned to ranks they do not share."""
    names = {t.name for t in tables}
    w, hosts, lw = topology.world_size, topology.num_hosts, topology.local_world_size
    groups: dict[str, set[str]] = {}
    for name, c in constraints.items():
        if not c.places:
            continue
        path = f"constraints.{name}"
        if c.ranks and c.ranks[-1] >= w:
            raise ConfigError(f"{path}.ranks", f"rank {c.ranks[-1]} is outside world_size {w} (ranks 0-{w - 1})")
        if c.hosts and c.hosts[-1] >= hosts:
            raise ConfigError(f"{path}.hosts", f"host {c.hosts[-1]} does not exist: {hosts} host(s) of {lw} ranks")
        for field in ("colocate", "apart"):
            for other in getattr(c, field) or ():
                if other == name:
                    raise ConfigError(f"{path}.{field}", f"names the table itself ({name!r})")
                if other not in names:
                    raise ConfigError(f"{path}.{field}", f"no table named {other!r}")
        for other in c.colocate or ():
            groups.setdefault(name, {name}).add(other)
    # co-location is symmetric and transitive: its groups
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for name, members in groups.items():
        for m in members:
            a, b = find(name), find(m)
            if a != b:
                parent[max(a, b)] = min(a, b)
    for name, c in constraints.items():
        for other in c.apart or ():
            if find(name) == find(other):
                raise ConfigError(f"constraints.{name}.apart", f"{other!r} is also co-located with {name!r} "
                                  "(directly or through other tables): a table cannot be both")
    allowed: dict[str, set[int]] = {}
    every = set(range(w))
    for name, c in constraints.items():
        ranks = allowed_ranks(c, topology)
        if ranks is not None and c.sharding_types:
            kinds = set(c.sharding_types)
            whole_host = any(set(range(h * lw, (h + 1) * lw)) <= ranks for h in range(hosts))
            if not kinds - {ShardingType.ROW_WISE, ShardingType.DATA_PARALLEL} and ranks != every or (
                    kinds <= {ShardingType.ROW_WISE, ShardingType.DATA_PARALLEL, ShardingType.TABLE_ROW_WISE}
                    and ShardingType.TABLE_ROW_WISE in kinds and not whole_host and ranks != every):
                raise ConfigError(f"constraints.{name}.sharding_types",
                                  "allows only sharding types that put a piece on every rank (or on every rank of "
                                  f"a host), but constraints.{name} pins the table to ranks "
                                  f"{', '.join(map(str, sorted(ranks)[:8]))}: allow table_wise or column_wise, or "
                                  "pin it to more ranks")
        if ranks is not None:
            root = find(name)
            allowed[root] = allowed.get(root, ranks) & ranks
            if not allowed[root]:
                raise ConfigError(f"constraints.{name}.ranks" if c.ranks else f"constraints.{name}.hosts",
                                  "leaves no rank that its co-located tables may use too")


def allowed_ranks(c: Constraints, topology: Topology) -> set[int] | None:
    """The ranks a table's pins allow (ranks and hosts both: the ranks in both), None when it has no pin."""
    out = None
    if c.ranks:
        out = set(c.ranks)
    if c.hosts:
        lw = topology.local_world_size
        on_hosts = {h * lw + i for h in c.hosts for i in range(lw)}
        out = on_hosts if out is None else out & on_hosts
    return out


def _bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(path, f"must be true or false, got {_type_name(v)}")
    return v


# every field's reader (made here, below the readers of every kind)
_READERS = {f.name: _reader(f) for f in (*F.TABLE, *F.CONSTRAINT, *F.TOPOLOGY, F.WORKLOAD_FIELD)}
_WORLD_SIZE, _LOCAL_WORLD_SIZE = F.BY_NAME["world_size"], F.BY_NAME["local_world_size"]
# (name, reader, default as a file writes it, path) of every topology field past the two sizes
_TOPOLOGY_REST = tuple((f.name, _READERS[f.name], f.json_default, f"topology.{f.name}") for f in F.TOPOLOGY
                       if f not in (_WORLD_SIZE, _LOCAL_WORLD_SIZE))


def _topology(raw: Any) -> Topology:
    d = _object(raw, "topology", (*TOPOLOGY_FIELDS, PROFILE_FIELD))
    if "world_size" not in d:
        raise ConfigError("topology.world_size", "is required (the number of ranks, e.g. 2)")
    ws = _read(_WORLD_SIZE, d["world_size"], "topology.world_size")
    lws = _read(_LOCAL_WORLD_SIZE, d.get("local_world_size", ws), "topology.local_world_size")
    if lws > ws or ws % lws:
        raise ConfigError("topology.local_world_size", f"must divide world_size ({ws}) evenly, got {lws}")
    topo = Topology(world_size=ws, local_world_size=lws, **{
        name: read(d.get(name, default), path) for name, read, default, path in _TOPOLOGY_REST})
    if d.get(PROFILE_FIELD) is None:
        return topo
    return replace(topo, profile=parse_profile(d[PROFILE_FIELD], f"topology.{PROFILE_FIELD}", topo))


def check_load(tables: tuple[TableConfig, ...], constraints: dict[str, Constraints], topology: Topology) -> None:
    """Ids and pooled outputs of one step within bounds, so that every byte count stays an exact int64."""
    ids_total = outputs_total = 0.0
    for t in tables:
        load = table_load(t, constraints.get(t.name) or Constraints(), topology)
        ids = load.batch_inputs * topology.world_size
        outputs = load.batch_outputs * topology.world_size * t.embedding_dim
        ids_total += ids
        outputs_total += outputs
        if ids > L.MAX_TABLE_IDS_PER_STEP or outputs > L.MAX_TABLE_OUTPUTS_PER_STEP:
            field = f"constraints.{t.name}.pooling_factors" if t.name in constraints else "topology.batch_size"
            raise ConfigError(field, f"table {t.name!r} looks up {ids:.3g} ids ({outputs:.3g} output values) per "
                              f"step over {topology.world_size} ranks; at most {L.MAX_TABLE_IDS_PER_STEP:.3g} "
                              f"({L.MAX_TABLE_OUTPUTS_PER_STEP:.3g}) are planned: lower the batch sizes, pooling "
                              "factors or num_poolings")
    if ids_total > L.MAX_IDS_PER_STEP or outputs_total > L.MAX_OUTPUTS_PER_STEP:
        raise ConfigError("topology.batch_size", f"the tables look up {ids_total:.3g} ids ({outputs_total:.3g} "
                          f"output values) per step together; at most {L.MAX_IDS_PER_STEP:.3g} "
                          f"({L.MAX_OUTPUTS_PER_STEP:.3g}) are planned: lower the batch size or pooling factors")


def check_pairs(tables: int, world: int) -> None:
    if tables * world > L.MAX_TABLE_RANK_PAIRS:
        raise ConfigError("topology.world_size", f"{tables:,} tables on {world:,} ranks are {tables * world:,} "
                          f"table-rank pairs; at most {L.MAX_TABLE_RANK_PAIRS:,} are planned (fewer ranks or fewer "
                          "tables)")


def parse_config(data: Any, refuse_too_big: bool = False) -> Config:
    """A config from already-decoded JSON (a dict). Raises ConfigError naming the first bad field; with
    refuse_too_big, engine.PlanningError as soon as the tables are read when they cannot fit together (the
    command line's `plan`: a config that cannot fit is refused before its constraints are read)."""
    if not isinstance(data, dict):
        raise ConfigError("config", f"must be an object with tables, constraints and topology, got {_type_name(data)}")
    d = _object(data, "", TOP_FIELDS)
    if "tables" not in d:
        raise ConfigError("tables", "is required: a list of tables, each with name, num_embeddings, embedding_dim")
    if "topology" not in d:
        raise ConfigError("topology", "is required: at least {\"world_size\": N}")
    raw_tables = d["tables"]
    if not isinstance(raw_tables, list) or not raw_tables:
        raise ConfigError("tables", f"must be a non-empty list, got {_type_name(raw_tables)}")
    if len(raw_tables) > L.MAX_TABLES:
        raise ConfigError("tables", f"has {len(raw_tables):,} tables; at most {L.MAX_TABLES:,} are planned")
    try:  # tables x ranks over the limit is refused before 100,000 tables are read
        early_topology: Topology | None = _topology(d["topology"])
        world = early_topology.world_size
    except ConfigError:
        early_topology, world = None, 0  # the topology's own error comes after the tables', as always
    check_pairs(len(raw_tables), world)
    tables = tuple(_table_fast(t) or _table(t, f"tables[{i}]") for i, t in enumerate(raw_tables))
    total = sum(t.weight_bytes for t in tables)
    if total > L.MAX_TOTAL_BYTES:
        raise ConfigError("tables", f"hold {human_bytes(total)} of weights together; at most "
                          f"{human_bytes(L.MAX_TOTAL_BYTES)} are planned")
    seen: dict[str, int] = {}
    owner: dict[str, str] = {}
    for i, t in enumerate(tables):
        if t.name in seen:
            raise ConfigError(f"tables[{i}].name", f"duplicate table name {t.name!r} (also tables[{seen[t.name]}])")
        seen[t.name] = i
        for f in t.feature_names:
            if f in owner:
                raise ConfigError(f"tables[{i}].feature_names",
                                  f"feature {f!r} is already used by table {owner[f]!r}; feature names must be unique")
            owner[f] = t.name
    if refuse_too_big and early_topology is not None:
        from engine.refuse import refuse_too_big as refuse

        refuse(tables, early_topology)
    raw_c = d.get("constraints", {}) or {}
    if not isinstance(raw_c, dict):
        raise ConfigError("constraints", f"must be an object keyed by table name, got {_type_name(raw_c)}")
    by_name = {t.name: t for t in tables}
    constraints = {}
    for name, c in raw_c.items():
        if name not in by_name:
            known = ", ".join(list(by_name)[:5]) + (", ..." if len(by_name) > 5 else "")
            raise ConfigError(f"constraints.{name}", f"no table named {name!r} (tables: {known})")
        constraints[name] = _constraint_fast(c, by_name[name]) or _constraint(c, f"constraints.{name}", by_name[name])
    topology = _topology(d["topology"])
    check_placement_rules(tables, constraints, topology)
    check_load(tables, constraints, topology)
    check_pairs(len(tables), topology.world_size)
    return Config(tables=tables, constraints=constraints, topology=topology)


def _read_json(path: str | Path, what: str) -> Any:
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


def load_config(path: str | Path, refuse_too_big: bool = False) -> Config:
    return parse_config(_read_json(path, "config"), refuse_too_big)


# ---- back to JSON -----------------------------------------------------------------------------


def _writer(f: F.Field) -> Optional[Callable[[Any], Any]]:
    """How a table field is written to JSON (None: as it is)."""
    if f.kind == F.ENUM:
        return lambda v: v.value
    if f.kind == F.ENUMS:
        return lambda v: [x.value for x in v]
    return list if f.kind in (F.NAMES, F.FLOATS, F.INTS, F.IDS, F.TABLE_NAMES) else None


_TABLE_WRITERS = tuple((f.name, _writer(f)) for f in F.TABLE)


def config_to_dict(cfg: Config) -> dict:
    """The config as JSON-ready data, every default written out (parse_config(config_to_dict(c)) == c)."""
    tables = [{name: getattr(t, name) if write is None else write(getattr(t, name)) for name, write in _TABLE_WRITERS}
              for t in cfg.tables]
    constraints = {}
    for name, c in cfg.constraints.items():
        out: dict[str, Any] = {}
        for f, absent in F.CONSTRAINT_ABSENT.items():
            v = getattr(c, f)
            if v is absent or v == absent:
                continue
            out[f] = F.json_value(v)
        if c.workload is not None:  # a block, written only when measured
            out[F.WORKLOAD_FIELD.name] = F.json_value(c.workload)
        constraints[name] = out
    return {"tables": tables, "constraints": constraints, "topology": topology_to_dict(cfg.topology)}


def topology_to_dict(topology: Topology) -> dict:
    """The topology as JSON-ready data, every default written out (as config_to_dict writes it)."""
    topo = {}
    for f in TOPOLOGY_FIELDS:
        v = getattr(topology, f)
        topo[f] = v.value if isinstance(v, enum.Enum) else v
    if topology.profile is not None:  # topologies without one keep their exact form
        topo[PROFILE_FIELD] = topology.profile.as_dict()
    return topo


def complete_topology(raw: Any) -> dict:
    """A config's `topology` object with every default written out, as config_to_dict writes it; raises
    ConfigError (naming the field) when it does not parse."""
    return topology_to_dict(_topology(raw))
