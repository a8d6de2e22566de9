"""How two plans' numbers differ (pure): headline by headline and rank by rank, absolute and in %, which plan is
better on each, with measured figures beside the estimates where a run measured a plan. Also each plan's
device memory per rank (HBM, or DDR for CPU plans) and the lower bound given to plans that carry none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import dataclasses

import pandas as pd

import engine
from dashboard.plans.analysis import device_memory, headroom, imbalance, peak_bytes
from dashboard.plans.measured import ratio_text
from dashboard.text import ms_text, sig_text

MIB = 1024**2
SAME_WITHIN = 1e-9  # relative: closer than this, neither plan is better


@dataclass(frozen=True)
class Figure:
    """One of the figures two plans are compared on (a row of headline_frame): what it is, its unit and which way
    is better. (A plan's own headline, for the workspace, is dashboard.plans.headline.Headline.)"""

    name: str
    unit: str  # "ms", "x" or "bytes"
    lower_is_better: bool = True


def with_bound(plan: engine.Plan, bound_ms: Optional[float]) -> engine.Plan:
    """The plan (a new one: the given one is shared, never changed) with `bound_ms` as its lower bound when it
    carries none (TorchRec's plans: the bound depends on the config only, so ours holds for any planner's plan
    of it)."""
    if plan.lower_bound_ms or bound_ms is None:
        return plan
    return dataclasses.replace(plan, lower_bound_ms=float(bound_ms))


def memory_kind(plans: dict[str, engine.Plan]) -> str:
    """'HBM' or 'DDR' when every plan trains from that memory (DDR: CPU plans), else 'device memory'."""
    kinds = {device_memory(p) for p in plans.values()}
    return kinds.pop().upper() if len(kinds) == 1 else "device memory"


def memory_frame(plans: dict[str, engine.Plan]) -> pd.DataFrame:
    """One row per (plan, rank): the step's peak of the memory the plan's device trains from (HBM; DDR on CPU)."""
    rows = [{"plan": label, "rank": r.rank, "memory_bytes": peak_bytes(r, kind), "kind": kind}
            for label, plan in plans.items() for kind in [device_memory(plan)] for r in plan.ranks]
    return pd.DataFrame(rows, columns=["plan", "rank", "memory_bytes", "kind"])


def measured_long(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """{plan label: dashboard.plans.measured.run_frame} as (plan, rank, measured_ms) rows with a measured time."""
    parts = [f.assign(plan=label)[["plan", "rank", "measured_ms"]] for label, f in frames.items()]
    long = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["plan", "rank", "measured_ms"])
    return long[long["measured_ms"].notna()].reset_index(drop=True)


# ---- headlines ----------------------------------------------------------------------------------


def headlines(plan: engine.Plan, measured: Optional[pd.DataFrame] = None, memory: str = "device memory",
              device: str = "") -> dict[Figure, Optional[float]]:
    """A plan's headline numbers (`memory` names its device's memory); with its run's frame
    (dashboard.plans.measured.run_frame) on `device`, the measured slowest rank and its ratio to the run's estimate
    for that rank (priced for the device it measured)."""
    imb = imbalance(plan)
    kind = device_memory(plan)
    room = headroom(plan, kind)
    out: dict[Figure, Optional[float]] = {
        Figure("slowest rank", "ms"): imb.max_ms,
        Figure("average rank", "ms"): imb.mean_ms,
        Figure("imbalance (max/mean)", "x"): imb.ratio,
        Figure("vs lower bound", "x"): imb.vs_lower_bound,
        Figure("lower bound", "ms"): imb.lower_bound_ms,
        Figure(f"peak {memory} of a rank", "bytes"): float(max((peak_bytes(r, kind) for r in plan.ranks),
                                                                default=0)),
        Figure("least headroom of a rank", "bytes", lower_is_better=False):
            float(room.free_bytes) if room else None,
    }
    if measured is not None and measured["measured_ms"].notna().any():
        ok = measured[measured["measured_ms"].notna()]
        slow = ok.loc[ok["measured_ms"].idxmax()]
        on = f" on {device}" if device else ""
        out[Figure(f"slowest rank, measured{on}", "ms")] = float(slow["measured_ms"])
        est = slow["estimated_ms"]
        out[Figure(f"measured / estimated{on} (that rank)", "ratio")] = (
            None if est is None or pd.isna(est) or not est else float(slow["measured_ms"]) / float(est))
    return out


def value_text(value: Optional[float], unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "bytes":
        return engine.human_bytes(int(value))
    if unit == "ratio":
        return ratio_text(value)
    if unit == "x":
        return f"{value:.3f}x"
    return ms_text(value) if unit == "ms" else f"{sig_text(value)} {unit}"


def change_text(a: Optional[float], b: Optional[float], unit: str) -> str:
    """B - A with its sign ('+0.12 ms', '-1.5 GiB'), 'same' where the two read the same (value_text), or ''."""
    if a is None or b is None:
        return ""
    if shown_same(a, b, unit):
        return "same"
    d = b - a
    sign = "+" if d > 0 else "-" if d < 0 else "±"
    if unit == "bytes":
        return f"{sign}{engine.human_bytes(int(abs(d)))}"
    if unit in ("x", "ratio"):
        return f"{sign}{abs(d):.3f}x"
    return f"{sign}{value_text(abs(d), unit)}"


def percent(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """(B - A) / A in %, None without both or with A = 0."""
    if a is None or b is None or not a:
        return None
    return (b - a) / abs(a) * 100


def shown_same(a: float, b: float, unit: str) -> bool:
    """Whether two figures are the same to the precision they are shown with (and so to the estimate's own
    resolution, which is coarser): 1.105x against 1.105x, 0.005468 ms against 0.005468 ms."""
    return abs(b - a) <= SAME_WITHIN * max(abs(a), abs(b), 1e-300) or value_text(a, unit) == value_text(b, unit)


def better(h: Figure, a: Optional[float], b: Optional[float]) -> str:
    """'A', 'B', 'same' (the two read the same: shown_same) or '' (not both known, or a ratio: closer to 1 is
    neither better nor worse a plan)."""
    if a is None or b is None or h.unit == "ratio" or h.name == "lower bound":
        return ""
    if shown_same(a, b, h.unit):
        return "same"
    return ("A" if a < b else "B") if h.lower_is_better else ("A" if a > b else "B")


def headline_frame(plan_a: engine.Plan, plan_b: engine.Plan, measured_a: Optional[pd.DataFrame] = None,
                   measured_b: Optional[pd.DataFrame] = None, devices: tuple[str, str] = ("", "")) -> pd.DataFrame:
    """One row per headline: A, B, B - A, B - A in %, and which plan is better; `devices`: where each plan's
    run measured (measured rows of runs on different devices stay apart)."""
    memory = memory_kind({"A": plan_a, "B": plan_b})
    ha, hb = headlines(plan_a, measured_a, memory, devices[0]), headlines(plan_b, measured_b, memory, devices[1])
    rows = []
    for h in dict.fromkeys([*ha, *hb]):
        a, b = ha.get(h), hb.get(h)
        rows.append({"headline": h.name, "A": value_text(a, h.unit), "B": value_text(b, h.unit),
                     "B - A": change_text(a, b, h.unit),
                     "B - A %": None if a is not None and b is not None and shown_same(a, b, h.unit)  # "same"
                     else percent(a, b),  # (never "+0.0%" beside it)
                     "better": better(h, a, b)})
    return pd.DataFrame(rows, columns=["headline", "A", "B", "B - A", "B - A %", "better"])


def verdict(frame: pd.DataFrame) -> str:
    """'B is better on 4 of 6 headlines, A on 1; 1 the same.' (plain text; headlines no plan wins are left out)"""
    judged = frame[frame["better"] != ""]
    n_a, n_b, n_same = (int((judged["better"] == k).sum()) for k in ("A", "B", "same"))
    if n_same == len(judged):
        return f"A and B are the same on all {n_same} headlines."
    lead, count, rest, rest_n = ("B", n_b, "A", n_a) if n_b >= n_a else ("A", n_a, "B", n_b)
    text = f"{lead} is better on {count} of {len(judged)} headlines, {rest} on {rest_n}"
    return text + (f"; {n_same} the same." if n_same else ".")


# ---- per rank -----------------------------------------------------------------------------------


def _rank_values(plan: engine.Plan, measured: Optional[pd.DataFrame], side: str) -> pd.DataFrame:
    kind = device_memory(plan)
    frame = pd.DataFrame({"rank": [int(r.rank) for r in plan.ranks],
                          f"{side} ms": [float(r.cost_ms) for r in plan.ranks],
                          f"{side} peak MiB": [peak_bytes(r, kind) / MIB for r in plan.ranks]})
    if measured is not None and measured["measured_ms"].notna().any():
        m = measured[["rank", "measured_ms", "time_ratio"]].rename(
            columns={"measured_ms": f"{side} measured ms", "time_ratio": f"{side} measured / est."})
        frame = frame.merge(m, on="rank", how="left")
    return frame


def rank_frame(plan_a: engine.Plan, plan_b: engine.Plan, measured_a: Optional[pd.DataFrame] = None,
               measured_b: Optional[pd.DataFrame] = None, sigma: Optional[Sequence[int]] = None) -> pd.DataFrame:
    """Rank by rank: estimated time and peak device memory of A's rank and of the B rank it is paired with
    (sigma[a], the renumbering of dashboard.plans.plan_diff; by number without it), B - A absolute and in %, the faster
    plan, and each plan's measured time and its ratio to the estimate where a run measured it. B's ranks that
    no A rank pairs with come last, without an A rank."""
    a = _rank_values(plan_a, measured_a, "A")
    b = _rank_values(plan_b, measured_b, "B").rename(columns={"rank": "B rank"})
    pair = {int(r): int(sigma[r]) for r in a["rank"] if r < len(sigma) and sigma[r] >= 0} if sigma is not None \
        else {int(r): int(r) for r in a["rank"] if int(r) in set(b["B rank"])}
    a["B rank"] = [pair.get(int(r)) for r in a["rank"]]
    a["B rank"] = a["B rank"].astype("Int64")
    b["B rank"] = b["B rank"].astype("Int64")
    f = a.merge(b, on="B rank", how="outer")
    f["rank"] = f["rank"].astype("Int64")
    f = f.sort_values(["rank", "B rank"], kind="stable", na_position="last").reset_index(drop=True)
    f["B - A ms"] = f["B ms"] - f["A ms"]
    f["B - A ms %"] = [percent(x, y) for x, y in zip(_floats(f["A ms"]), _floats(f["B ms"]))]
    f["B - A MiB"] = f["B peak MiB"] - f["A peak MiB"]
    f["B - A MiB %"] = [percent(x, y) for x, y in zip(_floats(f["A peak MiB"]), _floats(f["B peak MiB"]))]
    time = Figure("rank", "ms")
    f["faster"] = [better(time, x, y) for x, y in zip(_floats(f["A ms"]), _floats(f["B ms"]))]
    first = ["rank", "B rank", "A ms", "B ms", "B - A ms", "B - A ms %", "faster", "A peak MiB", "B peak MiB",
             "B - A MiB", "B - A MiB %"]
    return f[first + [c for c in f.columns if c not in first]]


def _floats(column: pd.Series) -> list[Optional[float]]:
    return [None if pd.isna(v) else float(v) for v in column]


__all__ = ["Figure", "better", "change_text", "headline_frame", "headlines", "measured_long", "memory_frame",
           "memory_kind", "percent", "rank_frame", "shown_same", "value_text", "verdict", "with_bound"]
