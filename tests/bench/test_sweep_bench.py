"""The capacity-sweep benchmark end to end on a small grid: it times whole sweep processes, finds the same
points with one worker and two, and writes its table."""

import json
import sys

from tests import processes
from tests.factories import ROOT


def test_small_sweep_bench(tmp_path):
    proc = processes.run([sys.executable, "-m", "bench.sweep", "--tables", "20", "--world-sizes", "8,16",
                          "--devices", "h100_80gb,a100_40gb", "--effort", "500", "--repeat", "1", "--out-dir",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["identical"] and [r["jobs"] for r in data["runs"]] == [2, 1]
    points = data["runs"][0]["points"]
    assert [(p["device"], p["world_size"]) for p in points] == [
        ("h100_80gb", 8), ("h100_80gb", 16), ("a100_40gb", 8), ("a100_40gb", 16)]
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 for r in data["runs"])
    md = (tmp_path / "sweep.md").read_text()
    assert md.startswith("Made by `python -m bench.sweep --tables 20") and md.count("\n| h100_80gb |") == 2
    assert "Same points every time**: yes" in md
