"""A re-plan after growth is a plan TorchRec takes: Criteo on 8 ranks with its three largest tables grown 2x,
re-planned from the first plan, converted to a ShardingPlan with TorchRec's own types and back."""

from torchrec.distributed.types import EnumerableShardingSpec, ParameterSharding, ShardingPlan, ShardMetadata

import engine
from bench.replan import grow_largest
from bench.suite import criteo_1tb
from engine.replan import read_old_plan, replan
from engine.torchrec_compat import from_sharding_plan, to_sharding_plan


def test_a_grown_criteo_replan_converts_to_a_torchrec_sharding_plan():
    raw = engine.config_to_dict(engine.parse_config(criteo_1tb(8)))
    old = read_old_plan(engine.plan_to_dict(engine.plan(engine.parse_config(raw))))
    cfg = engine.parse_config(grow_largest(raw))
    r = replan(cfg, old)
    assert r.plan.notes[0].startswith("re-planned from the earlier plan")
    assert all(rk.hbm_bytes <= rk.hbm_cap_bytes and rk.ddr_bytes <= rk.ddr_cap_bytes for rk in r.plan.ranks)
    sp = to_sharding_plan(cfg, r.plan.tables)
    assert isinstance(sp, ShardingPlan)
    module = sp.plan[""]
    for t in cfg.tables:
        ps = module[t.name]
        assert isinstance(ps, ParameterSharding) and ps.sharding_type == r.plan.tables[t.name].sharding_type.value
        if ps.sharding_spec is None:  # data-parallel: no shards
            continue
        assert isinstance(ps.sharding_spec, EnumerableShardingSpec)
        shards = ps.sharding_spec.shards
        assert all(isinstance(s, ShardMetadata) for s in shards)
        assert sum(s.shard_sizes[0] * s.shard_sizes[1] for s in shards) == t.num_embeddings * t.embedding_dim
        assert all(s.shard_offsets[0] + s.shard_sizes[0] <= t.num_embeddings
                   and s.shard_offsets[1] + s.shard_sizes[1] <= t.embedding_dim for s in shards)
        assert sorted({int(str(s.placement).split("rank:")[1].split("/")[0]) for s in shards}) == sorted(
            set(ps.ranks))
    assert from_sharding_plan(cfg, sp) == r.plan.tables
