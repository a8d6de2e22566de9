"""Downloads: plan JSON, TorchRec's text form, the ShardingPlan snippet (run for real against TorchRec), and
share links."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import pytest

import engine
from dashboard.plans import exports
from tests.dashboard.helpers import typed, typed_config
from tests.factories import ROOT, tutorial, tutorial_with_cache_curve

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
    cfg["constraints"] = {"large_table_0": {"sharding_types": ["column_wise"], "stochastic_rounding": False},
                          "large_table_1": {"sharding_types": ["row_wise"], "compute_kernels": ["fused_uvm_caching"],
                                            "cache_load_factor": 0.3},
                          "small_table_0": {"sharding_types": ["data_parallel"]}}
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    return cfg, plan


def test_plan_json_and_torchrec_text():
    cfg, plan = _mixed()
    parsed = engine.parse_plan(json.loads(exports.plan_json(typed(plan, cfg))), engine.parse_config(cfg))
    assert parsed.keys() == plan["plan"].keys()
    text = exports.torchrec_text(typed(plan, cfg), typed_config(cfg), "sparse.ebc")
    assert text.startswith("{'sparse.ebc': {'large_table_0': ParameterSharding(sharding_type='column_wise'")
    assert "sharding_spec=None" in text  # the data-parallel table


def _same_as_the_engines(tmp_path, cfg: dict, plan: dict, snippet: str) -> str:
    """Runs the snippet beside the engine's own ShardingPlan of the plan (CHECK); its output ('same N')."""
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "check.py").write_text(CHECK.format(snippet=snippet))
    out = subprocess.run([sys.executable, str(tmp_path / "check.py"), str(tmp_path / "cfg.json"),
                          str(tmp_path / "plan.json")], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def test_snippet_builds_the_same_sharding_plan_as_torchrec_compat(tmp_path):
    cfg, plan = _mixed()
    snippet = exports.python_snippet(typed(plan, cfg), typed_config(cfg), "model.ebc", what="tutorial, mixed")
    assert "exec(" not in snippet and "import engine" not in snippet
    assert _same_as_the_engines(tmp_path, cfg, plan, snippet).endswith("same 4")


def test_the_snippet_carries_the_cache_size_the_planner_chose(tmp_path):
    """No cache_load_factor typed and a measured miss curve: the plan's own (engine.clf's choice from the curve)
    goes into the snippet's CacheParams, as in the ShardingPlan the engine builds; the snippet once wrote only
    typed ones."""
    cfg = tutorial_with_cache_curve()
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    chosen = typed(plan, cfg).tables["large_table_1"].cache_load_factor
    assert chosen is not None
    snippet = exports.python_snippet(typed(plan, cfg), typed_config(cfg), "model.ebc")
    assert f"'large_table_1': {chosen!r}" in snippet
    assert _same_as_the_engines(tmp_path, cfg, plan, snippet).endswith("same 4")


def test_the_snippet_carries_grid_shard_and_says_how_to_launch_it(tmp_path):
    cfg = json.loads((ROOT / "examples" / "grid_shard.json").read_text())
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    snippet = exports.python_snippet(typed(plan, cfg), typed_config(cfg), "model.ebc")
    assert "'grid_shard'" in snippet and snippet.endswith(exports.GRID_NOTE) and "LOCAL_WORLD_SIZE = 2" in snippet
    assert _same_as_the_engines(tmp_path, cfg, plan, snippet).endswith("same 1")
    plain_cfg, plain_plan = _mixed()
    assert exports.GRID_NOTE not in exports.python_snippet(typed(plain_plan, plain_cfg), typed_config(plain_cfg))


def test_the_snippet_and_the_torchrec_text_carry_the_offload_tiers(tmp_path):
    """A key_value table (row-wise, a typed cache) and a dram_virtual_table one (declared virtual): the snippet
    builds the engine's own ShardingPlan, kernels and cache sizes included, and both exports name the virtual table
    whose EmbeddingBagConfig needs use_virtual_table=True."""
    cfg = tutorial()
    cfg["tables"][1]["use_virtual_table"] = True
    assert cfg["tables"][1]["name"] == "large_table_1"
    cfg["constraints"] = {"large_table_0": {"compute_kernels": ["key_value"], "sharding_types": ["row_wise"],
                                            "cache_load_factor": 0.5},
                          "large_table_1": {"compute_kernels": ["dram_virtual_table"],
                                            "sharding_types": ["table_wise"]}}
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    snippet = exports.python_snippet(typed(plan, cfg), typed_config(cfg), "model.ebc")
    assert "'key_value'" in snippet and "'dram_virtual_table'" in snippet and "'large_table_0': 0.5" in snippet
    assert _same_as_the_engines(tmp_path, cfg, plan, snippet).endswith("same 4")
    text = exports.torchrec_text(typed(plan, cfg), typed_config(cfg))
    assert "'large_table_0': ParameterSharding(sharding_type='row_wise', compute_kernel='key_value'" in text
    assert "# EmbeddingBagConfig(..., use_virtual_table=True) for 'large_table_1'\n" in text
    assert "VIRTUAL_TABLES = {'large_table_1': {'use_virtual_table': True}}  # table: its EmbeddingBagConfig" in snippet
    plain = tutorial()
    plain_plan = engine.plan(engine.parse_config(plain))
    assert "use_virtual_table" not in exports.torchrec_text(plain_plan, typed_config(plain))
    assert "VIRTUAL_TABLES" not in exports.python_snippet(plain_plan, typed_config(plain))


# run after the snippet: its virtual_table_keywords build TorchRec's own EmbeddingBagConfig keywords, as the engine's
VIRTUAL_CHECK = """
from engine.torchrec_compat import build_ebc
for c in build_ebc(engine.parse_config(json.load(open(sys.argv[1])))).embedding_bag_configs():
    kw = virtual_table_keywords(c.name)
    assert kw.get("use_virtual_table", False) == c.use_virtual_table, c.name
    assert kw.get("total_num_buckets") == c.total_num_buckets, c.name
    assert kw.get("virtual_table_eviction_policy") == c.virtual_table_eviction_policy, c.name
    assert type(kw.get("virtual_table_eviction_policy")) is type(c.virtual_table_eviction_policy), c.name
print("keywords", sorted(VIRTUAL_TABLES))
"""


def test_the_snippet_and_the_text_carry_a_virtual_tables_buckets_and_eviction_policy(tmp_path):
    """A bucketed virtual table (row_wise: whole buckets per rank) with a count-based eviction policy: the snippet's
    ShardingPlan is the engine's, its virtual_table_keywords give TorchRec's EmbeddingBagConfig the buckets and the
    policy as TorchRec's own class, and the TorchRec-format text says them."""
    cfg = tutorial()
    cfg["tables"][1].update(use_virtual_table=True, total_num_buckets=8,
                            virtual_table_eviction_policy={"type": "count_based", "eviction_threshold": 3,
                                                           "decay_rate": 0.5})
    cfg["tables"][2].update(use_virtual_table=True, virtual_table_eviction_policy={"type": "no_eviction"})
    cfg["topology"].update(world_size=3, local_world_size=3)
    cfg["constraints"] = {"large_table_1": {"compute_kernels": ["ssd_virtual_table"], "sharding_types": ["row_wise"]}}
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    assert [s["sizes"][0] for s in plan["plan"]["large_table_1"]["shards"]] == [1536, 1536, 1024]
    snippet = exports.python_snippet(typed(plan, cfg), typed_config(cfg), "model.ebc")
    out = _same_as_the_engines(tmp_path, cfg, plan, snippet + VIRTUAL_CHECK)
    assert out.endswith("keywords ['large_table_1', 'small_table_0']\nsame 4"), out
    text = exports.torchrec_text(typed(plan, cfg), typed_config(cfg))
    assert text.startswith("# EmbeddingBagConfig(..., use_virtual_table=True, total_num_buckets=8, "
                           "virtual_table_eviction_policy=CountBasedEvictionPolicy(eviction_threshold=3, "
                           "decay_rate=0.5)) for 'large_table_1'\n# EmbeddingBagConfig(..., use_virtual_table=True, "
                           "virtual_table_eviction_policy=NoEvictionPolicy()) for 'small_table_0'\n{'': {")


def test_share_urls():
    assert exports.share_url("http://10.0.0.5:8501/plan", "abc_DEF-123") == "http://10.0.0.5:8501/?plan=abc_DEF-123"
    assert exports.share_url("https://x.org/tools/planner/save_share", "t", "tools/planner") == \
        "https://x.org/tools/planner/?plan=t"
    assert exports.share_url(None, "t") == "?plan=t"
    assert exports.share_link("t", "https://p.org/x", "http://10.0.0.5:8501/plan", "") == "https://p.org/x/?plan=t"
    assert exports.share_link("t", "", "http://10.0.0.5:8501/plan", "app") == "http://10.0.0.5:8501/app/?plan=t"


# ---- hostile values: no label, planner, module path or table name can end a string and run as code ----------

RUN_ALL = """
import json, sys
out = []
for snippet in json.load(open(sys.argv[1])):
    g = {"__name__": "downloaded_snippet"}
    exec(compile(snippet, "snippet.py", "exec"), g)
    module = g["plan"].plan[g["MODULE_PATH"]]
    out.append({"label": g["PLAN_LABEL"], "planner": g["PLANNER"], "module_path": g["MODULE_PATH"],
                "tables": list(module.keys()), "kinds": [ps.sharding_type for ps in module.values()]})
print(json.dumps(out))
"""


def _hostile(marker: str) -> list[str]:
    """Texts that would end a docstring, a string or a comment and run `open(marker, 'w')`."""
    run = f"open({marker!r}, 'w')"
    return [
        f'baseline"""\nimport os; os.system("touch {marker}"); {run}\n"""',
        f"baseline'''\n{run}\n'''", f"x'\n{run}\n#", f'x"\n{run}\n#', f"x\\\n{run}", f"x\r{run}\r#",
        f"x\u2028{run}", f"x\x0c\n{run}", f"x\x0b{run}", f"x\x00{run}", f"x\x85{run}", f"x\u2029{run}",
        f"$(touch {marker})", f"`touch {marker}`", "{}{0}{plan}{{", "\\", "'", '"', "'''", '"""', "",
        "名前 ✓ \U0001f600", f"x\\'\n{run}\n#", f'x\\"""\n{run}\n"""',
    ]


def _engine_safe(text: str) -> str:
    """The part of a hostile text a table name may hold (one line of printable text, not blank)."""
    return "".join(c for c in text if c.isprintable())[:200] or "t"


def _hostile_plan(name_of, marker: str) -> tuple[dict, dict]:
    cfg = tutorial()
    names = [name_of(i) for i in range(len(cfg["tables"]))]
    for t, n in zip(cfg["tables"], names):
        t["name"] = n
        t["feature_names"] = [f"f_{n}"]
    cfg["constraints"] = {names[1]: {"compute_kernels": ["fused_uvm_caching"], "cache_load_factor": 0.25}}
    return cfg, engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))


def _shapes(source: str) -> list[str]:
    return [type(n).__name__ for n in ast.walk(ast.parse(source))]


def test_snippet_writes_every_user_value_as_a_literal(tmp_path):
    marker = str(tmp_path / "pwned")
    hostile = _hostile(marker)
    plain_cfg, plain_plan = _hostile_plan(lambda i: f"table_{i}", marker)
    plain = _shapes(exports.python_snippet(typed(plain_plan, plain_cfg), typed_config(plain_cfg), "model.ebc",
                                           what="baseline"))
    cases, snippets = [], []
    for i, text in enumerate(hostile):
        names = [_engine_safe(text) + f"_{k}" for k in range(4)]
        cfg, plan = _hostile_plan(names.__getitem__, marker)
        plan["planner"] = text
        snippet = exports.python_snippet(typed(plan, cfg), typed_config(cfg), module_path=text, what=text)
        assert _shapes(snippet) == plain, repr(text)
        cases.append((text, names))
        snippets.append(snippet)
    (tmp_path / "snippets.json").write_text(json.dumps(snippets))
    (tmp_path / "run.py").write_text(RUN_ALL)
    out = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "snippets.json")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    for (text, names), g in zip(cases, got):
        assert g["label"] == (text or "4 tables") and g["planner"] == text and g["module_path"] == text
        assert sorted(g["tables"]) == sorted(names) and len(g["kinds"]) == 4
    assert not (tmp_path / "pwned").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run.py",
                                                                                            "snippets.json"]


def test_table_names_the_engine_refuses_never_reach_a_snippet():
    for bad in ("a\nb", "a\rb", "a\x00b", "a\u2028b", "a\x0cb", "a\x0bb", "a\x85b"):
        cfg = tutorial()
        cfg["tables"][0]["name"] = bad
        with pytest.raises(engine.ConfigError, match="printable"):
            engine.parse_config(cfg)


def test_torchrec_text_quotes_names_and_module_path(tmp_path):
    for text in _hostile(str(tmp_path / "pwned")):
        names = [_engine_safe(text) + f"_{k}" for k in range(4)]
        cfg, plan = _hostile_plan(names.__getitem__, "")
        text_form = exports.torchrec_text(typed(plan, cfg), typed_config(cfg), text)
        printed = re.sub(r"placement=rank:\d+/\w+(:\d+)?", "placement=0", text_form)
        tree = ast.parse(printed, mode="eval").body  # TorchRec prints placements unquoted
        assert isinstance(tree, ast.Dict) and [k.value for k in tree.keys] == [text]
        inner = tree.values[0]
        assert [k.value for k in inner.keys] == list(plan["plan"]) and len(set(plan["plan"]) & set(names)) == 4
        assert all(isinstance(v, ast.Call) and v.func.id == "ParameterSharding" for v in inner.values)


def test_share_link_quotes_the_token():
    assert exports.share_url("http://h:1/x", "a&b=c#d\n") == "http://h:1/?plan=a%26b%3Dc%23d%0A"
    assert exports.share_url(None, "<script>") == "?plan=%3Cscript%3E"


def test_the_torchrec_text_and_snippet_say_what_dmp_collection_needs():
    """2D: the text opens with the DMPCollection arguments a group's plan needs; the snippet builds the group's plan
    and wraps the model in DMPCollection instead of DMP."""
    from engine.torchrec_compat import to_sharding_plan  # torch, for this test only

    cfg = engine.parse_config({"tables": [{"name": "t", "num_embeddings": 10_001, "embedding_dim": 64}],
                               "constraints": {"t": {"sharding_types": ["row_wise"]}},
                               "topology": {"world_size": 8, "local_world_size": 4, "sharding_group_size": 4}})
    plan = engine.plan(cfg)
    text = engine.torchrec_format(plan, cfg)
    assert text.startswith("# DMPCollection(plan=..., world_size=8, sharding_group_size=4): ranks are one group's "
                           "0-3; group g runs plan rank r on world rank r * 2 + g\n")
    assert exports.torchrec_text(plan, cfg).startswith(text.splitlines()[0])
    snippet = exports.python_snippet(plan, cfg)
    assert "model = DMPCollection(" in snippet and "DistributedModelParallel(model" not in snippet
    namespace: dict = {}
    exec(snippet, namespace)  # the snippet builds the group's ShardingPlan with TorchRec's classes
    assert (namespace["WORLD_SIZE"], namespace["SHARDING_GROUP_SIZE"]) == (8, 4)
    assert namespace["plan"].plan[""] == to_sharding_plan(cfg, plan.tables).plan[""]
    flat = engine.parse_config({**engine.config_to_dict(cfg), "topology": {"world_size": 8, "local_world_size": 4}})
    assert "DistributedModelParallel(model" in exports.python_snippet(engine.plan(flat), flat)
