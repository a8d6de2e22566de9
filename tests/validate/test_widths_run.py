"""A dim that is not a multiple of 4 (30), which fbgemm's fused kernels refuse: our plan (data_parallel, dense)
runs for real on 2 gloo ranks; a plan that gives it a fused kernel (as TorchRec 1.8's planner does) is refused
before launching, in one line naming the field."""

from __future__ import annotations

import json

import engine
from engine import ComputeKernel, ShardingType
from tests.factories import tutorial, write
from tests.validate.conftest import FAST, run_cli


def _dim_30(tmp_path):
    cfg = tutorial()
    cfg["tables"][2]["embedding_dim"] = 30
    return cfg, write(tmp_path, cfg)


def test_our_plan_of_a_dim_30_table_runs_on_two_gloo_ranks(tmp_path):
    cfg, config = _dim_30(tmp_path)
    plan = engine.plan(engine.parse_config(cfg))
    assert plan.tables["small_table_0"].compute_kernel is ComputeKernel.DENSE
    plan_path = write(tmp_path, engine.plan_to_dict(plan), "plan.json")
    p = run_cli("validate", str(config), "--plan", str(plan_path), "--json", *FAST, "--out-dir", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(p.stdout)
    assert data["status"] == "succeeded" and data["error"] is None and data["shards_match"] is True


def test_a_fused_plan_of_a_dim_30_table_is_refused_before_launching(tmp_path):
    cfg, config = _dim_30(tmp_path)
    data = engine.plan_to_dict(engine.plan(engine.parse_config(tutorial("table_wise"))))
    data["plan"]["small_table_0"]["shards"][0]["sizes"] = [1024, 30]  # TorchRec's plan: table_wise/fused
    assert data["plan"]["small_table_0"]["sharding_type"] == ShardingType.TABLE_WISE.value
    p = run_cli("validate", str(config), "--plan", str(write(tmp_path, data, "plan.json")))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and lines[-1].startswith("error: plan.small_table_0.compute_kernel: fused needs piece "
                                                      "widths that are multiples of 4"), p.stderr
