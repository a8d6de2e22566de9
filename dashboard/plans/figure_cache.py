"""A plan's figures and frames, built once and shared between reruns and sessions (issue 14: the server's CPU per
session). Plotly figures cost tens of milliseconds to build (layout and template validation) and a page draws
several per plan, on every rerun of the page, in every session that looks at the plan.

Keys are the content the figure is drawn from, hashed cheaply: the plan's per-rank statistics (engine.RankStats,
frozen; 40 microseconds at 32 ranks) for the per-rank charts, the rows shown for the heatmap, the tables' placements
for the per-table frame. A saved plan opened from its share link (parsed again: other objects, the same content)
gets the figures its author's session built. Figures and frames are shared: never mutate them (Streamlit's
st.plotly_chart and st.dataframe only read them).
"""

from __future__ import annotations

from typing import Callable, Hashable, TypeVar

import pandas as pd
import plotly.graph_objects as go

import engine
from dashboard.plans import analysis, charts, table_matrix
from dashboard import lru

ENTRIES = 64  # figures and frames kept (a few per plan)

T = TypeVar("T")


class ContentCache:
    """A small thread-safe LRU cache keyed by hashable content (every session's script thread uses it)."""

    def __init__(self, entries: int = ENTRIES) -> None:
        self._lru = lru.Lru(entries)
        self.hits = self.misses = 0

    @property
    def entries(self) -> int:
        return self._lru.entries

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        missing = object()
        value = self._lru.get(key, missing)
        if value is not missing:
            self.hits += 1
            return value  # type: ignore[return-value]
        value = compute()  # outside the lock: two sessions may build the same figure once each, never wait
        self.misses += 1
        self._lru.put(key, value)
        return value

    def clear(self) -> None:
        self._lru.clear()
        self.hits = self.misses = 0


_CACHE = ContentCache()


def _ranks_key(plan: engine.Plan) -> tuple:
    return plan.ranks, plan.lower_bound_ms


def memory_bars(plan: engine.Plan, config: engine.Config, devices: list[str] | None = None,
                group: str | None = None) -> go.Figure:
    """charts.memory_bars, built once per plan content (its ranks, the SSD its key_value tables hold, their devices
    where named, the 2D group line)."""
    ssd = analysis.ssd_use(plan, config)
    key = ("memory_bars", _ranks_key(plan), ssd, tuple(devices or ()), group)
    return _CACHE.get(key, lambda: charts.memory_bars(plan, devices, group, ssd))


def cost_stacked(plan: engine.Plan, devices: list[str] | None = None, group: str | None = None) -> go.Figure:
    """charts.cost_stacked, built once per plan content (its ranks and lower bound, their devices where named, the
    2D group line)."""
    key = ("cost_stacked", _ranks_key(plan), tuple(devices or ()), group)
    return _CACHE.get(key, lambda: charts.cost_stacked(plan, devices, group))


def heatmap(m: table_matrix.TableRankMatrix, metric: str, rows: list[int]) -> go.Figure:
    """charts.heatmap of these rows, built once per content shown (the rows' names and values)."""
    values = m.values[metric][rows]
    key = ("heatmap", metric, tuple(m.tables[i] for i in rows), tuple(m.ranks), values.shape, values.tobytes())
    return _CACHE.get(key, lambda: charts.heatmap(m, metric, rows))


def table_frame(plan: engine.Plan, config: engine.Config) -> pd.DataFrame:
    """analysis.table_frame, built once per plan content (its tables' placements and the tables' shapes)."""
    key = ("table_frame", tuple(plan.tables.items()), tuple(tp.cache_note for tp in plan.tables.values()),
           config.tables)  # a TablePlan's equality leaves its cache note out
    return _CACHE.get(key, lambda: analysis.table_frame(plan, config))


def clear() -> None:
    _CACHE.clear()
