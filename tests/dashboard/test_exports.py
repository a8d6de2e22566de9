"""Downloads: plan JSON, TorchRec's text form, the ShardingPlan snippet (run for real against TorchRec), and
share links."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import engine
from dashboard import exports
from tests.factories import ROOT, tutorial

CHECK = """
import json, sys
import engine
from engine.torchrec_compat import to_sharding_plan
{snippet}
cfg_dict = json.load(open(sys.argv[1]))
cfg = engine.parse_config(cfg_dict)
expected = to_sharding_plan(cfg, engine.parse_plan(json.load(open(sys.argv[2])), cfg), MODULE_PATH)
assert plan.plan.keys() == expected.plan.keys(), (plan.plan.keys(), expected.plan.keys())
for name, ps in expected.plan[MODULE_PATH].items():
    assert plan.plan[MODULE_PATH][name] == ps, (name, plan.plan[MODULE_PATH][name], ps)
print("same", len(expected.plan[MODULE_PATH]))
"""


def _mixed() -> tuple[dict, dict]:
    cfg = tutorial()
    cfg["constraints"] = {"large_table_0": {"sharding_types": ["column_wise"]},
                          "large_table_1": {"sharding_types": ["row_wise"], "compute_kernels": ["fused_uvm_caching"],
                                            "cache_load_factor": 0.3},
                          "small_table_0": {"sharding_types": ["data_parallel"]}}
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    return cfg, plan


def test_plan_json_and_torchrec_text():
    cfg, plan = _mixed()
    parsed = engine.parse_plan(json.loads(exports.plan_json(plan)), engine.parse_config(cfg))
    assert parsed.keys() == plan["plan"].keys()
    text = exports.torchrec_text(plan, cfg, "sparse.ebc")
    assert text.startswith("{'sparse.ebc': {'large_table_0': ParameterSharding(sharding_type='column_wise'")
    assert "sharding_spec=None" in text  # the data-parallel table


def test_snippet_builds_the_same_sharding_plan_as_torchrec_compat(tmp_path):
    cfg, plan = _mixed()
    snippet = exports.python_snippet(plan, cfg, "model.ebc", what="tutorial, mixed")
    assert "exec(" not in snippet and "import engine" not in snippet
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "check.py").write_text(CHECK.format(snippet=snippet))
    out = subprocess.run([sys.executable, str(tmp_path / "check.py"), str(tmp_path / "cfg.json"),
                          str(tmp_path / "plan.json")], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("same 4")


def test_share_urls():
    assert exports.share_url("http://10.0.0.5:8501/plan", "abc_DEF-123") == "http://10.0.0.5:8501/?plan=abc_DEF-123"
    assert exports.share_url("https://x.org/tools/planner/save_share", "t", "tools/planner") == \
        "https://x.org/tools/planner/?plan=t"
    assert exports.share_url(None, "t") == "?plan=t"
    assert exports.share_link("t", "https://p.org/x", "http://10.0.0.5:8501/plan", "") == "https://p.org/x/?plan=t"
    assert exports.share_link("t", "", "http://10.0.0.5:8501/plan", "app") == "http://10.0.0.5:8501/app/?plan=t"
