"""The workspace's headline, computed: a plan's few numbers (slowest rank, against the lower bound, peak memory
against capacity, whether it fits) and what changed since the plan before it. Pure: engine.Plan in, numbers
and one-line texts out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import engine
from dashboard.plans import analysis
from dashboard.text import ms_text, sig_text

MEMORY_KINDS = ("hbm", "ddr")


@dataclass(frozen=True)
class Memory:
    """The rank whose estimated peak takes the largest share of its usable memory of one kind."""

    kind: str  # "hbm" or "ddr"
    rank: int
    peak_bytes: int
    cap_bytes: int  # usable: the device's memory less the reservation kept for the dense model
    step_peak: bool = True  # the step's estimated peak (engine.memory); False: the stored bytes only


    @property
    def share(self) -> float:
        return self.peak_bytes / self.cap_bytes if self.cap_bytes else 0.0

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.cap_bytes


@dataclass(frozen=True)
class Headline:
    tables: int
    ranks: int
    slowest_ms: float
    slowest_rank: int
    vs_lower_bound: Optional[float]  # slowest rank over the bound (None: the plan carries none, TorchRec's)
    memory: tuple[Memory, ...]  # the device's memory, and DDR too when a GPU plan puts anything there

    out_of_memory: bool = False  # the engine's verdict: a rank's step outgrows its device (engine.OUT_OF_MEMORY)

    @property
    def into_reservation(self) -> bool:
        """The step's peak passes the usable memory but the device holds it: its transient buffers use part of the
        memory kept for the dense model."""
        return not self.out_of_memory and any(not m.fits for m in self.memory)

    @property
    def fits(self) -> bool:
        """No rank outgrows its device: the engine's out-of-memory note, or stored bytes over the usable memory
        where the plan carries no step estimate (a plan file from elsewhere)."""
        return not self.out_of_memory


def _memory(plan: engine.Plan, kind: str) -> Optional[Memory]:
    ranks = [r for r in plan.ranks if analysis.cap_bytes(r, kind)]
    if not ranks:
        return None
    tight = max(ranks, key=lambda r: analysis.peak_bytes(r, kind) / analysis.cap_bytes(r, kind))
    return Memory(kind, int(tight.rank), analysis.peak_bytes(tight, kind), int(analysis.cap_bytes(tight, kind)),
                  tight.memory is not None)


def headline(plan: engine.Plan) -> Headline:
    imb = analysis.imbalance(plan)
    kinds = [m for m in (_memory(plan, k) for k in MEMORY_KINDS) if m is not None]
    memory = tuple(m for i, m in enumerate(kinds) if i == 0 or m.peak_bytes > 0)
    oom = any(n.startswith(engine.OUT_OF_MEMORY) for n in plan.notes) or any(
        not m.fits and not m.step_peak for m in memory)
    return Headline(len(plan.tables), len(plan.ranks), imb.max_ms, imb.bottleneck_rank, imb.vs_lower_bound,
                    memory, oom)


def group_text(config: engine.Config) -> Optional[str]:
    """2D sharding in a few words: the plan is one group's ranks, and how many replicas the world holds (None
    without 2D)."""
    replicas = engine.replica_count(config.topology)
    if replicas == 1:
        return None
    size = config.topology.sharding_group_size
    return (f"one sharding group: ranks 0-{size - 1} of {config.topology.world_size:,}, {replicas:,} replicas "
            "(2D, DMPCollection)")


def memory_text(m: Memory) -> str:
    pct = m.share * 100
    share = "<1%" if 0 < pct < 1 else f"{pct:.0f}%"
    return (f"peak {m.kind.upper()} {engine.human_bytes(m.peak_bytes)} of {engine.human_bytes(m.cap_bytes)} "
            f"({share}, rank {m.rank})")


@dataclass(frozen=True)
class Change:
    """From the plan before to this one: the slowest rank, and the tables placed differently (another sharding
    type, kernel or set of ranks), added or removed."""

    before_ms: float
    after_ms: float
    moved: int
    added: int
    removed: int
    fits_before: bool
    fits_after: bool
    kept: int  # tables both plans have

    @property
    def ratio(self) -> Optional[float]:
        return self.after_ms / self.before_ms - 1 if self.before_ms > 0 else None


def change(before: engine.Plan, after: engine.Plan) -> Change:
    """Placements are compared over the tables both plans have."""
    old, new = before.tables, after.tables
    kept = [name for name in new if name in old]
    moved = sum(1 for name in kept if engine.has_moved(old[name], new[name]))
    return Change(float(before.max_rank_cost_ms), float(after.max_rank_cost_ms), moved,
                  len(new.keys() - old.keys()), len(old.keys() - new.keys()), headline(before).fits,
                  headline(after).fits, len(kept))


def _ratio_text(ratio: Optional[float]) -> str:
    if ratio is None:
        return ""
    if abs(ratio) < 1e-9:
        return " (same)"
    if ratio >= 9:
        return f" (x{ratio + 1:,.0f})"
    return f" ({ratio * 100:+.0f}%)" if abs(ratio) >= 0.01 else f" ({ratio * 100:+.1f}%)"


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def change_text(c: Change) -> str:
    """One line, e.g. 'slowest rank 1.92 → 2.10 ms (+9%); 3 tables placed differently'."""
    parts = [f"slowest rank {sig_text(c.before_ms)} → {ms_text(c.after_ms)}{_ratio_text(c.ratio)}"]
    if c.kept:
        parts.append(f"{_count(c.moved, 'table')} placed differently" if c.moved else "no table placed differently")
    if c.added:
        parts.append(f"{_count(c.added, 'table')} added")
    if c.removed:
        parts.append(f"{_count(c.removed, 'table')} removed")
    if c.fits_before != c.fits_after:
        parts.append("now fits" if c.fits_after else "no longer fits")
    return "; ".join(parts)


@dataclass(frozen=True)
class Switch:
    """The plan on screen (a re-plan) against another plan of the same config (the plan from scratch): the slowest
    rank of each, and what switching to the other moves between ranks."""

    here_ms: float
    other_ms: float
    moved_bytes: int
    moved_tables: int


def switch(config: engine.Config, here: engine.Plan, other: engine.Plan) -> Switch:
    m = engine.replan_moved_bytes(config, engine.read_old_plan(here, "plan on screen"), other.tables)
    return Switch(float(here.max_rank_cost_ms), float(other.max_rank_cost_ms), int(m.total_bytes), len(m.by_table))


def switch_text(s: Switch) -> str:
    """One line (markdown), e.g. 'From scratch: slowest rank **2.10 ms**, against **1.92 ms** for the plan on
    screen (+9%); switching to it moves 12.0 MiB (3 tables).' Figures that read the same at 3 significant digits
    are the same."""
    if sig_text(s.other_ms) == sig_text(s.here_ms):
        ratio = " (the same)"
    else:
        ratio = _ratio_text(s.other_ms / s.here_ms - 1 if s.here_ms > 0 else None)
    moves = (f"moves {engine.human_bytes(s.moved_bytes)} ({_count(s.moved_tables, 'table')})" if s.moved_tables
             else "moves nothing")
    return (f"From scratch: slowest rank **{ms_text(s.other_ms)}**, against **{ms_text(s.here_ms)}** for the plan "
            f"on screen{ratio}; switching to it {moves}.")
