"""The planner: enumerate options per table, choose them a few ways, place greedily, improve, report.

plan(config) -> Plan is the whole public entry point; the stages live in enumerate, strategy (choices and
the lower bound), partition (placement and search) and evaluate.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from engine.bounds import fleet_worth, workset_bound_ms
from engine.tiers import check_ssd, offloadable, plans_kv, ssd_pieces
from engine.enumerate import Option, all_table_options
from engine.clf import with_notes
from engine.errors import PlanningError
from engine.fleet import per_rank
from engine.evaluate import evaluate
from engine.planfile import placement_problem
from engine.refuse import no_room, refuse_too_big
from engine.replicas import group_config, with_group_note
from engine.profile import active, notes as profile_notes
from engine.groups import place_group, place_past_apart
from engine.partition import Placement, PlacementRules, Work, better, improve, perturb
from engine.work import safety_stop_note
from engine.strategy import OptionArrays, Recipe, candidates, option_arrays, relaxed_bound_ms
from engine.typesets import FixedCosts, TypeSet, fixed_costs, lower_bound_ms, score, type_sets
from engine.types import PLACEMENT_FIELDS, Config, Plan, Shard, ShardingType, TablePlan


@dataclass(frozen=True)
class PlannerSettings:
    """How hard the planner searches. The search is bounded by work (engine.work.Work), so the same config
    and settings give the same plan on any machine, quiet or busy; time_budget_s is only a safety stop on the
    whole planning, and a plan it cut says so in its notes."""

    search: bool = True  # local search (and ruin and recreate) after each greedy placement
    effort: int = 50_000  # work units of search (about 40 us each on this 2-core machine, quiet); under a profile
    # that charges per sharding type, the sets limited to a few types get LIMITED_SHARE of it more
    seed: int = 0  # the ruin-and-recreate rounds' random generator
    time_budget_s: float = 60.0  # safety stop: wall-clock seconds for the whole planning


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
            o.piece_hbm_bytes / pl.hbm_cap if pl.hbm_cap else 0.0,
            o.piece_ddr_bytes / pl.ddr_cap if pl.ddr_cap else 0.0)
        for o in chosen
    ])
    return np.lexsort((np.arange(len(chosen)), -weight, ~fixed))


def _largest_ranks(pl: Placement) -> list[tuple[float, float]]:
    """The ranks' distinct (usable HBM, usable DDR) that no other rank's both exceed: one pair where ranks are
    alike, one per kind of device on a mixed fleet."""
    out: list[tuple[float, float]] = []
    for h, d in sorted(set(zip(pl.hbm_caps.tolist(), pl.ddr_caps.tolist())), reverse=True):
        if not out or d > out[-1][1]:
            out.append((h, d))
    return out


def _totals(pl: Placement) -> tuple[float, float] | None:
    """All ranks' usable memory where ranks differ (engine.strategy.choose's budgets); None where they are alike."""
    return (pl.hbm_total, pl.ddr_total) if per_rank(pl.topo) else None


def _refuse_early(cfg: Config) -> None:
    """One pass over the tables before any option is priced (engine.refuse)."""
    refuse_too_big(cfg.tables, cfg.topology, offloadable(cfg.constraints, cfg.topology, cfg.tables))


def place_greedy(cfg: Config, options: list[list[Option]], chosen: list[Option],
                 balance_memory: bool = False, work: Work | None = None) -> tuple[Placement, list[str]]:
    """Place the chosen options, heaviest first, each onto the least-loaded ranks with room; a table whose
    choice fits nowhere takes its cheapest option that fits. Returns the placement and those fallbacks."""
    rules = rules_of(cfg)
    pl = Placement(cfg.topology, balance_memory=balance_memory, rules=rules)
    fallbacks: list[str] = []
    if work is not None:
        work.spend(len(chosen))
    order = _order(chosen, pl)
    if rules is not None:  # tables on every rank (they go there anyway), then those with placement rules (fewer
        spread = (ShardingType.DATA_PARALLEL, ShardingType.ROW_WISE)  # ranks to choose from), then the rest
        key = [1 if t in rules.fixed else 0 if chosen[t].sharding_type in spread else 2 for t in order]
        order = order[np.argsort(key, kind="stable")].astype(np.int64)
    for t in order:
        if t in pl.choice:
            continue  # placed with its co-located group
        group = rules.members.get(rules.group.get(t, -1), ()) if rules is not None else ()
        if len(group) > 1:
            used = place_group(pl, options, chosen, list(group), work)
            if used is not None:
                fallbacks += [f"{cfg.tables[k].name} -> {o.label}" for k, o in used.items() if o is not chosen[k]]
                continue
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
            if rules is not None and t in rules.fixed:
                opt = place_past_apart(pl, options, chosen, t, work)
                if opt is not None:
                    fallbacks += [f"{cfg.tables[t].name} -> {opt.label}"] if opt is not chosen[t] else []
                    continue
                name = cfg.tables[t].name
                raise PlanningError(
                    f"Table {name!r} cannot be placed within the placement rules that bind it "
                    f"({', '.join(_rules_naming(cfg, name))}, or those of the tables co-located with it): no rank "
                    "they allow has room for any of its options.",
                    tables=(name,), fixes=(f"allow more ranks or hosts in constraints.{name}",
                                           "co-locate fewer tables with it or keep it apart from fewer (a table "
                                           "that is data_parallel or row_wise holds a piece on every rank)",
                                           "raise topology.hbm_cap"))
            raise no_room(cfg, options, t, pl)
        pl.add(opt, ranks)
    pl.balance_memory = False
    return pl, fallbacks


def _rules_naming(cfg: Config, name: str) -> list[str]:
    """The placement rules that bind table `name`: its own, and other tables' colocate and apart that name it."""
    own = [f"constraints.{name}.{f}" for f in PLACEMENT_FIELDS if getattr(cfg.constraint(name), f)]
    return own + [f"constraints.{other}.{f}" for other, c in cfg.constraints.items() if other != name
                  for f in ("colocate", "apart") if name in (getattr(c, f) or ())]


_RULES: tuple = (None, None)  # (config, its PlacementRules): the last config's, reused by every greedy pass


def rules_of(cfg: Config) -> PlacementRules | None:
    """The config's placement rules, computed once per config. Threads (the dashboard's sessions) may plan at
    once: the pair is read and replaced whole, so a thread never takes another config's rules."""
    global _RULES
    last_cfg, last_rules = _RULES
    if last_cfg is cfg:
        return last_rules
    rules = PlacementRules.of(cfg)
    _RULES = (cfg, rules)
    return rules


def to_table_plan(opt: Option, ranks: np.ndarray) -> TablePlan:
    if opt.sharding_type is ShardingType.DATA_PARALLEL:
        return TablePlan(opt.sharding_type, opt.kernel, tuple(int(r) for r in ranks), None)
    shards = tuple(
        Shard((int(o[0]), int(o[1])), (int(s[0]), int(s[1])), int(r))
        for o, s, r in zip(opt.offsets, opt.sizes, ranks)
    )
    return TablePlan(opt.sharding_type, opt.kernel, tuple(int(r) for r in ranks), shards, opt.clf)


def _placeable(cfg: Config, options: list[list[Option]]) -> tuple[list[list[Option]], OptionArrays]:
    """Drop the options with a piece larger than one rank's usable memory: they can never be placed.
    Returns what is left, per table and as arrays."""
    arr = option_arrays(options)
    probe = Placement(cfg.topology)
    fits = np.zeros(len(arr.table), dtype=bool)
    for h, d in _largest_ranks(probe):  # some rank holds the piece
        fits |= (arr.piece_hbm_bytes <= h) & (arr.piece_ddr_bytes <= d)
    if plans_kv(cfg):  # and its SSD (key_value's)
        fits &= ssd_pieces(arr.options) <= probe.ssd_caps.max()
    per_table = np.zeros(len(options), dtype=np.int64)
    np.add.at(per_table, arr.table[fits], 1)
    if (per_table == 0).any():
        raise no_room(cfg, options, int(np.argmin(per_table)), probe)
    arr = arr.select(fits)
    return arr.per_table(), arr


# Of the work budget, the share spent trying candidate choices (the rest improves the best where its search was
# cut short), and the most one candidate's local search may take after its greedy placement.
EXPLORE_SHARE = 0.9
CANDIDATE_SHARE = 0.15
CLOSE_ENOUGH = 1e-3  # a plan this close to the lower bound (relative) ends the search
# Where a profile charges per sharding type, the sets limited to a few types get this share of the effort on top of
# the search over every type, which keeps its whole effort: limiting the types never makes the plan worse.
LIMITED_SHARE = 0.5


@dataclass
class _Found:
    pl: Placement
    recipe: Recipe
    fallbacks: list[str]
    tried: int = 0
    types: TypeSet | None = None  # the set of sharding types the plan was limited to
    cost: tuple[float, float] = (np.inf, np.inf)  # typesets.score of pl when last scored


def _try(cfg: Config, ts: TypeSet, recipe: Recipe, idx: np.ndarray, work: Work, settings: PlannerSettings,
         explore: float) -> _Found:
    """One candidate choice placed greedily and improved for CANDIDATE_SHARE of the effort after its placement (up
    to `explore` work used); raises PlanningError."""
    pl, fallbacks = place_greedy(cfg, ts.options, [ts.arr.options[i] for i in idx], recipe.balance_memory, work)
    if settings.search:
        improve(pl, ts.options, work, limit=min(explore, work.used + CANDIDATE_SHARE * settings.effort))
    return _Found(pl, recipe, fallbacks, types=ts)


def _search(cfg: Config, sets: list[TypeSet], fc: FixedCosts | None, work: Work, settings: PlannerSettings,
            lower_ms: float, beat: _Found | None = None) -> _Found:
    """Place each candidate choice greedily and improve it for a slice of the work, stopping early at the lower
    bound; keep the best, or `beat` (a plan found before) where none is better. Within one set, its choices in turn;
    over several (those limited to a few types), the cheapest choice within each set whose bound can beat the best
    plan (a smaller set of options may also place better: not only collectives are saved), then the other choices
    within the sets that placed, best first. The search spends the work from work.used to work.budget: the first
    candidate that places is always placed in full where nothing is to beat; the next only while the exploring share
    of that work can pay for its greedy placement. Raises the first placement error if nothing places."""
    explore = work.used + EXPLORE_SHARE * (work.budget - work.used)
    probe, n = Placement(cfg.topology), len(sets[0].options)
    state = {"best": beat, "error": None, "tried": 0, "failed": 0}
    streams, placed, kv = {}, {}, plans_kv(cfg)

    def run(ts: TypeSet, first_only: bool) -> bool:
        """Candidates of one set; True where the best plan meets the lower bound."""
        if id(ts) not in streams:
            ssd = (ssd_pieces(ts.arr.options), float(probe.ssd_caps.max())) if kv else None  # capped as HBM, DDR
            streams[id(ts)] = candidates(ts.arr, ts.bound_ms, probe.hbm_cap, probe.ddr_cap,
                                         cfg.topology.world_size, _totals(probe), ssd)
        for recipe, idx in streams[id(ts)]:
            best = state["best"]
            if best is not None and (recipe.retry or work.done(explore - n * work.unit)):
                return False  # the rest are retries and a plan was found, or no work left to place one more
            try:
                found = _try(cfg, ts, recipe, idx, work, settings, explore)
            except PlanningError as e:
                state["error"], state["failed"] = state["error"] or e, state["failed"] + 1
                if best is None and work.done():  # refusing is bounded by the same work as planning
                    error = state["error"]
                    raise PlanningError(
                        f"{error.message} ({state['failed']} ways to choose the options were tried before the effort "
                        "ran out.)", tables=error.tables, fixes=error.fixes + ("a larger --effort, to try more ways",)
                    ) from None
                continue
            state["tried"] += 1
            found.cost = score(found.pl, fc)
            placed.setdefault(id(ts), (found.cost, ts))  # the first plan within each set
            if best is None or better(found.cost, best.cost):
                state["best"] = best = found
            met = best.cost[0] <= lower_ms * (1 + CLOSE_ENOUGH)
            if met or first_only:
                return met
        return False

    for ts in sets:  # each set's first choice that places
        best = state["best"]
        if best is not None and (ts.lower_ms >= best.cost[0] * (1 - 1e-9) or work.done(explore - n * work.unit)):
            continue  # no plan within these types beats the best, or no work left to try them
        if run(ts, first_only=len(sets) > 1):
            break
    else:  # the other choices within each set that placed, best first, while the work lasts
        for _, ts in sorted(placed.values(), key=lambda v: v[0]) if len(sets) > 1 else ():
            if run(ts, first_only=False) or work.done(explore - n * work.unit):
                break
    if state["best"] is None:
        raise state["error"]
    state["best"].tried = (beat.tried if beat is not None else 0) + state["tried"]
    return state["best"]


def _refine(found: _Found, fc: FixedCosts | None, work: Work, settings: PlannerSettings,
            lower_ms: float) -> tuple[int, int]:
    """Improve the best plan while the work lasts (local search, then ruin and recreate short of the bound);
    returns the improving steps and rounds."""
    if not settings.search:
        return 0, 0
    steps, gains = improve(found.pl, found.types.options, work), 0
    found.cost = score(found.pl, fc)
    if found.cost[0] > lower_ms * (1 + CLOSE_ENOUGH):
        pl, gains = perturb(found.pl, found.types.options, work, settings.seed)
        cost = score(pl, fc)
        if fc is None or better(cost, found.cost):  # its rounds compare loads alone
            found.pl, found.cost = pl, cost
        else:
            gains = 0
    return steps, gains


def _notes(cfg: Config, arr: OptionArrays, found: _Found, steps: int, gains: int, work: Work,
           settings: PlannerSettings) -> list[str]:
    notes = []
    if work.cut:
        notes.append(safety_stop_note(work, settings.time_budget_s))
    cheapest = arr.argmin(arr.cost_ms)
    cap = found.pl.hbm_total
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
    if found.types.types is not None:
        notes.append(f"{found.types.label}: each type a plan uses adds its collectives to every rank's step")
    if steps:
        notes.append(f"local search: {steps} improving steps")
    if gains:
        notes.append(f"ruin and recreate: {gains} improving rounds")
    if found.pl.ws_price.ramp:
        notes.append("lower bound: the tables' measured costs spread evenly, without what a rank's tables cost each "
                     "other (no bound of that is known), so the slowest rank stays further above it")
    return notes + profile_notes(cfg.topology)


@contextmanager
def without_cyclic_gc():
    """Planning makes millions of small objects without cycles; Python's cyclic collector would scan them all
    again and again while they are made (at 100,000 tables it more than doubled the time). Reference counting
    still frees them; the collector resumes after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def plan(cfg: Config, settings: PlannerSettings = PlannerSettings()) -> Plan:
    """Enumerate; choose options and place them greedily a few ways (keeping the fastest after a short local
    search); improve the best while the work budget lasts; score the result."""
    with without_cyclic_gc():
        return with_group_note(cfg.topology, _plan(group_config(cfg), settings))  # 2D: one group's (engine.replicas)


def _bounds(cfg: Config, placeable: list[list[Option]], arr: OptionArrays
            ) -> tuple[list[TypeSet], FixedCosts | None, float, float]:
    """(the sets of types to search, the profile's fixed costs, the lower bound on `score`'s scale, the floor a
    plan's bound adds to it: the profile's per-step cost, which every rank pays, where no fixed costs hold it)."""
    probe = Placement(cfg.topology)
    ranks_worth, scale = fleet_worth(placeable, probe)
    bound = max(relaxed_bound_ms(arr, ranks_worth, probe.hbm_total, probe.ddr_total) * scale,
                workset_bound_ms(placeable, arr, probe))
    fc = fixed_costs(cfg)
    sets = type_sets(arr, placeable, bound, fc, ranks_worth, scale)
    prof = active(cfg.topology)
    return sets, fc, lower_bound_ms(sets), (prof.step_ms if prof and fc is None else 0.0)


def plan_lower_bound_ms(cfg: Config, options: list[list[Option]]) -> float:
    """The lower bound a plan from scratch of `cfg` reports (Plan.lower_bound_ms; no plan's slowest rank is faster),
    without the search: for a re-plan that makes no plan from scratch. `options`: all_table_options(cfg), `cfg` as
    the planner sees it (2D: one group's, engine.replicas.group_config)."""
    placeable, arr = _placeable(cfg, options)
    _, _, lower, floor_ms = _bounds(cfg, placeable, arr)
    return lower + floor_ms


def _plan(cfg: Config, settings: PlannerSettings) -> Plan:
    start = time.perf_counter()
    deadline = start + settings.time_budget_s
    _refuse_early(cfg)
    placeable, arr = _placeable(cfg, all_table_options(cfg, deadline, settings.time_budget_s))
    w = cfg.topology.world_size
    sets, fc, lower, floor_ms = _bounds(cfg, placeable, arr)
    work = Work(budget=float(settings.effort), world_size=w, deadline=deadline, start=start)
    found = _search(cfg, sets[:1], fc, work, settings, lower)  # every type at once, with the whole effort
    steps, gains = _refine(found, fc, work, settings, lower)
    if len(sets) > 1 and found.cost[0] > lower * (1 + CLOSE_ENOUGH):  # then the sets of a few types, on top
        work.grant(LIMITED_SHARE * settings.effort)
        limited = _search(cfg, sets[1:], fc, work, settings, lower, beat=found)
        if limited is not found:
            steps, gains = _refine(limited, fc, work, settings, lower)
            found = limited
    pl = found.pl
    tables = with_notes(cfg, {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t])
                              for t in range(len(cfg.tables))})
    broken = placement_problem(cfg, tables)
    if broken is not None:  # co-located tables whose pieces ended on different ranks: the greedy pass could not
        field, why = broken
        raise PlanningError(f"No plan found that keeps {field}: {why}.", tables=(field.split(".")[1],),
                            fixes=("co-locate tables of the same sharding type and column split",
                                   "pin them to the same ranks (constraints.<table>.ranks)"))
    check_ssd(cfg, tables)  # key_value's SSD: tracked while placing (Placement.ssd), and summed again here
    return evaluate(cfg, tables, planner="engine", planning_seconds=time.perf_counter() - start,
                    lower_bound_ms=lower + floor_ms,
                    notes=tuple(_notes(cfg, arr, found, steps, gains, work, settings)))
