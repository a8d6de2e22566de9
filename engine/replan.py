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

from engine.config import _read_json
from engine.enumerate import Option, all_table_options
from engine.errors import ConfigError, PlanningError
from engine.evaluate import evaluate
from engine.partition import FreeShards, Placement, Work, _best_move, _best_swap
from engine.planfile import placement_problem
from engine.planner import PlannerSettings, plan, rules_of, to_table_plan
from engine.types import ComputeKernel, Config, Plan, ShardingType, TablePlan

MAX_CANDIDATES = 16  # options tried per table placed around the kept ones, cheapest first


@dataclass(frozen=True)
class OldTable:
    """One table of the earlier plan, as its plan file gives it (not checked against the new config)."""

    sharding_type: ShardingType
    compute_kernel: ComputeKernel
    ranks: tuple[int, ...]
    shards: Optional[tuple[tuple[int, int, int, int, int], ...]]  # (row offset, col offset, rows, cols, rank)


def _int(v: Any, path: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ConfigError(path, f"must be a whole number >= {lo}, got {v!r}")
    return v


def read_old_plan(data: Any, source: str = "--from") -> dict[str, OldTable]:
    """The earlier plan's tables from plan JSON (the whole file or its "plan" object)."""
    if isinstance(data, dict) and "tables" in data and "topology" in data:
        raise ConfigError(source, "is a config, not a plan: give the earlier plan (python -m engine plan --json)")
    if isinstance(data, dict) and isinstance(data.get("plan"), dict):
        data = data["plan"]
    if not isinstance(data, dict) or not data:
        raise ConfigError(source, "must be a plan file (python -m engine plan --json) with a \"plan\" object")
    out = {}
    for name, raw in data.items():
        path = f"{source}.plan.{name}"
        if not isinstance(raw, dict):
            raise ConfigError(path, "must be an object with sharding_type, compute_kernel, ranks and shards")
        try:
            st, kernel = ShardingType(raw.get("sharding_type")), ComputeKernel(raw.get("compute_kernel"))
        except ValueError:
            raise ConfigError(path, "has an unknown sharding_type or compute_kernel") from None
        ranks = raw.get("ranks")
        if not isinstance(ranks, list) or not ranks:
            raise ConfigError(f"{path}.ranks", "must be a non-empty list of ranks")
        ranks_t = tuple(_int(r, f"{path}.ranks") for r in ranks)
        shards = raw.get("shards")
        if shards is None:
            if st is not ShardingType.DATA_PARALLEL:
                raise ConfigError(f"{path}.shards", "must list the shards (only data_parallel has none)")
            out[name] = OldTable(st, kernel, ranks_t, None)
            continue
        if not isinstance(shards, list) or not shards:
            raise ConfigError(f"{path}.shards", "must be a non-empty list of shards")
        parsed = []
        for j, s in enumerate(shards):
            sp = f"{path}.shards[{j}]"
            if not isinstance(s, dict) or not isinstance(s.get("offsets"), list) or not isinstance(
                    s.get("sizes"), list) or len(s["offsets"]) != 2 or len(s["sizes"]) != 2:
                raise ConfigError(sp, "must be {\"offsets\": [row, col], \"sizes\": [rows, cols], \"rank\": r}")
            parsed.append((_int(s["offsets"][0], sp), _int(s["offsets"][1], sp), _int(s["sizes"][0], sp, 1),
                           _int(s["sizes"][1], sp, 1), _int(s.get("rank"), f"{sp}.rank")))
        out[name] = OldTable(st, kernel, ranks_t, tuple(parsed))
    return out


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
    load = pl.load.copy()
    np.add.at(load, ranks, opt.cost_ms)
    return float(load.max())


def _place_rest(pl: Placement, options: list[list[Option]], tables: list[int], work: Work) -> list[int]:
    """Place each table around what is there (heaviest first): of its cheapest options, the one that leaves the
    lowest peak. Returns the tables that found no room."""
    unplaced = []
    order = sorted(tables, key=lambda t: (-min(o.total_cost_ms for o in options[t]), t))
    for t in order:
        best = None
        for opt in sorted(options[t], key=lambda o: o.total_cost_ms)[:MAX_CANDIDATES]:
            work.spend()
            ranks = pl.find_ranks(opt)
            if ranks is None:
                continue
            key = (_peak_with(pl, opt, ranks), opt.total_cost_ms)
            if best is None or key < best[0]:
                best = (key, opt, ranks)
        if best is None:
            unplaced.append(t)
        else:
            pl.add(best[1], best[2])
    return unplaced


def _improve_within(cfg: Config, pl: Placement, old: dict[str, OldTable], budget: float, work: Work) -> tuple[
        float, int]:
    """Moves and swaps of table-wise and column-wise shards off the slowest rank, each kept only while the bytes
    moved so far stay within `budget`. Returns the bytes the moves add and how many were made."""
    fs = FreeShards(pl)
    spent, steps = 0.0, 0

    def delta(i: int, src: int, dst: int) -> float:
        opt = pl.choice[int(fs.t[i])]
        j = int(fs.j[i])
        return _piece_bytes_moved(cfg, old, opt, j, dst) - _piece_bytes_moved(cfg, old, opt, j, src)

    while len(fs.t) and not work.done():
        b = int(np.argmax(pl.load))
        peak = float(pl.load[b])
        best, best_val = None, peak - 1e-12
        on_b = np.flatnonzero(fs.r == b)
        work.spend(max(len(on_b), 1))
        for a in on_b:
            val, dst = _best_move(pl, fs, a, b, peak)
            if dst >= 0 and val < best_val:
                d = delta(a, b, dst)
                if spent + d <= budget:
                    best, best_val = ("move", a, dst, d), val
            val, x = _best_swap(pl, fs, a, b, peak)
            if x >= 0 and val < best_val:
                rx = int(fs.r[x])
                d = delta(a, b, rx) + delta(x, rx, b)
                if spent + d <= budget:
                    best, best_val = ("swap", a, x, d), val
        if best is None:
            break
        kind, a, other, d = best
        if kind == "move":
            fs.move(pl, a, other)
        else:
            ra = int(fs.r[other])
            fs.move(pl, a, ra)
            fs.move(pl, other, b)
        spent += d
        steps += 1
    return spent, steps


def _keep(cfg: Config, old: dict[str, OldTable], options: list[list[Option]], pl: Placement) -> tuple[
        list[int], list[int]]:
    """Put every table that can stay on its earlier ranks there, in config order. (Making room for a grown table
    by sending smaller ones away was tried: on the bench cases it moved more bytes in the end, 42-49% of a plan
    from scratch against 14-35%.) Returns (kept tables, tables to place)."""
    w = cfg.topology.world_size
    kept, rest = [], []
    for i, t in enumerate(cfg.tables):
        o = old.get(t.name)
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
    kept: Optional[Plan]  # the earlier placement kept as it is, new and changed tables placed around it
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


def replan(cfg: Config, old: dict[str, OldTable], max_move_bytes: Optional[int] = None,
           settings: PlannerSettings = PlannerSettings()) -> Replan:
    """The re-plan of `cfg` from the earlier plan `old` (see the module's docstring)."""
    start = time.perf_counter()
    scratch = plan(cfg, settings)
    scratch_tables = scratch.tables
    options = all_table_options(cfg)
    w = cfg.topology.world_size
    work = Work(budget=float(settings.effort), world_size=w, deadline=start + settings.time_budget_s)
    pl = Placement(cfg.topology, rules=rules_of(cfg))
    kept_idx, rest = _keep(cfg, old, options, pl)
    unplaced = _place_rest(pl, options, rest, work)
    budget = float("inf") if max_move_bytes is None else float(max_move_bytes)
    new_names = tuple(t.name for t in cfg.tables if t.name not in old)
    kept: Optional[Plan] = None
    kept_moves: Optional[Moves] = None
    candidate: Optional[dict[str, TablePlan]] = None
    if not unplaced and placement_problem(cfg, {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t])
                                                for t in range(len(cfg.tables))}) is not None:
        unplaced = [t for t in range(len(cfg.tables)) if t in (pl.rules.fixed if pl.rules else ())]
    if unplaced:  # the kept tables leave no room for these: nothing short of moving them helps
        names = ", ".join(cfg.tables[t].name for t in unplaced[:3])
        note = f"the earlier placement leaves no room for {names}: re-planned from scratch"
    else:
        kept = evaluate(cfg, {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t]) for t in range(len(
            cfg.tables))}, planner="engine")
        kept_moves = moved_bytes(cfg, old, kept.tables)
        if kept_moves.total_bytes > budget:
            raise PlanningError(
                f"Keeping every table that can stay where it was still moves {kept_moves.total_bytes:,} bytes "
                f"(grown or re-split tables), more than --max-move-bytes {max_move_bytes:,}.",
                fixes=(f"allow at least {kept_moves.total_bytes:,} bytes (--max-move-bytes)",))
        _, steps = _improve_within(cfg, pl, old, budget - kept_moves.total_bytes, work)
        candidate = {cfg.tables[t].name: to_table_plan(pl.choice[t], pl.ranks[t]) for t in range(len(cfg.tables))}
        note = (f"re-planned from the earlier plan: {len(kept_idx)} of {len(cfg.tables)} tables kept their ranks, "
                f"{len(rest)} placed around them, then {steps} moves of shards within the byte limit")
    result = evaluate(cfg, candidate if candidate is not None else scratch_tables, planner="engine",
                      planning_seconds=time.perf_counter() - start, lower_bound_ms=scratch.lower_bound_ms,
                      notes=(note,))
    moves = moved_bytes(cfg, old, result.tables)
    if candidate is None and max_move_bytes is not None and moves.total_bytes > max_move_bytes:
        raise PlanningError(f"{note}, which moves {moves.total_bytes:,} bytes, more than --max-move-bytes "
                            f"{max_move_bytes:,}.", fixes=("allow more bytes to move", "add memory or ranks"))
    kept_on = tuple(t.name for t in cfg.tables if t.name in old and t.name not in moves.by_table)
    return Replan(plan=result, kept=kept, scratch=scratch, moves=moves, kept_moves=kept_moves,
                  scratch_moves=moved_bytes(cfg, old, scratch_tables), kept_tables=kept_on,
                  moved_tables=tuple(moves.by_table), new_tables=new_names,
                  checkpoint=checkpoint_breaks(cfg, old, result.tables), max_move_bytes=max_move_bytes)

