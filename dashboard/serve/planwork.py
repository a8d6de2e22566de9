"""The heavy work the app hands to its worker processes (dashboard.serve.planpool), and the shapes it comes back in:
our planner's plan of a config (or why there is none), the working view's re-plan of an edited config from the plan
on screen, a re-plan from a saved plan, and an uploaded sample's workload statistics
(dashboard.serve.workloadwork). Nothing here imports Streamlit or the store: a worker process imports the engine
and these modules only.

A task is named, never a function sent over the pipe: the server asks for `plan` or `replan` by name (TASKS),
with plain arguments (the config as JSON text, numbers), and gets the engine's typed objects back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Optional

import engine
from dashboard.serve import workloadwork


@dataclass(frozen=True)
class PlanResult:
    """A plan and the config it was made for, as the engine's typed objects (shared: never mutated). Their dict
    forms (saving, downloads) are made at that boundary, once per result."""

    plan: engine.Plan
    config: engine.Config

    @cached_property
    def plan_dict(self) -> dict:
        """engine.plan_to_dict(plan), made once (shared: never mutate it)."""
        return engine.plan_to_dict(self.plan)

    @cached_property
    def config_dict(self) -> dict:
        """engine.config_to_dict(config): the config in full, every default written out (shared: never mutate)."""
        return engine.config_to_dict(self.config)

    def __getstate__(self) -> dict:  # across the pipe: the objects only, never the cached dict forms
        return {"plan": self.plan, "config": self.config}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "plan", state["plan"])
        object.__setattr__(self, "config", state["config"])


@dataclass(frozen=True)
class PlanOutcome:
    """Our planner's plan of a config, or why there is none (one line): the config has a problem (config_error)
    or no plan fits (refused: engine.PlanningError), or another engine error."""

    result: Optional[PlanResult] = None
    problem: str = ""  # with what would help, when the engine says
    config_error: bool = False
    refused: bool = False
    reason: str = ""  # a refusal's reason alone, without what would help
    replanned: bool = False  # re-planned from the plan on screen (replan_edit); False: planned from scratch
    scratch_why: str = ""  # why replan_edit planned from scratch after all (one line)
    moved_bytes: Optional[int] = None  # a re-plan's bytes moved off the plan on screen


def plan(config_json: str, effort: int, safety_stop_s: float) -> PlanOutcome:
    """Our planner on the config (JSON text), its errors returned as one line each."""
    try:
        cfg = engine.parse_config(json.loads(config_json))
        settings = engine.PlannerSettings(search=effort > 0, effort=effort, time_budget_s=safety_stop_s)
        return PlanOutcome(PlanResult(engine.plan(cfg, settings), cfg))
    except engine.ConfigError as e:
        return PlanOutcome(problem=str(e), config_error=True)
    except engine.PlanningError as e:
        return PlanOutcome(problem=engine.one_line(str(e)), refused=True, reason=engine.one_line(e.message))
    except engine.EngineError as e:
        return PlanOutcome(problem=engine.one_line(str(e)))
    except ValueError as e:  # JSON the page wrote itself: not expected, but one line, not a traceback
        return PlanOutcome(problem=f"the config is not JSON ({e})", config_error=True)


@dataclass(frozen=True)
class ReplanOutcome:
    """A re-plan's figures (engine's Replan.summary()) and plan, or why there is none (one line)."""

    summary: Optional[dict] = None
    plan: Optional[engine.Plan] = None
    config: Optional[engine.Config] = None
    problem: str = ""
    config_error: bool = False


def replan(config_json: str, old_plan: dict, max_move_bytes: Optional[int], effort: int,
           safety_stop_s: float) -> ReplanOutcome:
    """engine.replan_plan of the config from a saved plan (its dict), its errors returned as one line."""
    try:
        cfg = engine.parse_config(json.loads(config_json))
        r = engine.replan_plan(cfg, engine.read_old_plan(old_plan, "saved plan"), max_move_bytes,
                               engine.PlannerSettings(effort=effort, time_budget_s=safety_stop_s))
        return ReplanOutcome(r.summary(), r.plan, cfg)
    except engine.ConfigError as e:
        return ReplanOutcome(problem=str(e), config_error=True)
    except engine.EngineError as e:
        return ReplanOutcome(problem=engine.one_line(str(e)))


def replan_edit(config_json: str, on_screen: engine.Plan, effort: int, safety_stop_s: float) -> PlanOutcome:
    """The working view's plan of an edited config: engine.replan_plan from the plan on screen (compare=False: no
    plan from scratch beside it), so a small edit moves little; deterministic given the config and that plan. A
    re-plan that fails, or that finds no room for a table where the plan on screen has its tables, is planned from
    scratch, and the outcome says why (scratch_why)."""
    try:
        cfg = engine.parse_config(json.loads(config_json))
    except (engine.ConfigError, ValueError):
        return plan(config_json, effort, safety_stop_s)  # its config error, in the same words
    settings = engine.PlannerSettings(search=effort > 0, effort=effort, time_budget_s=safety_stop_s)
    try:
        old = engine.read_old_plan(on_screen, "plan on screen")
        r = engine.replan_plan(cfg, old, settings=settings, compare=False,
                               earlier_step_ms=on_screen.max_rank_cost_ms)
    except engine.EngineError as e:
        return replace(plan(config_json, effort, safety_stop_s),
                       scratch_why=f"the re-plan failed: {engine.one_line(str(e))}")
    if r.scratch is not None:  # the engine's own fallback: the plan on screen left no room for a table
        return PlanOutcome(PlanResult(r.plan, cfg), scratch_why=engine.one_line(r.plan.notes[0]))
    return PlanOutcome(PlanResult(r.plan, cfg), replanned=True, moved_bytes=r.moves.total_bytes)


def pricing_cache() -> tuple[int, int, int]:
    """This worker's pricing cache (engine.enumerate): hits, misses (tables priced), entries. Tables a worker has
    priced before are not priced again: one edit to one table of 1,000 prices that table only."""
    info = engine.pricing_cache_info()
    return info.hits, info.misses, info.currsize


TASKS = {"plan": plan, "replan": replan, "replan_edit": replan_edit, "pricing_cache": pricing_cache,
         "workload": workloadwork.measure_task}
