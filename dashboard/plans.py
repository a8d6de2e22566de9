"""Plan dicts (a plan file: engine.plan_to_dict, as the store and a background planner hand them back) parsed once
into the engine's typed Plan, with the figures the dict carries: the pages show a saved plan's own estimates,
never recomputed ones. Pure: no Streamlit.

The typed objects (engine.Plan, engine.Config: frozen dataclasses) are shared between reruns and sessions by
the caches in dashboard.services: nothing in the dashboard mutates them (dataclasses.replace makes a new one).
"""

from __future__ import annotations

from typing import Any, Optional

import engine

MEMORY_PREFIX = "memory_"  # a plan file's per-rank memory parts, flat: memory_weights_bytes, ...
PERF_FIELDS = {"fwd_compute": "fwd_compute_ms", "fwd_comms": "fwd_comms_ms", "bwd_compute": "bwd_compute_ms",
               "bwd_comms": "bwd_comms_ms", "input_dist_comms": "input_dist_comms_ms",
               "prefetch_compute": "prefetch_compute_ms"}
MEMORY_FIELDS = tuple(engine.MemoryParts.__dataclass_fields__)


def _number(v: Any, default: float = 0) -> Any:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _memory(rank: dict) -> Optional[engine.MemoryParts]:
    """A rank's memory parts: flat memory_<part> keys (engine.planfile) or a nested "memory" object."""
    nested = rank.get("memory")
    parts = nested if isinstance(nested, dict) else {
        k.removeprefix(MEMORY_PREFIX): v for k, v in rank.items() if k.startswith(MEMORY_PREFIX)}
    if not parts:
        return None
    return engine.MemoryParts(**{f: int(_number(parts.get(f))) for f in MEMORY_FIELDS})


def rank_stats(rank: dict) -> engine.RankStats:
    """One rank of a plan file's "ranks" as engine.RankStats (a figure the file lacks is 0)."""
    perf = engine.Perf(**{f: float(_number(rank.get(k))) for f, k in PERF_FIELDS.items()})
    return engine.RankStats(
        rank=int(rank["rank"]), hbm_bytes=int(_number(rank.get("hbm_bytes"))),
        ddr_bytes=int(_number(rank.get("ddr_bytes"))), hbm_cap_bytes=int(_number(rank.get("hbm_cap_bytes"))),
        ddr_cap_bytes=int(_number(rank.get("ddr_cap_bytes"))), perf=perf,
        input_bytes=int(_number(rank.get("input_bytes"))), output_bytes=int(_number(rank.get("output_bytes"))),
        num_shards=int(_number(rank.get("num_shards"))), memory=_memory(rank))


def plan_from_dict(data: dict, config: engine.Config) -> engine.Plan:
    """A plan file as engine.Plan: its placements checked against `config` (engine.parse_plan, which raises
    engine.ConfigError) and its own per-rank figures, planner, bound, planning time and notes."""
    bound = data.get("lower_bound_ms")
    secs = data.get("planning_seconds")
    return engine.Plan(
        tables=engine.parse_plan(data, config),
        ranks=tuple(rank_stats(r) for r in data.get("ranks") or ()),
        planner=str(data["planner"]) if data.get("planner") is not None else "engine",
        planning_seconds=float(secs) if isinstance(secs, (int, float)) else None,
        lower_bound_ms=float(bound) if isinstance(bound, (int, float)) else None,
        notes=tuple(str(n) for n in data.get("notes") or ()),
    )


def parse(plan: dict, config: dict) -> tuple[engine.Plan, engine.Config]:
    """A stored (plan, config) pair of dicts as the engine's typed objects."""
    cfg = engine.parse_config(config)
    return plan_from_dict(plan, cfg), cfg
