"""Lower bounds on a plan's slowest rank that depend on the ranks (engine.strategy.relaxed_bound_ms is the
tables' own): the working set's price past the cache knee, and a mixed fleet's ranks counted as ranks of one kind.
"""

from __future__ import annotations

import numpy as np

from engine import constants as C
from engine.enumerate import Option
from engine.placement import Placement
from engine.strategy import OptionArrays


def workset_bound_ms(options: list[list[Option]], arr: OptionArrays, probe: Placement) -> float:
    """Where the working set is priced (CPU): no plan's slowest rank is faster than the average rank. A rank's rows
    past the knee are at least its rows less knee / (the narrowest row's bytes), a convex function of its rows, so
    the ranks together pay at least the term of the average of the tables' fewest rows (Jensen), on top of the
    tables' cheapest costs. 0 elsewhere."""
    if not probe.priced_ws or not options:
        return 0.0
    if probe.ws_price.ramp:  # tables measured alone: the pressure term is >= 0 and the pieces' costs hold the rest
        return float(arr.min_per_table(arr.cost_ms).sum()) / probe.topo.world_size
    w = probe.topo.world_size
    least_rows, narrowest = 0.0, np.inf
    for opts in options:
        if not opts:
            continue
        least_rows += min(float(o.est.workset_rows.sum()) for o in opts)
        for o in opts:
            held = o.est.workset_rows > 0
            if held.any():
                narrowest = min(narrowest, float((o.est.workset_bytes[held] / o.est.workset_rows[held]).min()))
    if not np.isfinite(narrowest):
        return 0.0
    past = max(least_rows / w - C.CPU_WORKSET_KNEE_BYTES / narrowest, 0.0)
    least_cost = float(arr.min_per_table(arr.cost_ms).sum())
    return (least_cost + w * probe.ws_price.per_row * past) / w


def fleet_worth(options: list[list[Option]], probe: Placement) -> tuple[float, float]:
    """(the ranks as so many ranks of the first device kind, a scale <= 1) for the lower bound: a rank of a kind whose
    cheapest factor over the first kind is f does at most 1/f of a first-kind rank's work in the same time, and no
    piece costs less than the smallest factor times its cost. (world_size, 1) where ranks are alike."""
    if probe.kind is None:
        return float(probe.topo.world_size), 1.0
    f = np.array([o.kind_factor for opts in options for o in opts if o.kind_factor is not None])
    least = f.min(axis=0) if len(f) else np.ones(int(probe.kind.max()) + 1)
    return float((1.0 / least[probe.kind]).sum()), min(1.0, float(least.min()))
