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


def test_sweep_bench_against_a_baseline(tmp_path):
    """--baseline: each point's step over another run's (here the same tree's, one point made 2x slower there and
    one 2x faster), and the count of faster, slower and same points."""
    args = [sys.executable, "-m", "bench.sweep", "--tables", "20", "--world-sizes", "8,16", "--devices", "h100_80gb",
            "--effort", "500", "--repeat", "1", "--jobs", "1"]
    first = processes.run(args + ["--out-dir", str(tmp_path / "a")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert first.returncode == 0, first.stderr
    base = json.loads((tmp_path / "a" / "sweep.json").read_text())
    steps = [p["step_ms"] for p in base["runs"][0]["points"]]
    assert all(steps), steps
    base["runs"][0]["points"][0]["step_ms"] *= 2.0  # the baseline was slower there: this run is 0.5x
    base["runs"][0]["points"][1]["step_ms"] *= 0.5  # and faster there: this run is 2x
    (tmp_path / "base.json").write_text(json.dumps(base))
    proc = processes.run(args + ["--out-dir", str(tmp_path / "b"), "--baseline", str(tmp_path / "base.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "b" / "sweep.md").read_text()
    assert "of 2 points planned in both, 1 faster (median 0.500x, down to 0.500x), 1 slower, 0 the same; " \
           "worst 2.0000x." in md, md
    assert "| 0.5000x |" in md and "| 2.0000x |" in md and "vs baseline |" in md
    data = json.loads((tmp_path / "b" / "sweep.json").read_text())
    assert data["baseline"]["points"][0]["step_ms"] == 2.0 * steps[0]
