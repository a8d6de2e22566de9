"""What a re-plan moves: the earlier plan as read from its file (`OldTable`), the bytes going from it to a new
plan moves between ranks (weights and optimizer state), and the tables whose checkpoint does not load as it is.

Bytes moved: for every piece of a table the new plan puts on a rank, the part of it (rows x columns, times the
bytes of a weight and its optimizer state) that the earlier plan held on another rank. Rows a grown table did not
have are new, and move nothing; a data-parallel table was on every rank it listed.

Checkpoints: a table whose sharding type, kernel or column split changes cannot load its earlier checkpoint
shard for shard (data-parallel and sharded tables keep optimizer state differently); such tables are flagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from engine.readers import read_json
from engine.enumerate import Option
from engine.planfile import parse_earlier_plan
from engine.types import ComputeKernel, Config, Plan, ShardingType, TablePlan


@dataclass(frozen=True)
class OldTable:
    """One table of the earlier plan, as its plan file gives it (not checked against the new config)."""

    sharding_type: ShardingType
    compute_kernel: ComputeKernel
    ranks: tuple[int, ...]
    shards: Optional[tuple[tuple[int, int, int, int, int], ...]]  # (row offset, col offset, rows, cols, rank)


def read_old_plan(data: Any, source: str = "--from") -> dict[str, OldTable]:
    """The earlier plan's tables from plan JSON (the whole file, its "plan" object, or a saved plan's bundle),
    read by the plan file reader (engine.planfile), the one door every plan comes in by; or from an engine Plan
    made in this process (the plan on screen: checked when it was made, so not written out and read back)."""
    if isinstance(data, Plan):
        return {name: as_old(tp) for name, tp in data.tables.items()}
    return {name: as_old(tp) for name, tp in parse_earlier_plan(data, source).items()}


def load_old_plan(path: str) -> dict[str, OldTable]:
    return read_old_plan(read_json(path, "plan"), "--from")


# ---- bytes moved ----------------------------------------------------------------------------------


def _pieces(tp: TablePlan, rows: int, cols: int) -> np.ndarray:
    """(rank, row0, row1, col0, col1) per piece a table plan holds; data-parallel: the whole table per rank."""
    if tp.shards is None:
        return np.array([(r, 0, rows, 0, cols) for r in tp.ranks], dtype=np.int64).reshape(-1, 5)
    return np.array([(s.rank, s.offsets[0], s.offsets[0] + s.sizes[0], s.offsets[1], s.offsets[1] + s.sizes[1])
                     for s in tp.shards], dtype=np.int64).reshape(-1, 5)


def old_pieces(o: OldTable, rows: int, cols: int) -> np.ndarray:
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


def bytes_per_element(cfg: Config, name: str) -> float:
    t = cfg.table(name)
    return t.data_type.bytes * (1.0 + cfg.topology.optimizer.state_multiplier(t.embedding_dim))


@dataclass(frozen=True)
class Moves:
    total_bytes: int
    by_pair: dict[tuple[int, int], int]  # (source rank, destination rank) -> bytes
    by_table: dict[str, int]


def _in_place(tp: TablePlan, o: OldTable) -> bool:
    """Whether every piece of `tp` is a piece the earlier plan held on the same rank (nothing of it moves)."""
    if tp.shards is None or o.shards is None:
        return tp.shards is None and o.shards is None and set(tp.ranks) <= set(o.ranks)
    return o.shards == tuple((s.offsets[0], s.offsets[1], s.sizes[0], s.sizes[1], s.rank) for s in tp.shards)


def moved_bytes(cfg: Config, old: dict[str, OldTable], new: dict[str, TablePlan]) -> Moves:
    """What going from the earlier plan to `new` moves between ranks (weights and optimizer state)."""
    pairs: dict[tuple[int, int], float] = {}
    tables: dict[str, int] = {}
    for name, tp in new.items():
        o = old.get(name)
        if o is None or _in_place(tp, o):
            continue
        t = cfg.table(name)
        per = bytes_per_element(cfg, name)
        moved = _elements_moved(_pieces(tp, t.num_embeddings, t.embedding_dim),
                                old_pieces(o, t.num_embeddings, t.embedding_dim), o.shards is None)
        total = 0.0
        for key, elements in moved.items():
            pairs[key] = pairs.get(key, 0.0) + elements * per
            total += elements * per
        if total:
            tables[name] = int(round(total))
    by_pair = {k: int(round(v)) for k, v in sorted(pairs.items())}
    return Moves(sum(by_pair.values()), by_pair, tables)


def old_bytes(cfg: Config, old: dict[str, OldTable], name: str) -> float:
    """Bytes (weights and optimizer state) of the pieces the earlier plan held of table `name`, within its
    present size; data-parallel: one copy."""
    o, t = old.get(name), cfg.table(name)
    if o is None:
        return 0.0
    p = old_pieces(o, t.num_embeddings, t.embedding_dim)[: 1 if o.shards is None else None]
    rows = np.clip(np.minimum(p[:, 2], t.num_embeddings) - p[:, 1], 0, None)
    cols = np.clip(np.minimum(p[:, 4], t.embedding_dim) - p[:, 3], 0, None)
    return float((rows * cols).sum()) * bytes_per_element(cfg, name)


def piece_bytes_moved(cfg: Config, old: dict[str, OldTable], opt: Option, j: int, rank: int) -> float:
    """Bytes of shard j of `opt` that rank `rank` would have to receive."""
    name = cfg.tables[opt.table].name
    o = old.get(name)
    if o is None:
        return 0.0
    t = cfg.tables[opt.table]
    off, size = opt.offsets[j], opt.sizes[j]
    piece = np.array([(rank, off[0], off[0] + size[0], off[1], off[1] + size[1])], dtype=np.int64)
    moved = _elements_moved(piece, old_pieces(o, t.num_embeddings, t.embedding_dim), o.shards is None)
    return sum(moved.values()) * bytes_per_element(cfg, name)


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


def as_old(tp: TablePlan) -> OldTable:
    shards = None if tp.shards is None else tuple(
        (s.offsets[0], s.offsets[1], s.sizes[0], s.sizes[1], s.rank) for s in tp.shards)
    return OldTable(tp.sharding_type, tp.compute_kernel, tuple(tp.ranks), shards)
