"""The search's budget, counted in work done (never in time), with a wall-clock safety stop."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Work:
    """The search's budget, counted in work done, never in time: one unit is one evaluation of a table's
    place on the ranks (a greedy placement, a re-shard tried, a reinsertion), or of one shard's moves and swaps,
    weighted by the number of ranks it scans (1 + world_size / 256). So the same config and settings always
    search the same way and give the same plan, on a quiet machine or a busy one.

    deadline (perf_counter seconds) is only a safety stop against a runaway search, read where the search checks
    its work (never inside a greedy placement or a step): when it finds the deadline passed, `cut` says so,
    `cut_s` when (seconds after `start`) and `step_s` how long the work since the clock's previous read took; the
    plan's notes tell the user, in those figures, that this plan depended on the machine's speed."""

    budget: float = float("inf")
    world_size: int = 1
    deadline: float = float("inf")
    start: float | None = None  # perf_counter seconds when planning began (default: when the Work is made)
    used: float = 0.0
    cut: bool = False
    cut_s: float = 0.0
    step_s: float = 0.0
    unit: float = field(init=False, default=1.0)
    _read: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.unit = 1.0 + self.world_size / 256
        self.start = time.perf_counter() if self.start is None else self.start
        self._read = self.start

    def spend(self, evaluations: int = 1) -> None:
        self.used += evaluations * self.unit

    def grant(self, units: float) -> None:
        """Raise the budget by `units`: a later stage's own share, which takes nothing from the work before it."""
        self.budget += units

    def left(self) -> float:
        return self.budget - self.used

    def done(self, limit: float | None = None) -> bool:
        """Whether the budget (or `limit`, a lower mark on `used`) is spent, or the safety stop fired."""
        if self.used >= (self.budget if limit is None else min(limit, self.budget)):
            return True
        if not self.cut and self.deadline < float("inf"):
            now = time.perf_counter()
            if now > self.deadline:
                self.cut, self.cut_s, self.step_s = True, now - self.start, now - self._read
            self._read = now
        return self.cut


def safety_stop_note(work: Work, time_budget_s: float, what: str = "the search") -> str:
    """The plan's note when the wall-clock safety stop cut `what` short (work.cut): when, and that the plan now
    depends on the machine's speed."""
    return (f"{what} stopped at the wall-clock safety stop ({time_budget_s:g} s), found passed {work.cut_s:.3g} s "
            f"into planning after a step of {work.step_s:.3g} s that it does not interrupt (pricing, a greedy "
            f"placement, a search step), with {work.used:,.0f} of {work.budget:,.0f} work units done: this plan "
            "depends on the machine's speed and load; raise the time budget or lower the effort to get the same plan "
            "every time")
