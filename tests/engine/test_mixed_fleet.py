"""Mixed fleets: topology.custom_topology_data gives each rank its own HBM / DDR capacity (TorchRec's
CustomTopologyData). Read and written back at the door, every rank kept within its own capacity by our planner,
exported to TorchRec's Topology, and TorchRec's own planner run on the same input as the baseline."""

import copy
import dataclasses

import pytest
from torchrec.distributed.planner.types import CustomTopologyData

import engine
from engine import ConfigError, config_to_dict, parse_config
from engine.capacity import usable_hbm_of
from engine.torchrec_compat import to_sharding_plan, torchrec_plan, torchrec_sharding_plan, torchrec_topology
from engine.torchrec_costs import torchrec_rank_costs
from tests.factories import tutorial, within_memory

GIB = 2**30
BIG, SMALL = 4 * GIB, GIB  # two ranks of each: the small ones have a quarter of the HBM


def mixed(num_tables: int = 24, seed: int = 5, **custom) -> dict:
    """Seeded tables (4.9 GiB of weights) on 2 hosts of 2 ranks; ranks 2 and 3 have a quarter of the HBM."""
    from bench.suite import synthetic

    raw = synthetic(num_tables, 4, seed=seed, max_rows=2e6, local_world_size=2)
    raw["topology"]["custom_topology_data"] = custom or {"hbm_cap": [BIG, BIG, SMALL, SMALL]}
    return raw


# ---- the config field -------------------------------------------------------------------------------------------


def test_custom_topology_data_round_trips_and_absent_leaves_the_topology_as_it_was():
    raw = tutorial()
    raw["topology"]["custom_topology_data"] = {"hbm_cap": [8 * GIB, 2 * GIB], "ddr_cap": [64 * GIB, 32 * GIB]}
    cfg = parse_config(raw)
    custom = cfg.topology.custom_topology_data
    assert custom.hbm_cap == (8 * GIB, 2 * GIB) and custom.ddr_cap == (64 * GIB, 32 * GIB)
    written = config_to_dict(cfg)
    assert written["topology"]["custom_topology_data"] == raw["topology"]["custom_topology_data"]
    assert parse_config(copy.deepcopy(written)) == cfg
    plain = config_to_dict(parse_config(tutorial()))
    assert "custom_topology_data" not in plain["topology"]  # configs without it keep their exact form
    raw["topology"]["custom_topology_data"] = {}
    assert parse_config(raw).topology == parse_config(tutorial()).topology  # {}: every rank alike


@pytest.mark.parametrize("custom, field, words", [
    ({"hbm_cap": [GIB]}, "topology.custom_topology_data.hbm_cap",
     "must list one capacity in bytes per rank (world_size 2 entries), got 1 entries"),
    ({"ddr_cap": [GIB, GIB, GIB]}, "topology.custom_topology_data.ddr_cap", "world_size 2 entries), got 3 entries"),
    ({"hbm_cap": 8 * GIB}, "topology.custom_topology_data.hbm_cap", "per rank (world_size 2 entries), got a number"),
    ({"hbm_cap": [GIB, -1]}, "topology.custom_topology_data.hbm_cap[1]", "must be from 0 to"),
    ({"hbm_cap": [1.5, GIB]}, "topology.custom_topology_data.hbm_cap[0]", "must be an integer, got 1.5"),
    ({"hbm_cap": ["8GiB", GIB]}, "topology.custom_topology_data.hbm_cap[0]", "must be an integer, got a string"),
    ({"ssd_cap": [GIB, GIB]}, "topology.custom_topology_data.ssd_cap", "unknown field; known fields: hbm_cap, ddr_cap"),
    ([GIB, GIB], "topology.custom_topology_data", "must be an object, got a list"),
])
def test_bad_custom_topology_data_is_one_line_naming_the_field(custom, field, words):
    raw = tutorial()
    raw["topology"]["custom_topology_data"] = custom
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert e.value.field == field
    assert words in str(e.value) and "\n" not in str(e.value)


# ---- our planner ----------------------------------------------------------------------------------------------


def test_each_rank_is_kept_within_its_own_capacity_and_reports_it():
    cfg = parse_config(mixed())
    plan = engine.plan(cfg)
    caps = [usable_hbm_of(cfg.topology, r) for r in range(4)]
    assert caps[2] == caps[3] < caps[0] // 3  # the small ranks' own usable HBM (85% of 1 GiB)
    assert [r.hbm_cap_bytes for r in plan.ranks] == caps
    assert [r.memory.reserved_bytes for r in plan.ranks] == [BIG - caps[0]] * 2 + [SMALL - caps[2]] * 2
    assert within_memory(cfg, plan)
    # the small ranks are used, not left empty, and the tables need more than four small ranks could hold
    assert all(r.hbm_bytes > caps[2] / 2 for r in plan.ranks[2:])
    assert sum(r.hbm_bytes for r in plan.ranks) > 4 * caps[2]


def test_same_capacity_on_every_rank_plans_as_without_the_lists_but_row_wise_cut_by_memory():
    """Equal lists change nothing but the row-wise cut, which TorchRec makes by memory share whenever the lists
    are given (int(rows x share) per rank, the rest on the last)."""
    raw = tutorial("row_wise")
    raw["tables"][0]["num_embeddings"] += 1  # an odd number of rows: the two cuts differ
    same = copy.deepcopy(raw)
    same["topology"]["custom_topology_data"] = {"hbm_cap": [raw["topology"].get("hbm_cap", 32 * GIB)] * 2}
    plain, custom = engine.plan(parse_config(raw)), engine.plan(parse_config(same))
    assert {n: (t.sharding_type, t.ranks) for n, t in plain.tables.items()} == \
        {n: (t.sharding_type, t.ranks) for n, t in custom.tables.items()}
    odd = raw["tables"][0]["name"]
    assert [s.sizes[0] for s in plain.tables[odd].shards] == [2049, 2048]  # ceil(rows / 2) first
    assert [s.sizes[0] for s in custom.tables[odd].shards] == [2048, 2049]  # int(rows / 2), the rest last


def test_row_wise_rows_follow_each_ranks_memory_as_torchrecs_planner_cuts_them():
    raw = mixed(num_tables=4)
    raw["constraints"] = {t["name"]: {"sharding_types": ["row_wise"], "compute_kernels": ["fused"]}
                          for t in raw["tables"]}
    cfg = parse_config(raw)
    mine = to_sharding_plan(cfg, engine.plan(cfg).tables).plan[""]
    theirs = torchrec_sharding_plan(cfg).plan[""]
    for t in cfg.tables:
        rows = [m.shard_sizes[0] for m in mine[t.name].sharding_spec.shards]
        assert rows[0] > 3 * rows[2]  # a big rank takes four times a small rank's rows (less rounding)
        assert mine[t.name] == theirs[t.name], t.name  # every ParameterSharding field, placements included


def test_a_table_too_big_for_the_small_ranks_is_refused_naming_the_rank_and_its_capacity():
    raw = mixed(num_tables=4)
    big = raw["tables"][0]
    big["num_embeddings"], big["embedding_dim"] = 2_000_000, 128  # 0.95 GiB: a replica fits only the big ranks
    raw["constraints"][big["name"]] = {"sharding_types": ["data_parallel"]}
    with pytest.raises(engine.PlanningError) as e:
        engine.plan(parse_config(raw))
    text = str(e.value)
    assert f"Table {big['name']!r} does not fit" in text
    assert "2 of 4 ranks have no room for it; rank 2's own capacity is 870.40 MiB HBM" in text, text
    assert "raise rank 2's capacity in topology.custom_topology_data" in text
    assert "\n" not in e.value.message


def test_tables_too_big_for_all_ranks_together_count_each_ranks_own_capacity():
    raw = mixed(hbm_cap=[GIB // 2] + [GIB // 4] * 3, ddr_cap=[GIB // 4] * 3 + [GIB // 2])  # the default: 32 GiB
    with pytest.raises(engine.PlanningError) as e:
        engine.plan(parse_config(raw))
    assert "the 4 ranks have 1.06 GiB HBM + 1.25 GiB DDR usable" in str(e.value)  # 85% of HBM: 0.85 x 1.25 GiB
    assert "raise the ranks' capacities in topology.custom_topology_data" in str(e.value)


# ---- TorchRec: its Topology, its types, its planner as the baseline -------------------------------------------


def test_torchrec_gets_the_same_capacities_per_rank():
    cfg = parse_config(mixed())
    topo = torchrec_topology(cfg)
    assert [d.storage.hbm for d in topo.devices] == [BIG, BIG, SMALL, SMALL]
    assert [d.storage.ddr for d in topo.devices] == [cfg.topology.ddr_cap] * 4
    assert isinstance(topo._custom_topology_data, CustomTopologyData)


def test_ours_and_torchrecs_planner_both_plan_within_each_rank_and_ours_is_not_slower():
    """The same mixed input to both planners; both plans scored by both estimators, as bench does."""
    cfg = parse_config(mixed())
    ours, theirs = engine.plan(cfg), torchrec_plan(cfg)
    assert within_memory(cfg, ours) and within_memory(cfg, theirs)
    to_sharding_plan(cfg, ours.tables)  # TorchRec's ParameterSharding / EnumerableShardingSpec accept it
    assert ours.max_rank_cost_ms <= theirs.max_rank_cost_ms * (1 + 1e-9)
    ours_tr, theirs_tr = torchrec_rank_costs(cfg, ours).max(), torchrec_rank_costs(cfg, theirs).max()
    assert ours_tr <= theirs_tr * (1 + 1e-9)


def test_a_sweep_of_a_mixed_fleet_gives_every_rank_the_swept_gpu():
    """The capacity sweep sizes every rank as one accelerator: a mixed fleet's lists (one entry per rank of the
    config's world size) are dropped there, not indexed past their end."""
    from engine.sweep import ACCELERATORS

    cfg = parse_config(mixed())
    topo = ACCELERATORS["a100_40gb"].topology(cfg.topology, 16, 512)
    assert topo.custom_topology_data is None and topo.world_size == 16
    plan = engine.plan(dataclasses.replace(cfg, topology=topo), engine.PlannerSettings(effort=2000))
    assert len(plan.ranks) == 16 and {r.hbm_cap_bytes for r in plan.ranks} == {int(topo.hbm_cap * 0.85)}


def test_a_small_table_cut_by_memory_leaves_ranks_empty_shards_that_the_plan_file_reads_back():
    """int(rows x share) is 0 on a rank whose share is small: TorchRec's cut gives it an empty shard before the
    rows (found by tests/engine/test_properties.py); the plan file holds it and reads it back."""
    raw = tutorial("row_wise")
    raw["tables"][0]["num_embeddings"] = 3
    raw["topology"]["custom_topology_data"] = {"hbm_cap": [GIB, 32 * GIB]}
    cfg = parse_config(raw)
    plan = engine.plan(cfg)
    name = cfg.tables[0].name
    shards = plan.tables[name].shards
    assert [(s.offsets, s.sizes) for s in shards] == [((0, 0), (0, 64)), ((0, 0), (3, 64))]
    assert [(list(m.shard_offsets), list(m.shard_sizes)) for m in
            torchrec_sharding_plan(cfg).plan[""][name].sharding_spec.shards] == [([0, 0], [0, 64]), ([0, 0], [3, 64])]
    assert engine.parse_plan(engine.plan_to_dict(plan), cfg)[name] == plan.tables[name]
