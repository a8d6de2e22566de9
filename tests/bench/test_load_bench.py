"""bench.load runs for real, small: one then two browser sessions at once on a 20-table preset, through the
whole flow (open, load preset, plan, world size, replan, save, share link). Its report's structure and the saves
it found are checked, not its timings. Without Chromium or Playwright the test is skipped (fails under CI=true)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.load import STEPS
from tests.e2e.conftest import ROOT, need_browser

pytestmark = pytest.mark.timeout(300)


def test_two_small_rounds_save_every_plan_and_report_each_figure(tmp_path):
    need_browser()
    out = tmp_path / "load.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.load", "--sessions", "1", "2", "--tables", "20", "--out", str(out),
         "--settle", "2", "--session-ttl", "1", "--step-timeout", "90", "--max-minutes", "4"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["command"].startswith("python -m bench.load --sessions 1 2 --tables 20")
    assert "safety_stop" not in report
    if os.path.exists("/proc/self/autogroup"):  # the clients in a session below the server's (bench.load.clients_apart)
        assert report["clients_autogroup"] == "the clients' autogroup at nice 19"
    assert [r["sessions"] for r in report["rounds"]] == [1, 2]
    for r in report["rounds"]:
        n = r["sessions"]
        assert r["errors"] == []
        assert r["saves_expected"] == r["saves_found"] == n
        assert r["shares_ok"] == n, [f["share_problem"] for f in r["flows"]]
        assert r["cpu_s"] > 0 and r["cpu_per_session_s"] == pytest.approx(r["cpu_s"] / n)
        h = r["health"]  # polled from a process of its own
        assert h["polls"] > 0 and h["failures"] == 0 and h["median_s"] <= h["p99_s"] <= h["worst_s"]
        for key in ("rss_before", "rss_open", "rss_after"):
            assert r[key]["server_mb"] > 0 and r[key]["descendants_mb"] >= 0
        assert list(r["steps"]) == list(STEPS)
        assert all(f["sessions"] == n and 0 < f["median_s"] <= f["worst_s"] for f in r["steps"].values())
        assert len({f["share_url"] for f in r["flows"]}) == n
        assert "load average" in r["uptime_before"] and r["warmup"]["error"] == ""
        assert r["chromium_lowest_nice"] == 19  # the clients' nice held: Chromium could not raise its threads
    text = out.read_text()
    assert text.startswith("Made by `python -m bench.load --sessions 1 2 --tables 20")
    assert "shared the cores" in text and "| 1 | " in text and "| 2 | " in text
    for step in STEPS:
        assert f"| {step} | " in text
    assert "saves 2/2: met" in text
    assert "The lowest nice among Chromium's threads when the flows ended: N = 1: 19; N = 2: 19." in text
