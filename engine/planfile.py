"""Plan files <-> engine types. A plan file is JSON: {"plan": {table: {...}}, "ranks": [...], ...}.

Reading checks a plan against its config: every table placed once, shards of the shape their sharding type
cuts that tile the table exactly (no gap, no overlap, none empty), ranks inside the world and never repeated
for a data-parallel copy. Stats in the file are ignored by parse_plan (engine.evaluate recomputes them);
read_plan_file keeps them, for a saved plan shown with its own estimates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import limits as L
from engine.clf import CACHED
from engine.fields import KERNEL_ALIASES, TORCHREC_ONLY_KERNELS
from engine.readers import read_enum, read_float, read_int, read_json, read_object, type_name
from engine.errors import ConfigError
from engine.geometry import row_split
from engine.virtual import bucket_problem
from engine.replicas import group_config
from engine.tiling import grid_problem, tiling_problem
from engine.types import (ComputeKernel, Config, MemoryParts, Perf, Plan, RankStats, Shard, ShardingType, TableConfig,
                          TablePlan)

PLAN_FORMAT_VERSION = 1
TABLE_PLAN_FIELDS = ("sharding_type", "compute_kernel", "ranks", "shards", "cache_load_factor", "cache_note")
SHARD_FIELDS = ("offsets", "sizes", "rank")
MEMORY_PREFIX = "memory_"  # a rank's memory parts in a plan file: memory_weights_bytes, ..., memory_peak_bytes
PERF_KEYS = dict(zip(Perf.__dataclass_fields__, Perf().as_dict()))  # Perf field -> its key in a plan file's rank


def table_plan_to_dict(tp: TablePlan) -> dict:
    out = {
        "sharding_type": tp.sharding_type.value,
        "compute_kernel": tp.compute_kernel.value,
        "ranks": list(tp.ranks),
        "shards": None if tp.shards is None else [
            {"offsets": list(s.offsets), "sizes": list(s.sizes), "rank": s.rank} for s in tp.shards
        ],
    }
    if tp.cache_load_factor is not None:  # chosen by the planner from the table's miss curve (engine.clf)
        out["cache_load_factor"] = tp.cache_load_factor
    if tp.cache_note is not None:  # why its cache is that size, and where its miss rate comes from
        out["cache_note"] = tp.cache_note
    return out


def plan_to_dict(plan: Plan) -> dict:
    ranks = []
    for r in plan.ranks:
        rec = {"rank": r.rank, "hbm_bytes": r.hbm_bytes, "ddr_bytes": r.ddr_bytes,
               "hbm_cap_bytes": r.hbm_cap_bytes, "ddr_cap_bytes": r.ddr_cap_bytes, "cost_ms": r.cost_ms}
        rec.update(r.perf.as_dict())
        rec.update({"input_bytes": r.input_bytes, "output_bytes": r.output_bytes, "num_shards": r.num_shards})
        if r.workset_bytes:  # CPU estimates: the touched working set and its cost (engine.workset.rank_workset_ms)
            rec.update({"workset_bytes": r.workset_bytes, "workset_rows": r.workset_rows, "workset_ms": r.workset_ms})
        if r.fixed_step_ms or r.pieces_ms:  # a device profile's fixed compute on the rank (engine.evaluate)
            rec.update({"fixed_step_ms": r.fixed_step_ms, "pieces_ms": r.pieces_ms})
        if r.memory is not None:  # the step's memory part by part (engine.memory), flat: memory_<part>
            rec.update({f"{MEMORY_PREFIX}{k}": v for k, v in r.memory.as_dict().items()})
        ranks.append(rec)
    return {
        "format_version": PLAN_FORMAT_VERSION,
        "planner": plan.planner,
        "plan": {name: table_plan_to_dict(tp) for name, tp in plan.tables.items()},
        "ranks": ranks,
        "max_rank_cost_ms": plan.max_rank_cost_ms,
        "bottleneck_rank": plan.bottleneck_rank,
        "lower_bound_ms": plan.lower_bound_ms,
        "planning_seconds": plan.planning_seconds,
        "notes": list(plan.notes),
    }


# ---- a plan file's own figures, as written ------------------------------------------------------------------


def _figure(v: Any) -> Any:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _memory_parts(rank: dict) -> MemoryParts | None:
    """A rank's memory parts: flat memory_<part> keys (plan_to_dict) or a nested "memory" object."""
    nested = rank.get("memory")
    parts = nested if isinstance(nested, dict) else {
        k.removeprefix(MEMORY_PREFIX): v for k, v in rank.items() if k.startswith(MEMORY_PREFIX)}
    if not parts:
        return None
    return MemoryParts(**{f: int(_figure(parts.get(f))) for f in MemoryParts.__dataclass_fields__})


def read_rank_stats(rank: dict) -> RankStats:
    """One rank of a plan file's "ranks" as RankStats (a figure the file lacks is 0)."""
    perf = Perf(**{f: float(_figure(rank.get(k))) for f, k in PERF_KEYS.items()})
    return RankStats(
        rank=int(rank["rank"]), hbm_bytes=int(_figure(rank.get("hbm_bytes"))),
        ddr_bytes=int(_figure(rank.get("ddr_bytes"))), hbm_cap_bytes=int(_figure(rank.get("hbm_cap_bytes"))),
        ddr_cap_bytes=int(_figure(rank.get("ddr_cap_bytes"))), perf=perf,
        input_bytes=int(_figure(rank.get("input_bytes"))), output_bytes=int(_figure(rank.get("output_bytes"))),
        num_shards=int(_figure(rank.get("num_shards"))), memory=_memory_parts(rank),
        workset_bytes=float(_figure(rank.get("workset_bytes"))), workset_rows=float(_figure(rank.get("workset_rows"))),
        workset_ms=float(_figure(rank.get("workset_ms"))), fixed_step_ms=float(_figure(rank.get("fixed_step_ms"))),
        pieces_ms=float(_figure(rank.get("pieces_ms"))))


def read_plan_file(data: dict, cfg: Config) -> Plan:
    """A plan file as a Plan: its placements checked against `cfg` (parse_plan, which raises ConfigError) and its
    own per-rank figures, planner, bound, planning time and notes (what plan_to_dict wrote)."""
    bound = data.get("lower_bound_ms")
    secs = data.get("planning_seconds")
    return Plan(
        tables=parse_plan(data, cfg),
        ranks=tuple(read_rank_stats(r) for r in data.get("ranks") or ()),
        planner=str(data["planner"]) if data.get("planner") is not None else "engine",
        planning_seconds=float(secs) if isinstance(secs, (int, float)) else None,
        lower_bound_ms=float(bound) if isinstance(bound, (int, float)) else None,
        notes=tuple(str(n) for n in data.get("notes") or ()),
    )


def _pair(v: Any, path: str, minimum: int, maximum: tuple[int, int]) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2:
        raise ConfigError(path, f"must be a list of two integers [rows, columns], got {type_name(v)}")
    return read_int(v[0], f"{path}[0]", minimum, maximum[0]), read_int(v[1], f"{path}[1]", minimum, maximum[1])


def _ranks(raw: Any, path: str, world: int) -> tuple[int, ...]:
    """Data-parallel ranks: each rank of the world at most once (every copy is charged to its rank)."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError(path, "must be a non-empty list of ranks")
    if len(raw) > world:
        raise ConfigError(path, f"lists {len(raw):,} ranks but the world has {world}; each rank at most once")
    ranks = tuple(read_int(r, f"{path}[{i}]", 0, world - 1) for i, r in enumerate(raw))
    if len(set(ranks)) != len(ranks):
        dup = next(r for i, r in enumerate(ranks) if r in ranks[:i])
        raise ConfigError(path, f"lists rank {dup} twice; each rank holds one copy at most")
    return ranks


def _shard(raw: Any, path: str, dims: tuple[int, int], world: int) -> Shard:
    sd = read_object(raw, path, SHARD_FIELDS)
    for req in SHARD_FIELDS:
        if req not in sd:
            raise ConfigError(f"{path}.{req}", "is required")
    rank = read_int(sd["rank"], f"{path}.rank", 0)
    if rank >= world:
        raise ConfigError(f"{path}.rank", f"rank {rank:,} is outside the world: ranks 0 to {world - 1:,}")
    return Shard(_pair(sd["offsets"], f"{path}.offsets", 0, dims), _pair(sd["sizes"], f"{path}.sizes", 0, dims),
                 rank)


def _check_shape(st: ShardingType, shards: list[Shard], table: TableConfig, path: str) -> None:
    """What each sharding type cuts: table_wise nothing, row splits keep whole rows, column splits whole columns."""
    rows, cols = table.num_embeddings, table.embedding_dim
    if st is ShardingType.TABLE_WISE and len(shards) != 1:
        raise ConfigError(f"{path}.shards",
                          f"table_wise places the whole table on one rank: one shard, got {len(shards)}")
    if st is ShardingType.GRID_SHARD:
        return  # grid_problem checks each shard against TorchRec's grid layout, empty row shards included
    for i, s in enumerate(shards):
        if not s.sizes[0] or not s.sizes[1]:
            # TorchRec's row split ends in empty shards at [rows, 0]; its cut by memory share (a mixed fleet) may
            # give a rank none anywhere: an empty shard sits where the shard before it ends
            at = 0 if i == 0 else shards[i - 1].offsets[0] + shards[i - 1].sizes[0]
            if not (st.splits_rows and s.sizes == (0, cols) and s.offsets == (at, 0)):
                raise ConfigError(f"{path}.shards[{i}]", "is empty; only a row split may hold empty shards, each "
                                  f"with sizes [0, {cols}] where the shard before it ends (offsets [{at}, 0]), as "
                                  "TorchRec's row splits do")
            continue
        if st.splits_rows and (s.offsets[1], s.sizes[1]) != (0, cols):
            raise ConfigError(f"{path}.shards[{i}]", f"{st.value} shards hold whole rows: offset column 0 and "
                              f"{cols} columns, got column {s.offsets[1]} and {s.sizes[1]} columns")
        if st.splits_columns and (s.offsets[0], s.sizes[0]) != (0, rows):
            raise ConfigError(f"{path}.shards[{i}]", f"{st.value} shards hold whole columns: offset row 0 and "
                              f"{rows} rows, got row {s.offsets[0]} and {s.sizes[0]} rows")


def _read_table_plan(raw: Any, path: str, dims: tuple[int, int], world: int) -> TablePlan:
    """One table's plan with every number inside `dims` (rows, columns) and ranks below `world`; a sharded
    table's ranks are its shards' (a file's "ranks" list for it is not read)."""
    d = read_object(raw, path, TABLE_PLAN_FIELDS)
    for req in ("sharding_type", "compute_kernel"):
        if req not in d:
            raise ConfigError(f"{path}.{req}", "is required")
    st = read_enum(d["sharding_type"], f"{path}.sharding_type", ShardingType)
    kernel = read_enum(d["compute_kernel"], f"{path}.compute_kernel", ComputeKernel, KERNEL_ALIASES,
                       TORCHREC_ONLY_KERNELS)
    if st is ShardingType.DATA_PARALLEL:
        ranks = _ranks(d.get("ranks", list(range(world))), f"{path}.ranks", world)
        if d.get("shards") is not None:
            raise ConfigError(f"{path}.shards", "must be null for data_parallel (every rank holds the whole table)")
        return TablePlan(st, kernel, ranks, None)
    clf, note = d.get("cache_load_factor"), d.get("cache_note")
    if clf is not None:
        if kernel not in CACHED:
            raise ConfigError(f"{path}.cache_load_factor", f"applies to fused_uvm_caching and the offload tiers "
                              f"only, the kernel is {kernel.value}; remove it")
        clf = read_float(clf, f"{path}.cache_load_factor", 0.0, 1.0, lo_open=True)
    if note is not None and not isinstance(note, str):
        raise ConfigError(f"{path}.cache_note", f"must be text, got {type_name(note)}")
    raw_shards = d.get("shards")
    if not isinstance(raw_shards, list) or not raw_shards:
        raise ConfigError(f"{path}.shards", f"must be a non-empty list of shards for {st.value}")
    if len(raw_shards) > L.MAX_SHARDS_PER_TABLE:
        raise ConfigError(f"{path}.shards", f"has {len(raw_shards):,} shards; at most {L.MAX_SHARDS_PER_TABLE:,}")
    shards = tuple(_shard(s, f"{path}.shards[{i}]", dims, world) for i, s in enumerate(raw_shards))
    return TablePlan(st, kernel, tuple(s.rank for s in shards), shards, clf, note)


def _table_plan(raw: Any, path: str, cfg: Config, name: str) -> TablePlan:
    table = cfg.table(name)
    tp = _read_table_plan(raw, path, (table.num_embeddings, table.embedding_dim), cfg.topology.world_size)
    if tp.compute_kernel.virtual_only and not table.use_virtual_table:
        raise ConfigError(f"{path}.compute_kernel", f"{tp.compute_kernel.value} runs only on tables declared virtual "
                          f"(TorchRec 1.8); set use_virtual_table to true on table {name!r} in the config, or plan "
                          f"another kernel")
    if tp.shards is None:
        return tp
    shards = list(tp.shards)
    st = tp.sharding_type
    _check_shape(st, shards, table, path)
    problem = tiling_problem(np.array([s.offsets for s in shards], dtype=np.int64),
                             np.array([s.sizes for s in shards], dtype=np.int64),
                             table.num_embeddings, table.embedding_dim)
    if problem:
        raise ConfigError(f"{path}.shards", f"do not tile the table exactly: {problem}")
    if st is ShardingType.ROW_WISE and (problem := bucket_problem(table, tp.shards, cfg.topology.world_size)):
        raise ConfigError(f"{path}.shards", problem)
    if st is ShardingType.GRID_SHARD:
        lw = cfg.topology.local_world_size
        problem = grid_problem(np.array([s.offsets for s in shards], dtype=np.int64),
                               np.array([s.sizes for s in shards], dtype=np.int64),
                               np.array(tp.ranks, dtype=np.int64), table.num_embeddings, lw,
                               row_split(table.num_embeddings, lw))
        if problem:
            raise ConfigError(f"{path}.shards", problem)
    return tp


def parse_plan(data: Any, cfg: Config) -> dict[str, TablePlan]:
    """Table plans from decoded plan JSON (the whole file, or just its "plan" object)."""
    cfg = group_config(cfg)  # 2D: a plan is one sharding group's (engine.replicas)
    if isinstance(data, dict) and "plan" in data and isinstance(data["plan"], dict):
        data = data["plan"]
    if not isinstance(data, dict):
        raise ConfigError("plan", f"must be an object keyed by table name, got {type_name(data)}")
    names = [t.name for t in cfg.tables]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(f"plan.{unknown[0]}", "no table of that name in the config")
    missing = [n for n in names if n not in data]
    if missing:
        raise ConfigError(f"plan.{missing[0]}", f"the config's table is not placed ({len(missing)} missing)")
    tables = {n: _table_plan(data[n], f"plan.{n}", cfg, n) for n in names}
    broken = placement_problem(cfg, tables)
    if broken is not None:
        raise ConfigError(*broken)
    return tables


def load_plan(path: str, cfg: Config) -> dict[str, TablePlan]:
    return parse_plan(read_json(path, "plan"), cfg)


def parse_earlier_plan(data: Any, source: str) -> dict[str, TablePlan]:
    """Table plans from an earlier plan, read without its config (re-plan's --from, a saved plan): the whole
    file, its "plan" object or a saved plan's bundle (python -m db export). Every number is bounded as a
    config's would be (ranks below MAX_WORLD_SIZE, offsets and sizes within MAX_NUM_EMBEDDINGS and
    MAX_EMBEDDING_DIM); how the shards fit the new config is the re-plan's to judge."""
    if isinstance(data, dict) and "tables" in data and "topology" in data:
        raise ConfigError(source, "is a config, not a plan: give the earlier plan (python -m engine plan --json)")
    if isinstance(data, dict) and "bundle_version" in data and isinstance(data.get("plan"), dict):
        data = data["plan"]  # a saved plan's bundle holds its plan file
    if isinstance(data, dict) and isinstance(data.get("plan"), dict):
        data = data["plan"]
    if not isinstance(data, dict) or not data:
        raise ConfigError(source, "must be a plan file (python -m engine plan --json) with a \"plan\" object")
    if len(data) > L.MAX_TABLES:
        raise ConfigError(f"{source}.plan", f"has {len(data):,} tables; at most {L.MAX_TABLES:,}")
    dims = (L.MAX_NUM_EMBEDDINGS, L.MAX_EMBEDDING_DIM)
    return {name: _read_table_plan(raw, f"{source}.plan.{name}", dims, L.MAX_WORLD_SIZE)
            for name, raw in data.items()}


def placement_problem(cfg: Config, tables: dict[str, TablePlan]) -> tuple[str, str] | None:
    """The first placement rule (constraints.<table>.ranks, hosts, colocate, apart) the table plans break, as
    (field, why); None when they keep them all."""
    from engine.rules import allowed_ranks

    held = {name: set(tp.ranks) for name, tp in tables.items()}
    for name, c in cfg.constraints.items():
        if not c.places or name not in held:
            continue
        allowed = allowed_ranks(c, cfg.topology)
        if allowed is not None and not held[name] <= allowed:
            field = "ranks" if c.ranks else "hosts"
            bad = sorted(held[name] - allowed)
            return (f"constraints.{name}.{field}", f"table {name!r} has a piece on rank {bad[0]}, which its "
                    f"{field} do not allow (ranks {_span(sorted(allowed))})")
        for other in c.colocate or ():
            if other in held and held[other] != held[name]:
                return (f"constraints.{name}.colocate", f"{name!r} is on ranks {_span(sorted(held[name]))} and "
                        f"{other!r} on ranks {_span(sorted(held[other]))}; co-located tables share their ranks")
        for other in c.apart or ():
            both = held[name] & held.get(other, set())
            if both:
                return (f"constraints.{name}.apart", f"{name!r} and {other!r} are both on rank {min(both)}; "
                        "tables kept apart share no rank")
    return None


def _span(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)} in all)" if len(ranks) > 8 else "")
