"""Waits in the tests: for a state, never a fixed time, with a budget written for an idle machine and scaled for
the load now (slowdown); one that gives up says what it waited for and what was shown (docs/testing.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

SLOWDOWN_ENV = "PLANNER_TEST_SLOWDOWN"
SLOWDOWN_MAX = 4.0  # a budget is at most 4x its unloaded figure: a hang still ends before pytest's timeout
SNAPSHOT_CHARS = 1500


def slowdown() -> float:
    """How much longer than on an idle machine a wait may take: PLANNER_TEST_SLOWDOWN when set (a number >= 1),
    else the 1-minute load average per core now (other work on the same cores), clamped to 1-SLOWDOWN_MAX."""
    raw = os.environ.get(SLOWDOWN_ENV, "").strip()
    if raw:
        try:
            factor = float(raw)
        except ValueError:
            raise ValueError(f"{SLOWDOWN_ENV}={raw!r}: give a number, 1 or more (e.g. 3 on a busy CI runner)")
        return max(1.0, factor)
    return min(SLOWDOWN_MAX, max(1.0, os.getloadavg()[0] / len(os.sched_getaffinity(0))))


def budget_s(seconds: float) -> float:
    """`seconds`, a wait's budget on an idle machine, scaled for the machine's load now (slowdown)."""
    return seconds * slowdown()


def held_within(cond: Callable[[], object], budget: float) -> bool:
    """Poll `cond()` every 20 ms up to `budget` seconds scaled by slowdown(); whether it came to hold. For a wait
    whose running out is itself an answer (a click that was lost); `until` is the one that fails."""
    deadline = time.monotonic() + budget_s(budget)
    while not cond():
        if time.monotonic() > deadline:
            return bool(cond())
        time.sleep(0.02)
    return True


def until(cond: Callable[[], object], what: str = "the condition", budget: float = 10.0,
          shows: Callable[[], str] | None = None) -> bool:
    """Wait until `cond()` holds (held_within), up to `budget` seconds scaled by slowdown(); returns True
    (`assert until(...)` reads well). Past the budget: an AssertionError that says what was waited for, for how
    long, and what `shows()` says now (a page's visible text, trimmed)."""
    allowed = budget_s(budget)
    if held_within(cond, budget):
        return True
    seen = ""
    if shows is not None:
        try:
            seen = "\nIt showed: " + trimmed(shows())
        except Exception as e:  # noqa: BLE001 - the wait's failure is the news, not this
            seen = f"\n(what it showed could not be read: {type(e).__name__}: {e})"
    raise AssertionError(f"waited {allowed:.0f} s ({budget:g} s x slowdown {allowed / budget:.1f}) for {what}{seen}")


def trimmed(text: str, limit: int = SNAPSHOT_CHARS) -> str:
    """A page's text on a few lines: blank lines out, the middle cut when long."""
    text = "\n".join(line.strip() for line in text.splitlines() if line.strip())
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}\n[... {len(text) - limit} characters ...]\n{text[-limit // 2:]}"
