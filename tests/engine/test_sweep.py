"""Capacity sweep (`python -m engine sweep`): every point is the plan `python -m engine plan` makes of the config
on that topology; the Pareto front, refusals and out-of-memory steps are marked; bad flags get one line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from bench.suite import criteo_1tb
from engine.memory import OUT_OF_MEMORY
from engine.planner import PlannerSettings
from engine.sweep import ACCELERATORS, SweepPoint, pareto, plan_point, sweep

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "examples" / "tutorial.json"
# One wide table that must stay whole: on 1,024 ranks its pooled outputs for everyone's batch outgrow a GPU.
WIDE = {"tables": [{"name": "wide", "num_embeddings": 1_000_000, "embedding_dim": 1024,
                    "feature_names": ["a", "b", "c", "d"]}],
        "constraints": {"wide": {"sharding_types": ["table_wise"]}}, "topology": {"world_size": 2}}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_each_point_is_the_plan_of_its_topology(tmp_path: Path) -> None:
    out = cli("sweep", str(TUTORIAL), "--world-sizes", "2,4,16", "--devices", "h100_80gb,a100_40gb",
              "--batch-sizes", "256,1024", "--effort", "2000", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    points = data["points"]
    assert [(p["device"], p["world_size"], p["batch_size"]) for p in points] == [
        (d, w, b) for d in ("h100_80gb", "a100_40gb") for w in (2, 4, 16) for b in (256, 1024)]
    assert "published" in data["note"] and all("published" in a["source"] for a in data["accelerators"].values())
    cfg = engine.load_config(TUTORIAL)
    for p in (points[0], points[-1]):  # the smallest and the largest point, planned again by `plan`
        topo = ACCELERATORS[p["device"]].topology(cfg.topology, p["world_size"], p["batch_size"])
        path = tmp_path / f"{p['device']}-{p['world_size']}.json"
        path.write_text(json.dumps(engine.config_to_dict(dataclasses.replace(cfg, topology=topo))))
        planned = cli("plan", str(path), "--effort", "2000", "--json")
        assert planned.returncode == 0, planned.stderr
        alone = json.loads(planned.stdout)
        assert p["step_ms"] == alone["max_rank_cost_ms"] and p["lower_bound_ms"] == alone["lower_bound_ms"]
        assert p["hosts"] == -(-p["world_size"] // min(8, p["world_size"]))
        assert p["samples_per_s"] == pytest.approx(p["world_size"] * p["batch_size"] / (p["step_ms"] / 1000))


def test_pareto_front_is_the_points_nothing_beats() -> None:
    cfg = engine.load_config(TUTORIAL)
    points = sweep(cfg, ["a100_40gb", "h100_80gb", "b200_192gb"], [2, 4, 8, 16], [512],
                   PlannerSettings(effort=1000))
    fits = [p for p in points if p.fits]
    for p in points:
        beaten = any(q is not p and q.world_size <= p.world_size and q.step_ms < p.step_ms for q in fits)
        tied_earlier = any(q.world_size == p.world_size and q.step_ms == p.step_ms and points.index(q) <
                           points.index(p) for q in fits)
        assert p.pareto == (p.fits and not beaten and not tied_earlier), p
    assert any(p.pareto for p in points)
    made = [SweepPoint("h100_80gb", w, 1, True, True, step_ms=s) for w, s in ((8, 5.0), (16, 6.0), (32, 2.0))]
    assert [p.pareto for p in pareto(made)] == [True, False, True]


def test_same_points_with_one_worker_or_two() -> None:
    cfg = engine.parse_config(criteo_1tb(8))
    args = (cfg, ["a100_80gb", "h200_141gb"], [8, 16, 32], [512, 2048], PlannerSettings(effort=3000))
    assert sweep(*args, jobs=1) == sweep(*args, jobs=2)


def test_points_that_cannot_fit_say_why() -> None:
    huge = engine.parse_config({"tables": [{"name": "t", "num_embeddings": 2**33, "embedding_dim": 256}],
                                "topology": {"world_size": 8}})
    refused = plan_point(huge, "a100_40gb", 8, 512, PlannerSettings(effort=0))
    assert not refused.planned and not refused.fits and "do not fit" in refused.reason and refused.step_ms is None
    assert "What would help" in refused.reason
    oom = plan_point(engine.parse_config(WIDE), "a100_40gb", 1024, 2048, PlannerSettings(effort=1000))
    assert oom.planned and not oom.fits and oom.reason.startswith(OUT_OF_MEMORY) and oom.peak_hbm_fraction > 1
    assert "smaller batch size" in oom.reason
    same_on_fewer = plan_point(engine.parse_config(WIDE), "a100_40gb", 64, 2048, PlannerSettings(effort=1000))
    assert same_on_fewer.fits and not same_on_fewer.reason


def test_out_of_memory_step_is_a_note_of_the_plan() -> None:
    cfg = engine.parse_config(WIDE)
    topo = ACCELERATORS["a100_40gb"].topology(cfg.topology, 1024, 2048)
    p = engine.plan(dataclasses.replace(cfg, topology=topo), PlannerSettings(effort=1000))
    note = [n for n in p.notes if n.startswith(OUT_OF_MEMORY)]
    assert len(note) == 1 and "1 of 1024 ranks" in note[0] and "40.00 GiB" in note[0]
    assert not [n for n in engine.plan(engine.load_config(TUTORIAL)).notes if n.startswith(OUT_OF_MEMORY)]


@pytest.mark.parametrize("flags, message", [
    (["--devices", "tpu_v9"], "--devices: unknown accelerator 'tpu_v9'; choose from a100_40gb"),
    (["--world-sizes", "8,,16"], "--world-sizes: must be whole numbers separated by commas"),
    (["--world-sizes", "0"], "--world-sizes: must be from 1 to 16,384, got 0"),
    (["--batch-sizes", "-5"], "--batch-sizes: must be from 1 to 16,777,216"),
    (["--world-sizes", ",".join(str(i) for i in range(1, 1200)), "--batch-sizes", "1,2,3,4"],
     "--world-sizes: 23,980 points; at most 4,096 are swept"),
    *[(["--world-sizes", f"8,{w}", "--devices", "h100_80gb"],  # ValueError in find_ranks (issue 23, item 3)
       f"--world-sizes: {w:,} GPUs do not fill whole hosts of 8 (a config's local_world_size must divide its "
       f"world_size") for w in (9, 10, 12, 100, 12289)],
    (["--world-sizes", "12", "--devices", "h100_80gb"], "give 8 or fewer, or a multiple of 8 (8 or 16)"),
])
def test_bad_flags_get_one_line(flags: list[str], message: str) -> None:
    out = cli("sweep", str(TUTORIAL), *flags)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
