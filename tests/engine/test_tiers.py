"""TorchRec 1.8's embedding offload tiers (engine/tiers.py): key_value, ssd_virtual_table, dram_virtual_table and
dram_ssd_virtual_table. Accepted in configs and plan files, offered exactly where TorchRec's enumerator offers them,
priced with TorchRec's formulas (or the miss curve), refused by name where the SSD is missing, exported as TorchRec's
planner exports them, and run by DistributedModelParallel on gloo where TorchRec 1.8 can (it cannot: pinned here)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import engine
from engine.cachecurve import miss_rate
from engine.enumerate import table_options
from engine.tiers import OFFLOAD, ssd_by_rank
from engine.torchrec_compat import to_sharding_plan, torchrec_sharding_plan
from tests.engine.test_vs_torchrec_estimator import torchrec_options
from tests.factories import ROOT, tutorial

GIB = 2**30
KERNELS = [k.value for k in OFFLOAD]
CURVE = [{"cache_rows": r, "lru_miss_rate": m} for r, m in ((400, 0.5), (2000, 0.05), (4096, 0.04))]


def config(kernels: list[str], sharding_types: list[str] | None = None, table: str = "large_table_0",
           virtual: bool | None = None, **topology) -> dict:
    """The tutorial's config with the table's kernels (and types); the table declared virtual where `virtual`, or
    by default where a virtual-table kernel is listed."""
    raw = tutorial()
    raw["topology"].update(topology)
    if virtual if virtual is not None else any(k.endswith("_virtual_table") for k in kernels):
        next(t for t in raw["tables"] if t["name"] == table)["use_virtual_table"] = True
    c = {"compute_kernels": kernels}
    if sharding_types:
        c["sharding_types"] = sharding_types
    raw["constraints"] = {table: c}
    return raw


def kernels_of(raw: dict, name: str = "large_table_0") -> tuple[set, set]:
    """(ours, TorchRec's enumerator's) (sharding type, kernel) pairs for the table."""
    cfg = engine.parse_config(raw)
    i = [t.name for t in cfg.tables].index(name)
    ours = {(o.sharding_type.value, o.kernel.value) for o in table_options(cfg, i)}
    theirs = {(so.sharding_type, so.compute_kernel) for so in torchrec_options(cfg) if so.name == name}
    return ours, theirs


# ---- configs and plan files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_offload_kernel_is_planned_where_listed_and_reads_back_from_its_plan_file(kernel):
    raw = config([kernel], ["row_wise"])
    cfg = engine.parse_config(raw)
    assert engine.config_to_dict(cfg)["constraints"]["large_table_0"]["compute_kernels"] == [kernel]
    plan = engine.plan(cfg)
    assert plan.tables["large_table_0"].compute_kernel.value == kernel
    again = engine.parse_plan(json.loads(json.dumps(engine.plan_to_dict(plan))), cfg)
    assert again == plan.tables
    assert any(n.startswith(f"{kernel} (large_table_0): TorchRec 1.8's DistributedModelParallel") for n in plan.notes)
    assert f"compute_kernel='{kernel}'" in engine.torchrec_format(plan, cfg)


def test_inference_kernels_stay_refused_saying_they_are_for_inference():
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_config(config(["fused", "quant_uvm"]))
    assert "'quant_uvm' is one of TorchRec's inference kernels" in str(e.value) and "\n" not in str(e.value)


# ---- when they are offered: as TorchRec's enumerator ----------------------------------------------------------


@pytest.mark.parametrize("case, raw, offload", [
    ("listed", config(["fused", "key_value", "dram_virtual_table"]), {"key_value", "dram_virtual_table"}),
    ("all four", config(["fused_uvm", *KERNELS]), set(KERNELS)),
    ("not listed", tutorial(), set()),
    ("no SSD anywhere", config(["fused", *KERNELS], ssd_cap=0), set(KERNELS) - {"key_value"}),
    ("some rank with SSD", {**config(["key_value", "fused"]), "topology": {
        **tutorial()["topology"], "custom_topology_data": {"ssd_cap": [0, GIB]}}}, {"key_value"}),
    ("cpu", config(["fused", "key_value"], compute_device="cpu"), set()),
])
def test_offered_exactly_where_torchrecs_enumerator_offers_them(case, raw, offload):
    """Guarded as TorchRec 1.8 guards them (GUARDED_COMPUTE_KERNELS: only where listed; the CUDA sharder only;
    key_value dropped where no rank has SSD, torchrec#4088): every pair of sharding type and kernel is the same."""
    ours, theirs = kernels_of(raw)
    dp = ("data_parallel", "dense")  # ours always (the compute_kernels field's meaning); TorchRec's where listed
    types = {st for st, _ in ours}  # on CPU ours offers the row splits only where listed (docs/estimator.md)
    assert ours - {dp} == {(st, k) for st, k in theirs if st in types} - {dp}, case
    assert {k for _, k in ours if k in KERNELS} == offload


def test_listing_key_value_beside_fused_leaves_the_plan_as_it_was():
    """At TorchRec's SSD bandwidth (100 MiB/s) key_value is the slowest option: offered, not chosen, where HBM
    holds the table."""
    plain = engine.plan(engine.parse_config(config(["fused"])))
    offered = engine.plan(engine.parse_config(config(["fused", *KERNELS])))
    assert offered.tables == plain.tables and offered.max_rank_cost_ms == plain.max_rank_cost_ms


# ---- refused by name -------------------------------------------------------------------------------------------


def test_key_value_where_no_rank_has_ssd_is_refused_naming_the_table_as_torchrec_refuses_it():
    cfg = engine.parse_config(config(["key_value"], ["table_wise"], ssd_cap=0))
    with pytest.raises(engine.PlanningError) as e:
        engine.plan(cfg)
    assert "Table 'large_table_0'" in str(e.value) and "key_value needs SSD and no rank has any" in str(e.value)
    assert "topology.ssd_cap" in str(e.value)
    with pytest.raises(engine.PlanningError, match="No available sharding type and compute kernel combination"):
        torchrec_sharding_plan(cfg)


def test_a_rank_short_of_ssd_is_refused_naming_the_table_and_the_rank():
    """The tutorial's large_table_0 (1 MiB of weights) on ranks of 1 MiB of SSD: it does not fit with its cache
    state (TorchRec's 4 + 16 x 0.2 bytes per row). The placement sees it (it tracks each rank's SSD as TorchRec's
    partitioner does): one line naming the table, the SSD it needs and the rank with the most free."""
    cfg = engine.parse_config(config(["key_value"], ["table_wise"], ssd_cap=2**20))
    with pytest.raises(engine.PlanningError) as e:
        engine.plan(cfg)
    msg = str(e.value)
    assert msg.startswith("Table 'large_table_0' does not fit: its key_value options find no ranks with the SSD "
                          "their pieces need (the largest piece 1.03 MiB at least; rank 0, the one with the most SSD "
                          "free, has 1.00 MiB of its 1.00 MiB).")
    assert "raise topology.ssd_cap" in msg and "\n" not in msg
    with pytest.raises(engine.PlanningError, match="large_table_0"):  # TorchRec refuses it too
        torchrec_sharding_plan(cfg)


def test_a_mixed_fleet_keeps_key_value_on_the_ranks_that_have_ssd():
    raw = config(["key_value"], ["table_wise"])
    raw["topology"]["custom_topology_data"] = {"ssd_cap": [0, 4 * GIB]}
    cfg = engine.parse_config(raw)
    plan = engine.plan(cfg)
    assert plan.tables["large_table_0"].ranks == (1,)
    need = ssd_by_rank(cfg, plan.tables)
    assert need[0] == 0 and need[1] == 4096 * 64 * 4 + np.ceil(4096 * (4 + 0.2 * 16))
    raw["constraints"]["large_table_0"]["sharding_types"] = ["row_wise"]  # a piece on every rank: rank 0 has none
    with pytest.raises(engine.PlanningError, match="large_table_0"):
        engine.plan(engine.parse_config(raw))


# ---- priced as TorchRec prices them, or from the miss curve ----------------------------------------------------


def _row_wise(raw: dict, kernel: str) -> engine.ComputeKernel:
    cfg = engine.parse_config(raw)
    opts = {o.kernel.value: o for o in table_options(cfg, 0) if o.sharding_type.value == "row_wise"}
    return cfg, opts["fused"], opts[kernel]


@pytest.mark.parametrize("kernel, bw", [("key_value", "ssd_mem_bw"), ("dram_virtual_table", "hbm_to_ddr_mem_bw")])
def test_lookups_run_at_torchrecs_bandwidth_for_the_kernel(kernel, bw):
    cfg, fused, kv = _row_wise(config(["fused", kernel], ["row_wise"]), kernel)
    topo = cfg.topology
    ratio = topo.hbm_mem_bw / getattr(topo, bw)
    assert np.allclose(kv.est.perf_ms[:, 0], fused.est.perf_ms[:, 0] * ratio)  # forward lookups
    assert np.allclose(kv.est.perf_ms[:, 1], fused.est.perf_ms[:, 1])  # communication: the same
    # HBM: the cache (20% of the rows, fbgemm's SSD TBE) and the buffers, not the table
    rows = kv.sizes[:, 0]
    weights = np.ceil(rows * 64 * 4)
    cache = np.round(weights * 0.2) + np.ceil(rows * (4 + 0.2 * 16))
    assert np.array_equal(kv.est.hbm_bytes, fused.est.hbm_bytes - weights + cache)
    assert not kv.est.ddr_bytes.any()


def test_a_measured_miss_curve_prices_hits_at_hbm_and_misses_at_the_backing_store():
    raw = config(["fused", "key_value"], ["row_wise"])
    raw["constraints"]["large_table_0"]["workload"] = {
        "from": {"file": "ids.parquet", "rows": 5000, "modified": "2026-11-27T00:10:00Z"}, "miss_ratio_curve": CURVE}
    cfg = engine.parse_config(raw)
    topo = cfg.topology
    kv = {o.clf: o for o in table_options(cfg, 0) if o.kernel.value == "key_value"}
    fused = next(o for o in table_options(cfg, 0) if o.kernel.value == "fused")
    assert sorted(kv) == pytest.approx([400 / 4096, 0.2, 2000 / 4096])  # the curve's sizes and the default
    for clf, o in kv.items():
        miss = miss_rate(cfg.constraint("large_table_0").workload, 4096, clf)
        assert 0.049 < miss <= 0.5
        bw = (1 - miss) * topo.hbm_mem_bw + miss * topo.ssd_mem_bw
        assert np.allclose(o.est.perf_ms[:, 0], fused.est.perf_ms[:, 0] * topo.hbm_mem_bw / bw)
    assert engine.plan(cfg).tables["large_table_0"].compute_kernel.value == "fused"  # HBM holds it: faster
    raw["constraints"]["large_table_0"]["compute_kernels"] = ["key_value"]
    tp = engine.plan(engine.parse_config(raw)).tables["large_table_0"]
    assert tp.compute_kernel.value == "key_value" and tp.cache_load_factor == 2000 / 4096  # the hot rows held
    assert tp.cache_note.startswith("cache load factor 0.4883 (2,000 rows, of 3 sizes tried from the curve)")


# ---- TorchRec's types and planner ------------------------------------------------------------------------------


CASES = {
    "row_wise key_value, a typed cache": (config(["key_value"], ["row_wise"]), {"cache_load_factor": 0.5}),
    "table_row_wise dram_virtual_table": (config(["dram_virtual_table"], ["table_row_wise"]), {}),
    "column_wise ssd_virtual_table": (config(["ssd_virtual_table"], ["column_wise"]), {"min_partition": 32}),
    "data_parallel beside dram_ssd_virtual_table": (
        config(["dram_ssd_virtual_table"], ["row_wise"]), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_our_sharding_plan_equals_torchrecs_planner_forced_to_the_same_choices(case):
    """Every ParameterSharding field (type, kernel, ranks, shards, placements, cache_params, key_value_params) of
    the offload table equals what TorchRec 1.8's EmbeddingShardingPlanner emits on the same config."""
    raw, extra = copy.deepcopy(CASES[case][0]), CASES[case][1]
    raw["constraints"]["large_table_0"].update(extra)
    cfg = engine.parse_config(raw)
    mine = to_sharding_plan(cfg, engine.plan(cfg).tables).plan[""]["large_table_0"]
    theirs = torchrec_sharding_plan(cfg).plan[""]["large_table_0"]
    assert theirs.compute_kernel == raw["constraints"]["large_table_0"]["compute_kernels"][0]
    assert mine == theirs


@pytest.mark.parametrize("world, buckets, st, kernel", [
    (3, 8, "row_wise", "dram_virtual_table"),  # 3, 3, 2 buckets of 512 rows
    (4, 16, "row_wise", "ssd_virtual_table"),
    (2, 4096, "row_wise", "dram_virtual_table"),  # a bucket per row
    (3, 8, "row_wise", "fused"),  # TorchRec cuts a virtual table by its buckets whatever the kernel
    (3, 8, "table_row_wise", "ssd_virtual_table"),  # ... and row_wise only: table_row_wise keeps the even cut
])
def test_a_bucketed_virtual_tables_sharding_plan_equals_torchrecs_planner_forced_to_the_same_choices(
        world, buckets, st, kernel):
    """A virtual table with total_num_buckets: its row_wise shards hold whole buckets, exactly as TorchRec 1.8's
    planner cuts them (sharding_plan._calculate_rw_shard_sizes_and_offsets with num_buckets), every ParameterSharding
    field equal; memory and cost are priced on the rows each shard holds."""
    raw = config([kernel], [st], virtual=True, world_size=world, local_world_size=world)
    raw["tables"][0]["total_num_buckets"] = buckets
    cfg = engine.parse_config(raw)
    plan = engine.plan(cfg)
    mine = to_sharding_plan(cfg, plan.tables).plan[""]["large_table_0"]
    theirs = torchrec_sharding_plan(cfg).plan[""]["large_table_0"]
    assert mine == theirs and theirs.compute_kernel == kernel and theirs.sharding_type == st
    rows = [s.sizes[0] for s in plan.tables["large_table_0"].shards]
    if st == "row_wise":
        q, extra = divmod(buckets, world)
        assert rows == [4096 // buckets * (q + (r < extra)) for r in range(world)]
    opt = next(o for o in table_options(cfg, 0) if o.sharding_type.value == st and o.kernel.value == kernel)
    assert opt.sizes[:, 0].tolist() == rows
    hbm = opt.est.hbm_bytes
    if kernel == "fused":  # the weights differ by the rows: (1536 - 1024) x 64 x 4 bytes between ranks 0 and 2
        assert hbm[0] - hbm[2] == (rows[0] - rows[2]) * 64 * 4 > 0


DMP = """
import json, sys, tempfile
import torch, torch.distributed as dist
import engine
from engine.torchrec_compat import build_ebc, sharders, to_sharding_plan
from torchrec.distributed.model_parallel import DistributedModelParallel
from tests.engine.test_tiers import config

kernel, st, table = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
raw = config([kernel], [st], world_size=1, local_world_size=1)
raw["tables"][0].update(table)
cfg = engine.parse_config(raw)
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
plan = engine.plan(cfg)
sharding = to_sharding_plan(cfg, plan.tables, "", device="cpu")
assert sharding.plan[""]["large_table_0"].compute_kernel == kernel
print(json.dumps(plan.notes))
DistributedModelParallel(build_ebc(cfg, "meta"), device=torch.device("cpu"), plan=sharding,
                         sharders=sharders(cfg, "cpu"))
print("built")
"""
NO_EVICTION = {"total_num_buckets": 16, "virtual_table_eviction_policy": {"type": "no_eviction"}}


@pytest.mark.parametrize("kernel, st, table, error", [
    ("key_value", "table_wise", {}, "AssertionError: Torch not compiled with CUDA enabled"),
    ("dram_ssd_virtual_table", "row_wise", {}, "not supported for EmbeddingBagCollection (pooled embeddings)"),
    # the virtual-table kernels on a virtual table: DMP's refusals in its order, the last what a CPU build lacks
    ("dram_virtual_table", "table_wise", NO_EVICTION, "AssertionError: Unexpected `None`"),
    ("ssd_virtual_table", "table_row_wise", NO_EVICTION, "AssertionError: Unexpected `None`"),
    ("dram_virtual_table", "column_wise", NO_EVICTION,
     "AssertionError: Try to create ZeroCollisionKeyValueEmbeddingBag for non virtual tables"),
    ("ssd_virtual_table", "row_wise", {}, "AssertionError: Unexpected `None`"),
    ("ssd_virtual_table", "row_wise", {"total_num_buckets": 16},
     "AssertionError: virtual_table_eviction_policy for kvzch table should not be None"),
    ("dram_virtual_table", "row_wise", {**NO_EVICTION, "virtual_table_eviction_policy": {"type": "count_based"}},
     "KeyError: 'l2_cache_size'"),
    ("ssd_virtual_table", "row_wise", NO_EVICTION, "AssertionError: Torch not compiled with CUDA enabled"),
    ("dram_virtual_table", "row_wise", NO_EVICTION, "AssertionError: Torch not compiled with CUDA enabled"),
])
def test_dmp_on_gloo_cpu_refuses_each_offload_kernel_with_the_error_the_plan_notes(kernel, st, table, error):
    """TorchRec 1.8 on gloo/CPU builds none of the four for an EmbeddingBagCollection; the error is pinned here and
    named in the plan's note (engine.tiers.RUN_LIMITS, VIRTUAL_NEEDS) and docs/estimator.md, 13. A virtual table with
    total_num_buckets and the no_eviction policy, sharded row_wise, gets as far as fbgemm's CUDA-only SSD TBE. When
    this test fails, TorchRec runs the kernel: measure it against the estimate as for the other kernels."""
    out = subprocess.run([sys.executable, "-c", DMP, kernel, st, json.dumps(table)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode != 0 and "built" not in out.stdout
    assert error in out.stderr, out.stderr[-2000:]
    note = next(n for n in json.loads(out.stdout.splitlines()[0]) if n.startswith(f"{kernel} (large_table_0)"))
    assert error.split(": ", 1)[-1].split(" (")[0] in note


def test_the_step_memory_holds_the_cache_in_hbm_and_not_the_table():
    """engine.memory's replay of DMP: an offload table's rank holds its HBM cache, not its weights or state."""
    raw = config(["fused"], ["table_wise"], optimizer="adagrad")
    raw["tables"] = [t for t in raw["tables"] if t["name"] == "large_table_0"]  # the table alone
    fused = engine.plan(engine.parse_config(raw))
    raw["constraints"]["large_table_0"]["compute_kernels"] = ["key_value"]
    kv = engine.plan(engine.parse_config(raw))
    r = kv.tables["large_table_0"].ranks[0]
    assert fused.tables["large_table_0"].ranks == (r,)
    weights = 4096 * 64 * 4
    a, b = fused.ranks[r].memory, kv.ranks[r].memory
    assert a.weights_bytes - b.weights_bytes == weights and a.optimizer_bytes - b.optimizer_bytes == weights
    assert b.cache_bytes - a.cache_bytes == round(weights * 0.2) + np.ceil(4096 * (4 + 0.2 * 16))
    assert b.peak_ddr_bytes == a.peak_ddr_bytes == 0


@pytest.mark.parametrize("seed", range(12))
def test_a_config_torchrecs_planner_plans_is_never_refused_by_ours(seed):
    """Seeded random configs over the new options (kernel lists with and without the offload tiers, sharding types,
    SSD per rank: the default, none, a mixed fleet's list, a small one; virtual tables, some bucketed): wherever
    TorchRec 1.8's planner finds a plan, ours finds one, and ours keeps every rank within its SSD."""
    rng = np.random.default_rng(seed)
    raw = tutorial()
    raw["topology"].update(world_size=4, local_world_size=2)
    ssd = rng.integers(4)
    if ssd == 1:
        raw["topology"]["ssd_cap"] = 0
    elif ssd == 2:
        raw["topology"]["custom_topology_data"] = {"ssd_cap": [int(x) for x in rng.choice([0, 8 * GIB], 4)]}
    elif ssd == 3:
        raw["topology"]["ssd_cap"] = int(rng.integers(2**20, 2**23))
    kinds = ["fused", "fused_uvm", "fused_uvm_caching", *KERNELS]
    types = ["table_wise", "row_wise", "column_wise", "table_row_wise"]
    raw["constraints"] = {}
    for t in raw["tables"]:
        if rng.random() < 0.7:
            raw["constraints"][t["name"]] = {
                "compute_kernels": sorted(set(rng.choice(kinds, int(rng.integers(1, 4))).tolist())),
                "sharding_types": sorted(set(rng.choice(types, int(rng.integers(1, 3))).tolist()))}
        t["use_virtual_table"] = bool(rng.random() < 0.5)
        if rng.random() < 0.5:  # whole buckets of the 1,024 or 4,096 rows, one per rank at least (TorchRec's rules)
            t["total_num_buckets"] = int(2 ** rng.integers(2, 11))
            t["virtual_table_eviction_policy"] = {"type": str(rng.choice(["no_eviction", "count_based"]))}
    for t in raw["tables"]:  # TorchRec's planner plans these and its DMP refuses them; ours refuses them by name
        kernels = raw["constraints"].get(t["name"], {}).get("compute_kernels", ["fused"])
        if not t["use_virtual_table"] and all(k.endswith("_virtual_table") for k in kernels):
            with pytest.raises(engine.ConfigError, match=f"on table '{t['name']}'"):
                engine.parse_config(raw)
            t["use_virtual_table"] = True
    cfg = engine.parse_config(raw)
    try:
        torchrec_sharding_plan(cfg)
    except engine.PlanningError:
        return  # TorchRec refuses it: ours may plan it or not (docs/estimator.md, 10)
    while True:  # a table whose only offered kernels are virtual-table ones: refused by name unless declared virtual
        try:
            plan = engine.plan(cfg)
            break
        except engine.PlanningError as e:
            name = e.tables[0]
            t = next(t for t in raw["tables"] if t["name"] == name)
            assert f"set use_virtual_table to true on table {name!r}" in str(e) and not t["use_virtual_table"]
            t["use_virtual_table"] = True
            cfg = engine.parse_config(raw)
    caps = [engine.ssd_cap_of(cfg.topology, r) for r in range(4)]
    assert all(need <= cap for need, cap in zip(ssd_by_rank(cfg, plan.tables), caps))


def test_the_plan_summary_says_the_ssd_and_torchrecs_estimator_scores_the_plan():
    cfg = engine.parse_config(config(["key_value"], ["row_wise"], ssd_cap=4 * 2**20))
    plan = engine.plan(cfg)
    text = engine.summary(plan, cfg)
    assert "SSD (key_value's backing store): 1.03 MiB over the ranks; rank 0 holds 526.40 KiB of 4.00 MiB" in text
    assert "SSD" not in engine.summary(engine.plan(engine.parse_config(tutorial())), engine.parse_config(tutorial()))
    costs = engine.torchrec_rank_costs(cfg, plan)  # TorchRec's EmbeddingPerfEstimator prices key_value too
    assert len(costs) == 2 and costs.min() > 0


def test_a_table_larger_than_hbm_and_ddr_together_plans_on_key_value_as_torchrec_plans_it():
    """16 MiB of weights on 2 ranks of 8 MiB HBM and 1 MiB DDR: too big for every kernel but the offload tiers, so
    the early size check (the command line's, before constraints are read, and the planner's) leaves out a table
    that lists one; listing none it is refused as before."""
    raw = {"tables": [{"name": "big", "num_embeddings": 65536, "embedding_dim": 64}],
           "constraints": {"big": {"compute_kernels": ["fused", "key_value"], "sharding_types": ["row_wise"]}},
           "topology": {"world_size": 2, "hbm_cap": 8 * 2**20, "ddr_cap": 2**20}}
    cfg = engine.parse_config(copy.deepcopy(raw), refuse_too_big=True)
    plan = engine.plan(cfg)
    assert plan.tables["big"].compute_kernel.value == "key_value"
    assert torchrec_sharding_plan(cfg).plan[""]["big"].compute_kernel == "key_value"
    raw["constraints"]["big"]["compute_kernels"] = ["fused"]
    with pytest.raises(engine.PlanningError, match="The tables do not fit"):
        engine.parse_config(copy.deepcopy(raw), refuse_too_big=True)
    raw["topology"]["ssd_cap"] = 0
    raw["constraints"]["big"]["compute_kernels"] = ["key_value"]  # not offered without SSD: counted again
    with pytest.raises(engine.PlanningError, match="The tables do not fit"):
        engine.plan(engine.parse_config(raw))
    raw["constraints"]["big"]["compute_kernels"] = ["fused", "dram_virtual_table"]  # not offered: not virtual
    with pytest.raises(engine.PlanningError, match="The tables do not fit"):
        engine.parse_config(copy.deepcopy(raw), refuse_too_big=True)
    raw["tables"][0]["use_virtual_table"] = True  # a virtual table: planned on it, as TorchRec plans it
    cfg = engine.parse_config(copy.deepcopy(raw), refuse_too_big=True)
    assert engine.plan(cfg).tables["big"].compute_kernel.value == "dram_virtual_table"
    assert torchrec_sharding_plan(cfg).plan[""]["big"].compute_kernel == "dram_virtual_table"


# ---- virtual tables: TorchRec's EmbeddingBagConfig.use_virtual_table ------------------------------------------


VIRTUAL = [k for k in KERNELS if k.endswith("_virtual_table")]


def test_a_virtual_table_reads_back_and_the_flag_is_written_only_where_set():
    raw = config(["fused", "ssd_virtual_table"])
    cfg = engine.parse_config(raw)
    assert cfg.table("large_table_0").use_virtual_table and not cfg.table("large_table_1").use_virtual_table
    out = engine.config_to_dict(cfg)
    assert [t.get("use_virtual_table") for t in out["tables"]] == [True, None, None, None]
    assert engine.parse_config(json.loads(json.dumps(out))) == cfg
    raw["tables"][0]["use_virtual_table"] = "yes"
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_config(raw)
    assert str(e.value).startswith("tables[0].use_virtual_table:") and "\n" not in str(e.value)


@pytest.mark.parametrize("kernel", VIRTUAL)
def test_a_table_not_declared_virtual_listing_only_virtual_kernels_is_refused_in_one_line(kernel):
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_config(config([kernel], ["row_wise"], virtual=False))
    msg = str(e.value)
    assert msg.startswith("constraints.large_table_0.compute_kernels: lists only virtual-table kernels")
    assert "set use_virtual_table to true on table 'large_table_0'" in msg and "\n" not in msg


def test_virtual_kernels_are_offered_to_virtual_tables_only_and_every_kernel_to_those():
    """A virtual table: every pair TorchRec's enumerator offers (every kernel, as TorchRec's). A table not declared
    virtual that lists them beside others: planned on the others; TorchRec's enumerator offers them to it too, and
    its DMP then refuses them (docs/estimator.md, 13)."""
    ours, theirs = kernels_of(config(["fused", "fused_uvm", *KERNELS]))
    assert ours - {("data_parallel", "dense")} == theirs - {("data_parallel", "dense")}
    assert {k for _, k in ours} >= {"fused", "fused_uvm", *VIRTUAL}
    ours, theirs = kernels_of(config(["fused", *KERNELS], virtual=False))
    assert {k for _, k in ours} == {"fused", "key_value", "dense"}
    assert ours - {("data_parallel", "dense")} == {p for p in theirs if p[1] not in VIRTUAL}
    assert {k for _, k in theirs} >= set(VIRTUAL)


def test_a_plan_file_with_a_virtual_kernel_for_a_table_not_declared_virtual_is_refused_naming_it():
    raw = config(["ssd_virtual_table"], ["table_wise"])
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(raw)))
    del raw["tables"][0]["use_virtual_table"]
    raw["constraints"] = {}
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_plan(plan, engine.parse_config(raw))
    msg = str(e.value)
    assert "large_table_0.compute_kernel: ssd_virtual_table runs only on tables declared virtual" in msg
    assert "set use_virtual_table to true on table 'large_table_0'" in msg and "\n" not in msg


def test_the_model_and_the_text_export_carry_use_virtual_table():
    from engine.torchrec_compat import build_ebc, torchrec_constraints

    cfg = engine.parse_config(config(["dram_virtual_table"], ["row_wise"]))
    flags = {c.name: c.use_virtual_table for c in build_ebc(cfg).embedding_bag_configs()}
    assert flags == {"large_table_0": True, "large_table_1": False, "small_table_0": False, "small_table_1": False}
    assert not torchrec_constraints(cfg)["large_table_0"].use_virtual_table  # docs/estimator.md, 13
    text = engine.torchrec_format(engine.plan(cfg), cfg)
    assert text.startswith("# EmbeddingBagConfig(..., use_virtual_table=True) for 'large_table_0'\n{'': {")
    assert "use_virtual_table" not in engine.torchrec_format(engine.plan(engine.parse_config(tutorial())),
                                                             engine.parse_config(tutorial()))
