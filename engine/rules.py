"""Placement rules in a config (pins to ranks or hosts, tables kept together or apart) checked against the tables and
the topology, and the ranks a table's pins allow.
"""

from __future__ import annotations

from engine.errors import ConfigError
from engine.types import Constraints, ShardingType, TableConfig, Topology


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
            where = f"the sharding group of {w} (2D: a pin names a group's ranks" if topology.sync_ms_per_byte else \
                f"world_size {w} (ranks"  # a 2D group's topology (engine.replicas.group_topology)
            raise ConfigError(f"{path}.ranks", f"rank {c.ranks[-1]} is outside {where} 0-{w - 1})")
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
                    kinds <= {ShardingType.ROW_WISE, ShardingType.DATA_PARALLEL, ShardingType.TABLE_ROW_WISE,
                              ShardingType.GRID_SHARD}
                    and any(k.rows_in_host for k in kinds) and not whole_host and ranks != every):
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
