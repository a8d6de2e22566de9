"""A closed session's memory goes back to the system: the janitor sweeps when the session count falls (never
otherwise), and a sweep hands freed pages back (the resident set drops), in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys

from dashboard.serve import housekeeping
from dashboard.ui import services
from tests.factories import ROOT


def test_the_janitor_sweeps_only_when_sessions_ended():
    counts = iter([None, 3, 4, 4, 2, 2, None, 1])
    janitor = housekeeping.Janitor(count=lambda: next(counts))
    assert [janitor.look() for _ in range(8)] == [False, False, False, False, True, False, False, False]
    assert janitor.sweeps == 1


def test_the_last_session_gone_empties_the_sessions_caches():
    emptied = []
    counts = iter([2, 1, 0, 0, 1, 0])
    janitor = housekeeping.Janitor(count=lambda: next(counts), when_empty=[lambda: emptied.append(1)])
    assert [janitor.look() for _ in range(6)] == [False, True, True, False, False, True]
    assert len(emptied) == 2  # at 1 -> 0, twice; not at 2 -> 1


def test_outside_a_server_there_is_no_session_count():
    assert services.streamlit_sessions() is None


def test_a_sweep_gives_freed_memory_back():
    """300 MB in 1 kB objects, 98% of them freed between survivors: the allocator keeps the pages until a sweep."""
    script = """
import json
from dashboard.serve import housekeeping
keep, junk = [], []
for i in range(300_000):
    (keep if i % 50 == 0 else junk).append(bytes(1000) + bytes([i % 256]))
high = housekeeping.rss_bytes()
del junk
freed = housekeeping.sweep()
print(json.dumps({"high": high, "after": housekeeping.rss_bytes(), "freed": freed, "kept": len(keep)}))
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    r = json.loads(out.stdout)
    assert r["high"] > 250 * 2**20
    assert r["freed"] > 150 * 2**20 and r["after"] < r["high"] - 150 * 2**20
