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
from tests.factories import tutorial, within_memory, write

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
    raw["topology"]["custom_topology_data"] = {"hbm_cap": [8 * GIB, 2 * GIB], "ddr_cap": [64 * GIB, 32 * GIB],
                                               "ssd_cap": [0, 1024 * GIB]}
    cfg = parse_config(raw)
    custom = cfg.topology.custom_topology_data
    assert custom.hbm_cap == (8 * GIB, 2 * GIB) and custom.ddr_cap == (64 * GIB, 32 * GIB)
    assert custom.ssd_cap == (0, 1024 * GIB)
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
    ({"ssd_cap": [GIB]}, "topology.custom_topology_data.ssd_cap", "world_size 2 entries), got 1 entries"),
    ({"hdd_cap": [GIB, GIB]}, "topology.custom_topology_data.hdd_cap",
     "unknown field; known fields: hbm_cap, ddr_cap, ssd_cap"),
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


def test_the_same_capacity_in_every_ranks_list_plans_as_without_the_lists():
    raw = tutorial("row_wise")
    raw["tables"][0]["num_embeddings"] += 1  # an odd number of rows: a cut by memory share would differ
    same = copy.deepcopy(raw)
    same["topology"]["custom_topology_data"] = {"hbm_cap": [32 * GIB] * 2, "ddr_cap": [128 * GIB] * 2}
    plain, custom = engine.plan(parse_config(raw)), engine.plan(parse_config(same))
    assert plain.tables == custom.tables and plain.ranks == custom.ranks


def test_row_wise_keeps_the_even_cut_where_torchrecs_planner_cuts_by_memory_share():
    """TorchRec's planner, given the lists, cuts row_wise rows in proportion to each rank's memory
    (_calculate_uneven_rw_shard_sizes_and_offsets); DMP 1.8 then routes ids in even blocks (the next test), so
    ours keeps TorchRec's even cut, ceil(rows / ranks), which DMP looks up right (docs/estimator.md)."""
    raw = mixed(num_tables=4)
    raw["constraints"] = {t["name"]: {"sharding_types": ["row_wise"], "compute_kernels": ["fused"]}
                          for t in raw["tables"]}
    cfg = parse_config(raw)
    mine = to_sharding_plan(cfg, engine.plan(cfg).tables).plan[""]
    theirs = torchrec_sharding_plan(cfg).plan[""]
    for t in cfg.tables:
        rows = [m.shard_sizes[0] for m in mine[t.name].sharding_spec.shards]
        assert rows[:3] == [-(-t.num_embeddings // 4)] * 3
        rows = [m.shard_sizes[0] for m in theirs[t.name].sharding_spec.shards]
        assert rows[0] > 3 * rows[2]  # a big rank four times a small rank's rows (less rounding)
    assert within_memory(cfg, torchrec_plan(cfg))  # TorchRec's uneven plan, read as ours and scored


def test_distributed_model_parallel_runs_ours_on_a_mixed_fleet_and_torchrecs_cut_by_memory_pools_wrong_rows(
        tmp_path):
    """Two gloo/CPU processes shard the tutorial's EBC with DMP from a plan file and pool known weights: our plan
    of a mixed fleet exactly; TorchRec's planner's own plan of it (rows cut 1 : 3 by memory) runs without an error
    but pools other rows than it holds: TorchRec 1.8's RwSparseFeaturesDist buckets ids in even blocks of
    ceil(rows / world_size) whatever the shards' sizes. When this stops failing TorchRec routes uneven cuts."""
    from tests.engine.test_dmp_gloo import expected_pieces, spawn

    raw = tutorial("row_wise")
    raw["topology"]["custom_topology_data"] = {"hbm_cap": [GIB, 3 * GIB]}
    config_path = write(tmp_path, raw)
    cfg = engine.load_config(config_path)
    for who, plan in (("ours", engine.plan(cfg)), ("torchrec", torchrec_plan(cfg))):
        rows = [s.sizes[0] for s in plan.tables["large_table_0"].shards]
        assert rows == ([2048, 2048] if who == "ours" else [1024, 3072])
        (tmp_path / who).mkdir()
        reports = spawn(config_path, write(tmp_path / who, engine.plan_to_dict(plan), "plan.json"), tmp_path / who)
        errors = [max(rep["max_abs_error"].values()) for rep in reports]
        for rank, rep in enumerate(reports):
            assert rep["local_shards"] == expected_pieces(cfg, plan, rank)
        assert max(errors) < 1e-5 if who == "ours" else min(errors) > 0.1, (who, errors)


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


def test_torchrec_gets_the_ssd_tier_per_rank_and_its_bandwidth():
    raw = mixed(num_tables=2, ssd_cap=[0, 0, 512 * GIB, 2**40])
    raw["topology"]["ssd_mem_bw"] = 2e6
    cfg = parse_config(raw)
    topo = torchrec_topology(cfg)
    assert [d.storage.ssd for d in topo.devices] == [0, 0, 512 * GIB, 2**40]
    assert topo.ssd_mem_bw == 2e6
    plain = torchrec_topology(parse_config(tutorial()))
    assert [d.storage.ssd for d in plain.devices] == [2 * 2**40] * 2  # TorchRec's SSD_CAP on every rank, as ours
    assert parse_config(tutorial()).topology.ssd_cap == 2 * 2**40 and plain.ssd_mem_bw == 100 * 2**20 / 1000


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


def test_torchrecs_cut_by_memory_may_give_a_rank_an_empty_shard_first_and_its_plan_file_reads_back():
    """int(rows x share) is 0 on a rank whose share is small: TorchRec's planner gives it an empty row_wise shard
    before the rows; as a plan file (a baseline saved in the store) it reads back (found by the property test when
    our planner cut that way too)."""
    raw = tutorial("row_wise")
    raw["tables"][0]["num_embeddings"] = 3
    raw["topology"]["custom_topology_data"] = {"hbm_cap": [GIB, 32 * GIB]}
    cfg = parse_config(raw)
    theirs = torchrec_plan(cfg)
    name = cfg.tables[0].name
    assert [(s.offsets, s.sizes) for s in theirs.tables[name].shards] == [((0, 0), (0, 64)), ((0, 0), (3, 64))]
    assert engine.parse_plan(engine.plan_to_dict(theirs), cfg) == theirs.tables
