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
from typing import Any, Callable, Optional

from engine import fields as F
from engine import limits as L
from engine.errors import ConfigError, human_bytes
from engine.estimate import table_load
from engine.profile import parse_profile
from engine.fleet import read_rank_devices
from engine.fleet import to_json as fleet_json
from engine.config_fast import constraint_fast, table_fast
from engine.readers import (
    read_bool, read_caps, read_enum, read_ids, read_int, read_json, read_list, read_name, read_object,
    read_per_feature, read_float, read_table_names, type_name,
)
from engine.replicas import group_topology
from engine.rules import check_placement_rules
from engine.virtual import check_buckets, policy_to_dict
from engine.types import (
    Config,
    Constraints,
    CustomTopologyData,
    TableConfig,
    Topology,
)

# Every field is declared once, in engine.fields: the names, ranges and defaults below are read from there.
TABLE_FIELDS = F.TABLE_FIELDS
CONSTRAINT_FIELDS = F.CONSTRAINT_FIELDS
TOPOLOGY_FIELDS = F.TOPOLOGY_FIELDS
PROFILE_FIELD = F.PROFILE_FIELD.name  # a device profile (engine.profile): written only when there is one
CUSTOM_FIELD = F.CUSTOM_TOPOLOGY_FIELD.name  # per-rank capacities: written only when there are some
DEVICES_FIELD = F.RANK_DEVICES_FIELD.name  # per-rank device kinds (engine.fleet): written only when there are some
GROUP_FIELD = F.GROUP_FIELD.name  # 2D sharding's group size: written only when given
TOP_FIELDS = ("tables", "constraints", "topology")

# Names older TorchRec releases (and its tutorials) print for today's kernels.
KERNEL_ALIASES = F.KERNEL_ALIASES


# ---- the three parts --------------------------------------------------------------------------


def _reader(f: F.Field) -> Callable[..., Any]:
    """The checking reader of a field, as its declaration (engine.fields) says: its kind and range; each raises
    ConfigError naming the path. Made once per field (_READERS): reader(value, path), and for per-feature fields
    reader(value, path, number of features)."""
    kind, lo, hi = f.kind, f.lo, f.hi
    if kind == F.INT:
        return lambda v, path: read_int(v, path, lo, hi)
    if kind == F.FLOAT:
        top, lo_open = math.inf if hi is None else hi, f.lo_open
        return lambda v, path: read_float(v, path, lo, top, lo_open)
    if kind == F.BOOL:
        return read_bool
    if kind == F.ENUM:
        choices, aliases, refused = f.choices, f.aliases, f.refused
        return lambda v, path: read_enum(v, path, choices, aliases, refused)
    if kind == F.ENUMS:
        return lambda v, path: read_list(v, path, partial(read_enum, cls=f.choices, aliases=f.aliases,
                                                          refused=f.refused))
    if kind == F.FLOATS:
        return lambda v, path, n: read_per_feature(v, path, n, partial(read_float, lo=lo, hi=hi))
    if kind == F.INTS:
        return lambda v, path, n: read_per_feature(v, path, n, partial(read_int, minimum=lo, maximum=hi))
    if kind == F.NAME:
        return read_name
    if kind == F.NAMES:
        return lambda v, path: read_list(v, path, read_name, max_len=hi)
    if kind == F.IDS:
        return lambda v, path: read_ids(v, path, f)
    if kind == F.TABLE_NAMES:
        return read_table_names
    if kind == F.Kind.EVICTION:
        from engine.virtual import read_policy

        return read_policy
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
    d = read_object(raw, path, TABLE_FIELDS)
    for req in _REQUIRED_TABLE_FIELDS:
        if req not in d:
            raise ConfigError(f"{path}.{req}", "is required")
    values: dict[str, Any] = {}
    for f in _TABLE_READ_ORDER:
        if f.name in d:
            values[f.name] = _read(f, d[f.name], f"{path}.{f.name}")
        elif f.kind == F.NAMES:  # feature_names: the table's name
            values[f.name] = (values["name"],)
        elif f.json_default is None:  # total_num_buckets, the eviction policy: none
            values[f.name] = None
        else:
            values[f.name] = _read(f, f.json_default, f"{path}.{f.name}")
    table = TableConfig(**values)
    if table.weight_bytes > L.MAX_TABLE_BYTES:
        raise ConfigError(f"{path}.num_embeddings", f"the table holds {human_bytes(table.weight_bytes)} of weights; "
                          f"at most {human_bytes(L.MAX_TABLE_BYTES)} per table are planned")
    return table


_CONSTRAINT_KEYS = (*CONSTRAINT_FIELDS, F.WORKLOAD_FIELD.name)


def _constraint(raw: Any, path: str, table: TableConfig) -> Constraints:
    d = read_object(raw, path, _CONSTRAINT_KEYS)
    n = len(table.feature_names)
    c = Constraints(**{f.name: _read(f, d[f.name], f"{path}.{f.name}", n, table)
                       for f in (*F.CONSTRAINT, F.WORKLOAD_FIELD) if f.name in d})
    if c.compute_kernels and not table.use_virtual_table and all(k.virtual_only for k in c.compute_kernels):
        raise ConfigError(f"{path}.compute_kernels", f"lists only virtual-table kernels "
                          f"({', '.join(k.value for k in c.compute_kernels)}), which TorchRec 1.8 runs only on "
                          f"tables declared virtual; set use_virtual_table to true on table {table.name!r}, or list "
                          f"another kernel")
    return c


# every field's reader (made here, below the readers of every kind)
_READERS = {f.name: _reader(f) for f in (*F.TABLE, *F.CONSTRAINT, *F.TOPOLOGY, F.GROUP_FIELD, F.WORKLOAD_FIELD)}
_WORLD_SIZE, _LOCAL_WORLD_SIZE = F.BY_NAME["world_size"], F.BY_NAME["local_world_size"]
# (name, reader, default as a file writes it, path) of every topology field past the two sizes
_TOPOLOGY_REST = tuple((f.name, _READERS[f.name], f.json_default, f"topology.{f.name}") for f in F.TOPOLOGY
                       if f not in (_WORLD_SIZE, _LOCAL_WORLD_SIZE))


def _topology(raw: Any) -> Topology:
    d = read_object(raw, "topology", (*TOPOLOGY_FIELDS, PROFILE_FIELD, CUSTOM_FIELD, DEVICES_FIELD, GROUP_FIELD))
    if "world_size" not in d:
        raise ConfigError("topology.world_size", "is required (the number of ranks, e.g. 2)")
    ws = _read(_WORLD_SIZE, d["world_size"], "topology.world_size")
    lws = _read(_LOCAL_WORLD_SIZE, d.get("local_world_size", ws), "topology.local_world_size")
    if lws > ws or ws % lws:
        raise ConfigError("topology.local_world_size", f"must divide world_size ({ws}) evenly, got {lws}")
    topo = Topology(world_size=ws, local_world_size=lws, **{
        name: read(d.get(name, default), path) for name, read, default, path in _TOPOLOGY_REST})
    if d.get(CUSTOM_FIELD) is not None:
        caps = read_caps(d[CUSTOM_FIELD], f"topology.{CUSTOM_FIELD}", ws)
        if any(c is not None for c in caps):  # {} is every rank alike, as no field
            topo = replace(topo, custom_topology_data=CustomTopologyData(*caps))
    if d.get(DEVICES_FIELD) is not None:
        topo = replace(topo, rank_devices=read_rank_devices(d[DEVICES_FIELD], ws, topo.compute_device))
    if d.get(GROUP_FIELD) is not None:
        topo = replace(topo, sharding_group_size=_group_size(d[GROUP_FIELD], ws))
        if topo.rank_devices is not None and topo.sharding_group_size != ws:
            raise ConfigError(f"topology.{GROUP_FIELD}", f"2D groups on a mixed fleet ({DEVICES_FIELD}) are not "
                              f"planned yet: leave out {GROUP_FIELD} or {DEVICES_FIELD}")
    if d.get(PROFILE_FIELD) is None:
        return topo
    return replace(topo, profile=parse_profile(d[PROFILE_FIELD], f"topology.{PROFILE_FIELD}", topo))


def _group_size(v: Any, ws: int) -> int:
    size = _read(F.GROUP_FIELD, v, f"topology.{GROUP_FIELD}")
    if size > ws or ws % size:
        raise ConfigError(f"topology.{GROUP_FIELD}", f"must divide world_size ({ws}) evenly, got {size}: use a "
                          f"divisor such as {ws // 2 if ws % 2 == 0 and ws > 1 else ws}, or leave it out for one group")
    return size


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
        raise ConfigError("config", f"must be an object with tables, constraints and topology, got {type_name(data)}")
    d = read_object(data, "", TOP_FIELDS)
    if "tables" not in d:
        raise ConfigError("tables", "is required: a list of tables, each with name, num_embeddings, embedding_dim")
    if "topology" not in d:
        raise ConfigError("topology", "is required: at least {\"world_size\": N}")
    raw_tables = d["tables"]
    if not isinstance(raw_tables, list) or not raw_tables:
        raise ConfigError("tables", f"must be a non-empty list, got {type_name(raw_tables)}")
    if len(raw_tables) > L.MAX_TABLES:
        raise ConfigError("tables", f"has {len(raw_tables):,} tables; at most {L.MAX_TABLES:,} are planned")
    try:  # tables x ranks over the limit is refused before 100,000 tables are read
        early_topology: Topology | None = _topology(d["topology"])
        world = early_topology.world_size
    except ConfigError:
        early_topology, world = None, 0  # the topology's own error comes after the tables', as always
    check_pairs(len(raw_tables), world)
    tables = tuple(table_fast(t) or _table(t, f"tables[{i}]") for i, t in enumerate(raw_tables))
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
        from engine.tiers import offloadable

        refuse(tables, early_topology, offloadable(d.get("constraints"), early_topology, tables))
    raw_c = d.get("constraints", {}) or {}
    if not isinstance(raw_c, dict):
        raise ConfigError("constraints", f"must be an object keyed by table name, got {type_name(raw_c)}")
    by_name = {t.name: t for t in tables}
    constraints = {}
    for name, c in raw_c.items():
        if name not in by_name:
            known = ", ".join(list(by_name)[:5]) + (", ..." if len(by_name) > 5 else "")
            raise ConfigError(f"constraints.{name}", f"no table named {name!r} (tables: {known})")
        constraints[name] = constraint_fast(c, by_name[name]) or _constraint(c, f"constraints.{name}", by_name[name])
    topology = _topology(d["topology"])
    check_placement_rules(tables, constraints, group_topology(topology))  # 2D: pins name a group's ranks
    check_buckets(tables, constraints, topology)
    check_load(tables, constraints, topology)
    check_pairs(len(tables), topology.world_size)
    return Config(tables=tables, constraints=constraints, topology=topology)


def load_config(path: str | Path, refuse_too_big: bool = False) -> Config:
    return parse_config(read_json(path, "config"), refuse_too_big)


# ---- back to JSON -----------------------------------------------------------------------------


def _writer(f: F.Field) -> Optional[Callable[[Any], Any]]:
    """How a table field is written to JSON (None: as it is)."""
    if f.kind == F.ENUM:
        return lambda v: v.value
    if f.kind == F.ENUMS:
        return lambda v: [x.value for x in v]
    return list if f.kind in (F.NAMES, F.FLOATS, F.INTS, F.IDS, F.TABLE_NAMES) else None


# a table's flags (use_virtual_table) and fields without a default (the virtual tables') are written only where set
_SET_ONLY = tuple(f.name for f in F.TABLE if f.kind == F.BOOL or (f.json_default is None and f.kind != F.NAMES
                                                               and not f.required))
_TABLE_WRITERS = tuple((f.name, _writer(f)) for f in F.TABLE if f.name not in _SET_ONLY)


def _set_only(name: str, v: Any) -> Any:
    return policy_to_dict(v) if name == "virtual_table_eviction_policy" else v


def config_to_dict(cfg: Config) -> dict:
    """The config as JSON-ready data, every default written out but a table's fields that are false or absent
    (parse_config(config_to_dict(c)) == c)."""
    tables = [{**{name: getattr(t, name) if write is None else write(getattr(t, name))
                  for name, write in _TABLE_WRITERS},
               **{name: _set_only(name, v) for name in _SET_ONLY if (v := getattr(t, name)) not in (None, False)}}
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
    custom = topology.custom_topology_data
    if custom is not None:
        topo[CUSTOM_FIELD] = {k: list(v) for k in F.CUSTOM_CAPS if (v := getattr(custom, k)) is not None}
    if topology.rank_devices is not None:
        topo[DEVICES_FIELD] = fleet_json(topology.rank_devices)
    if topology.sharding_group_size is not None:
        topo[GROUP_FIELD] = topology.sharding_group_size
    return topo


def complete_topology(raw: Any) -> dict:
    """A config's `topology` object with every default written out, as config_to_dict writes it; raises
    ConfigError (naming the field) when it does not parse."""
    return topology_to_dict(_topology(raw))
