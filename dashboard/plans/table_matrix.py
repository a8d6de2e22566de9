"""The table-by-rank matrix of a plan (estimated cost and memory of every table on every rank, the heatmap's data),
its tables' scores priced once per (table, constraints, topology, placement) and shared between sessions, and the
heaviest tables of a metric. Pure: engine.Plan and engine.Config in, arrays out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import numpy as np

import engine

MATRIX_METRICS = {"cost_ms": "estimated cost (ms)", "hbm_bytes": "HBM (bytes)", "ddr_bytes": "DDR (bytes)"}


@dataclass(frozen=True)
class TableRankMatrix:
    """Shared between reruns and sessions (dashboard.ui.services caches it): its arrays are read-only."""

    tables: list[str]
    ranks: list[int]
    values: dict[str, np.ndarray]  # metric -> (tables x ranks)


# Tables scored alone, kept across plans: after an edit only the tables placed differently are scored again.
TABLE_SCORE_ENTRIES = 20_000

_Key = tuple  # (TableConfig, Constraints, Topology, TablePlan): frozen, hashed by value
CacheInfo = namedtuple("CacheInfo", "hits misses maxsize currsize")


def _scored(ranks: list, table_plan: engine.TablePlan) -> tuple[np.ndarray, np.ndarray]:
    """A table's (ranks it touches, (len(MATRIX_METRICS), ranks) values) read from scored ranks (engine.RankStats)
    where nothing else was placed on its ranks. Shared between plans: read-only."""
    mine = set(table_plan.ranks)
    touched = [r for r in ranks if r.rank in mine and (r.cost_ms or r.hbm_bytes or r.ddr_bytes)]
    out_ranks = np.array([r.rank for r in touched], dtype=np.int64)
    values = np.array([[getattr(r, m) for r in touched] for m in MATRIX_METRICS], dtype=float).reshape(
        len(MATRIX_METRICS), len(touched))
    out_ranks.flags.writeable = values.flags.writeable = False
    return out_ranks, values


class _TableScores:
    """Each table scored alone (as if the config held that table only) as placed by its TablePlan, kept across
    plans and sessions (an LRU of TABLE_SCORE_ENTRIES; cache_info() as functools.lru_cache's).

    Tables are scored together, in one engine.evaluate of several tables, when nothing makes a table's figures
    depend on the others (the topology carries no device profile: without one the engine prices each piece on its
    own rank and adds them up, engine.profile.step_perf) and no two of them share a rank: each rank's figures
    are then its one table's, the same numbers as scoring it alone, at a tenth of the cost (a thousand tables on
    32 ranks: about 30 evaluations instead of 1,000). With a profile (per-step and per-collective costs that
    depend on what else is placed) each table is scored on its own."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[_Key, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def cache_info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, self.maxsize, len(self._items))

    def cache_clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0

    def __call__(self, table: engine.TableConfig, constraints: engine.Constraints, topology: engine.Topology,
                 table_plan: engine.TablePlan) -> tuple[np.ndarray, np.ndarray]:
        return self.many([(table, constraints, topology, table_plan)])[0]

    def many(self, keys: list[_Key]) -> list[tuple[np.ndarray, np.ndarray]]:
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        with self._lock:
            for i, key in enumerate(keys):
                hit = self._items.get(key)
                if hit is not None:
                    self._items.move_to_end(key)
                    found[i] = hit
            self.hits += len(found)
        missing = list(dict.fromkeys(k for i, k in enumerate(keys) if i not in found))
        scored = {}
        for batch in _batches(missing):
            scored.update(_score_together(batch))
        with self._lock:
            self.misses += len(missing)
            for key in missing:
                self._items[key] = scored[key]
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)
        return [found[i] if i in found else scored[k] for i, k in enumerate(keys)]


def _batches(keys: list[_Key]) -> list[list[_Key]]:
    """Keys in groups whose tables may be scored together: one topology without a profile, distinct names, no
    rank shared (first fit over the groups with a free rank); each key alone otherwise."""
    groups: list[list[_Key]] = []
    open_groups: dict[engine.Topology, list[tuple[set, set, list[_Key]]]] = {}  # (ranks taken, names, keys)
    for key in keys:
        table, _, topology, table_plan = key
        if getattr(topology, "profile", None) is not None:
            groups.append([key])
            continue
        ranks = set(table_plan.ranks)
        candidates = open_groups.setdefault(topology, [])
        for i, (taken, names, group) in enumerate(candidates):
            if not (ranks & taken) and table.name not in names:
                taken |= ranks
                names.add(table.name)
                group.append(key)
                if len(taken) >= topology.world_size:  # full: no table fits any more
                    del candidates[i]
                break
        else:
            group = [key]
            groups.append(group)
            if len(ranks) < topology.world_size:
                candidates.append((ranks, {table.name}, group))
    return groups


def _score_together(keys: list[_Key]) -> dict[_Key, tuple[np.ndarray, np.ndarray]]:
    topology = keys[0][2]
    cfg = engine.Config(tables=tuple(k[0] for k in keys), constraints={k[0].name: k[1] for k in keys},
                        topology=topology)
    scored = engine.evaluate(cfg, {k[0].name: k[3] for k in keys})
    return {k: _scored(scored.ranks, k[3]) for k in keys}


_table_alone = _TableScores(TABLE_SCORE_ENTRIES)


def table_rank_matrix(plan: engine.Plan, config: engine.Config) -> TableRankMatrix:
    """Each table's estimated cost and memory on each rank, scored alone by engine.evaluate (on a config of that
    table only: its cost and memory do not depend on the other tables; _TableScores scores several at once where
    that gives the same numbers). Its arrays are read-only."""
    w = config.topology.world_size
    names = list(plan.tables)
    values = np.zeros((len(MATRIX_METRICS), len(names), w))
    scores = _table_alone.many([(config.table(n), config.constraint(n), config.topology, plan.tables[n])
                                for n in names])
    for i, (ranks, v) in enumerate(scores):
        values[:, i, ranks] = v
    values.flags.writeable = False
    return TableRankMatrix(names, list(range(w)), dict(zip(MATRIX_METRICS, values)))


def heaviest_tables(m: TableRankMatrix, metric: str, limit: int) -> list[int]:
    """Row positions of the `limit` tables with the largest total `metric`, heaviest first."""
    totals = m.values[metric].sum(axis=1)
    return [int(i) for i in np.argsort(-totals, kind="stable")[:limit]]


def clear_table_scores() -> None:
    """Forget the tables scored alone (the server's last session went)."""
    _table_alone.cache_clear()
