"""Calibration from real stored runs (the session's four 2-rank gloo validations of the tutorial, one config per
sharding type): the runs become observations with their plans' step features, `python -m db calibrate` fits a
CPU/gloo profile, checks it by leaving one config out, and writes a config that is priced for CPU with the fixed
costs; re-planning with it prices them. The fit itself on synthetic numbers: tests/engine/test_profile.py.
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest

import engine
from db.calibration import calibrate_from_store, observations_from_store
from db.store import Store
from engine.types import Device
from tests.factories import tutorial, write
from tests.validate.conftest import SHARDING_TYPES, run_cli, run_db_cli

ROUNDS = {"table_wise": 5, "column_wise": 5, "row_wise": 6, "data_parallel": 2}  # 2 ranks: engine.profile.step_counts


def test_stored_runs_become_observations_of_their_plans(recorded_runs):
    store = Store(recorded_runs.database_url)
    obs = observations_from_store(store, Device.CPU)
    assert sorted(o.group for o in obs) == sorted(f"tutorial_{st}" for st in SHARDING_TYPES)
    for o in obs:
        st = o.group.removeprefix("tutorial_")
        assert o.features.shape == (2, 7) and (o.features[:, 1] == ROUNDS[st]).all()
        assert (o.measured_ms > 0).all() and o.hosts == 1 and o.cores_per_host == os.cpu_count()
        assert o.own_ms.shape == (2,) and (o.own_ms > 0).all()  # each rank's embedding_ms, for the lookups' cost
        assert (o.own_ms < o.measured_ms).all()  # a rank's own embedding work is inside its step
    cal = calibrate_from_store(store, Device.CPU)
    assert cal.n_runs == len(SHARDING_TYPES) and cal.profile.backend == "gloo" and cal.r2 is not None
    assert all(v > 0 and math.isfinite(v) for v in cal.patch.values())
    assert observations_from_store(store, Device.CUDA) == []
    assert observations_from_store(store, Device.CPU, device_name="no such device") == []
    assert observations_from_store(store, Device.CPU, hosts=2) == []


def test_calibrate_writes_a_cpu_profile_and_a_config_that_replans_with_it(recorded_runs, tmp_path):
    config = write(tmp_path, tutorial())  # the tutorial says cuda
    p = run_db_cli(recorded_runs.database_url, "calibrate", "--device", "cpu", "--json", "--leave-one-out",
                   "--out", str(tmp_path / "cal.json"), "--config", str(config), "--config-out",
                   str(tmp_path / "calibrated.json"))
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data == json.loads((tmp_path / "cal.json").read_text())
    assert data["device"] == "cpu" and data["n_runs"] == len(SHARDING_TYPES)
    assert (data["profile"]["device"], data["profile"]["backend"], data["profile"]["hosts"]) == ("cpu", "gloo", 1)
    assert sorted(data["leave_one_out"]["configs"]) == sorted(f"tutorial_{st}" for st in SHARDING_TYPES)
    calibrated = json.loads((tmp_path / "calibrated.json").read_text())
    topo = calibrated["topology"]
    assert topo["compute_device"] == "cpu" and topo["profile"] == data["profile"]
    assert all(topo[name] == value for name, value in data["patch"].items())

    p = run_cli("plan", str(tmp_path / "calibrated.json"), "--json")  # re-planning prices the fixed costs
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert any(n.startswith("step priced with profile cpu/gloo on 1 host") for n in plan["notes"])
    cfg = engine.parse_config(calibrated)
    again = engine.evaluate(cfg, engine.parse_plan(plan, cfg))
    assert plan["max_rank_cost_ms"] == pytest.approx(again.max_rank_cost_ms)
    bare = dict(calibrated, topology={k: v for k, v in topo.items() if k != "profile"})
    without = engine.evaluate(engine.parse_config(bare), again.tables).max_rank_cost_ms
    fixed = sum(data["profile"][k] for k in ("step_ms", "collective_ms", "launch_ms", "piece_ms"))
    assert again.max_rank_cost_ms > without if fixed > 0 else again.max_rank_cost_ms == without


def test_calibrate_text_names_each_fixed_cost_and_bandwidth(recorded_runs):
    p = run_db_cli(recorded_runs.database_url, "calibrate", "--leave-one-out")
    assert p.returncode == 0, p.stderr
    head = re.match(r"Calibration of cpu \(gloo, 1 host, ([0-9.]+) cores per host\) from (\d+) runs \(R\^2 ", p.stdout)
    assert head and 0 < float(head[1]) <= os.cpu_count() and int(head[2]) == len(SHARDING_TYPES), p.stdout
    for text in ("step_ms = ", "ms per step", "ms per collective round", "ms per lookup launch", "ms per table piece",
                 "Leave one config out", "tutorial_row_wise: 1 plans, median error ", "all: median error "):
        assert text in p.stdout, p.stdout
    for bw in ("ddr_mem_bw", "intra_host_bw"):  # fitted, or left as configured when the runs do not show it
        assert f"{bw} = " in p.stdout and "GiB/s" in p.stdout or f"note: {bw}: the runs do not determine it" in \
            p.stdout, p.stdout


@pytest.mark.parametrize("args, message", [
    (["--device", "cuda"], "no succeeded validation runs on cuda"),
    (["--config", "c.json"], "--config and --config-out go together"),
    (["--device", "tpu"], "--device"),
])
def test_calibrate_errors_are_one_line(tmp_path, args, message):
    p = run_db_cli(f"sqlite:///{tmp_path / 'empty.db'}", "calibrate", *args)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr
