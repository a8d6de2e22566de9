"""Re-plan from an earlier plan: tables stay where they were when they still can, new and changed tables are placed
around them, and the slowest rank is then improved only while the bytes that would move between ranks (weights
and optimizer state) stay within a limit. Beside the re-plan come the earlier placement kept as it is (on the
new config) and a plan from scratch, with what each would move, so a user sees what the limit costs.

Bytes moved: for every piece of a table the new plan puts on a rank, the part of it (rows x columns, times the
bytes of a weight and its optimizer state) that the earlier plan held on another rank. Rows a grown table did not
have are new, and move nothing; a data-parallel table was on every rank it listed.

Checkpoints: a table whose sharding type, kernel or column split changes cannot load its earlier checkpoint
shard for shard (data-parallel and sharded tables keep optimizer state differently); such tables are flagged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from engine import limits as L
from engine.config import _read_json
from engine.enumerate import Option, all_table_options
from engine.errors import ConfigError, PlanningError
from engine.evaluate import evaluate
from engine.partition import FREE_PLACEMENT, FreeShards, Placement, Shift, Work, move_or_swap
from engine.planfile import parse_earlier_plan, placement_problem
from engine.planner import PlannerSettings, plan, rules_of, safety_stop_note, to_table_plan
from engine.types import ComputeKernel, Config, Plan, ShardingType, TablePlan

MAX_CANDIDATES = 16  # options tried per table placed around the kept ones, cheapest first
# Without a byte limit, the re-plan buys speed with moved bytes only down to this far above the slowest rank of a
# plan from scratch (in the search's own load figures): past it, every move is a byte that need not move.
STEP_SLACK = 0.03
REPLAN_STEP_TOLERANCE = 1.05  # an attempt this close to the plan from scratch is as fast


@dataclass(frozen=True)
class OldTable:
    """One table of the earlier plan, as its plan file gives it (not checked against the new config)."""

    sharding_type: ShardingType
    compute_kernel: ComputeKernel
    ranks: tuple[int, ...]
    shards: Optional[tuple[tuple[int, int, int, int, int], ...]]  # (row offset, col offset, rows, cols, rank)


def read_old_plan(data: Any, source: str = "--from") -> dict[str, OldTable]:
    """The earlier plan's tables from plan JSON (the whole file, its "plan" object, or a saved plan's bundle),
    read by the plan file reader (engine.planfile), the one door every plan comes in by."""
    return {name: _as_old(tp) for name, tp in parse_earlier_plan(data, source).items()}


def load_old_plan(path: str) -> dict[str, OldTable]:
    return read_old_plan(_read_json(path, "plan"), "--from")


# ---- bytes moved ----------------------------------------------------------------------------------


def _pieces(tp: TablePlan, rows: int, cols: int) -> np.ndarray:
    """(rank, row0, row1, col0, col1) per piece a table plan holds; data-parallel: the whole table per rank."""
    if tp.shards is None:
        return np.array([(r, 0, rows, 0, cols) for r in tp.ranks], dtype=np.int64).reshape(-1, 5)
    return np.array([(s.rank, s.offsets[0], s.offsets[0] + s.sizes[0], s.offsets[1], s.offsets[1] + s.sizes[1])
                     for s in tp.shards], dtype=np.int64).reshape(-1, 5)


def _old_pieces(o: OldTable, rows: int, cols: int) -> np.ndarray:
    if o.shards is None:
        return np.array([(r, 0, rows, 0, cols) for r in o.ranks], dtype=np.int64).reshape(-1, 5)
    return np.array([(rk, r0, r0 + nr, c0, c0 + nc) for r0, c0, nr, nc, rk in o.shards], dtype=np.int64)


def _elements_moved(new: np.ndarray, old: np.ndarray, replicated: bool) -> dict[tuple[int, int], int]:
    """Elements each new piece takes from another rank: {(source rank, destination rank): elements}."""
    out: dict[tuple[int, int], int] = {}
    if not len(new) or not len(old):
        return out
    rows = np.clip(np.minimum(new[:, None, 2], old[None, :, 2]) - np.maximum(new[:, None, 1], old[None, :, 1]), 0,
                   None)
    cols = np.clip(np.minimum(new[:, None, 4], old[None, :, 4]) - np.maximum(new[:, None, 3], old[None, :, 3]), 0,
                   None)
    area = rows * cols  # (new pieces, old pieces)
    same = new[:, None, 0] == old[None, :, 0]
    if replicated:  # every old rank holds everything: a new piece moves only to a rank that held no copy
        held = same.any(axis=1)
        for i in np.flatnonzero(~held):
            j = int(np.argmax(area[i]))  # the lowest old rank with the region (all hold it)
            if area[i, j] > 0:
                key = (int(old[j, 0]), int(new[i, 0]))
                out[key] = out.get(key, 0) + int(area[i, j])
        return out
    for i, j in zip(*np.nonzero((area > 0) & ~same)):
        key = (int(old[j, 0]), int(new[i, 0]))
        out[key] = out.get(key, 0) + int(area[i, j])
    return out


def _bytes_per_element(cfg: Config, name: str) -> float:
    t = cfg.table(name)
    return t.data_type.bytes * (1.0 + cfg.topology.optimizer.state_multiplier(t.embedding_dim))


@dataclass(frozen=True)
class Moves:
    total_bytes: int
    by_pair: dict[tuple[int, int], int]  # (source rank, destination rank) -> bytes
    by_table: dict[str, int]


def moved_bytes(cfg: Config, old: dict[str, OldTable], new: dict[str, TablePlan]) -> Moves:
    """What going from the earlier plan to `new` moves between ranks (weights and optimizer state)."""
    pairs: dict[tuple[int, int], float] = {}
    tables: dict[str, int] = {}
    for name, tp in new.items():
        o = old.get(name)
        if o is None:
            continue
        t = cfg.table(name)
        per = _bytes_per_element(cfg, name)
        moved = _elements_moved(_pieces(tp, t.num_embeddings, t.embedding_dim),
                                _old_pieces(o, t.num_embeddings, t.embedding_dim), o.shards is None)
        total = 0.0
        for key, elements in moved.items():
            pairs[key] = pairs.get(key, 0.0) + elements * per
            total += elements * per
        if total:
            tables[name] = int(round(total))
    by_pair = {k: int(round(v)) for k, v in sorted(pairs.items())}
    return Moves(sum(by_pair.values()), by_pair, tables)


def _piece_bytes_moved(cfg: Config, old: dict[str, OldTable], opt: Option, j: int, rank: int) -> float:
    """Bytes of shard j of `opt` that rank `rank` would have to receive."""
    name = cfg.tables[opt.table].name
    o = old.get(name)
    if o is None:
        return 0.0
    t = cfg.tables[opt.table]
    off, size = opt.offsets[j], opt.sizes[j]
    piece = np.array([(rank, off[0], off[0] + size[0], off[1], off[1] + size[1])], dtype=np.int64)
    moved = _elements_moved(piece, _old_pieces(o, t.num_embeddings, t.embedding_dim), o.shards is None)
    return sum(moved.values()) * _bytes_per_element(cfg, name)


# ---- checkpoints ----------------------------------------------------------------------------------


def checkpoint_breaks(cfg: Config, old: dict[str, OldTable], new: dict[str, TablePlan]) -> dict[str, str]:
    """Tables whose earlier checkpoint shards cannot be loaded as they are, and why."""
    out = {}
    for name, tp in new.items():
        o = old.get(name)
        if o is None:
            continue
        if (o.sharding_type is ShardingType.DATA_PARALLEL) != (tp.sharding_type is ShardingType.DATA_PARALLEL):
            out[name] = (f"{o.sharding_type.value} -> {tp.sharding_type.value}: data-parallel and sharded tables keep "
                         "optimizer state differently")
        elif o.sharding_type is not tp.sharding_type:
            out[name] = f"sharding type {o.sharding_type.value} -> {tp.sharding_type.value}: the shards differ"
        elif o.compute_kernel is not tp.compute_kernel:
            out[name] = f"kernel {o.compute_kernel.value} -> {tp.compute_kernel.value}: state and cache differ"
        elif o.shards is not None and tp.shards is not None and sorted({c for *_, c, _ in o.shards}) != sorted(
                {s.sizes[1] for s in tp.shards}):
            out[name] = "the column split differs"
    return out


# ---- planning -------------------------------------------------------------------------------------


def _old_option(options: list[Option], o: OldTable, w: int) -> tuple[Option, np.ndarray] | None:
    """The option with the earlier plan's sharding type, kernel and column split, on its earlier ranks."""
    if max(o.ranks) >= w:
        return None
    for opt in options:
        if opt.sharding_type is not o.sharding_type or opt.kernel is not o.compute_kernel:
            continue
        if o.shards is None:
            if opt.num_shards == len(o.ranks):
                return opt, np.array(o.ranks, dtype=np.int64)
            continue
        if opt.num_shards != len(o.shards) or any(int(opt.sizes[j][1]) != o.shards[j][3]
                                                  for j in range(opt.num_shards)):
            continue
        return opt, np.array([s[4] for s in o.shards], dtype=np.int64)
    return None


def _peak_with(pl: Placement, opt: Option, ranks: np.ndarray) -> float:
    return float(pl.loads_with(opt, ranks).max())


def _affine_ranks(pl: Placement, opt: Option, old_pieces: np.ndarray) -> np.ndarray | None:
    """Ranks for a freely placed option that keep each shard where the earlier plan held most of its region (when
    it fits there and the rules allow it; the shards holding the most earlier elements choose first), the least
    loaded fitting rank otherwise; None when a shard fits nowhere."""
    w, n = pl.topo.world_size, opt.num_shards
    allowed = pl.rules.allowed(pl, opt.table) if pl.rules is not None else None
    load, hbm, ddr = pl.load.copy(), pl.hbm.copy(), pl.ddr.copy()
    h, d, cost = opt.est.hbm_bytes, opt.est.ddr_bytes, opt.cost_ms
    held = np.zeros((n, w))  # elements of shard j that rank r held
    ranks = old_pieces[:, 0]
    inside = ranks < w
    for j in range(n):
        r0, c0 = int(opt.offsets[j][0]), int(opt.offsets[j][1])
        r1, c1 = r0 + int(opt.sizes[j][0]), c0 + int(opt.sizes[j][1])
        rows = np.clip(np.minimum(r1, old_pieces[:, 2]) - np.maximum(r0, old_pieces[:, 1]), 0, None)
        cols = np.clip(np.minimum(c1, old_pieces[:, 4]) - np.maximum(c0, old_pieces[:, 3]), 0, None)
        np.add.at(held[j], ranks[inside], (rows * cols)[inside].astype(np.float64))
    out = np.full(n, -1, dtype=np.int64)
    used = np.zeros(w, dtype=bool)

    def take(j: int, r: int) -> None:
        out[j] = r
        used[r] = True
        load[r] += cost[j]
        hbm[r] += h[j]
        ddr[r] += d[j]

    def fitting(j: int) -> np.ndarray:
        ok = (hbm + h[j] <= pl.hbm_cap) & (ddr + d[j] <= pl.ddr_cap)
        return ok & allowed if allowed is not None else ok

    for j in sorted(range(n), key=lambda j: (-held[j].max(), j)):  # first: shards that go home
        home = fitting(j) & (held[j] > 0)
        if home.any():
            pick = np.flatnonzero(home)
            take(j, int(pick[np.lexsort((load[pick], -held[j][pick]))[0]]))
    for j in np.flatnonzero(out < 0):  # then the rest, least loaded first
        ok = fitting(int(j))
        if not ok.any():
            return None
        pick = np.flatnonzero(ok & ~used if (ok & ~used).any() else ok)
        take(int(j), int(pick[np.argmin(load[pick])]))
    return out


def _place_rest(cfg: Config, old: dict[str, OldTable], pl: Placement, options: list[list[Option]],
                tables: list[int], work: Work, target_peak: float) -> list[int]:
    """Place each table around what is there (heaviest first). Its candidates: its cheapest options on the ranks
    the search would pick, and, for a table the earlier plan had, its options of the earlier sharding type kept
    as near the earlier ranks as they fit. Of the candidates that keep the slowest rank within `target_peak` (or
    the lowest peak, when none does), the one that moves the fewest bytes, then the lowest peak. Returns the
    tables that found no room."""
    unplaced = []
    order = sorted(tables, key=lambda t: (-min(o.total_cost_ms for o in options[t]), t))
    for t in order:
        name = cfg.tables[t].name
        o = old.get(name)
        pieces = None if o is None else _old_pieces(o, cfg.tables[t].num_embeddings, cfg.tables[t].embedding_dim)
        cheapest = sorted(options[t], key=lambda x: x.total_cost_ms)
        tried = cheapest[:MAX_CANDIDATES]
        if o is not None:
            tried += [x for x in cheapest[MAX_CANDIDATES:] if x.sharding_type is o.sharding_type][:MAX_CANDIDATES]
        found = []  # (peak, moved bytes, cost, option, ranks)
        for opt in tried:
            work.spend()
            choices = [pl.find_ranks(opt)]
            if pieces is not None and opt.sharding_type in FREE_PLACEMENT and not (
                    pl.rules is not None and t in pl.rules.fixed):
                choices.append(_affine_ranks(pl, opt, pieces))
            for ranks in choices:
                if ranks is None or not pl.fits(opt, ranks):
                    continue
                moved = 0.0 if o is None else sum(_piece_bytes_moved(cfg, old, opt, j, int(r))
                                                  for j, r in enumerate(ranks))
                found.append((_peak_with(pl, opt, ranks), moved, opt.total_cost_ms, opt, ranks))
        if not found:
            unplaced.append(t)
            continue
        limit = max(target_peak, min(f[0] for f in found))
        best = min(found, key=lambda f: (f[0] > limit * (1 + 1e-9), f[1], f[0], f[2]))
        pl.add(best[3], best[4])
    return unplaced


def _improve_within(cfg: Config, pl: Placement, old: dict[str, OldTable], budget: float, work: Work,
                    stop_peak: float = 0.0) -> tuple[float, int]:
    """Moves and swaps of table-wise and column-wise shards off the slowest rank (the planner's local search,
    engine.partition.move_or_swap), each kept only while the bytes moved so far stay within `budget`, until the
    slowest rank is at or below `stop_peak`. Returns the bytes the moves add and how many were made."""
    fs = FreeShards(pl)
    spent, steps = 0.0, 0

    def moved(step: tuple[Shift, ...]) -> float:
        """Bytes a step adds to what the re-plan moves (less where a shard goes back to where it was)."""
        total = 0.0
        for i, src, dst in step:
            opt, j = pl.choice[int(fs.t[i])], int(fs.j[i])
            total += _piece_bytes_moved(cfg, old, opt, j, dst) - _piece_bytes_moved(cfg, old, opt, j, src)
        return total

    while len(fs.t) and not work.done():
        if float(pl.load.max()) <= stop_peak:
            break
        step = move_or_swap(pl, fs, work, allow=lambda s: spent + moved(s) <= budget, margin=1e-12)
        if not step:
            break
        spent += moved(step)
        steps += 1
    return spent, steps


def _keep(cfg: Config, old: dict[str, OldTable], options: list[list[Option]], pl: Placement,
          skip: frozenset[int] = frozenset()) -> tuple[list[int], list[int]]:
    """Put every table that can stay on its earlier ranks there, in config order, except the tables in `skip`.
    (Making room for a grown table by sending smaller ones away was tried: on the bench cases it moved more bytes
    in the end, 42-49% of a plan from scratch; re-placing the grown table itself near its old shards is the second
    attempt of `replan`.) Returns (kept tables, tables to place)."""
    w = cfg.topology.world_size
    kept, rest = [], []
    for i, t in enumerate(cfg.tables):
        o = old.get(t.name) if i not in skip else None
        found = _old_option(options[i], o, w) if o is not None else None
        allowed = pl.rules.allowed(pl, i) if pl.rules is not None and found is not None else None
        if allowed is not None and not allowed[found[1]].all():
            found = None  # its placement rules (new, or its partners') no longer allow its earlier ranks
        if found is not None and pl.fits(*found):
            pl.add(*found)
            kept.append(i)
        else:
            rest.append(i)
    return kept, rest


@dataclass(frozen=True)
class Replan:
    plan: Plan  # the re-plan
    kept: Optional[Plan]  # the earlier placement kept as it is, new and changed tables placed around it (before
    # the moves that improve the slowest rank; of the attempt the re-plan comes from)
    scratch: Plan  # a plan from scratch of the new config, same settings
    moves: Moves
    kept_moves: Optional[Moves]
    scratch_moves: Moves
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
            "scratch_step_ms": self.scratch.max_rank_cost_ms, "scratch_moved_bytes": self.scratch_moves.total_bytes,
            "checkpoint_breaks": [{"table": k, "why": v} for k, v in sorted(self.checkpoint.items())],
        }


def _as_old(tp: TablePlan) -> OldTable:
    shards = None if tp.shards is None else tuple(
        (s.offsets[0], s.offsets[1], s.sizes[0], s.sizes[1], s.rank) for s in tp.shards)
    return OldTable(tp.sharding_type, tp.compute_kernel, tuple(tp.ranks), shards)


def _search_peak(cfg: Config, options: list[list[Option]], tables: dict[str, TablePlan]) -> float:
    """The slowest rank of a plan in the search's own load figures (0.0 when an option cannot be matched)."""
    load = np.zeros(cfg.topology.world_size)
    for i, t in enumerate(cfg.tables):
        found = _old_option(options[i], _as_old(tables[t.name]), cfg.topology.world_size)
        if found is None:
            return 0.0
        np.add.at(load, found[1], found[0].cost_ms)
    return float(load.max())


def _changed(cfg: Config, old: dict[str, OldTable]) -> frozenset[int]:
    """Tables whose rows or columns differ from the earlier plan's shards (grown, shrunk or widened)."""
    out = set()
    for i, t in enumerate(cfg.tables):
        o = old.get(t.name)
        if o is not None and o.shards is not None and (max(r0 + nr for r0, _, nr, _, _ in o.shards),
                                                        max(c0 + nc for _, c0, _, nc, _ in o.shards)) != (
                                                           t.num_embeddings, t.embedding_dim):
            out.add(i)
    return frozenset(out)


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


def _attempt(cfg: Config, old: dict[str, OldTable], options: list[list[Option]], settings: PlannerSettings,
             start: float, deadline: float, skip: frozenset[int], target_peak: float, budget: float,
             max_move_bytes: Optional[int]) -> _Attempt:
    """One re-plan: keep what can stay (but the tables in `skip`), place the rest, then improve within the
    budget."""
    work = Work(budget=float(settings.effort), world_size=cfg.topology.world_size, deadline=deadline,
                start=start)
    pl = Placement(cfg.topology, rules=rules_of(cfg))
    kept_idx, rest = _keep(cfg, old, options, pl, skip)
    unplaced = _place_rest(cfg, old, pl, options, rest, work, target_peak)
    if not unplaced and placement_problem(cfg, {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t])
                                                for t in range(len(cfg.tables))}) is not None:
        unplaced = [t for t in range(len(cfg.tables)) if t in (pl.rules.fixed if pl.rules else ())]
    a = _Attempt(kept_idx, rest, unplaced, work=work)
    if unplaced:
        return a
    a.kept = evaluate(cfg, {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t])
                            for t in range(len(cfg.tables))}, planner="engine")
    a.kept_moves = moved_bytes(cfg, old, a.kept.tables)
    if a.kept_moves.total_bytes > budget:
        a.refusal = PlanningError(
            f"Keeping every table that can stay where it was still moves {a.kept_moves.total_bytes:,} bytes "
            f"(grown or re-split tables), more than --max-move-bytes {max_move_bytes:,}.",
            fixes=(f"allow at least {a.kept_moves.total_bytes:,} bytes (--max-move-bytes)",))
        return a
    # Without a byte limit, stop buying speed with bytes once near the plan from scratch; with one, go on.
    stop = target_peak if max_move_bytes is None else 0.0
    _, a.steps = _improve_within(cfg, pl, old, budget - a.kept_moves.total_bytes, work, stop)
    a.tables = {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t]) for t in range(len(cfg.tables))}
    return a


def replan(cfg: Config, old: dict[str, OldTable], max_move_bytes: Optional[int] = None,
           settings: PlannerSettings = PlannerSettings()) -> Replan:
    """The re-plan of `cfg` from the earlier plan `old` (see the module's docstring). Two attempts: every table
    that fits stays where it was; and the same with grown or re-shaped tables placed last, near their earlier
    ranks, so a grown table re-splits around its old shards instead of pushing others off theirs. The attempt
    that moves fewer bytes at a slowest rank within 5% of a plan from scratch wins (else the faster one)."""
    if max_move_bytes is not None and not 0 <= max_move_bytes <= L.MAX_MOVE_BYTES:
        raise ConfigError("max_move_bytes", f"must be from 0 to {L.MAX_MOVE_BYTES:,} bytes (None: no limit), got "
                          f"{'less' if max_move_bytes < 0 else 'more'}")
    start = time.perf_counter()
    scratch = plan(cfg, settings)
    scratch_tables = scratch.tables
    options = all_table_options(cfg)
    budget = float("inf") if max_move_bytes is None else float(max_move_bytes)
    target_peak = _search_peak(cfg, options, scratch_tables) * (1 + STEP_SLACK)
    deadline = start + settings.time_budget_s
    changed = _changed(cfg, old)
    attempts = [_attempt(cfg, old, options, settings, start, deadline, frozenset(), target_peak, budget,
                         max_move_bytes)]
    if changed:
        attempts.append(_attempt(cfg, old, options, settings, start, deadline, changed, target_peak, budget,
                                 max_move_bytes))
    new_names = tuple(t.name for t in cfg.tables if t.name not in old)
    first = attempts[0]
    results = []
    for a in attempts:
        if a.tables is None:
            continue
        ev = evaluate(cfg, a.tables, planner="engine")
        results.append((ev.max_rank_cost_ms > scratch.max_rank_cost_ms * REPLAN_STEP_TOLERANCE,
                        moved_bytes(cfg, old, ev.tables).total_bytes, ev.max_rank_cost_ms, a))
    candidate: Optional[dict[str, TablePlan]] = None
    best = first
    if results:
        best = min(results, key=lambda r: r[:3])[3]
        candidate = best.tables
        note = (f"re-planned from the earlier plan: {len(best.kept_idx)} of {len(cfg.tables)} tables kept their "
                f"ranks, {len(best.rest)} placed around them, then {best.steps} moves of shards within the byte "
                "limit")
    else:
        refusals = [a.refusal for a in attempts if a.refusal is not None]
        if refusals:
            raise refusals[0]
        names = ", ".join(cfg.tables[t].name for t in first.unplaced[:3])
        note = f"the earlier placement leaves no room for {names}: re-planned from scratch"
    notes = [note]
    if candidate is None:  # the plan from scratch: its own notes (its safety stop's among them) still hold
        notes += scratch.notes
    elif best.work is not None and best.work.cut:
        notes.append(safety_stop_note(best.work, settings.time_budget_s, "the re-plan's search"))
    result = evaluate(cfg, candidate if candidate is not None else scratch_tables, planner="engine",
                      planning_seconds=time.perf_counter() - start, lower_bound_ms=scratch.lower_bound_ms,
                      notes=tuple(notes))
    moves = moved_bytes(cfg, old, result.tables)
    if candidate is None and max_move_bytes is not None and moves.total_bytes > max_move_bytes:
        raise PlanningError(f"{note}, which moves {moves.total_bytes:,} bytes, more than --max-move-bytes "
                            f"{max_move_bytes:,}.", fixes=("allow more bytes to move", "add memory or ranks"))
    kept_on = tuple(t.name for t in cfg.tables if t.name in old and t.name not in moves.by_table)
    return Replan(plan=result, kept=best.kept, scratch=scratch, moves=moves, kept_moves=best.kept_moves,
                  scratch_moves=moved_bytes(cfg, old, scratch_tables), kept_tables=kept_on,
                  moved_tables=tuple(moves.by_table), new_tables=new_names,
                  checkpoint=checkpoint_breaks(cfg, old, result.tables), max_move_bytes=max_move_bytes)
