"""Config files <-> engine types. Everything is validated here, at the door, with errors naming the field.

A config is JSON with three parts named as TorchRec names them: `tables` (EmbeddingBagConfig fields),
`constraints` (ParameterConstraints fields, keyed by table name) and `topology` (Topology fields plus
batch_size and optimizer). See README.md for every field and its default.
"""

from __future__ import annotations

import enum
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from engine import constants as C
from engine import limits as L
from engine.errors import ConfigError, human_bytes
from engine.estimate import table_load
from engine.jsonsafe import JsonError, loads
from engine.profile import parse_profile
from engine.types import (
    ComputeKernel,
    Config,
    Constraints,
    DataType,
    Device,
    Optimizer,
    PoolingType,
    ShardingType,
    TableConfig,
    Topology,
)

E = TypeVar("E", bound=enum.Enum)

TABLE_FIELDS = ("name", "num_embeddings", "embedding_dim", "feature_names", "pooling", "data_type")
CONSTRAINT_FIELDS = (
    "sharding_types",
    "compute_kernels",
    "min_partition",
    "pooling_factors",
    "num_poolings",
    "batch_sizes",
    "is_weighted",
    "cache_load_factor",
    "ranks",
    "hosts",
    "colocate",
    "apart",
)
TOPOLOGY_FIELDS = (
    "world_size",
    "local_world_size",
    "compute_device",
    "hbm_cap",
    "ddr_cap",
    "hbm_mem_bw",
    "ddr_mem_bw",
    "hbm_to_ddr_mem_bw",
    "intra_host_bw",
    "inter_host_bw",
    "batch_size",
    "storage_reservation",
    "optimizer",
)
PROFILE_FIELD = "profile"  # a device profile (engine.profile): written only when there is one
TOP_FIELDS = ("tables", "constraints", "topology")
MAX_FILE_BYTES = 256 * 2**20  # 100,000 tables with constraints take about 40 MiB of JSON

# Names older TorchRec releases (and its tutorials) print for today's kernels.
KERNEL_ALIASES = {"batched_fused": "fused", "batched_dense": "dense", "batched_fused_uvm": "fused_uvm",
                  "batched_fused_uvm_caching": "fused_uvm_caching"}


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
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(path, f"must be a non-empty string, got {_type_name(v)}")
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


def _table(raw: Any, path: str) -> TableConfig:
    d = _object(raw, path, TABLE_FIELDS)
    for req in ("name", "num_embeddings", "embedding_dim"):
        if req not in d:
            raise ConfigError(f"{path}.{req}", "is required")
    name = _name(d["name"], f"{path}.name")
    features = (
        _list(d["feature_names"], f"{path}.feature_names", _name) if "feature_names" in d else (name,)
    )
    table = TableConfig(
        name=name,
        num_embeddings=_int(d["num_embeddings"], f"{path}.num_embeddings", 1, L.MAX_NUM_EMBEDDINGS),
        embedding_dim=_int(d["embedding_dim"], f"{path}.embedding_dim", 1, L.MAX_EMBEDDING_DIM),
        feature_names=features,
        pooling=_enum(d.get("pooling", "sum"), f"{path}.pooling", PoolingType),
        data_type=_enum(d.get("data_type", "fp32"), f"{path}.data_type", DataType),
    )
    if table.weight_bytes > L.MAX_TABLE_BYTES:
        raise ConfigError(f"{path}.num_embeddings", f"the table holds {human_bytes(table.weight_bytes)} of weights; "
                          f"at most {human_bytes(L.MAX_TABLE_BYTES)} per table are planned")
    return table


# ---- the common case at C speed ---------------------------------------------------------------------
# A table or constraint whose every field has the plain type and range is built here without the checking
# path's per-field calls (100,000 tables parse in about a second); anything else (None) goes through the
# checking path, which alone writes error messages. tests/engine/test_config_fast.py holds the two equal.

_TABLE_KEYS = frozenset(TABLE_FIELDS)
_POOLINGS = {m.value: m for m in PoolingType}
_DATA_TYPES = {m.value: m for m in DataType}
_FAST_CONSTRAINT_KEYS = frozenset(CONSTRAINT_FIELDS) - {"sharding_types", "compute_kernels", "ranks", "hosts",
                                                         "colocate", "apart"}


def _plain_name(v: Any) -> bool:
    return type(v) is str and 0 < len(v) <= L.MAX_NAME_CHARS and v.isprintable() and not v.isspace()


def _table_fast(raw: Any) -> TableConfig | None:
    if type(raw) is not dict or not raw.keys() <= _TABLE_KEYS:
        return None
    name, rows, dim = raw.get("name"), raw.get("num_embeddings"), raw.get("embedding_dim")
    if not (_plain_name(name) and type(rows) is int and 1 <= rows <= L.MAX_NUM_EMBEDDINGS
            and type(dim) is int and 1 <= dim <= L.MAX_EMBEDDING_DIM):
        return None
    features = raw.get("feature_names", None)
    if features is None:
        if "feature_names" in raw:
            return None
        features = (name,)
    elif type(features) is list and 0 < len(features) <= L.MAX_FEATURES_PER_TABLE and all(map(_plain_name, features)):
        features = tuple(features)
    else:
        return None
    pooling, data_type = raw.get("pooling", "sum"), raw.get("data_type", "fp32")
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
    for key, lo, hi, ints in (("pooling_factors", 0.0, L.MAX_POOLING_FACTOR, False),
                              ("num_poolings", 0.0, L.MAX_NUM_POOLINGS, False),
                              ("batch_sizes", 1, L.MAX_BATCH_SIZE, True)):
        if key in raw:
            out[key] = _numbers_fast(raw[key], n, lo, hi, ints)
            if out[key] is None:
                return None
    if "min_partition" in raw:
        v = raw["min_partition"]
        if not (type(v) is int and 1 <= v <= L.MAX_EMBEDDING_DIM):
            return None
        out["min_partition"] = v
    if "cache_load_factor" in raw:
        v = raw["cache_load_factor"]
        if not ((type(v) is int or type(v) is float) and 0.0 < v <= 1.0):
            return None
        out["cache_load_factor"] = float(v)
    weighted = raw.get("is_weighted", False)
    if type(weighted) is not bool:
        return None
    return Constraints(is_weighted=weighted, **out)


def _per_feature(v: Any, path: str, n_features: int, item: Callable[[Any, str], Any]) -> tuple:
    values = _list(v, path, item, allow_scalar=True)
    if len(values) == 1 and n_features > 1:
        values = values * n_features
    if len(values) != n_features:
        raise ConfigError(path, f"has {len(values)} values but the table has {n_features} features; give one "
                          "value per feature or a single value for all")
    return values


def _constraint(raw: Any, path: str, table: TableConfig) -> Constraints:
    d = _object(raw, path, CONSTRAINT_FIELDS)
    n = len(table.feature_names)
    get = d.get
    return Constraints(
        sharding_types=_list(get("sharding_types"), f"{path}.sharding_types",
                             lambda v, p: _enum(v, p, ShardingType)) if "sharding_types" in d else None,
        compute_kernels=_list(get("compute_kernels"), f"{path}.compute_kernels",
                              lambda v, p: _enum(v, p, ComputeKernel, KERNEL_ALIASES))
        if "compute_kernels" in d else None,
        min_partition=_int(get("min_partition"), f"{path}.min_partition", 1, L.MAX_EMBEDDING_DIM)
        if "min_partition" in d else None,
        pooling_factors=_per_feature(get("pooling_factors"), f"{path}.pooling_factors", n,
                                     lambda v, p: _float(v, p, 0.0, L.MAX_POOLING_FACTOR))
        if "pooling_factors" in d else None,
        num_poolings=_per_feature(get("num_poolings"), f"{path}.num_poolings", n,
                                  lambda v, p: _float(v, p, 0.0, L.MAX_NUM_POOLINGS)) if "num_poolings" in d else None,
        batch_sizes=_per_feature(get("batch_sizes"), f"{path}.batch_sizes", n,
                                 lambda v, p: _int(v, p, 1, L.MAX_BATCH_SIZE)) if "batch_sizes" in d else None,
        is_weighted=_bool(get("is_weighted", False), f"{path}.is_weighted"),
        cache_load_factor=_float(get("cache_load_factor"), f"{path}.cache_load_factor", 0.0, 1.0, lo_open=True)
        if "cache_load_factor" in d else None,
        ranks=_ids(get("ranks"), f"{path}.ranks") if "ranks" in d else None,
        hosts=_ids(get("hosts"), f"{path}.hosts") if "hosts" in d else None,
        colocate=_names(get("colocate"), f"{path}.colocate") if "colocate" in d else None,
        apart=_names(get("apart"), f"{path}.apart") if "apart" in d else None,
    )


def _ids(v: Any, path: str) -> tuple[int, ...]:
    """A non-empty list of distinct rank or host numbers, sorted (their upper bound is checked with the topology)."""
    values = _list(v, path, lambda x, p: _int(x, p, 0, L.MAX_WORLD_SIZE - 1))
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


def _topology(raw: Any) -> Topology:
    d = _object(raw, "topology", (*TOPOLOGY_FIELDS, PROFILE_FIELD))
    if "world_size" not in d:
        raise ConfigError("topology.world_size", "is required (the number of ranks, e.g. 2)")
    ws = _int(d["world_size"], "topology.world_size", 1, L.MAX_WORLD_SIZE)
    lws = _int(d.get("local_world_size", ws), "topology.local_world_size", 1, L.MAX_WORLD_SIZE)
    if lws > ws or ws % lws:
        raise ConfigError("topology.local_world_size", f"must divide world_size ({ws}) evenly, got {lws}")
    bw = lambda k, dflt: _float(d.get(k, dflt), f"topology.{k}", L.MIN_BW, L.MAX_BW)  # noqa: E731
    topo = Topology(
        world_size=ws,
        local_world_size=lws,
        compute_device=_enum(d.get("compute_device", "cuda"), "topology.compute_device", Device),
        hbm_cap=_int(d.get("hbm_cap", C.HBM_CAP_BYTES), "topology.hbm_cap", 0, L.MAX_CAP_BYTES),
        ddr_cap=_int(d.get("ddr_cap", C.DDR_CAP_BYTES), "topology.ddr_cap", 0, L.MAX_CAP_BYTES),
        hbm_mem_bw=bw("hbm_mem_bw", C.HBM_MEM_BW),
        ddr_mem_bw=bw("ddr_mem_bw", C.DDR_MEM_BW),
        hbm_to_ddr_mem_bw=bw("hbm_to_ddr_mem_bw", C.HBM_TO_DDR_MEM_BW),
        intra_host_bw=bw("intra_host_bw", C.INTRA_NODE_BW),
        inter_host_bw=bw("inter_host_bw", C.CROSS_NODE_BW),
        batch_size=_int(d.get("batch_size", C.BATCH_SIZE), "topology.batch_size", 1, L.MAX_BATCH_SIZE),
        storage_reservation=_float(d.get("storage_reservation", C.STORAGE_RESERVATION),
                                   "topology.storage_reservation", 0.0, 0.99),
        optimizer=_enum(d.get("optimizer", "sgd"), "topology.optimizer", Optimizer),
    )
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


def config_to_dict(cfg: Config) -> dict:
    """The config as JSON-ready data, every default written out (parse_config(config_to_dict(c)) == c)."""
    tables = [
        {"name": t.name, "num_embeddings": t.num_embeddings, "embedding_dim": t.embedding_dim,
         "feature_names": list(t.feature_names), "pooling": t.pooling.value, "data_type": t.data_type.value}
        for t in cfg.tables
    ]
    constraints = {}
    for name, c in cfg.constraints.items():
        out: dict[str, Any] = {}
        for f in CONSTRAINT_FIELDS:
            v = getattr(c, f)
            if v is None or (f == "is_weighted" and v is False):
                continue
            out[f] = [x.value if isinstance(x, enum.Enum) else x for x in v] if isinstance(v, tuple) else v
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
