"""Memory a closed browser session leaves behind goes back to the system. Streamlit forgets a session's state a
while after its browser went away (`server.disconnectedSessionTTL`); its objects are freed then, but the C
allocator keeps the freed pages for reuse, so the server's resident set stays at its high-water mark. A thread
checks the number of sessions every INTERVAL_S seconds; when it fell, it collects garbage (reference cycles of the
freed session) and hands free pages back (glibc's malloc_trim); when no session is left, it first empties the
caches the app keeps for its sessions (plans, figures, matrices: bounded, but no one is there to use them). The
work is a tenth of a second or so, at most once per interval, and only after sessions ended.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
import threading
from typing import Callable, Optional, Sequence

INTERVAL_S = 10.0


def rss_bytes() -> int:
    """This process's resident set (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim with
        return None


_TRIM = _malloc_trim()


def sweep() -> int:
    """Collect garbage and give free pages back to the system; the bytes of resident set that went."""
    before = rss_bytes()
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)
    return max(0, before - rss_bytes())


class Janitor:
    """Sweeps when `count()` fell since its last look (sessions ended), every `interval_s`."""

    def __init__(self, count: Callable[[], Optional[int]], interval_s: float = INTERVAL_S,
                 when_empty: Sequence[Callable[[], None]] = ()):
        self.count, self.interval_s = count, interval_s
        self.when_empty = tuple(when_empty)  # run when the last session went: the caches kept for sessions
        self.sweeps = 0
        self.freed_bytes = 0
        self._last: Optional[int] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="planner-janitor", daemon=True)

    def start(self) -> "Janitor":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def look(self) -> bool:
        """One look: sweep when fewer sessions are counted than at the last look. True when it swept."""
        n = self.count()
        last, self._last = self._last, n
        fell = n is not None and last is not None and n < last
        if fell:
            if n == 0:
                for clear in self.when_empty:
                    clear()
            freed = sweep()
            self.freed_bytes += freed
            self.sweeps += 1
            print(f"housekeeping: sessions {last} -> {n}; collected garbage and gave {freed / 2**20:.0f} MB back "
                  f"(resident set now {rss_bytes() / 2**20:.0f} MB)", file=sys.stderr, flush=True)
        return fell

    def _loop(self) -> None:
        self.look()  # at once: the first page's session is counted while it runs
        while not self._stop.wait(self.interval_s):
            self.look()
