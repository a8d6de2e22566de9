"""Plan files <-> engine types. A plan file is JSON: {"plan": {table: {...}}, "ranks": [...], ...}.

Reading checks a plan against its config: every table placed once, shards that tile the table exactly,
ranks inside the world. Stats in the file are ignored on reading: engine.evaluate recomputes them.
"""

from __future__ import annotations

from typing import Any

from engine.config import KERNEL_ALIASES, _enum, _int, _object, _read_json, _type_name
from engine.errors import ConfigError
from engine.types import ComputeKernel, Config, Plan, Shard, ShardingType, TablePlan

PLAN_FORMAT_VERSION = 1
TABLE_PLAN_FIELDS = ("sharding_type", "compute_kernel", "ranks", "shards")
SHARD_FIELDS = ("offsets", "sizes", "rank")


def table_plan_to_dict(tp: TablePlan) -> dict:
    return {
        "sharding_type": tp.sharding_type.value,
        "compute_kernel": tp.compute_kernel.value,
        "ranks": list(tp.ranks),
        "shards": None if tp.shards is None else [
            {"offsets": list(s.offsets), "sizes": list(s.sizes), "rank": s.rank} for s in tp.shards
        ],
    }


def plan_to_dict(plan: Plan) -> dict:
    ranks = []
    for r in plan.ranks:
        rec = {"rank": r.rank, "hbm_bytes": r.hbm_bytes, "ddr_bytes": r.ddr_bytes,
               "hbm_cap_bytes": r.hbm_cap_bytes, "ddr_cap_bytes": r.ddr_cap_bytes, "cost_ms": r.cost_ms}
        rec.update(r.perf.as_dict())
        rec.update({"input_bytes": r.input_bytes, "output_bytes": r.output_bytes, "num_shards": r.num_shards})
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


def _pair(v: Any, path: str, minimum: int) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2:
        raise ConfigError(path, f"must be a list of two integers [rows, columns], got {_type_name(v)}")
    return _int(v[0], f"{path}[0]", minimum), _int(v[1], f"{path}[1]", minimum)


def _table_plan(raw: Any, path: str, cfg: Config, name: str) -> TablePlan:
    d = _object(raw, path, TABLE_PLAN_FIELDS)
    for req in ("sharding_type", "compute_kernel"):
        if req not in d:
            raise ConfigError(f"{path}.{req}", "is required")
    st = _enum(d["sharding_type"], f"{path}.sharding_type", ShardingType)
    kernel = _enum(d["compute_kernel"], f"{path}.compute_kernel", ComputeKernel, KERNEL_ALIASES)
    w = cfg.topology.world_size
    table = cfg.table(name)
    if st is ShardingType.DATA_PARALLEL:
        ranks_raw = d.get("ranks", list(range(w)))
        if not isinstance(ranks_raw, list) or not ranks_raw:
            raise ConfigError(f"{path}.ranks", "must be a non-empty list of ranks")
        ranks = tuple(_int(r, f"{path}.ranks[{i}]", 0) for i, r in enumerate(ranks_raw))
        if d.get("shards") is not None:
            raise ConfigError(f"{path}.shards", "must be null for data_parallel (every rank holds the whole table)")
        return TablePlan(st, kernel, ranks, None)
    raw_shards = d.get("shards")
    if not isinstance(raw_shards, list) or not raw_shards:
        raise ConfigError(f"{path}.shards", f"must be a non-empty list of shards for {st.value}")
    shards = []
    for i, s in enumerate(raw_shards):
        sp = f"{path}.shards[{i}]"
        sd = _object(s, sp, SHARD_FIELDS)
        for req in SHARD_FIELDS:
            if req not in sd:
                raise ConfigError(f"{sp}.{req}", "is required")
        shard = Shard(_pair(sd["offsets"], f"{sp}.offsets", 0), _pair(sd["sizes"], f"{sp}.sizes", 0),
                      _int(sd["rank"], f"{sp}.rank", 0))
        if shard.rank >= w:
            raise ConfigError(f"{sp}.rank", f"rank {shard.rank} is outside world_size {w}")
        shards.append(shard)
    _check_tiling(shards, table.num_embeddings, table.embedding_dim, path)
    return TablePlan(st, kernel, tuple(s.rank for s in shards), tuple(shards))


def _check_tiling(shards: list[Shard], rows: int, cols: int, path: str) -> None:
    area = 0
    for i, s in enumerate(shards):
        if s.offsets[0] + s.sizes[0] > rows or s.offsets[1] + s.sizes[1] > cols:
            raise ConfigError(f"{path}.shards[{i}]", f"extends past the table's {rows}x{cols}")
        area += s.sizes[0] * s.sizes[1]
    if area != rows * cols:
        raise ConfigError(f"{path}.shards", f"cover {area} cells but the table has {rows * cols} ({rows}x{cols})")
    boxes = sorted((s.offsets, s.sizes) for s in shards if s.sizes[0] * s.sizes[1])
    for (o1, s1), (o2, s2) in zip(boxes, boxes[1:]):
        if o1[0] < o2[0] + s2[0] and o2[0] < o1[0] + s1[0] and o1[1] < o2[1] + s2[1] and o2[1] < o1[1] + s1[1]:
            raise ConfigError(f"{path}.shards", f"shards at {list(o1)} and {list(o2)} overlap")


def parse_plan(data: Any, cfg: Config) -> dict[str, TablePlan]:
    """Table plans from decoded plan JSON (the whole file, or just its "plan" object)."""
    if isinstance(data, dict) and "plan" in data and isinstance(data["plan"], dict):
        data = data["plan"]
    if not isinstance(data, dict):
        raise ConfigError("plan", f"must be an object keyed by table name, got {_type_name(data)}")
    names = [t.name for t in cfg.tables]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(f"plan.{unknown[0]}", "no table of that name in the config")
    missing = [n for n in names if n not in data]
    if missing:
        raise ConfigError(f"plan.{missing[0]}", f"the config's table is not placed ({len(missing)} missing)")
    return {n: _table_plan(data[n], f"plan.{n}", cfg, n) for n in names}


def load_plan(path: str, cfg: Config) -> dict[str, TablePlan]:
    return parse_plan(_read_json(path, "plan"), cfg)
