"""engine.torchrec_compat against TorchRec itself: our plans as ShardingPlans, TorchRec's planner on our
configs, the EBC and sharders that run them, and `python -m engine torchrec-plan` as a user runs it."""

import json
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.sharding_plan import (
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_row_wise,
    table_wise,
)
from torchrec.distributed.types import CacheParams, EnumerableShardingSpec, ParameterSharding, ShardMetadata

import engine
from engine.torchrec_compat import (
    CpuRowWiseEmbeddingBagCollectionSharder,
    build_ebc,
    from_parameter_sharding,
    from_sharding_plan,
    sharders,
    to_sharding_plan,
    torchrec_plan,
    torchrec_sharding_plan,
)
from tests.engine.tutorial_plans import TUTORIAL_PLANS
from tests.factories import EXAMPLES, ROOT, SHARDING_TYPES, tutorial, with_changes, write

TABLES = ("large_table_0", "large_table_1", "small_table_0", "small_table_1")
# The tutorial predates TorchRec's kernel rename.
OLD_KERNEL_NAMES = {"batched_fused": "fused", "batched_dense": "dense"}


def config(sharding_type=None, **topology):
    return engine.parse_config(with_changes(tutorial(sharding_type), **topology))


def ours(cfg):
    return engine.plan(cfg, engine.PlannerSettings(search=True))


def summary(ps: ParameterSharding):
    """What a ParameterSharding says, as plain data: type, kernel, ranks, (offsets, sizes, placement)."""
    shards = None if ps.sharding_spec is None else [
        (list(m.shard_offsets), list(m.shard_sizes), str(m.placement)) for m in ps.sharding_spec.shards]
    return ps.sharding_type, ps.compute_kernel, list(ps.ranks), shards


def tutorial_summaries(text: str) -> dict:
    """The tutorial's printed module plan parsed into the same plain data as summary()."""
    out = {}
    pattern = (r"'(\w+)': ParameterSharding\(sharding_type='(\w+)', compute_kernel='(\w+)', ranks=\[([\d, ]*)\], "
               r"sharding_spec=(None|EnumerableShardingSpec\(shards=\[.*?\]\))\)")
    for name, st_, kernel, ranks, spec in re.findall(pattern, text):
        shards = None if spec == "None" else [
            ([int(a), int(b)], [int(c), int(d)], p) for a, b, c, d, p in re.findall(
                r"ShardMetadata\(shard_offsets=\[(\d+), (\d+)\], shard_sizes=\[(\d+), (\d+)\], placement=([^)]+)\)",
                spec)]
        out[name] = (st_, OLD_KERNEL_NAMES.get(kernel, kernel), [int(r) for r in ranks.split(",")], shards)
    return out


# ---- our plans as ShardingPlans -----------------------------------------------------------------


@pytest.mark.parametrize("sharding_type", sorted(TUTORIAL_PLANS))
def test_our_plan_converts_to_the_plan_the_tutorial_prints(sharding_type):
    cfg = config(sharding_type)
    module_plan = to_sharding_plan(cfg, ours(cfg).tables).plan[""]
    expected = tutorial_summaries("".join(TUTORIAL_PLANS[sharding_type]))
    assert set(expected) == set(TABLES)
    assert {name: summary(ps) for name, ps in module_plan.items()} == expected


@pytest.mark.parametrize("sharding_type", SHARDING_TYPES)
def test_our_plan_equals_torchrecs_planner_on_the_same_config(sharding_type):
    cfg = config(sharding_type)
    theirs = torchrec_sharding_plan(cfg).plan[""]
    mine = to_sharding_plan(cfg, ours(cfg).tables).plan[""]
    assert set(theirs) == set(mine) == set(TABLES)
    for name in TABLES:
        assert mine[name] == theirs[name], name  # every ParameterSharding field, placements included
        assert theirs[name].sharding_type == sharding_type


@pytest.mark.parametrize("sharding_type, generator", [
    ("table_wise", lambda i: table_wise(rank=i % 2, compute_kernel="fused")),
    ("row_wise", lambda i: row_wise(compute_kernel="fused")),
    ("column_wise", lambda i: column_wise(ranks=[0, 1], compute_kernel="fused")),
    ("table_row_wise", lambda i: table_row_wise(host_index=0)),
    ("data_parallel", lambda i: data_parallel()),
])
def test_to_sharding_plan_builds_what_torchrecs_own_plan_helpers_build(sharding_type, generator):
    cfg = config(sharding_type)
    p = ours(cfg)
    ebc = build_ebc(cfg)
    built = construct_module_sharding_plan(ebc, {t: generator(i) for i, t in enumerate(TABLES)},
                                           local_size=2, world_size=2, device_type="cuda")
    mine = to_sharding_plan(cfg, p.tables).plan[""]
    for name in TABLES:
        # TorchRec's helper picks the dense kernel for table_row_wise; the rest is the same
        assert summary(mine[name])[0::2] == summary(built[name])[0::2], name
        assert summary(mine[name])[3] == summary(built[name])[3], name
        if sharding_type != "table_row_wise":
            assert mine[name] == built[name], name


def test_placements_follow_the_local_rank_and_the_runtime_device():
    cfg = engine.parse_config(with_changes(tutorial("row_wise"), world_size=4, local_world_size=2))
    p = ours(cfg)
    on_cuda = to_sharding_plan(cfg, p.tables).plan[""]["large_table_0"]
    assert [str(m.placement) for m in on_cuda.sharding_spec.shards] == [
        "rank:0/cuda:0", "rank:1/cuda:1", "rank:2/cuda:0", "rank:3/cuda:1"]
    on_cpu = to_sharding_plan(cfg, p.tables, device="cpu").plan[""]["large_table_0"]
    assert [str(m.placement) for m in on_cpu.sharding_spec.shards] == [f"rank:{r}/cpu" for r in range(4)]
    cpu_cfg = engine.parse_config(with_changes(tutorial("row_wise"), compute_device="cpu"))
    assert str(to_sharding_plan(cpu_cfg, ours(cpu_cfg).tables).plan[""]["small_table_1"]
               .sharding_spec.shards[1].placement) == "rank:1/cpu"
    with pytest.raises(engine.EngineError, match="device 'tpu'"):
        to_sharding_plan(cfg, p.tables, device="tpu")


def test_module_path_and_data_parallel_without_a_sharding_spec():
    cfg = config("data_parallel")
    sp = to_sharding_plan(cfg, ours(cfg).tables, module_path="model.sparse.ebc")
    assert list(sp.plan) == ["model.sparse.ebc"]
    ps = sp.get_plan_for_module("model.sparse.ebc")["small_table_0"]
    assert (ps.sharding_type, ps.compute_kernel, ps.ranks, ps.sharding_spec) == ("data_parallel", "dense", [0, 1], None)


def test_cache_load_factor_becomes_cache_params_as_torchrecs_planner_writes_them():
    raw = tutorial("table_wise")
    for c in raw["constraints"].values():
        c.update(compute_kernels=["fused_uvm_caching"], cache_load_factor=0.3)
    cfg = engine.parse_config(raw)
    theirs = torchrec_sharding_plan(cfg).plan[""]
    mine = to_sharding_plan(cfg, ours(cfg).tables).plan[""]
    for name in TABLES:
        assert mine[name].compute_kernel == theirs[name].compute_kernel == "fused_uvm_caching"
        assert mine[name].cache_params.load_factor == theirs[name].cache_params.load_factor == 0.3


def test_a_cache_load_factor_chosen_from_the_curve_reaches_torchrecs_cache_params():
    """A table with a measured miss curve (engine.clf): the size our planner chose goes into the ShardingPlan as
    TorchRec's own CacheParams, as TorchRec's planner writes them when that size is typed, and comes back."""
    rows = 200_000
    curve = [{"cache_rows": r, "lru_miss_rate": m} for r, m in ((200, 0.6), (2_000, 0.4), (12_000, 0.3),
                                                                 (60_000, 0.3), (rows, 0.3))]
    block = {"from": {"file": "ids.parquet", "rows": 40_000, "modified": "2026-11-27T00:00:00Z"},
             "miss_ratio_curve": curve}
    raw = {"tables": [{"name": "big", "num_embeddings": rows, "embedding_dim": 64, "feature_names": ["f0"]}],
           "constraints": {"big": {"workload": block}},
           "topology": {"world_size": 1, "compute_device": "cuda", "hbm_cap": 8_000_000, "batch_size": 512}}
    cfg = engine.parse_config(raw)
    tp = ours(cfg).tables["big"]
    assert tp.compute_kernel.value == "fused_uvm_caching" and tp.cache_load_factor == 12_000 / rows
    mine = to_sharding_plan(cfg, {"big": tp})
    ps = mine.plan[""]["big"]
    assert isinstance(ps.cache_params, CacheParams) and ps.cache_params.load_factor == 12_000 / rows
    raw["constraints"]["big"].update(compute_kernels=["fused_uvm_caching"], cache_load_factor=12_000 / rows)
    theirs = torchrec_sharding_plan(engine.parse_config(raw)).plan[""]["big"]
    assert theirs.compute_kernel == ps.compute_kernel and theirs.cache_params == ps.cache_params
    assert from_sharding_plan(cfg, mine)["big"] == tp


@pytest.mark.parametrize("sharding_type", SHARDING_TYPES)
def test_plans_come_back_unchanged_from_a_sharding_plan(sharding_type):
    cfg = engine.parse_config(with_changes(tutorial(sharding_type), world_size=4, local_world_size=2))
    p = ours(cfg)
    for device in (None, "cpu"):
        assert from_sharding_plan(cfg, to_sharding_plan(cfg, p.tables, device=device)) == p.tables


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(st.sampled_from([8, 16, 32, 64, 96, 128, 256]), min_size=1, max_size=6),
    rows=st.lists(st.integers(1, 100_000), min_size=6, max_size=6),
    hosts=st.integers(1, 3), local=st.sampled_from([1, 2, 4]), device=st.sampled_from(["cuda", "cpu"]),
)
def test_any_plan_survives_the_round_trip(dims, rows, hosts, local, device):
    raw = {"tables": [{"name": f"t{i}", "num_embeddings": rows[i], "embedding_dim": d} for i, d in enumerate(dims)],
           "topology": {"world_size": hosts * local, "local_world_size": local, "compute_device": device}}
    cfg = engine.parse_config(raw)
    p = engine.plan(cfg, engine.PlannerSettings(search=False))
    assert from_sharding_plan(cfg, to_sharding_plan(cfg, p.tables)) == p.tables


# ---- TorchRec -> our types ------------------------------------------------------------------------


def test_kernels_and_types_we_do_not_model_are_a_clear_error():
    spec = EnumerableShardingSpec([ShardMetadata([0, 0], [4096, 64], "rank:0/cuda:0")])
    with pytest.raises(engine.EngineError, match=r"kernel 'quant' for table 'large_table_0'.*does not model"):
        from_parameter_sharding("large_table_0", ParameterSharding("table_wise", "quant", [0], spec))
    # every ShardingType of TorchRec 1.8 is modelled (grid_shard too): a name from elsewhere stands in
    with pytest.raises(engine.EngineError, match=r"sharding type 'diagonal'"):
        from_parameter_sharding("large_table_0", ParameterSharding("diagonal", "fused", [0], spec))
    grid = from_parameter_sharding("large_table_0", ParameterSharding("grid_shard", "fused", [0], spec))
    assert grid.sharding_type is engine.ShardingType.GRID_SHARD
    cfg = config()
    sp = to_sharding_plan(cfg, ours(cfg).tables)
    del sp.plan[""]["small_table_1"]
    with pytest.raises(engine.EngineError, match="small_table_1"):
        from_sharding_plan(cfg, sp)


# ---- the EBC and the sharders ---------------------------------------------------------------------


def test_build_ebc_holds_the_configs_tables_on_the_meta_device():
    raw = tutorial()
    raw["tables"][1].update(pooling="mean", data_type="fp16", feature_names=["a", "b"])
    cfg = engine.parse_config(raw)
    ebc = build_ebc(cfg)
    got = {c.name: (c.num_embeddings, c.embedding_dim, c.feature_names, c.pooling.value, c.data_type.value)
           for c in ebc.embedding_bag_configs()}
    assert got["large_table_1"] == (4096, 64, ["a", "b"], "MEAN", "FP16")
    assert got["small_table_0"] == (1024, 64, ["small_table_feature_0"], "SUM", "FP32")
    assert list(got) == list(TABLES)
    assert all(p.device.type == "meta" for p in ebc.parameters())
    assert build_ebc(cfg, "cpu").embedding_bags["small_table_0"].weight.shape == (1024, 64)


def test_pooling_none_cannot_be_an_embedding_bag():
    raw = tutorial()
    raw["tables"][2]["pooling"] = "none"
    with pytest.raises(engine.EngineError, match=r"tables\[2\]\.pooling.*small_table_0"):
        build_ebc(engine.parse_config(raw))


def test_cpu_sharder_adds_row_splits_and_cuda_gets_torchrecs_own():
    cfg = config()
    (cpu,) = sharders(cfg, "cpu")
    assert isinstance(cpu, CpuRowWiseEmbeddingBagCollectionSharder)
    assert {"row_wise", "table_row_wise", "table_wise", "column_wise", "data_parallel"} <= set(
        cpu.sharding_types("cpu"))
    assert "row_wise" not in EmbeddingBagCollectionSharder().sharding_types("cpu")
    assert cpu.compute_kernels("row_wise", "cpu") == ["fused"]
    (gpu,) = sharders(cfg)  # the config says cuda
    assert type(gpu) is EmbeddingBagCollectionSharder


# ---- TorchRec's planner as a baseline -------------------------------------------------------------


def test_torchrec_plan_is_scored_by_our_estimator():
    cfg = config()
    p = torchrec_plan(cfg)
    assert p.planner == "torchrec" and p.planning_seconds > 0
    assert {n: tp.ranks for n, tp in p.tables.items()} == {
        "large_table_0": (0,), "large_table_1": (1,), "small_table_0": (0,), "small_table_1": (1,)}
    assert p.ranks == engine.evaluate(cfg, p.tables).ranks


def test_torchrec_plans_row_wise_on_cpu_only_with_our_sharder():
    raw = with_changes(tutorial(), compute_device="cpu")
    raw["constraints"] = {"large_table_0": {"sharding_types": ["row_wise"]}}
    cfg = engine.parse_config(raw)
    with pytest.raises(engine.PlanningError) as e:
        torchrec_plan(cfg)
    assert e.value.tables == ("large_table_0",)
    assert "\n" not in str(e.value) and "table_column_wise" in str(e.value)
    p = torchrec_plan(cfg, sharders(cfg, "cpu"))
    assert p.tables["large_table_0"].sharding_type is engine.ShardingType.ROW_WISE
    assert [s.sizes for s in p.tables["large_table_0"].shards] == [(2048, 64), (2048, 64)]


def nofit_config(optimizer="sgd"):
    raw = tutorial("table_wise")
    raw["tables"][0]["num_embeddings"] = 1_000_000  # 244 MiB of fp32 weights
    return engine.parse_config(with_changes(raw, hbm_cap=500 * 2**20, optimizer=optimizer))


def test_torchrecs_planner_error_becomes_one_planning_error_line():
    with pytest.raises(engine.PlanningError) as e:
        torchrec_plan(nofit_config("adam"))  # adam's two states triple the table
    text = str(e.value)
    assert e.value.tables == ("large_table_0",)
    assert text.startswith("TorchRec: Unable to find a plan") and "\n" not in text
    assert "perf: Perf" not in text and "What would help" in text


def test_the_optimizer_reaches_torchrecs_memory_estimate():
    assert torchrec_plan(nofit_config("sgd")).tables["large_table_0"].ranks in ((0,), (1,))
    assert torchrec_plan(nofit_config("rowwise_adagrad")).ranks[0].hbm_bytes > 0
    with pytest.raises(engine.PlanningError):
        torchrec_plan(nofit_config("adagrad"))


def test_planning_leaves_no_logging_handler_behind():
    import logging

    before = list(logging.root.handlers)
    torchrec_plan(config("data_parallel"))  # TorchRec logs "Sharding spec not found" through the root logger
    assert logging.root.handlers == before


# ---- the CLI ----------------------------------------------------------------------------------------


def cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_cli_prints_torchrecs_plan_in_our_summary_and_nothing_else():
    proc = cli("torchrec-plan", EXAMPLES / "tutorial.json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Plan by torchrec: 4 tables on 2 ranks")
    assert "large_table_0" in proc.stdout and "Sharding types: table_wise 4" in proc.stdout
    assert "WARNING" not in proc.stderr and "Traceback" not in proc.stderr


def test_cli_json_says_planner_torchrec():
    proc = cli("torchrec-plan", EXAMPLES / "tutorial_row_wise.json", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["planner"] == "torchrec"
    assert data["plan"]["large_table_0"]["shards"] == [{"offsets": [0, 0], "sizes": [2048, 64], "rank": 0},
                                                       {"offsets": [2048, 0], "sizes": [2048, 64], "rank": 1}]
    assert len(data["ranks"]) == 2 and data["max_rank_cost_ms"] > 0


def test_cli_config_torchrec_cannot_fit_is_one_error_line(tmp_path):
    raw = with_changes(tutorial(), hbm_cap=100_000)
    proc = cli("torchrec-plan", write(tmp_path, raw))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: TorchRec: "), proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_bad_config_is_one_error_line(tmp_path):
    proc = cli("torchrec-plan", write(tmp_path, {"tables": [], "topology": {"world_size": 2}}))
    assert proc.returncode == 2 and proc.stderr.startswith("error: tables: must be a non-empty list")


def test_planning_with_our_engine_never_imports_torch():
    proc = subprocess.run([sys.executable, "-c", "import engine, sys; engine.plan(engine.load_config("
                           f"{str(EXAMPLES / 'tutorial.json')!r})); print('torch' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr
