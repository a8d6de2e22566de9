"""Per-rank statistics of a plan, wherever it was made: our planner, TorchRec's, or a user's file.

Every plan is scored by the same estimator (engine.estimate), so plans compare like for like.
"""

from __future__ import annotations

import numpy as np

from engine.capacity import usable_ddr_of, usable_hbm_of
from engine.errors import ConfigError
from engine.estimate import estimate_pieces, perf_from_row, pieces_for, pressure_alone_ms, table_load
from engine.workset import rank_workset_ms, workset_price
from engine.memory import StepMemory, over_memory
from engine.profile import active, fixed_perf, plan_counts, with_fixed
from engine.fleet import kind_topologies, kinds
from engine.replicas import group_config, with_group_note
from engine.tiers import run_notes
from engine.types import ComputeKernel, Config, Plan, PoolingType, RankStats, ShardingType, TablePlan, Topology
from engine.widths import plan_notes


def shard_arrays(cfg: Config, name: str, tp: TablePlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ranks, rows, cols) of the pieces a table plan puts on ranks; data_parallel: a full copy each."""
    t = cfg.table(name)
    if tp.sharding_type is ShardingType.DATA_PARALLEL or tp.shards is None:
        ranks = np.array(tp.ranks, dtype=np.int64)
        return ranks, np.full(len(ranks), t.num_embeddings), np.full(len(ranks), t.embedding_dim)
    ranks = np.array([s.rank for s in tp.shards], dtype=np.int64)
    rows = np.array([s.sizes[0] for s in tp.shards])
    cols = np.array([s.sizes[1] for s in tp.shards])
    return ranks, rows, cols


def evaluate(cfg: Config, tables: dict[str, TablePlan], planner: str = "engine",
             planning_seconds: float | None = None, lower_bound_ms: float | None = None,
             notes: tuple[str, ...] = ()) -> Plan:
    world, cfg = cfg.topology, group_config(cfg)  # 2D: the plan is one sharding group's (engine.replicas)
    topo = cfg.topology
    w = topo.world_size
    perf = np.zeros((w, 6))
    hbm = np.zeros(w, dtype=np.int64)
    ddr = np.zeros(w, dtype=np.int64)
    inp = np.zeros(w, dtype=np.int64)
    out = np.zeros(w, dtype=np.int64)
    count = np.zeros(w, dtype=np.int64)
    workset, workset_rows = np.zeros(w), np.zeros(w)
    own = np.zeros(w)  # tables measured alone, their pressure probed: each piece's own pressure, in its cost
    held = np.zeros(w)  # the non-empty pieces each rank holds (a profile's piece_ms is priced per piece)
    price = workset_price(topo)
    memory = StepMemory(cfg)
    groups: dict[tuple, list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = {}
    index = {t.name: i for i, t in enumerate(cfg.tables)}
    for name, tp in tables.items():
        ranks, rows, cols = shard_arrays(cfg, name, tp)
        if len(ranks) and (ranks.min() < 0 or ranks.max() >= w):
            raise ConfigError(f"plan.{name}.ranks", f"rank {int(ranks.max())} is outside world_size {w}")
        groups.setdefault((tp.sharding_type, tp.compute_kernel), []).append((index[name], ranks, rows, cols))
        memory.add(name, tp, ranks, rows, cols)
    for (st, kernel), items in groups.items():  # every table of a sharding type and kernel priced at once
        owners = [i for i, *_ in items]
        sizes = np.array([len(r) for _, r, _, _ in items], dtype=np.int64)
        ranks = np.concatenate([r for _, r, _, _ in items]).astype(np.int64)
        rows, cols = np.concatenate([r for *_, r, _ in items]), np.concatenate([c for *_, c in items])
        pieces = pieces_for([cfg.tables[i] for i in owners],
                            [table_load(cfg.tables[i], cfg.constraint(cfg.tables[i].name), topo,
                                        tables[cfg.tables[i].name].cache_load_factor) for i in owners], topo,
                            np.repeat(np.arange(len(owners)), sizes), rows, cols, np.repeat(sizes, sizes))
        est = estimate_pieces(pieces, topo, st, [kernel])[0]
        np.add.at(perf, ranks, est.perf_ms if kinds(topo) is None else _perf_by_kind(pieces, topo, st, kernel, ranks))
        np.add.at(hbm, ranks, est.hbm_bytes)
        np.add.at(ddr, ranks, est.ddr_bytes)
        np.add.at(inp, ranks, est.input_bytes)
        np.add.at(out, ranks, est.output_bytes)
        np.add.at(count, ranks, 1)
        np.add.at(held, ranks, (rows * cols > 0).astype(np.float64))
        np.add.at(workset, ranks, est.workset_bytes)
        np.add.at(workset_rows, ranks, est.workset_rows)
        if price.ramp:
            np.add.at(own, ranks, np.minimum(pressure_alone_ms(pieces, topo, st, price), 0.0))
    workset_ms = rank_workset_ms(workset, workset_rows, topo)
    add_workset(perf, workset_ms)
    workset_ms = workset_ms + own  # with the ramp: what the rank's tables cost each other beyond their times alone
    perf, fixed_step_ms, pieces_ms = _with_profile(cfg, tables, perf, held)
    parts = memory.parts()
    stats = tuple(
        RankStats(rank=r, hbm_bytes=int(hbm[r]), ddr_bytes=int(ddr[r]), hbm_cap_bytes=usable_hbm_of(topo, r),
                  ddr_cap_bytes=usable_ddr_of(topo, r), perf=perf_from_row(perf[r]), input_bytes=int(inp[r]),
                  output_bytes=int(out[r]), num_shards=int(count[r]), memory=parts[r],
                  workset_bytes=float(workset[r]), workset_rows=float(workset_rows[r]),
                  workset_ms=float(workset_ms[r]), fixed_step_ms=float(fixed_step_ms[r]), pieces_ms=float(pieces_ms[r]))
        for r in range(w)
    )
    notes = tuple(notes)
    notes += tuple(n for n in plan_notes(cfg, tables) + grid_mean_notes(cfg, tables) + run_notes(cfg, tables)
                   if n not in notes)  # a re-plan
    # passes on earlier notes
    return with_group_note(world, Plan(tables=dict(tables), ranks=stats, planner=planner,
                                       planning_seconds=planning_seconds, lower_bound_ms=lower_bound_ms,
                                       notes=notes + tuple(over_memory(stats, topo))))


def _with_profile(cfg: Config, tables: dict[str, TablePlan], perf: np.ndarray,
                  held: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(W, 6) per-rank times with the device profile's per-step, per-collective and per-launch costs
    (engine.profile.step_perf), and two of its compute parts per rank, named for the cost stack: the fixed step
    (step_ms and each lookup kernel's launch) and the table pieces (piece_ms each, already in perf); each stretched as
    the rank is where ranks share cores. Without a profile that applies: perf and zeros."""
    topo = cfg.topology
    prof = active(topo)
    w = len(perf)
    if prof is None:
        return perf, np.zeros(w), np.zeros(w)
    counts = plan_counts(cfg, tables, prof.backend)
    fixed = fixed_perf(prof, counts)
    out = with_fixed(prof, topo, counts, perf)
    before = (perf + fixed).sum(axis=1)
    stretch = np.where(before > 0, out.sum(axis=1) / np.maximum(before, 1e-300), 1.0)
    return out, (fixed[:, 0] + fixed[:, 2]) * stretch, prof.piece_ms * held * stretch


def _perf_by_kind(pieces, topo: Topology, st: ShardingType, kernel: ComputeKernel, ranks: np.ndarray) -> np.ndarray:
    """(pieces, 6) times where each piece is priced with the device of its rank (topology.rank_devices)."""
    kind = kinds(topo)[1][ranks]
    out = np.zeros((len(ranks), 6))
    for d, td in enumerate(kind_topologies(topo)):
        at = kind == d
        if at.any():
            out[at] = estimate_pieces(pieces, td, st, [kernel])[0].perf_ms[at]
    return out


def add_workset(perf: np.ndarray, ms: np.ndarray) -> None:
    """A rank's working-set cost is compute: a third in forward, two thirds in backward (as the row terms split)."""
    perf[:, 0] += ms / 3.0
    perf[:, 2] += ms * 2.0 / 3.0


def grid_mean_notes(cfg: Config, tables: dict[str, TablePlan]) -> list[str]:
    """TorchRec 1.8 divides mean-pooled row splits after the output dist for row_wise and table_row_wise only: a
    mean-pooled grid_shard table's outputs come out wrong (tests/engine/test_grid_shard.py runs one)."""
    names = [t.name for t in cfg.tables if t.pooling is PoolingType.MEAN and t.name in tables
             and tables[t.name].sharding_type is ShardingType.GRID_SHARD]
    if not names:
        return []
    return [f"will not compute mean pooling: TorchRec 1.8 divides mean-pooled row splits for row_wise and "
            f"table_row_wise only, so a mean-pooled grid_shard table's outputs come out wrong, and "
            f"{', '.join(names[:5])} {'is' if len(names) == 1 else 'are'} one; use sum pooling or table_row_wise"]
