"""The planner: enumerate options per table, choose them a few ways, place greedily, improve, report.

plan(config) -> Plan is the whole public entry point; the stages live in enumerate, strategy (choices and
the lower bound), partition (placement and search) and evaluate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from engine.enumerate import Option, table_options
from engine.errors import PlanningError, human_bytes
from engine.evaluate import evaluate
from engine.profile import active
from engine.profile import notes as profile_notes
from engine.partition import Placement, better, improve, perturb
from engine.strategy import OptionArrays, Recipe, candidates, option_arrays, relaxed_bound_ms
from engine.types import ComputeKernel, Config, Plan, Shard, ShardingType, TablePlan


@dataclass(frozen=True)
class PlannerSettings:
    search: bool = True  # local search (and ruin and recreate) after each greedy placement
    time_budget_s: float = 3.0  # the search stops by then, keeping the best plan so far
    max_iters: int = 5000


# Where the cheapest options ask for more than this share of all HBM, memory is tight (a note says so).
FILL_TARGET = 0.95


def _order(chosen: list[Option], pl: Placement) -> np.ndarray:
    """Fixed placements first, then the pieces heaviest in time or memory (memory only when balancing
    memory), table order breaking ties."""
    avg = max(sum(o.total_cost_ms for o in chosen) / pl.topo.world_size, 1e-12)
    if pl.balance_memory:
        avg = np.inf
    fixed = np.array([o.sharding_type in (ShardingType.DATA_PARALLEL, ShardingType.ROW_WISE) for o in chosen])
    weight = np.array([
        max(o.max_shard_cost_ms / avg,
            float(o.est.hbm_bytes.max()) / pl.hbm_cap if pl.hbm_cap else 0.0,
            float(o.est.ddr_bytes.max()) / pl.ddr_cap if pl.ddr_cap else 0.0)
        for o in chosen
    ])
    return np.lexsort((np.arange(len(chosen)), -weight, ~fixed))


def _footprint(o: Option, pl: Placement) -> float:
    """How full one rank gets from the option's largest piece, as a share of the usable memory."""
    h = float(o.est.hbm_bytes.max()) / pl.hbm_cap if pl.hbm_cap else (np.inf if o.est.hbm_bytes.max() else 0.0)
    d = float(o.est.ddr_bytes.max()) / pl.ddr_cap if pl.ddr_cap else (np.inf if o.est.ddr_bytes.max() else 0.0)
    return max(h, d)


def _no_room(cfg: Config, options: list[list[Option]], t: int, pl: Placement) -> PlanningError:
    opts = options[t]
    name = cfg.tables[t].name
    w = cfg.topology.world_size
    total_h, total_d = pl.hbm_cap * w, pl.ddr_cap * w
    fixes = []
    kinds = {o.sharding_type for o in opts}
    if ShardingType.ROW_WISE not in kinds:
        fixes.append(f"allow row_wise for {name!r} (constraints.{name}.sharding_types) to spread its rows")
    if cfg.topology.compute_device.value == "cuda" and ComputeKernel.FUSED_UVM_CACHING not in {o.kernel for o in opts}:
        fixes.append(f"allow fused_uvm_caching for {name!r} to keep its weights in DDR")
    fixes += ["raise topology.hbm_cap / topology.ddr_cap", "add ranks (topology.world_size)"]
    need = sum(min(float((o.est.hbm_bytes + o.est.ddr_bytes).sum()) for o in opt) for opt in options)
    if need > total_h + total_d:
        biggest = sorted(range(len(cfg.tables)), key=lambda i: -cfg.tables[i].weight_bytes)[:3]
        names = tuple(cfg.tables[i].name for i in biggest)
        return PlanningError(
            f"The tables do not fit: together they need at least {human_bytes(need)} (each in its least "
            f"memory-hungry option), but the {w} ranks have {human_bytes(total_h)} HBM + {human_bytes(total_d)} "
            f"DDR usable; the largest tables are {', '.join(names)}.", tables=names, fixes=tuple(fixes[-2:]))
    crowded = ""
    if need > 0.9 * (total_h + total_d):
        crowded = (f" All tables together need {human_bytes(need)}, {need / (total_h + total_d):.0%} of the memory of "
                   f"all ranks: too full to pack.")
    smallest = min(opts, key=lambda o: _footprint(o, pl))
    need_h, need_d = int(smallest.est.hbm_bytes.max()), int(smallest.est.ddr_bytes.max())
    emptiest = int(np.argmin(pl.fill()))
    free_h = int(max(pl.hbm_cap - pl.hbm[emptiest], 0))
    free_d = int(max(pl.ddr_cap - pl.ddr[emptiest], 0))
    return PlanningError(
        f"Table {name!r} does not fit: its smallest option ({smallest.label}) needs {human_bytes(need_h)} HBM "
        f"+ {human_bytes(need_d)} DDR on one rank, but after placing the other tables the emptiest rank has "
        f"{human_bytes(free_h)} HBM and {human_bytes(free_d)} DDR free (usable per rank: "
        f"{human_bytes(pl.hbm_cap)} HBM, {human_bytes(pl.ddr_cap)} DDR).{crowded}",
        tables=(name,), fixes=tuple(fixes),
    )


def place_greedy(cfg: Config, options: list[list[Option]], chosen: list[Option],
                 balance_memory: bool = False) -> tuple[Placement, list[str]]:
    """Place the chosen options, heaviest first, each onto the least-loaded ranks with room; a table whose
    choice fits nowhere takes its cheapest option that fits. Returns the placement and those fallbacks."""
    pl = Placement(cfg.topology, balance_memory=balance_memory)
    fallbacks: list[str] = []
    for t in _order(chosen, pl):
        opt = chosen[t]
        ranks = pl.find_ranks(opt)
        if ranks is None:
            for alt in sorted(options[t], key=lambda o: o.total_cost_ms):
                ranks = pl.find_ranks(alt)
                if ranks is not None:
                    fallbacks.append(f"{cfg.tables[t].name} -> {alt.label}")
                    opt = alt
                    break
        if ranks is None:
            raise _no_room(cfg, options, t, pl)
        pl.add(opt, ranks)
    pl.balance_memory = False
    return pl, fallbacks


def to_table_plan(opt: Option, ranks: np.ndarray) -> TablePlan:
    if opt.sharding_type is ShardingType.DATA_PARALLEL:
        return TablePlan(opt.sharding_type, opt.kernel, tuple(int(r) for r in ranks), None)
    shards = tuple(
        Shard((int(o[0]), int(o[1])), (int(s[0]), int(s[1])), int(r))
        for o, s, r in zip(opt.offsets, opt.sizes, ranks)
    )
    return TablePlan(opt.sharding_type, opt.kernel, tuple(int(r) for r in ranks), shards)


def _placeable(cfg: Config, options: list[list[Option]]) -> tuple[list[list[Option]], OptionArrays]:
    """Drop the options with a piece larger than one rank's usable memory: they can never be placed.
    Returns what is left, per table and as arrays."""
    arr = option_arrays(options)
    probe = Placement(cfg.topology)
    fits = (arr.piece_hbm_bytes <= probe.hbm_cap) & (arr.piece_ddr_bytes <= probe.ddr_cap)
    per_table = np.zeros(len(options), dtype=np.int64)
    np.add.at(per_table, arr.table[fits], 1)
    if (per_table == 0).any():
        raise _no_room(cfg, options, int(np.argmin(per_table)), probe)
    arr = arr.select(fits)
    return arr.per_table(), arr


# Of the time left after enumeration, the share spent trying candidate choices (the rest improves the best
# where its search was cut short), and the most one candidate's local search may take.
EXPLORE_SHARE = 0.9
CANDIDATE_SHARE = 0.15
CLOSE_ENOUGH = 1e-3  # a plan this close to the lower bound (relative) ends the search


@dataclass
class _Found:
    pl: Placement
    recipe: Recipe
    fallbacks: list[str]
    tried: int = 0


def _search(cfg: Config, options: list[list[Option]], arr: OptionArrays, bound: float, deadline: float,
            settings: PlannerSettings) -> _Found:
    """Place each candidate choice greedily and improve it for a slice of the time, stopping early at the
    bound; keep the best. Raises the first placement error if no candidate places."""
    now = time.perf_counter()
    explore_end = now + EXPLORE_SHARE * max(deadline - now, 0.0)
    probe = Placement(cfg.topology)
    best, error, tried = None, None, 0
    for recipe, idx in candidates(arr, bound, probe.hbm_cap, probe.ddr_cap, cfg.topology.world_size):
        if best is not None and (time.perf_counter() > explore_end or recipe.retry):
            break  # out of time, or the rest are retries and a plan was found
        try:
            pl, fallbacks = place_greedy(cfg, options, [arr.options[i] for i in idx], recipe.balance_memory)
        except PlanningError as e:
            error = error or e
            continue
        tried += 1
        if settings.search:
            until = min(explore_end, time.perf_counter() + CANDIDATE_SHARE * (deadline - now))
            improve(pl, options, until, settings.max_iters)
        if best is None or better(pl.score(), best.pl.score()):
            best = _Found(pl, recipe, fallbacks)
        if best.pl.score()[0] <= bound * (1 + CLOSE_ENOUGH):
            break
    if best is None:
        raise error
    best.tried = tried
    return best


def _notes(cfg: Config, arr: OptionArrays, found: _Found, steps: int, gains: int) -> list[str]:
    notes = []
    cheapest = arr.argmin(arr.cost_ms)
    cap = found.pl.hbm_cap * cfg.topology.world_size
    if arr.hbm_bytes[cheapest].sum() > FILL_TARGET * cap:
        moved = sum(found.pl.choice[t].kernel.weights_in_ddr and not arr.options[i].kernel.weights_in_ddr
                    for t, i in enumerate(cheapest))
        notes.append(f"HBM demand exceeded {FILL_TARGET:.0%} of capacity: {moved} tables moved to DDR-backed "
                     "kernels, others re-sharded to fit")
    if found.fallbacks:
        more = f", and {len(found.fallbacks) - 5} more" if len(found.fallbacks) > 5 else ""
        notes.append(f"{len(found.fallbacks)} tables did not fit in their chosen option where memory was left; "
                     f"used the cheapest that fit: {', '.join(found.fallbacks[:5])}{more}")
    if found.tried > 1:
        notes.append(f"best of {found.tried} candidate choices: {found.recipe.label}")
    if steps:
        notes.append(f"local search: {steps} improving steps")
    if gains:
        notes.append(f"ruin and recreate: {gains} improving rounds")
    return notes + profile_notes(cfg.topology)


def plan(cfg: Config, settings: PlannerSettings = PlannerSettings()) -> Plan:
    """Enumerate; choose options and place them greedily a few ways (keeping the fastest after a short local
    search); improve the best until the time budget; score the result."""
    start = time.perf_counter()
    deadline = start + settings.time_budget_s
    placeable, arr = _placeable(cfg, [table_options(cfg, i) for i in range(len(cfg.tables))])
    w = cfg.topology.world_size
    probe = Placement(cfg.topology)
    bound = relaxed_bound_ms(arr, w, probe.hbm_cap * w, probe.ddr_cap * w)
    found = _search(cfg, placeable, arr, bound, deadline, settings)
    steps = gains = 0
    if settings.search:
        steps = improve(found.pl, placeable, deadline, settings.max_iters)
        if found.pl.score()[0] > bound * (1 + CLOSE_ENOUGH):
            found.pl, gains = perturb(found.pl, placeable, deadline)
    pl = found.pl
    tables = {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t]) for t in range(len(cfg.tables))}
    prof = active(cfg.topology)  # every rank pays the profile's per-step cost: the bound does too
    floor_ms = prof.step_ms if prof else 0.0
    return evaluate(cfg, tables, planner="engine", planning_seconds=time.perf_counter() - start,
                    lower_bound_ms=bound + floor_ms, notes=tuple(_notes(cfg, arr, found, steps, gains)))
