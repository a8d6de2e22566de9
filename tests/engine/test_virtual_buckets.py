"""A virtual table's total_num_buckets and virtual_table_eviction_policy (TorchRec 1.8's BaseEmbeddingConfig fields;
engine/virtual.py): read and written back, checked at the door by TorchRec's own rules in one line naming the table
and the field, given to TorchRec's model, checked in plan files, and carried by the TorchRec-format text. The
bucketed shards against TorchRec's planner and DMP's refusals: tests/engine/test_tiers.py."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine
from engine.virtual import POLICIES
from tests.engine.test_tiers import config
from tests.factories import tutorial


def virtual(buckets: int | None = None, policy: dict | None = None, kernels=("dram_virtual_table",),
            types=("row_wise",), declared: bool = True, **topology) -> dict:
    """The tutorial's config with large_table_0 declared virtual (or not), its buckets, policy, kernels and types."""
    raw = config(list(kernels), list(types) if types else None, virtual=declared, **topology)
    if buckets is not None:
        raw["tables"][0]["total_num_buckets"] = buckets
    if policy is not None:
        raw["tables"][0]["virtual_table_eviction_policy"] = policy
    return raw


def refused(raw: dict) -> str:
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_config(raw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ---- read, written back, checked at the door --------------------------------------------------------------------


@pytest.mark.parametrize("policy", [
    {"type": "no_eviction"},
    {"type": "count_based", "eviction_threshold": 3, "decay_rate": 0.5},
    {"type": "timestamp_based", "eviction_ttl_mins": 60, "max_inference_id_num_per_rank": 1000},
    {"type": "feature_score_based", "feature_score_mapping": {"f1": 1.5, "f2": 0.0}, "enable_eviction": False},
    {"type": "feature_l2_norm_based", "eviction_threshold": 0.25},
    {"type": "count_timestamp_mixed", "inference_eviction_ttl_mins": 5},
])
def test_the_fields_read_back_and_are_written_only_where_set(policy):
    cfg = engine.parse_config(virtual(64, policy))
    t = cfg.table("large_table_0")
    assert t.total_num_buckets == 64 and t.virtual_table_eviction_policy.type == policy["type"]
    out = engine.config_to_dict(cfg)
    assert out["tables"][0]["total_num_buckets"] == 64 and out["tables"][0]["virtual_table_eviction_policy"] == policy
    assert "total_num_buckets" not in out["tables"][1] and "virtual_table_eviction_policy" not in out["tables"][1]
    assert engine.parse_config(json.loads(json.dumps(out))) == cfg


@pytest.mark.parametrize("change, start, words", [
    ({"total_num_buckets": 0}, "tables[0].total_num_buckets: must be from 1", ()),
    ({"total_num_buckets": "8"}, "tables[0].total_num_buckets: must be an integer", ()),
    ({"total_num_buckets": 100}, "tables[0].total_num_buckets: 100 buckets do not cut the 4,096 rows of table "
     "'large_table_0' into whole buckets", ("divisor of num_embeddings such as 4", "a multiple of 100 such as 4,100")),
    ({"total_num_buckets": 1}, "tables[0].total_num_buckets: 1 buckets are fewer than the 2 ranks of a row_wise "
     "split of table 'large_table_0'", ("give at least 2", "leave row_wise out of constraints.large_table_0")),
    ({"virtual_table_eviction_policy": "lru"}, "tables[0].virtual_table_eviction_policy: must be an object", ()),
    ({"virtual_table_eviction_policy": {"type": "lru"}}, "tables[0].virtual_table_eviction_policy.type: must be one "
     "of count_based, feature_score_based", ("no_eviction (TorchRec 1.8's eviction policies), got 'lru'",)),
    ({"virtual_table_eviction_policy": {"type": "count_based", "eviction_ttl_mins": 5}},
     "tables[0].virtual_table_eviction_policy.eviction_ttl_mins: is not a field of count_based; its fields: "
     "training_id_eviction_trigger_count, eviction_threshold", ()),
    ({"virtual_table_eviction_policy": {"type": "count_based", "decay_rate": -0.1}},
     "tables[0].virtual_table_eviction_policy.decay_rate: must be >= 0", ()),
    ({"virtual_table_eviction_policy": {"type": "feature_score_based", "feature_score_mapping": {"f": "high"}}},
     "tables[0].virtual_table_eviction_policy.feature_score_mapping.f: must be a number", ()),
])
def test_bad_values_are_refused_in_one_line_naming_the_table_the_field_and_the_fix(change, start, words):
    raw = virtual()
    raw["tables"][0].update(change)
    msg = refused(raw)
    assert msg.startswith(start), msg
    assert all(w in msg for w in words), msg


def test_the_rules_are_torchrecs_and_apply_where_torchrec_applies_them():
    """TorchRec 1.8 refuses fewer buckets than ranks and buckets that do not divide the rows in its row_wise cut, and
    reads total_num_buckets only for virtual tables: a config its planner plans is not refused here."""
    import torch
    from torchrec.distributed.sharding_plan import calculate_shard_sizes_and_offsets

    weights = torch.empty(4096, 64, device="meta")
    with pytest.raises(ValueError, match="must be >= the number of ranks"):
        calculate_shard_sizes_and_offsets(weights, 2, 2, "row_wise", num_buckets=1)
    with pytest.raises(AssertionError, match="must be divisible by num_buckets"):
        calculate_shard_sizes_and_offsets(weights, 2, 2, "row_wise", num_buckets=100)
    from engine.torchrec_compat import torchrec_sharding_plan

    for raw in (virtual(1, types=("table_wise",)),  # row_wise not planned: one bucket is fine
                virtual(100, kernels=("fused",), types=("row_wise",), declared=False)):
        cfg = engine.parse_config(raw)
        ours, theirs = engine.plan(cfg).tables["large_table_0"], torchrec_sharding_plan(cfg).plan[""]["large_table_0"]
        assert ours.sharding_type.value == theirs.sharding_type
    cfg = engine.parse_config(virtual(1, types=None, compute_device="cpu"))  # cpu: no row_wise unless listed
    assert engine.plan(cfg).tables["large_table_0"].sharding_type.value != "row_wise"


def test_2d_groups_count_the_groups_ranks():
    """2D sharding (DMPCollection): the plan, TorchRec's planner and the kernel's process group are one group's, so
    2 buckets on groups of 2 of a world of 4 are enough, and they are cut over the group's 2 ranks as TorchRec's."""
    from engine.torchrec_compat import to_sharding_plan, torchrec_sharding_plan

    raw = virtual(2, {"type": "no_eviction"}, world_size=4, local_world_size=4, sharding_group_size=2)
    cfg = engine.parse_config(raw)
    tables = engine.plan(cfg).tables
    assert [s.sizes[0] for s in tables["large_table_0"].shards] == [2048, 2048]
    ours = to_sharding_plan(cfg, tables).plan[""]["large_table_0"]
    assert ours == torchrec_sharding_plan(cfg).plan[""]["large_table_0"]
    del raw["topology"]["sharding_group_size"]
    assert "2 buckets are fewer than the 4 ranks" in refused(raw)


def test_a_table_not_declared_virtual_keeps_the_even_cut_as_torchrec():
    raw = virtual(8, kernels=("fused",), declared=False)
    cfg = engine.parse_config(raw)
    assert [s.sizes[0] for s in engine.plan(cfg).tables["large_table_0"].shards] == [2048, 2048]
    raw["constraints"]["large_table_0"]["sharding_types"] = ["row_wise"]
    raw["topology"].update(world_size=3, local_world_size=3)
    assert [s.sizes[0] for s in engine.plan(engine.parse_config(raw)).tables["large_table_0"].shards] == [1366] * 2 + [
        1364]


def test_our_policy_types_are_torchrecs_classes_with_their_fields():
    """Every VirtualTableEvictionPolicy subclass of TorchRec 1.8, each with its own fields (the base class's state
    apart), and TorchRec's object built from the block carries the values given."""
    from torchrec.modules import embedding_configs as ec

    classes = {c.__name__ for c in vars(ec).values()
               if isinstance(c, type) and issubclass(c, ec.VirtualTableEvictionPolicy) and
               c is not ec.VirtualTableEvictionPolicy}
    assert {cls for cls, _ in POLICIES.values()} == classes
    base = {f.name for f in dataclasses.fields(ec.VirtualTableEvictionPolicy)}
    for cls, fields in POLICIES.values():
        theirs = [f.name for f in dataclasses.fields(getattr(ec, cls)) if f.name not in base]
        assert sorted(theirs) == sorted(name for name, _ in fields), cls
    from engine.torchrec_compat import build_ebc

    cfg = engine.parse_config(virtual(64, {"type": "feature_score_based", "feature_score_mapping": {"f": 2.0},
                                           "training_id_keep_count": 7}))
    made = {c.name: c for c in build_ebc(cfg).embedding_bag_configs()}
    t = made["large_table_0"]
    assert t.use_virtual_table and t.total_num_buckets == 64
    p = t.virtual_table_eviction_policy
    assert type(p) is ec.FeatureScoreBasedEvictionPolicy and p.feature_score_mapping == {"f": 2.0}
    assert p.training_id_keep_count == 7 and p.decay_rate == 0.99  # TorchRec's default where left out
    assert made["large_table_1"].total_num_buckets is None and made["large_table_1"].virtual_table_eviction_policy \
        is None


# ---- plan files and the TorchRec-format text ------------------------------------------------------------------


def test_a_plan_file_cutting_a_bucketed_table_otherwise_is_refused_naming_the_shard_and_the_buckets():
    raw = virtual(8, {"type": "no_eviction"}, world_size=3, local_world_size=3)
    cfg = engine.parse_config(raw)
    plan = engine.plan_to_dict(engine.plan(cfg))
    assert engine.parse_plan(json.loads(json.dumps(plan)), cfg) == engine.plan(cfg).tables
    shards = plan["plan"]["large_table_0"]["shards"]
    assert [s["sizes"][0] for s in shards] == [1536, 1536, 1024]
    shards[1]["offsets"][0], shards[1]["sizes"][0] = 1366, 1366  # TorchRec's even cut: 1366, 1366, 1364
    shards[2]["offsets"][0], shards[2]["sizes"][0] = 2732, 1364
    shards[0]["sizes"][0] = 1366
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_plan(plan, cfg)
    msg = str(e.value)
    assert msg.startswith("plan.large_table_0.shards: shard 0 on rank 0 holds rows 0 to 1,366, but rank 0's buckets "
                          "of table 'large_table_0' (8 in all") and "are rows 0 to 1,536" in msg and "\n" not in msg


def test_the_text_export_names_each_virtual_tables_keywords():
    raw = virtual(64, {"type": "count_based", "eviction_threshold": 3})
    raw["tables"][1]["use_virtual_table"] = True
    cfg = engine.parse_config(raw)
    text = engine.torchrec_format(engine.plan(cfg), cfg)
    assert text.startswith(
        "# EmbeddingBagConfig(..., use_virtual_table=True, total_num_buckets=64, virtual_table_eviction_policy="
        "CountBasedEvictionPolicy(eviction_threshold=3)) for 'large_table_0'\n"
        "# EmbeddingBagConfig(..., use_virtual_table=True) for 'large_table_1'\n{'': {")
    assert engine.virtual_table_keywords(cfg.table("large_table_0")) == {
        "use_virtual_table": True, "total_num_buckets": 64,
        "virtual_table_eviction_policy": ("CountBasedEvictionPolicy", {"eviction_threshold": 3})}
    assert engine.virtual_table_keywords(cfg.table("small_table_0")) == {}
    plain = engine.parse_config(tutorial())
    assert "EmbeddingBagConfig" not in engine.torchrec_format(engine.plan(plain), plain)


# ---- the cut, over random tables ------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 16), st.integers(1, 64), st.integers(1, 4_000), st.integers(0, 3))
def test_the_bucketed_cut_is_torchrecs_tiles_the_table_and_its_shapes_agree(world, per_rank, bucket_rows, extra):
    """For any world, buckets (at least one per rank) and rows (whole buckets): our shards are TorchRec 1.8's
    calculate_shard_sizes_and_offsets with num_buckets, tile the table exactly, and the distinct shapes the planner
    prices count the same shards."""
    import torch
    from torchrec.distributed.sharding_plan import calculate_shard_sizes_and_offsets

    from engine.geometry import distinct_shapes, geometry
    from engine.types import ShardingType, TableConfig, Topology

    buckets = world * per_rank + min(extra, world - 1)
    table = TableConfig("t", buckets * bucket_rows, 8, ("f",), use_virtual_table=True, total_num_buckets=buckets)
    topo = Topology(world_size=world, local_world_size=world)
    offsets, sizes = geometry(table, ShardingType.ROW_WISE, topo)
    theirs = calculate_shard_sizes_and_offsets(torch.empty(table.num_embeddings, 8, device="meta"), world, world,
                                               "row_wise", num_buckets=buckets)
    assert (sizes.tolist(), offsets.tolist()) == (theirs[0], theirs[1])
    assert (offsets[1:, 0] == offsets[:-1, 0] + sizes[:-1, 0]).all() and sizes[:, 0].sum() == table.num_embeddings
    assert (sizes[:, 0] % bucket_rows == 0).all() and (sizes[:, 0] > 0).all()
    shapes, counts, n = distinct_shapes(table, ShardingType.ROW_WISE, topo)
    assert n == world and [tuple(s) for s in sizes.tolist()] == [s for s, c in zip(shapes, counts) for _ in range(c)]
