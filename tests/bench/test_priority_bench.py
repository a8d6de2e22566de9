"""bench.priority runs for real, small: one pair of phases, the planning pool's workers at nice 0 then 10 while
an endpoint on this process's event loop is probed. Its figures' structure is checked, not their values."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests import processes
from tests.e2e.conftest import ROOT

pytestmark = pytest.mark.timeout(300)


def test_one_pair_reports_each_phase_with_its_workers_nice(tmp_path):
    out = tmp_path / "priority.json"
    proc = processes.run(
        [sys.executable, "-m", "bench.priority", "--pairs", "1", "--phase-s", "2", "--tables", "50", "--effort",
         "500", "--out", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    phases = json.loads(out.read_text())["phases"]
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert [p["nice"] for p in phases] == [0, 10]
    assert [p["worker_nices"] for p in phases] == [[base], [min(19, base + 10)]]
    for p in phases:
        assert p["polls"] > 0 and p["failed"] == 0 and p["median_s"] <= p["p99_s"] <= p["worst_s"]
        assert p["plans"] > 0 and p["page_pieces_per_s"] > 0
    assert "page_pieces_per_s: nice 10 / nice 0, median of 1 pair ratios" in proc.stdout
