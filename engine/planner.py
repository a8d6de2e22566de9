"""The planner: enumerate options per table, place greedily, improve by local search, report.

plan(config) -> Plan is the whole public entry point; the stages live in enumerate, partition, evaluate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from engine.enumerate import Option, table_options
from engine.errors import PlanningError, human_bytes
from engine.evaluate import evaluate
from engine.partition import Placement, better, improve
from engine.types import ComputeKernel, Config, Plan, Shard, ShardingType, TablePlan


@dataclass(frozen=True)
class PlannerSettings:
    search: bool = True  # local search after the greedy placement
    time_budget_s: float = 3.0  # the local search stops by then, keeping the best plan so far
    max_iters: int = 5000


def lower_bound_ms(options: list[list[Option]], world_size: int) -> float:
    """No plan's slowest rank is faster than the average of the cheapest options, nor than the cheapest
    way to run the heaviest table's largest piece."""
    total = sum(min(o.total_cost_ms for o in opts) for opts in options)
    piece = max(min(o.max_shard_cost_ms for o in opts) for opts in options)
    return max(total / world_size, piece)


def _initial(options: list[list[Option]]) -> list[Option]:
    """Per table, the cheapest option in total, HBM kernels before DDR ones at equal cost."""
    return [min(opts, key=lambda o: (o.total_cost_ms, o.kernel.weights_in_ddr)) for opts in options]


# Demote kernels until the plan asks for at most this share of all HBM; where shards then do not pack, try
# again with more room to spare.
FILL_TARGETS = (0.95, 0.85, 0.7, 0.5)


def _fit_kernels(chosen: list[Option], options: list[list[Option]], pl: Placement, fill: float) -> list[str]:
    """Where the cheapest options ask for more HBM than all ranks have, choose per table the option with the
    least `cost + lam x HBM bytes`, with the smallest price `lam` that brings the demand under `fill` of
    all HBM (a Lagrangian relaxation of the memory limit: hot tables stay in HBM, cold big ones move to
    DDR-backed kernels or spread by rows). Edits `chosen` in place."""
    cap = pl.hbm_cap * pl.topo.world_size * fill
    if sum(o.total_hbm_bytes for o in chosen) <= cap:
        return []
    flat = [o for opts in options for o in opts]
    table = np.array([o.table for o in flat])
    cost = np.array([o.total_cost_ms for o in flat])
    hbm = np.array([o.total_hbm_bytes for o in flat])
    ddr = np.array([float(o.est.ddr_bytes.sum()) for o in flat])
    ddr_cap = pl.ddr_cap * pl.topo.world_size * FILL_TARGETS[0]
    first = np.searchsorted(table, np.arange(len(options)))  # options are grouped by table, in order

    def pick(lam: float) -> np.ndarray:
        score = cost + lam * hbm
        order = np.lexsort((score, table))
        return order[np.searchsorted(table[order], np.arange(len(options)))]

    def ok(idx: np.ndarray) -> bool:
        return hbm[idx].sum() <= cap and ddr[idx].sum() <= ddr_cap

    hi = float(cost.max() / max(hbm[hbm > 0].min(), 1.0))
    if not ok(pick(hi)):
        return []  # no choice of kernels fits: placement reports what does not fit
    lo = 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if ok(pick(mid)):
            hi = mid
        else:
            lo = mid
    idx = pick(hi)
    moved = 0
    for t, i in enumerate(idx):
        if flat[i] is not chosen[t]:
            moved += flat[i].kernel.weights_in_ddr != chosen[t].kernel.weights_in_ddr
            chosen[t] = flat[i]
    del first
    return [f"HBM demand exceeded {fill:.0%} of capacity: {moved} tables moved to DDR-backed kernels, others "
            "re-sharded to fit"]


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


def _place_all(cfg: Config, options: list[list[Option]], pl: Placement, fill: float) -> list[str]:
    chosen = _initial(options)
    notes = _fit_kernels(chosen, options, pl, fill)
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
    if fallbacks:
        more = f", and {len(fallbacks) - 5} more" if len(fallbacks) > 5 else ""
        notes.append(f"{len(fallbacks)} tables did not fit in their cheapest option where memory was left; "
                     f"used the next cheapest: {', '.join(fallbacks[:5])}{more}")
    return notes


def to_table_plan(opt: Option, ranks: np.ndarray) -> TablePlan:
    if opt.sharding_type is ShardingType.DATA_PARALLEL:
        return TablePlan(opt.sharding_type, opt.kernel, tuple(int(r) for r in ranks), None)
    shards = tuple(
        Shard((int(o[0]), int(o[1])), (int(s[0]), int(s[1])), int(r))
        for o, s, r in zip(opt.offsets, opt.sizes, ranks)
    )
    return TablePlan(opt.sharding_type, opt.kernel, tuple(int(r) for r in ranks), shards)


def _placeable(cfg: Config, options: list[list[Option]]) -> list[list[Option]]:
    """Drop the options with a piece larger than one rank's usable memory: they can never be placed."""
    probe = Placement(cfg.topology)
    out = []
    for t, opts in enumerate(options):
        fit = [o for o in opts if o.est.hbm_bytes.max() <= probe.hbm_cap and o.est.ddr_bytes.max() <= probe.ddr_cap]
        if not fit:
            raise _no_room(cfg, options, t, probe)
        out.append(fit)
    return out


def _placements(cfg: Config, all_options: list[list[Option]], placeable: list[list[Option]],
                deadline: float):
    """Greedy placements to choose from, in order of preference: every option listed (big tables that fit
    nowhere fall back to what fits when their turn comes); then only the placeable options, filling memory by
    time or evenly, with ever more HBM to spare. Yields (placement, notes); stops when memory is not tight."""
    attempts = [(all_options, FILL_TARGETS[0], False)]
    attempts += [(placeable, fill, balance) for fill in FILL_TARGETS for balance in (False, True)]
    error = None
    for i, (options, fill, balance) in enumerate(attempts):
        if i and time.perf_counter() > deadline:
            break
        pl = Placement(cfg.topology, balance_memory=balance)
        try:
            notes = _place_all(cfg, options, pl, fill)
        except PlanningError as e:
            error = error or e
            continue
        pl.balance_memory = False
        if balance or fill != FILL_TARGETS[0]:
            notes.append(f"memory is tight: placed filling memory {'evenly' if balance else 'by time'} with "
                         f"HBM demand capped at {fill:.0%}, then balanced for time")
        yield pl, notes
        if not notes:  # no kernel demoted, no table fell back, no retry: memory is not tight
            return
    if error is not None:
        raise error


def plan(cfg: Config, settings: PlannerSettings = PlannerSettings()) -> Plan:
    """Enumerate, place greedily (a few ways where memory is tight, keeping the fastest), improve by local
    search, and score the result."""
    start = time.perf_counter()
    deadline = start + settings.time_budget_s
    all_options = [table_options(cfg, i) for i in range(len(cfg.tables))]
    placeable = _placeable(cfg, all_options)
    best = None
    for found, (pl, notes) in enumerate(_placements(cfg, all_options, placeable, start + settings.time_budget_s / 3)):
        if best is None or better(pl.score(), best[0].score()):
            best = (pl, notes)
        if found == 2:
            break
    pl, notes = best
    if settings.search:
        steps = improve(pl, placeable, deadline, settings.max_iters)
        if steps:
            notes.append(f"local search: {steps} improving steps")
    tables = {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t]) for t in range(len(cfg.tables))}
    lb = lower_bound_ms(placeable, cfg.topology.world_size)
    return evaluate(cfg, tables, planner="engine", planning_seconds=time.perf_counter() - start,
                    lower_bound_ms=lb, notes=tuple(notes))
