"""A plan at the store's door: checked against its config, its per-rank estimates recomputed by engine.evaluate.

The store never trusts a figure it can compute: a plan that brings estimates must bring the recomputed ones
(bytes exactly, milliseconds within REL_TOL), or be refused naming the first difference; recompute=True
stores the recomputed figures instead. lower_bound_ms and planning_seconds are the planner's claims, kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from db.checks import check_json_object, check_number, check_str, content_hash, normalize_config, shown, type_name
from db.errors import StoreError
from db.models import SHORT_LEN
from engine import (
    MEMORY_PREFIX, PLAN_FORMAT_VERSION, ConfigError, evaluate, parse_config, parse_plan, plan_to_dict,
)

REL_TOL = 1e-9  # milliseconds: summed in another order (TorchRec's plans list tables in their own) they differ
ABS_TOL_MS = 1e-12  # by a few ulps; a changed estimator or an edit differs by far more
FIGURES = ("ranks", "max_rank_cost_ms", "bottleneck_rank")  # what engine.evaluate computes from config and plan
DERIVED_PREFIX = MEMORY_PREFIX  # per-rank memory parts: a plan or bundle made before they existed may leave them out


@dataclass(frozen=True)
class Source:
    """Where a plan comes from, for messages: its fields, what holds it, and what a refusal leaves."""

    field: str
    config: str
    placement: str  # before engine.parse_plan's message, whose field starts at the plan file's "plan"
    holder: str
    refused: str
    cure: str


SAVED = Source("plan", "config", "the plan does not match its config: ", "the plan", "nothing was saved",
               "save with --recompute to store the recomputed ones")
BUNDLED = Source("bundle.plan", "bundle.config", "bundle.plan.", "the bundle", "nothing was imported",
                 "import with --recompute to store the recomputed ones")


@dataclass(frozen=True)
class RankEstimate:
    rank: int
    hbm_bytes: int
    ddr_bytes: int
    cost_ms: float


@dataclass(frozen=True)
class PreparedPlan:
    """A plan checked against its config, with what the plans and plan_ranks tables need."""

    config: dict
    plan: dict
    planner: str
    settings: dict
    ranks: tuple[RankEstimate, ...]
    planning_seconds: float
    num_tables: int
    world_size: int
    recomputed: str = ""  # the first figure the plan brought that differed, when recompute=True replaced them

    @property
    def max_rank_cost_ms(self) -> float:
        return max((r.cost_ms for r in self.ranks), default=0.0)

    @property
    def content_hash(self) -> str:
        return content_hash({"config": self.config, "plan": self.plan, "planner": self.planner,
                             "settings": self.settings})


def _same(given: Any, fresh: Any) -> bool:
    """Integers (bytes, counts, ranks) exactly; milliseconds within REL_TOL."""
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        return False
    if isinstance(fresh, int):
        return isinstance(given, int) and given == fresh
    try:
        return math.isclose(float(given), fresh, rel_tol=REL_TOL, abs_tol=ABS_TOL_MS)
    except OverflowError:
        return False


def _rank_difference(given: list, fresh: list[dict], path: str, holder: str) -> str | None:
    world = len(fresh)
    if len(given) < world:
        listed = {g["rank"] for g in given if isinstance(g, dict) and isinstance(g.get("rank"), int)}
        missing = next(r for r in range(world) if r not in listed) if len(listed) < world else len(given)
        return f"{path}: lists {len(given)} ranks but its config has world_size {world} (rank {missing} is missing)"
    if len(given) > world:
        return f"{path}[{world}]: an entry beyond its config's world_size {world}"
    for i, (g, f) in enumerate(zip(given, fresh)):
        p = f"{path}[{i}]"
        if not isinstance(g, dict):
            return f"{p}: must be an object of per-rank estimates, got {type_name(g)}"
        if g.get("rank") != i or isinstance(g.get("rank"), bool):
            return (f"{p}.rank: is {shown(g.get('rank'))}; {holder} must list one entry per rank, in order "
                    f"0 to {world - 1}")
        unknown = [k for k in g if k not in f]
        if unknown:
            return f"{p}.{shown(unknown[0])[1:-1]}: unknown field (not a figure engine.evaluate writes)"
        for key, value in f.items():
            if key not in g and key.startswith(DERIVED_PREFIX):
                continue  # filled in from the recomputation: plans saved before the estimator wrote it lack it
            if key not in g:
                return f"{p}.{key}: is missing"
            if not _same(g[key], value):
                return f"{p}.{key}: {shown(g[key])} in {holder} but {value!r} recomputed from its config and plan"
    return None


def _figure_difference(plan: dict, fresh: dict, src: Source) -> str | None:
    """The first figure the plan brings that differs from the recomputed ones ("field: why"), or None."""
    given = plan.get("ranks")
    if not isinstance(given, list):
        return f"{src.field}.ranks: must be a list of per-rank estimates, got {type_name(given)}"
    found = _rank_difference(given, fresh["ranks"], f"{src.field}.ranks", src.holder)
    if found:
        return found
    for key in FIGURES[1:]:
        if key not in plan:
            return f"{src.field}.{key}: is missing"
    top = fresh["max_rank_cost_ms"]
    if not _same(plan["max_rank_cost_ms"], top):
        return (f"{src.field}.max_rank_cost_ms: {shown(plan['max_rank_cost_ms'])} in {src.holder} but {top!r} "
                "recomputed from its config and plan")
    b = plan["bottleneck_rank"]  # any rank as slow as the slowest (ties differ by rounding)
    if not (isinstance(b, int) and not isinstance(b, bool) and 0 <= b < len(fresh["ranks"])
            and _same(fresh["ranks"][b]["cost_ms"], top)):
        return (f"{src.field}.bottleneck_rank: {shown(b)} in {src.holder} but {fresh['bottleneck_rank']} "
                "recomputed from its config and plan")
    return None


def _claims(plan: dict, fresh: dict, src: Source) -> float:
    """The fields a plan file may hold besides its figures, checked; returns planning_seconds (0 when null)."""
    unknown = [k for k in plan if k not in fresh]
    if unknown:
        raise StoreError(f"{src.field}.{shown(unknown[0])[1:-1]}: unknown field (a plan file has "
                         f"{', '.join(fresh)}); {src.refused}")
    version = plan.get("format_version", PLAN_FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= PLAN_FORMAT_VERSION:
        raise StoreError(f"{src.field}.format_version: {shown(version)} is not a plan format this planner reads "
                         f"(1 to {PLAN_FORMAT_VERSION}); {src.refused}")
    notes = plan.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise StoreError(f"{src.field}.notes: must be a list of strings; {src.refused}")
    for key in ("lower_bound_ms", "planning_seconds"):  # null for a plan scored by engine.evaluate, not searched
        if plan.get(key) is not None:
            check_number(plan[key], f"{src.field}.{key}", 0.0)
    return 0.0 if plan.get("planning_seconds") is None else float(plan["planning_seconds"])


def _placed(config: Any, plan: Any, normalize: bool, src: Source) -> tuple[dict, Any, dict]:
    """(config to store, engine Config, table plans), or a StoreError naming the field."""
    norm = normalize_config(config, src.config)
    cfg = parse_config(norm)
    norm = check_json_object(norm if normalize else config, src.config)
    if not isinstance(plan, dict):
        raise StoreError(f"{src.field}: must be a JSON object (the plan file), got {type_name(plan)}")
    try:
        return norm, cfg, parse_plan(plan, cfg)
    except ConfigError as e:
        raise StoreError(f"{src.placement}{e}") from None


def prepare_plan(config: Any, plan: Any, settings: Any = None, planner: str | None = None,
                 normalize: bool = True, recompute: bool = False, source: Source = SAVED) -> PreparedPlan:
    """Validate a plan against its config and its estimates against engine.evaluate's.

    A bare placement gets the recomputed estimates; a plan file whose figures differ is refused, or with
    recompute=True gets the recomputed ones (PreparedPlan.recomputed says what differed). normalize=False
    keeps a valid config exactly as given (bundles: what was exported comes back).
    """
    norm, cfg, tables = _placed(config, plan, normalize, source)
    name = plan.get("planner") if isinstance(plan.get("planner"), str) else "file"
    try:
        fresh = plan_to_dict(evaluate(cfg, tables, planner=name))
    except ConfigError as e:  # parse_plan checks what evaluate would refuse; this keeps the two in step
        raise StoreError(f"{source.placement}{e}") from None
    note = ""
    if not isinstance(plan.get("plan"), dict) or "ranks" not in plan:  # a placement without estimates
        plan = fresh
    else:
        difference = _figure_difference(plan, fresh, source)
        if difference and not recompute:
            raise StoreError(f"{difference}; {source.refused} ({source.cure})")
        if difference:
            plan, note = {**plan, **{k: fresh[k] for k in FIGURES}}, difference
        else:  # the figures match: fill in the parts an older plan file did not carry
            plan = {**plan, "ranks": [{**f, **g} for g, f in zip(plan["ranks"], fresh["ranks"])]}
    check_json_object(plan, source.field)
    seconds = _claims(plan, fresh, source)
    planner = check_str(planner if planner is not None else plan.get("planner", "file"), "planner", SHORT_LEN,
                        empty_ok=False)
    settings = check_json_object({} if settings is None else settings, "settings")
    ranks = tuple(RankEstimate(r["rank"], r["hbm_bytes"], r["ddr_bytes"], float(r["cost_ms"]))
                  for r in plan["ranks"])
    return PreparedPlan(norm, plan, planner, settings, ranks, seconds, len(cfg.tables), cfg.topology.world_size,
                        note)
