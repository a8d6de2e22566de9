"""Keep a baseline plan unless ours is estimably faster (issue 24): `python -m engine plan CONFIG --baseline PLAN.json
--min-gain F`. The estimate's error on the ratio of two plans' slowest ranks is several percent even where its terms
were fitted on the machine that runs them (docs/benchmarks.md: 4.4-6.5% median, held out by config), so a
plan the estimate calls 3% faster than the plan a team already runs (or TorchRec's) is as likely to be slower. With a
baseline, the planner's plan replaces it only where its estimated slowest rank beats the baseline's by more than
min_gain; otherwise the baseline comes back, evaluated under the same estimate, and its notes say why, with both
figures. A baseline that does not fit the ranks' memory is never kept.
"""

from __future__ import annotations

from dataclasses import replace

from engine.evaluate import evaluate
from engine.types import Config, Plan, TablePlan

MAX_MIN_GAIN = 0.9  # a required gain of 90% or more would keep every baseline: refused as a mistake


def _over_capacity(plan: Plan) -> list[int]:
    """Ranks whose tables store more than the rank's HBM or DDR holds."""
    return [r.rank for r in plan.ranks if r.hbm_bytes > r.hbm_cap_bytes or r.ddr_bytes > r.ddr_cap_bytes]


def keep_baseline(cfg: Config, ours: Plan, baseline: dict[str, TablePlan], min_gain: float,
                  label: str = "the baseline plan") -> Plan:
    """`ours` where its estimated slowest rank is more than `min_gain` (a fraction) under the baseline's, else the
    baseline evaluated on `cfg` (planner "engine"); either way a note gives both slowest ranks and the gain."""
    base = evaluate(cfg, baseline, planner="engine")
    full = _over_capacity(base)
    if full:
        return replace(ours, notes=(*ours.notes, f"{label} was not kept: it stores more than ranks "
                                    f"{', '.join(map(str, full[:8]))}{' ...' if len(full) > 8 else ''} hold"))
    mine, theirs = ours.max_rank_cost_ms, base.max_rank_cost_ms
    gain = 1.0 - mine / theirs if theirs > 0 else 0.0
    figures = f"slowest rank estimated at {mine:.4g} ms against {theirs:.4g} ms, {gain:.1%} faster"
    if gain > min_gain:
        return replace(ours, notes=(*ours.notes, f"ours replaces {label}: {figures}, over the {min_gain:.1%} "
                                    "--min-gain"))
    why = (f"{label} kept: ours is not estimably faster ({figures}, not over the {min_gain:.1%} --min-gain); the "
           "estimate cannot tell plans that close apart, so the plan already in use stays")
    return replace(base, planning_seconds=ours.planning_seconds, lower_bound_ms=ours.lower_bound_ms,
                   notes=(why, *base.notes))


__all__ = ["MAX_MIN_GAIN", "keep_baseline"]
