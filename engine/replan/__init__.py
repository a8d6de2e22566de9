"""Re-plan from an earlier plan: tables stay where they were when they still can, new and changed tables are placed
around them, and the slowest rank is then improved only while the bytes that would move between ranks (weights
and optimizer state) stay within a limit. Beside the re-plan come the earlier placement kept as it is (on the
new config) and a plan from scratch, with what each would move, so a user sees what the limit costs.

The bytes moved and the checkpoint breaks are worked out in engine.replan.moves; the placing in
engine.replan.place; relabelling a plan's ranks to match the earlier plan in engine.replan.align.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from engine import limits as L
from engine.enumerate import Option, all_table_options
from engine.errors import ConfigError, PlanningError
from engine.localsearch import reshard
from engine.evaluate import evaluate
from engine.placement import Placement
from engine.replicas import group_config
from engine.planfile import placement_problem
from engine.planner import PlannerSettings, plan, plan_lower_bound_ms, rules_of, to_table_plan
from engine.work import safety_stop_note
from engine.strategy import option_arrays
from engine.replan.align import relabel
from engine.replan.moves import (Moves, OldTable, checkpoint_breaks, load_old_plan, moved_bytes, old_bytes,
                                 read_old_plan)
from engine.replan.place import (changed_tables, cheapest_ddr_piece_ms, improve_within, keep, place_rest,
                                 fits, pull_home, search_peak)
from engine.types import Config, Plan, TablePlan
from engine.work import Work

__all__ = ["Moves", "OldTable", "Replan", "checkpoint_breaks", "ddr_piece_ms", "load_old_plan", "moved_bytes",
           "read_old_plan", "replan"]

# Without a byte limit, the re-plan buys speed with moved bytes only down to this far above the slowest rank of a
# plan from scratch (in the search's own load figures): past it, every move is a byte that need not move.
STEP_SLACK = 0.03
EDIT_SLACK = 1e-6  # an interactive re-plan leaves a slowest rank this close to the earlier plan's as it is
REPLAN_STEP_TOLERANCE = 1.05  # an attempt this close to the plan from scratch is as fast
CHEAP_RATIO = 4.0  # the byte budgets of the moves after a grown table was placed near home grow by this factor


@dataclass(frozen=True)
class Replan:
    plan: Plan  # the re-plan
    kept: Optional[Plan]  # the earlier placement kept as it is, new and changed tables placed around it (before
    # the moves that improve the slowest rank; of the attempt the re-plan comes from)
    scratch: Optional[Plan]  # a plan from scratch of the new config, same settings (None: not asked for)
    moves: Moves
    kept_moves: Optional[Moves]
    scratch_moves: Optional[Moves]
    kept_tables: tuple[str, ...]  # tables on their earlier ranks in the re-plan
    moved_tables: tuple[str, ...]  # tables with bytes to move in the re-plan
    new_tables: tuple[str, ...]  # tables the earlier plan did not have
    checkpoint: dict[str, str] = field(default_factory=dict)  # table -> why its checkpoint does not load as is
    max_move_bytes: Optional[int] = None

    def summary(self) -> dict:
        def pairs(m: Moves) -> list[dict]:
            return [{"from": a, "to": b, "bytes": v} for (a, b), v in m.by_pair.items()]

        return {
            "max_move_bytes": self.max_move_bytes,
            "moved_bytes": self.moves.total_bytes, "moved_by_pair": pairs(self.moves),
            "moved_tables": list(self.moved_tables), "kept_tables": len(self.kept_tables),
            "new_tables": list(self.new_tables),
            "step_ms": self.plan.max_rank_cost_ms,
            "kept_step_ms": self.kept.max_rank_cost_ms if self.kept is not None else None,
            "kept_moved_bytes": self.kept_moves.total_bytes if self.kept_moves is not None else None,
            "scratch_step_ms": self.scratch.max_rank_cost_ms if self.scratch is not None else None,
            "scratch_moved_bytes": self.scratch_moves.total_bytes if self.scratch_moves is not None else None,
            "checkpoint_breaks": [{"table": k, "why": v} for k, v in sorted(self.checkpoint.items())],
        }


class _Target:
    """The slowest rank (in the search's load figures) down to which a re-plan buys speed with moved bytes: the
    higher of `low` and `bound()` x (1 + STEP_SLACK); `bound` (costly) is worked out only when asked whether a
    rank above `low` is above the target."""

    def __init__(self, low: float, bound: Optional[Callable[[], float]] = None):
        self.low, self._bound, self._value = low, bound, None

    def value(self) -> float:
        if self._value is None:
            self._value = max(self.low, self._bound() * (1 + STEP_SLACK)) if self._bound is not None else self.low
        return self._value

    def above(self, peak: float) -> bool:
        return peak > self.low and peak > self.value()


@dataclass
class _Attempt:
    kept_idx: list[int]
    rest: list[int]
    unplaced: list[int]
    tables: Optional[dict[str, TablePlan]] = None
    kept: Optional[Plan] = None
    kept_moves: Optional[Moves] = None
    steps: int = 0
    refusal: Optional[PlanningError] = None
    work: Optional[Work] = None
    note: Optional[str] = None  # how it was made, where not by keeping and placing around (`_pulled_home`)
    placed: tuple = ()  # (table, option, ranks) of the tables placed around the kept ones
    budgeted: bool = False  # placed within the byte limit (how it is placed depends on the limit)


def _attempt(cfg: Config, old: dict[str, OldTable], options: list[list[Option]], settings: PlannerSettings,
             start: float, deadline: float, skip: frozenset[int], target: _Target, budget: float,
             max_move_bytes: Optional[int], compare: bool = True, home: frozenset[int] = frozenset(),
             twin: Optional[_Attempt] = None, home_budget: float = float("inf")) -> _Attempt:
    """One re-plan: keep what can stay (but the tables in `skip`), place the rest (the tables in `home` near
    their earlier shards, whatever the slowest rank: engine.replan.place.place_rest), then improve within the
    budget (after a `home` placing, cheap moves first: `_improve_cheap_first`). compare: evaluate the placement
    before the improving moves too (`kept`). twin: the attempt that placed the same tables without `home`; where
    the placing came out the same, this one stops there (no `tables`: a repeat). home_budget: the bytes the
    `home` tables may move as they are placed (then each takes the fastest candidate within what is left)."""
    work = Work(budget=float(settings.effort), world_size=cfg.topology.world_size, deadline=deadline,
                start=start)
    pl = Placement(cfg.topology, rules=rules_of(cfg))
    kept_idx, rest = keep(cfg, old, options, pl, skip)
    unplaced = place_rest(cfg, old, pl, options, rest, work, target.value() if rest else 0.0, home, home_budget)
    kept = None if unplaced else _table_plans(cfg, pl)
    if kept is not None and placement_problem(cfg, kept) is not None:
        unplaced = [t for t in range(len(cfg.tables)) if t in (pl.rules.fixed if pl.rules else ())]
    a = _Attempt(kept_idx, rest, unplaced, work=work, placed=_placed(pl, rest),
                 budgeted=home_budget < float("inf"))
    if unplaced or (twin is not None and twin.placed == a.placed):
        return a
    a.kept = evaluate(cfg, kept, planner="engine") if compare else None
    a.kept_moves = moved_bytes(cfg, old, kept)
    if a.kept_moves.total_bytes > budget:
        a.refusal = PlanningError(
            f"Keeping every table that can stay where it was still moves {a.kept_moves.total_bytes:,} bytes "
            f"(grown or re-split tables), more than --max-move-bytes {max_move_bytes:,}.",
            fixes=(f"allow at least {a.kept_moves.total_bytes:,} bytes (--max-move-bytes)",))
        return a
    # Without a byte limit, stop buying speed with bytes once near the plan from scratch; with one, go on.
    if max_move_bytes is not None:
        stop = 0.0
    else:
        stop = target.value() if target.above(float(pl.load.max())) else float("inf")  # inf: nothing to buy
    if home:
        a.steps = _improve_cheap_first(cfg, pl, old, budget - a.kept_moves.total_bytes, work, stop, home)
    else:
        _, a.steps = improve_within(cfg, pl, old, budget - a.kept_moves.total_bytes, work, stop)
    if max_move_bytes is None:  # no byte limit: a table that loads the slowest rank may take another option too
        known: dict = {}
        while float(pl.load.max()) > stop and not work.done() and reshard(pl, options, known=known, work=work):
            a.steps += 1 + improve_within(cfg, pl, old, budget, work, stop)[1]
    a.tables = _table_plans(cfg, pl) if a.steps else kept
    return a


def _improve_cheap_first(cfg: Config, pl: Placement, old: dict[str, OldTable], budget: float, work: Work,
                         stop: float, home: frozenset[int]) -> int:
    """improve_within under byte budgets that grow by CHEAP_RATIO from 1/CHEAP_RATIO^4 of the bytes the `home`
    tables held in the earlier plan up to `budget`: the slowest rank is first brought down by shards that move few
    bytes (small tables making way), and a grown table's pieces that stayed home move only when those are not
    enough. Returns the moves made."""
    held = sum(old_bytes(cfg, old, cfg.tables[t].name) for t in home)
    spent, steps = 0.0, 0
    for k in range(4, -1, -1):
        cap = min(budget, held / CHEAP_RATIO ** k) if k else budget
        more, n = improve_within(cfg, pl, old, cap - spent, work, stop)
        spent, steps = spent + more, steps + n
        if float(pl.load.max()) <= stop or work.done():
            break
    return steps


def _pulled_home(cfg: Config, old: dict[str, OldTable], options: list[list[Option]], settings: PlannerSettings,
                 start: float, deadline: float, scratch: Plan, target: _Target) -> Optional[_Attempt]:
    """The plan from scratch with tables brought back towards the earlier plan while its slowest rank stays within
    the target (engine.replan.place.pull_home): where keeping the earlier placement leaves the slowest rank far
    off (tables that changed kernel tier, say), this starts from the fast end instead. None when the plan from
    scratch's options cannot be matched or nothing comes back."""
    work = Work(budget=float(settings.effort), world_size=cfg.topology.world_size, deadline=deadline,
                start=start)
    start_from, relabelled = scratch.tables, relabel(cfg, old, scratch.tables)
    if relabelled is not start_from and placement_problem(cfg, relabelled) is None and fits(
            cfg, options, relabelled) and search_peak(cfg, options, relabelled) <= search_peak(
            cfg, options, start_from) * (1 + 1e-9):
        start_from = relabelled
    pl = Placement(cfg.topology, rules=rules_of(cfg))
    back = pull_home(cfg, old, options, start_from, pl, work, target.value())
    if back is None or (not back and start_from is scratch.tables):
        return None
    tables = _table_plans(cfg, pl)
    if placement_problem(cfg, tables) is not None:
        return None
    how = "its ranks relabelled within each host to match the earlier plan, " if start_from is not scratch.tables \
        else ""
    return _Attempt([], [], [], tables=tables, work=work,
                    note=f"the plan from scratch, {how}{len(back)} of {len(cfg.tables)} tables then brought back "
                         "towards their earlier ranks")


def _placed(pl: Placement, tables: list[int]) -> tuple:
    return tuple((t, id(pl.choice[t]), tuple(int(r) for r in pl.ranks[t])) for t in tables if t in pl.ranks)


def _table_plans(cfg: Config, pl: Placement) -> dict[str, TablePlan]:
    return {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t]) for t in range(len(cfg.tables))}


def _best_attempt(cfg: Config, old: dict[str, OldTable], done: list[_Attempt], scratch: Optional[Plan]) -> _Attempt:
    """Of the attempts, the one that moves the fewest bytes at a slowest rank within REPLAN_STEP_TOLERANCE of the
    plan from scratch (of the fastest attempt, without one), then the faster."""
    evs = [evaluate(cfg, a.tables, planner="engine") for a in done]
    ref = scratch.max_rank_cost_ms if scratch is not None else min(ev.max_rank_cost_ms for ev in evs)
    return min(((ev.max_rank_cost_ms > ref * REPLAN_STEP_TOLERANCE, moved_bytes(cfg, old, ev.tables).total_bytes,
                 ev.max_rank_cost_ms, a) for ev, a in zip(evs, done)), key=lambda r: r[:3])[3]


def _too_slow(cfg: Config, tables: dict[str, TablePlan], scratch: Optional[Plan]) -> Optional[float]:
    """The slowest rank of `tables` when it is more than REPLAN_STEP_TOLERANCE x the plan from scratch's (else
    None, and None without a plan from scratch)."""
    if scratch is None:
        return None
    step = evaluate(cfg, tables, planner="engine").max_rank_cost_ms
    return step if step > scratch.max_rank_cost_ms * REPLAN_STEP_TOLERANCE else None


def ddr_piece_ms(cfg: Config) -> dict[str, float]:
    """Per table, the cheapest costliest piece of its options with weights in host DDR (inf: none), in the search's
    load figures: a slowest rank below it rules those kernels out for the table (bench.replan's floor)."""
    return cheapest_ddr_piece_ms(cfg, all_table_options(cfg))


def _bound_peak(cfg: Config, options: list[list[Option]]) -> float:
    """A lower bound on the slowest rank in the search's own load figures, quick to work out: every table's
    cheapest option spread evenly over the ranks, and no table's smallest largest piece split (where no plan from
    scratch is at hand, the re-plan stops buying speed with bytes near it; the planner's own bound,
    strategy.relaxed_bound_ms, adds memory and takes longer)."""
    arr = option_arrays(options)
    return max(float(arr.min_per_table(arr.cost_ms).sum()) / cfg.topology.world_size,
               float(arr.min_per_table(arr.piece_ms).max()))


def replan(cfg: Config, old: dict[str, OldTable], max_move_bytes: Optional[int] = None,
           settings: PlannerSettings = PlannerSettings(), scratch: Optional[Plan] = None,
           compare: bool = True, earlier_step_ms: Optional[float] = None) -> Replan:
    """The re-plan of `cfg` from the earlier plan `old` (see the module's docstring). Attempts: every table that
    fits stays where it was; the same with grown or re-shaped tables placed last, near their earlier ranks, so a
    grown table re-splits around its old shards instead of pushing others off theirs; the same with those tables
    taking the fewest bytes the ranks can still carry, the slowest rank then bought back by cheap moves first
    (and, under a byte limit, once more with them placed as fast as the limit allows, host-DDR kernels on their
    own ranks included); and, with a plan from scratch and no byte limit, that plan relabelled rank for rank within
    each host to match the earlier one, with tables pulled back home (engine.replan.align, place.pull_home). The
    attempt that moves fewest bytes at a slowest rank within 5% of a plan from scratch wins (else the faster one;
    without a byte limit, the plan from scratch itself when no attempt comes within 5% of it).

    scratch: the plan from scratch of `cfg` with `settings`, where the caller has it (the same result as without
    it). compare=False with no `scratch`: none is made (an interactive re-plan after an edit, the plan from
    scratch one click away): the re-plan stops buying speed with bytes at the higher of `earlier_step_ms` (the
    earlier plan's slowest rank, as its plan file gives it: an edit that made no rank slower moves nothing) and
    near the planner's lower bound for `cfg` (an edit that adds more load than the ranks can share); attempts are
    weighed against the faster of them, `kept` is not evaluated, and the result's `scratch`, `scratch_moves` and
    `kept` are None (its plan still carries the planner's lower bound, engine.planner.plan_lower_bound_ms).
    Without a byte limit, a table that loads the slowest rank may also take another option
    (engine.localsearch.reshard) while that rank is above the target. Deterministic: the same config, earlier
    plan and arguments give the same plan."""
    if max_move_bytes is not None and not 0 <= max_move_bytes <= L.MAX_MOVE_BYTES:
        raise ConfigError("max_move_bytes", f"must be from 0 to {L.MAX_MOVE_BYTES:,} bytes (None: no limit), got "
                          f"{'less' if max_move_bytes < 0 else 'more'}")
    start = time.perf_counter()
    cfg = group_config(cfg)  # 2D: one sharding group's plan (engine.replicas)
    if scratch is None and compare:
        scratch = plan(cfg, settings)
    options = all_table_options(cfg)
    budget = float("inf") if max_move_bytes is None else float(max_move_bytes)
    if scratch is not None:
        target = _Target(search_peak(cfg, options, scratch.tables) * (1 + STEP_SLACK))
    else:  # back to the earlier plan's slowest rank (not past it: edits one after another would drift)
        target = _Target((earlier_step_ms or 0.0) * (1 + EDIT_SLACK), lambda: _bound_peak(cfg, options))
    deadline = start + settings.time_budget_s
    changed = changed_tables(cfg, old)
    attempts = [_attempt(cfg, old, options, settings, start, deadline, frozenset(), target, budget,
                         max_move_bytes, compare)]
    if changed:
        attempts.append(_attempt(cfg, old, options, settings, start, deadline, changed, target, budget,
                                 max_move_bytes, compare))
        attempts.append(_attempt(cfg, old, options, settings, start, deadline, changed, target, budget,
                                 max_move_bytes, compare, home=changed, twin=attempts[-1]))
        if max_move_bytes is not None:  # the fastest within the limit, where it must be slower (kernels in DDR)
            attempts.append(_attempt(cfg, old, options, settings, start, deadline, changed, target, budget,
                                     max_move_bytes, compare, home=changed, home_budget=budget))
    if scratch is not None and max_move_bytes is None:
        pulled = _pulled_home(cfg, old, options, settings, start, deadline, scratch, target)
        if pulled is not None:
            attempts.append(pulled)
    new_names = tuple(t.name for t in cfg.tables if t.name not in old)
    first = attempts[0]
    done = [a for a in attempts if a.tables is not None]
    candidate: Optional[dict[str, TablePlan]] = None
    best = first
    if done:
        best = done[0] if len(done) == 1 else _best_attempt(cfg, old, done, scratch)
        candidate = best.tables
        note = best.note or (f"re-planned from the earlier plan: {len(best.kept_idx)} of {len(cfg.tables)} tables "
                             f"kept their ranks, {len(best.rest)} placed around them, then {best.steps} moves of "
                             "shards within the byte limit")
        slow = _too_slow(cfg, candidate, scratch) if max_move_bytes is None else None
        if slow is not None:  # no byte limit to honour: the plan from scratch is the faster answer
            candidate = None
            note = (f"no re-plan from the earlier plan came within {REPLAN_STEP_TOLERANCE - 1:.0%} of the plan from "
                    f"scratch's slowest rank (the best: {slow:.4g} ms against {scratch.max_rank_cost_ms:.4g} ms): "
                    "the plan from scratch")
    else:
        refusals = [a for a in attempts if a.refusal is not None and not a.budgeted]
        if refusals:  # the one that asks for the fewest bytes (placed whatever the limit: that many always do)
            raise min(refusals, key=lambda a: a.kept_moves.total_bytes).refusal
        names = ", ".join(cfg.tables[t].name for t in first.unplaced[:3])
        note = f"the earlier placement leaves no room for {names}: re-planned from scratch"
    notes = [note]
    if candidate is None:  # the plan from scratch: its own notes (its safety stop's among them) still hold
        scratch = scratch if scratch is not None else plan(cfg, settings)
        notes += scratch.notes
    elif best.work is not None and best.work.cut:
        notes.append(safety_stop_note(best.work, settings.time_budget_s, "the re-plan's search"))
    result = evaluate(cfg, candidate if candidate is not None else scratch.tables, planner="engine",
                      planning_seconds=time.perf_counter() - start,
                      lower_bound_ms=scratch.lower_bound_ms if scratch is not None else plan_lower_bound_ms(
                          cfg, options), notes=tuple(notes))
    moves = moved_bytes(cfg, old, result.tables)
    if candidate is None and max_move_bytes is not None and moves.total_bytes > max_move_bytes:
        raise PlanningError(f"{note}, which moves {moves.total_bytes:,} bytes, more than --max-move-bytes "
                            f"{max_move_bytes:,}.", fixes=("allow more bytes to move", "add memory or ranks"))
    kept_on = tuple(t.name for t in cfg.tables if t.name in old and t.name not in moves.by_table)
    if best.kept_moves is None:  # pulled home from scratch: the earlier placement kept as is is the first attempt's
        best = first
    return Replan(plan=result, kept=best.kept, scratch=scratch, moves=moves, kept_moves=best.kept_moves,
                  scratch_moves=moved_bytes(cfg, old, scratch.tables) if scratch is not None else None,
                  kept_tables=kept_on,
                  moved_tables=tuple(moves.by_table), new_tables=new_names,
                  checkpoint=checkpoint_breaks(cfg, old, result.tables), max_move_bytes=max_move_bytes)
