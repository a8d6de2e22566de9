"""Distinct rows a step touches, and the bytes they take: what decides whether a rank's lookups hit the cache.

A step draws n ids over a table's N rows, independently, uniform or Zipf-skewed (the table's constraint
zipf_exponent s: the k-th hottest row drawn with weight (k + 1)^-s, as the dry-run draws them). The expected
number of distinct rows is sum_k 1 - (1 - p_k)^n, about sum_k 1 - exp(-n p_k): N (1 - exp(-n / N)) for uniform
ids; for Zipf ids it is integrated over the hotness ranks on a log-spaced grid (exact to a fraction of a percent
against the sum, tests/engine/test_workset.py). Hot ids are scattered over the rows (hashing), so a row split
holding a share f of the rows touches f of the table's distinct rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine import constants as C
from engine.terms import terms_of
from engine.types import Device, Topology

GRID = 257  # log-spaced points over the hotness ranks for the Zipf integral
EXACT_UP_TO = 4096  # rows summed term by term below this


def distinct_rows(ids: float, rows: float, zipf: float = 0.0) -> float:
    """Expected distinct rows among `ids` draws over `rows` rows (Zipf exponent `zipf`, 0: uniform)."""
    if ids <= 0 or rows <= 0:
        return 0.0
    if zipf <= 0:
        return float(rows * -np.expm1(-ids / rows))
    return _zipf_distinct(float(ids), int(rows), round(float(zipf), 6))


@lru_cache(maxsize=65_536)
def _zipf_distinct(ids: float, rows: int, s: float) -> float:
    if rows <= EXACT_UP_TO:
        k = np.arange(rows, dtype=np.float64)
        w = _mass(k, k + 1.0, s)
        p = w / w.sum()
        return float(-np.expm1(-ids * p).sum())
    # the continuous density (x + 1)^-s on [0, rows): integrate 1 - exp(-ids * density(x) / total) dx
    x = np.concatenate(([0.0], np.geomspace(1.0, rows, GRID - 1)))
    total = _mass(0.0, float(rows), s)
    f = -np.expm1(-ids * np.power(x + 1.0, -s) / total)
    return float(np.minimum(np.trapezoid(f, x), rows))


def _mass(a, b, s: float):
    """Integral of (x + 1)^-s from a to b."""
    if abs(s - 1.0) < 1e-9:
        return np.log1p(b) - np.log1p(a)
    return (np.power(np.add(b, 1.0), 1.0 - s) - np.power(np.add(a, 1.0), 1.0 - s)) / (1.0 - s)


def distinct_array(ids: np.ndarray, rows: np.ndarray, zipf: np.ndarray) -> np.ndarray:
    """distinct_rows over arrays (uniform rows in one vectorised pass)."""
    ids, rows, zipf = (np.asarray(a, dtype=np.float64) for a in (ids, rows, zipf))
    ids, rows, zipf = np.broadcast_arrays(ids, rows, zipf)
    safe = np.maximum(rows, 1.0)
    out = np.where((ids > 0) & (rows > 0), safe * -np.expm1(-ids / safe), 0.0)
    for i in np.flatnonzero(zipf > 0):
        out.flat[i] = distinct_rows(float(ids.flat[i]), float(rows.flat[i]), float(zipf.flat[i]))
    return out


MAX_ZIPF = 5.0  # the constraint's range (engine.fields)


def zipf_matching(ids: float, rows: float, distinct: float, steps: int = 50) -> float:
    """The Zipf exponent under which `ids` draws over `rows` rows touch `distinct` distinct rows on average: how a
    measured sample's distinct rows per batch become the skew the estimate prices (0 where the sample touches as
    many rows as uniform ids would, or more; MAX_ZIPF where it touches fewer than that skew gives)."""
    if ids <= 0 or rows <= 0 or distinct >= distinct_rows(ids, rows):
        return 0.0
    if distinct <= distinct_rows(ids, rows, MAX_ZIPF):
        return MAX_ZIPF
    lo, hi = 0.0, MAX_ZIPF  # distinct rows fall as the exponent grows
    for _ in range(steps):
        mid = (lo + hi) / 2
        if distinct_rows(ids, rows, mid) > distinct:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def rows_beyond(workset_bytes: np.ndarray, workset_rows: np.ndarray) -> np.ndarray:
    """The rows of a rank's working set beyond the knee: its rows x the share of its bytes past CPU_WORKSET_KNEE."""
    b = np.asarray(workset_bytes, dtype=np.float64)
    past = np.maximum(b - C.CPU_WORKSET_KNEE_BYTES, 0.0)
    return np.where(b > 0, np.asarray(workset_rows) * past / np.maximum(b, 1.0), 0.0)


def pressure(workset_bytes: np.ndarray | float) -> np.ndarray:
    """How far a working set is up the ramp from CPU_PRESSURE_FROM_BYTES to CPU_PRESSURE_TO_BYTES: 0 to 1."""
    b = np.asarray(workset_bytes, dtype=np.float64)
    return np.clip((b - C.CPU_PRESSURE_FROM_BYTES) / (C.CPU_PRESSURE_TO_BYTES - C.CPU_PRESSURE_FROM_BYTES), 0.0, 1.0)


@dataclass(frozen=True)
class WorksetPrice:
    """How a rank's touched working set (its bytes, and the distinct rows they are) is priced, in ms: rows past the
    knee at per_row each (the estimate's term), or, where tables were measured alone (ramp), every row at per_row
    times the rank's pressure (the tables' own working sets are in their measured times; engine.estimate takes
    each piece's pressure alone off its cost). per_row 0: not priced."""

    per_row: float  # ms
    ramp: bool = False

    def ms(self, ws: np.ndarray, wsr: np.ndarray) -> np.ndarray:
        if self.ramp:
            return self.per_row * np.maximum(wsr, 0.0) * pressure(ws)
        past = np.maximum(ws - C.CPU_WORKSET_KNEE_BYTES, 0.0)
        return self.per_row * np.maximum(wsr, 0.0) * past / np.maximum(ws, 1.0)


def workset_price(topo: Topology) -> WorksetPrice:
    """The topology's price of a rank's working set (CPU only; its profile's terms, engine.terms)."""
    if topo.compute_device is not Device.CPU:
        return WorksetPrice(0.0)
    k = terms_of(topo)
    if k.pressure_row_work > 0:
        return WorksetPrice(k.pressure_row_work / topo.ddr_mem_bw, ramp=True)
    return WorksetPrice(k.workset_row_work / topo.ddr_mem_bw)


def prices_pressure(topo: Topology) -> bool:
    """Whether the topology prices the pressure of tables measured alone on each other (RankStats.workset_ms is then
    what a rank's tables cost each other beyond their times alone)."""
    return workset_price(topo).ramp


def rank_workset_ms(workset_bytes: np.ndarray, workset_rows: np.ndarray, topo: Topology) -> np.ndarray:
    """Per rank, the cost of its touched working set (workset_price): every row past the knee is
    CPU_WORKSET_ROW_WORK bytes of work at the DDR bandwidth (or the profile's cpu_workset_row_work, engine.terms);
    with tables measured alone, the pressure ramp instead. Zero on other devices."""
    price = workset_price(topo)
    if price.per_row == 0:
        return np.zeros(np.shape(workset_bytes))
    return price.ms(np.asarray(workset_bytes, dtype=np.float64), np.asarray(workset_rows, dtype=np.float64))
