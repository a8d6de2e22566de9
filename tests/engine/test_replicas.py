"""2D sharding (topology.sharding_group_size, TorchRec 1.8's DMPCollection): read and written once, planned on one
group's ranks, priced with the cross-group sync, reported, swept (engine/replicas.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import engine
from engine import replicas
from engine.errors import ConfigError
from engine.sweep import sweep
from tests.factories import ROOT, tutorial, with_changes, write


def config(world: int = 8, local: int = 4, group: int | None = 4, optimizer: str = "sgd", **topo) -> engine.Config:
    extra = {} if group is None else {"sharding_group_size": group}
    return engine.parse_config(with_changes(tutorial(), world_size=world, local_world_size=local,
                                            optimizer=optimizer, **extra, **topo))


@pytest.mark.parametrize("bad, message", [
    (3, "topology.sharding_group_size: must divide world_size (8) evenly, got 3"),
    (16, "topology.sharding_group_size: must divide world_size (8) evenly, got 16"),
    (0, "topology.sharding_group_size: must be from 1 to"),
    ("two", "topology.sharding_group_size: must be an integer"),
])
def test_a_bad_group_size_is_one_line_naming_the_field(bad, message):
    with pytest.raises(ConfigError) as e:
        config(group=bad)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_the_cli_says_a_bad_group_size_in_one_line(tmp_path):
    path = write(tmp_path, with_changes(tutorial(), world_size=8, local_world_size=4, sharding_group_size=3))
    out = subprocess.run([sys.executable, "-m", "engine", "plan", str(path)], cwd=ROOT, capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "topology.sharding_group_size" in out.stderr


def test_groups_on_a_mixed_fleet_are_refused_in_one_line_and_the_sweep_says_why():
    cfg = with_changes(tutorial(), world_size=16, local_world_size=8, sharding_group_size=8,
                       rank_devices=[{"ranks": 8, "device": "h100_80gb"}, {"ranks": 8, "device": "a100_80gb"}])
    with pytest.raises(ConfigError) as e:
        engine.parse_config(cfg)
    assert str(e.value).startswith("topology.sharding_group_size") and "rank_devices" in str(e.value)
    cfg["topology"].pop("sharding_group_size")
    points = sweep(engine.parse_config(cfg), ["8 h100_80gb + 8 a100_80gb"], [16], group_sizes=[None, 8])
    assert [p.planned for p in points] == [True, False] and "mixed fleet" in points[1].reason


def test_the_field_is_written_only_when_given_and_reads_back():
    flat, grouped = config(group=None), config(group=4)
    assert "sharding_group_size" not in engine.config_to_dict(flat)["topology"]
    assert engine.config_to_dict(grouped)["topology"]["sharding_group_size"] == 4
    assert engine.parse_config(engine.config_to_dict(grouped)) == grouped


def test_a_group_of_the_whole_world_plans_as_without_the_field():
    flat = engine.plan(config(group=None))
    whole = engine.plan(config(group=8))
    assert engine.plan_to_dict(dataclasses.replace(whole, planning_seconds=None)) == \
        engine.plan_to_dict(dataclasses.replace(flat, planning_seconds=None))


def test_the_plan_is_one_groups_and_says_group_and_replicas():
    cfg = config(world=8, local=4, group=4)
    p = engine.plan(cfg)
    assert len(p.ranks) == 4
    assert all(r < 4 for tp in p.tables.values() for r in tp.ranks)
    assert p.notes[0].startswith("2D sharding: the plan is one group of 4 ranks; 2 replicas over 8 ranks")
    text = engine.summary(p, cfg)
    assert "2D sharding: the plan is one group of 4 ranks; 2 replicas" in text
    assert "Memory per replica" in text and "replica_sync_ms" in text
    # the plan file carries it, and reads back against the config
    data = json.loads(json.dumps(engine.plan_to_dict(p)))
    assert any("2 replicas" in n for n in data["notes"])
    assert engine.read_plan_file(data, cfg).tables == p.tables


@pytest.mark.parametrize("pin, message", [
    ({"ranks": [5]}, "constraints.large_table_0.ranks: rank 5 is outside the sharding group of 4 (2D: a pin names a "
                     "group's ranks 0-3)"),
    ({"hosts": [2]}, "constraints.large_table_0.hosts: host 2 does not exist: 2 host(s) of 2 ranks"),
])
def test_pins_name_a_groups_ranks_and_hosts(pin, message):
    raw = with_changes(tutorial(), world_size=8, local_world_size=4, sharding_group_size=4)
    raw["constraints"] = {"large_table_0": pin}
    with pytest.raises(ConfigError) as e:
        engine.parse_config(raw)
    assert str(e.value) == message
    raw["constraints"] = {"large_table_0": {"ranks": [3]}}
    assert engine.plan(engine.parse_config(raw)).tables["large_table_0"].ranks == (3,)


def test_a_plan_file_past_the_group_is_refused_by_rank():
    cfg = config(world=8, local=4, group=2)
    p = engine.plan(cfg)
    data = engine.plan_to_dict(p)
    name = next(iter(data["plan"]))
    data["plan"][name] = {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [3],
                          "shards": [{"offsets": [0, 0], "sizes": [cfg.table(name).num_embeddings,
                                                                   cfg.table(name).embedding_dim], "rank": 3}]}
    with pytest.raises(ConfigError, match="rank 3"):
        engine.read_plan_file(data, cfg)


def _sync_free(cfg: engine.Config, tables) -> engine.Plan:
    """The same tables scored on the group's topology without the sync term."""
    topo = dataclasses.replace(replicas.group_topology(cfg.topology), sync_ms_per_byte=0.0)
    return engine.evaluate(dataclasses.replace(cfg, topology=topo), tables)


@pytest.mark.parametrize("optimizer, state_bytes_per_row", [("sgd", 0), ("rowwise_adagrad", 4), ("adagrad", 4 * 64),
                                                            ("adam", 0)])
def test_the_sync_is_the_whole_shard_all_reduced_across_replicas(optimizer, state_bytes_per_row):
    """replica_sync_ms = (weights + Adagrad's "sum" state) x 2 (R - 1) / R / bandwidth, within a host here (4
    replicas of consecutive ranks on hosts of 4), by hand for a table placed whole on plan rank 1."""
    cfg = config(world=8, local=4, group=2, optimizer=optimizer)
    tables = {t.name: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (i % 2,),
                                       (engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), i % 2),))
              for i, t in enumerate(cfg.tables)}
    with_sync, without = engine.evaluate(cfg, tables), _sync_free(cfg, tables)
    r = 4
    expect = np.zeros(2)
    for i, t in enumerate(cfg.tables):
        expect[i % 2] += (t.num_embeddings * t.embedding_dim * 4 + t.num_embeddings * state_bytes_per_row) \
            * 2 * (r - 1) / r / cfg.topology.intra_host_bw
    got = [a.perf.bwd_comms - b.perf.bwd_comms for a, b in zip(with_sync.ranks, without.ranks)]
    assert got == pytest.approx(expect, rel=1e-9)
    assert replicas.rank_sync_ms(cfg, tables) == pytest.approx(expect, rel=1e-9)
    assert [a.hbm_bytes for a in with_sync.ranks] == [b.hbm_bytes for b in without.ranks]  # no memory added


def test_replica_groups_across_hosts_pay_the_network():
    """8 replicas on hosts of 4 ranks: each replica group (8 consecutive ranks) spans two hosts."""
    inside, across = config(world=16, local=8, group=2), config(world=16, local=4, group=2)
    assert replicas.sync_in_host(inside.topology) and not replicas.sync_in_host(across.topology)
    tables = engine.plan(inside).tables
    ratio = replicas.rank_sync_ms(across, tables) / replicas.rank_sync_ms(inside, tables)
    assert ratio == pytest.approx([inside.topology.intra_host_bw / inside.topology.inter_host_bw] * 2)


def test_the_group_is_planned_with_the_mesh_s_hosts_and_each_rank_s_least_capacity():
    """DMPCollection's default mesh puts plan rank r of group g on world rank r * R + g: with 2 replicas on hosts of
    4, a group has 2 ranks per host, and plan rank 1 is world ranks 2 and 3 (the smaller of their HBM)."""
    hbm = [80, 80, 40, 80, 80, 80, 80, 80]
    cfg = config(world=8, local=4, group=4, custom_topology_data={"hbm_cap": [h << 30 for h in hbm]})
    g = replicas.group_topology(cfg.topology)
    assert (g.world_size, g.local_world_size, g.sharding_group_size) == (4, 2, None)
    assert [c >> 30 for c in g.custom_topology_data.hbm_cap] == [80, 40, 80, 80]
    assert [replicas.global_rank(cfg.topology, 1, grp) for grp in (0, 1)] == [2, 3]


def test_the_sweep_explores_group_sizes_and_says_which_do_not_divide():
    cfg = config(group=None)
    points = sweep(cfg, ["h100_80gb"], [8], group_sizes=[None, 2, 3, 4],
                   settings=engine.PlannerSettings(effort=500))
    assert [(p.group_size, p.replicas, p.planned) for p in points] == \
        [(None, 1, True), (2, 4, True), (3, 2, False), (4, 2, True)]
    assert points[2].reason == "sharding_group_size 3 does not divide 8 ranks"
    assert len({p.step_ms for p in points if p.planned}) == 3  # each group size planned on its own
    from engine.sweep import table
    assert "2x4" in table(points) and "4x2" in table(points)


def test_a_groups_spanning_more_hosts_keeps_the_worlds_device_profile():
    """16 replicas on hosts of 8: each group's 2 ranks sit on 2 hosts while the world has 4; the published fixed
    costs of the world still price the group's plan (engine.profile applies a profile to its host count only)."""
    cfg = engine.parse_config(with_changes(tutorial(), world_size=32, local_world_size=8, sharding_group_size=2,
                                           profile="published"))
    g = replicas.group_topology(cfg.topology)
    assert (g.num_hosts, cfg.topology.num_hosts) == (2, 4)
    assert g.profile.applies(g) and g.profile.step_ms == cfg.topology.profile.step_ms


def test_on_a_2d_config_ours_is_no_slower_than_torchrecs_by_our_estimator():
    """TorchRec 1.8's planner on the group's topology (what DMPCollection wants), scored by our estimator with the
    same sync term: our plan's slowest rank is no slower."""
    cfg = config(world=8, local=4, group=4, optimizer="rowwise_adagrad")
    theirs = engine.torchrec_planner()(cfg)
    assert len(theirs.ranks) == 4
    ours = engine.plan(cfg)
    assert ours.max_rank_cost_ms <= theirs.max_rank_cost_ms * (1 + 1e-9)
    # and TorchRec's estimator (no sync term: it prices one DMP) scores the group's 4 ranks of either plan
    assert len(engine.torchrec_rank_costs(cfg, ours)) == len(engine.torchrec_rank_costs(cfg, theirs)) == 4


def test_validate_refuses_a_2d_plan_in_one_line_and_the_dry_run_measures_one_group(tmp_path):
    cfg = config(world=4, local=4, group=2, compute_device="cpu")
    config_path = write(tmp_path, engine.config_to_dict(cfg))
    plan_path = write(tmp_path, engine.plan_to_dict(engine.plan(cfg)), "plan.json")
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "engine", "validate", str(config_path), "--plan", str(plan_path),
                          "--device", "cpu", "--out-dir", str(tmp_path / "run")], cwd=ROOT, capture_output=True,
                         text=True, env=env)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "topology.sharding_group_size: validation runs DistributedModelParallel" in out.stderr
    dry = subprocess.run([sys.executable, "-m", "engine", "dryrun", str(config_path), "--plan", str(plan_path),
                          "--json", "--iters", "1", "--warmup", "0"], cwd=ROOT, capture_output=True, text=True,
                         env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert len(json.loads(dry.stdout)["ranks"]) == 2



@settings(max_examples=20, deadline=None)
@given(hosts=st.sampled_from([1, 2, 4]), local=st.sampled_from([1, 2, 4]), copies=st.sampled_from([1, 2, 4, 8]),
       optimizer=st.sampled_from(["sgd", "rowwise_adagrad", "adagrad"]), seed=st.integers(0, 2**16))
def test_any_grouped_plan_stays_in_its_group_and_prices_its_sync(hosts, local, copies, optimizer, seed):
    """Over random worlds and group sizes: the plan has the group's ranks, every piece within them, evaluate gives
    the planner's figures, and the bwd_comms the sync adds are rank_sync_ms."""
    world = hosts * local
    assume(world % copies == 0)
    rng = np.random.default_rng(seed)
    raw = {"tables": [{"name": f"t{i}", "num_embeddings": int(rng.integers(1, 5000)),
                       "embedding_dim": int(rng.choice([4, 16, 64, 128]))} for i in range(int(rng.integers(1, 6)))],
           "constraints": {}, "topology": {"world_size": world, "local_world_size": local, "optimizer": optimizer,
                                           "sharding_group_size": world // copies}}
    cfg = engine.parse_config(raw)
    p = engine.plan(cfg, engine.PlannerSettings(effort=300))
    size = world // copies
    assert len(p.ranks) == size and all(r < size for tp in p.tables.values() for r in tp.ranks)
    assert [r.cost_ms for r in engine.evaluate(cfg, p.tables).ranks] == [r.cost_ms for r in p.ranks]
    added = [a.perf.bwd_comms - b.perf.bwd_comms for a, b in zip(p.ranks, _sync_free(cfg, p.tables).ranks)]
    assert added == pytest.approx(replicas.rank_sync_ms(cfg, p.tables), rel=1e-9, abs=1e-12)
