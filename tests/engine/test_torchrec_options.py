"""TorchRec options the planner passes on (fields declared sharding=True, e.g. stochastic_rounding): read and written
back by the config, set in TorchRec's ParameterConstraints and in each table's ParameterSharding exactly as TorchRec's
own planner sets them, and applied by DistributedModelParallel to the fbgemm kernel it builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import engine
from tests.factories import ROOT, tutorial

# TorchRec's defaults are None (fbgemm's own default applies), so each table shows a different case.
ROUNDING = {"large_table_0": False, "large_table_1": True}


def _config(**topology) -> dict:
    raw = tutorial()
    raw["topology"].update(topology)
    raw["constraints"] = {name: {"stochastic_rounding": v} for name, v in ROUNDING.items()}
    return raw


def test_the_option_is_read_written_back_and_refused_by_name():
    cfg = engine.parse_config(_config())
    assert {n: cfg.constraint(n).stochastic_rounding for n in ("large_table_0", "large_table_1", "small_table_0")} \
        == {**ROUNDING, "small_table_0": None}
    again = engine.config_to_dict(cfg)
    assert again["constraints"]["large_table_0"] == {"stochastic_rounding": False}
    assert "small_table_0" not in again["constraints"] or again["constraints"]["small_table_0"] == {}
    assert engine.parse_config(again) == cfg
    bad = _config()
    bad["constraints"]["large_table_0"]["stochastic_rounding"] = "yes"
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_config(bad)
    assert "constraints.large_table_0.stochastic_rounding" in str(e.value) and "\n" not in str(e.value)
    assert engine.sharding_options(cfg.constraint("large_table_1")) == {"stochastic_rounding": True}
    assert engine.sharding_options(cfg.constraint("small_table_0")) == {}


def test_our_sharding_plan_carries_it_as_torchrecs_planner_does():
    from engine.torchrec_compat import to_sharding_plan, torchrec_constraints, torchrec_sharding_plan

    cfg = engine.parse_config(_config())
    assert {n: c.stochastic_rounding for n, c in torchrec_constraints(cfg).items()} == ROUNDING
    ours = to_sharding_plan(cfg, engine.plan(cfg).tables).plan[""]
    theirs = torchrec_sharding_plan(cfg).plan[""]
    for name in ours:
        assert ours[name].stochastic_rounding == theirs[name].stochastic_rounding == ROUNDING.get(name), name


DMP = """
import json, sys
import torch, torch.distributed as dist
import engine
from engine.torchrec_compat import build_ebc, sharders, to_sharding_plan
from torchrec.distributed.model_parallel import DistributedModelParallel

cfg = engine.parse_config(json.load(open(sys.argv[1])))
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
plan = to_sharding_plan(cfg, engine.plan(cfg).tables, "", device="cpu")
model = DistributedModelParallel(build_ebc(cfg, "meta"), device=torch.device("cpu"), plan=plan,
                                 sharders=sharders(cfg, "cpu"))
seen = {}
for lookup in model._dmp_wrapped_module._lookups:
    for kernel in lookup._emb_modules:
        for t in kernel.config.embedding_tables:
            seen[t.name] = kernel._emb_module.stochastic_rounding
print(json.dumps(seen))
"""


def test_distributed_model_parallel_builds_fbgemm_kernels_with_it(tmp_path):
    """One rank on gloo: each table's fbgemm kernel has the rounding its constraint set (fbgemm's default, true,
    where none is set); tables with different values sit in different kernels."""
    (tmp_path / "cfg.json").write_text(json.dumps(_config(world_size=1, local_world_size=1, compute_device="cpu")))
    (tmp_path / "dmp.py").write_text(DMP)
    out = subprocess.run([sys.executable, str(tmp_path / "dmp.py"), str(tmp_path / "cfg.json"),
                          str(tmp_path / "pg_init")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"large_table_0": False, "large_table_1": True, "small_table_0": True, "small_table_1": True}
