"""Mixed fleets by device kind: topology.rank_devices names each group of ranks' accelerator. Read and written back
at the door, each rank priced with its own device's published bandwidths, the planner giving a slower rank less work,
TorchRec's planner (one speed for every rank) run on the same input as the baseline and both plans scored by both
estimators, as bench does."""

import copy
import dataclasses

import numpy as np
import pytest

import engine
from engine import ConfigError, config_to_dict, parse_config
from engine.accelerators import ACCELERATORS
from engine.capacity import usable_hbm_of
from engine.fields import RANK_DEVICES_FIELD
from tests.factories import tutorial, within_memory

GIB = 2**30
FAST, SLOW = "h100_80gb", "a100_40gb"


def fleet(num_tables: int = 60, fast: int = 8, slow: int = 8, seed: int = 3) -> dict:
    """Seeded tables on `fast` H100 ranks then `slow` A100 40GB ranks, 8 a host."""
    from bench.suite import synthetic

    raw = synthetic(num_tables, fast + slow, seed=seed, max_rows=2e6)
    raw["topology"]["rank_devices"] = [{"ranks": fast, "device": FAST}, {"ranks": slow, "device": SLOW}]
    return raw


# ---- the config field -------------------------------------------------------------------------------------------


def test_rank_devices_round_trips_and_absent_leaves_the_topology_as_it_was():
    raw = tutorial()
    raw["topology"]["rank_devices"] = [{"ranks": 1, "device": FAST}, {"ranks": 1, "device": SLOW}]
    cfg = parse_config(raw)
    assert cfg.topology.rank_devices == ((1, FAST), (1, SLOW))
    written = config_to_dict(cfg)
    assert written["topology"]["rank_devices"] == raw["topology"]["rank_devices"]
    assert parse_config(copy.deepcopy(written)) == cfg
    assert "rank_devices" not in config_to_dict(parse_config(tutorial()))["topology"]
    raw["topology"]["rank_devices"] = []
    assert parse_config(raw).topology == parse_config(tutorial()).topology  # []: every rank alike


@pytest.mark.parametrize("groups, field, words", [
    ([{"ranks": 1, "device": FAST}, {"ranks": 1, "device": "a10"}], "topology.rank_devices[1].device",
     "unknown device 'a10'; known devices: a100_40gb, a100_80gb, h100_80gb, h200_141gb, b200_192gb"),
    ([{"ranks": 1, "device": FAST}], "topology.rank_devices", "the groups hold 1 ranks; they must add up to "
     "world_size (2)"),
    ([{"ranks": 0, "device": FAST}, {"ranks": 2, "device": FAST}], "topology.rank_devices[0].ranks",
     "must be a whole number of ranks from 1 to 2, got 0"),
    ([{"ranks": 2, "device": FAST, "hbm": 1}], "topology.rank_devices[0].hbm", "unknown field; known fields"),
    ({"ranks": 2, "device": FAST}, "topology.rank_devices", "must be a list of groups"),
    (["h100_80gb", "a100_40gb"], "topology.rank_devices[0]", 'must be an object: {"ranks": N, "device"'),
])
def test_bad_rank_devices_is_one_line_naming_the_entry(groups, field, words):
    raw = tutorial()
    raw["topology"]["rank_devices"] = groups
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert e.value.field == field
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_cpu_topology_naming_gpus_is_refused():
    raw = tutorial()
    raw["topology"].update(compute_device="cpu", rank_devices=[{"ranks": 2, "device": FAST}])
    with pytest.raises(ConfigError, match="names GPUs: set compute_device to cuda"):
        parse_config(raw)


def test_the_field_names_every_known_device():
    assert all(k in RANK_DEVICES_FIELD.meaning for k in ACCELERATORS)


def test_a_ranks_hbm_is_its_devices_unless_custom_topology_data_gives_it():
    raw = tutorial()
    raw["topology"]["rank_devices"] = [{"ranks": 1, "device": "h200_141gb"}, {"ranks": 1, "device": SLOW}]
    topo = parse_config(raw).topology
    assert [usable_hbm_of(topo, r) for r in range(2)] == [int(140 * GIB * 0.85), int(40 * GIB * 0.85)]
    raw["topology"]["custom_topology_data"] = {"hbm_cap": [8 * GIB, 4 * GIB]}
    topo = parse_config(raw).topology
    assert [usable_hbm_of(topo, r) for r in range(2)] == [int(8 * GIB * 0.85), int(4 * GIB * 0.85)]


# ---- pricing: each rank its own device ---------------------------------------------------------------------------


def test_one_device_everywhere_plans_as_the_topology_with_that_devices_figures():
    """rank_devices of one kind is the uniform topology with the accelerator's bandwidths and HBM: same plan,
    same estimates."""
    raw = fleet(fast=16, slow=0)
    raw["topology"]["rank_devices"] = raw["topology"]["rank_devices"][:1]
    named = parse_config(raw)
    plain = dataclasses.replace(named, topology=ACCELERATORS[FAST].priced(dataclasses.replace(
        named.topology, rank_devices=None, hbm_cap=ACCELERATORS[FAST].hbm_bytes)))
    a, b = engine.plan(named), engine.plan(plain)
    assert a.tables == b.tables
    assert [r.perf for r in a.ranks] == [r.perf for r in b.ranks]


def test_the_same_shard_costs_more_on_the_slower_device_by_its_bandwidths():
    raw = tutorial("table_wise")
    raw["topology"]["rank_devices"] = [{"ranks": 1, "device": FAST}, {"ranks": 1, "device": SLOW}]
    cfg = parse_config(raw)
    plan = engine.plan(cfg)
    swapped = {n: dataclasses.replace(tp, ranks=tuple(1 - r for r in tp.ranks),
                                      shards=tuple(dataclasses.replace(s, rank=1 - s.rank) for s in tp.shards))
               for n, tp in plan.tables.items()}
    again = engine.evaluate(cfg, swapped)
    for r in range(2):  # what rank r held now sits on the other device
        on_fast, on_slow = (plan.ranks[r], again.ranks[1 - r]) if r == 0 else (again.ranks[1 - r], plan.ranks[r])
        assert on_slow.perf.fwd_compute > on_fast.perf.fwd_compute > 0
        ratio = on_slow.perf.fwd_compute / on_fast.perf.fwd_compute  # compute: work over the HBM bandwidth
        assert ratio == pytest.approx(ACCELERATORS[FAST].hbm_gbps / ACCELERATORS[SLOW].hbm_gbps, rel=1e-9)


# ---- the planner against TorchRec's, on 8 fast + 8 slow ranks ---------------------------------------------------


def test_slow_ranks_carry_less_work_and_ours_beats_torchrecs_plan_on_our_estimator():
    """TorchRec's planner has one speed for every rank (the first kind's, and each rank's own HBM): both plans scored
    by our estimator (each rank its own device) and by TorchRec's (docs/estimator.md says how they differ)."""
    from engine.torchrec_compat import to_sharding_plan, torchrec_plan
    from engine.torchrec_costs import torchrec_rank_costs

    cfg = parse_config(fleet())
    ours, theirs = engine.plan(cfg), torchrec_plan(cfg)
    assert within_memory(cfg, ours) and within_memory(cfg, theirs)
    to_sharding_plan(cfg, ours.tables)  # TorchRec's types accept it
    assert ours.max_rank_cost_ms <= theirs.max_rank_cost_ms
    ours_tr, theirs_tr = torchrec_rank_costs(cfg, ours), torchrec_rank_costs(cfg, theirs)
    # on TorchRec's estimator (every rank as fast as the first kind) the slow ranks of ours look idle: less work
    assert ours_tr[8:].sum() < ours_tr[:8].sum() * 0.8
    assert theirs_tr[8:].sum() > theirs_tr[:8].sum() * 0.8  # TorchRec loads them alike
    shards = [r.num_shards for r in ours.ranks]
    assert sum(shards[8:]) < sum(shards[:8])
    costs = np.array([r.cost_ms for r in ours.ranks])
    assert costs.max() / costs.min() < 1.1  # balanced in each rank's own time
    assert ours.lower_bound_ms <= ours.max_rank_cost_ms


def test_mixed_fleet_plans_are_deterministic_and_kept_within_each_ranks_memory():
    raw = fleet(num_tables=120, seed=7)
    a, b = engine.plan(parse_config(raw)), engine.plan(parse_config(copy.deepcopy(raw)))
    assert a.tables == b.tables and a.ranks == b.ranks
    assert within_memory(parse_config(raw), a)


# ---- the sweep mixes accelerators --------------------------------------------------------------------------------


def test_a_sweep_candidate_mixes_accelerators_and_its_point_is_the_plan_of_its_config(tmp_path):
    from engine.planner import PlannerSettings
    from engine.sweep import point_config, sweep, table

    cfg = parse_config(fleet(num_tables=40))
    mix = "8x h100_80gb+8 a100_40gb"
    settings = PlannerSettings(effort=2000)
    points = sweep(cfg, ["h100_80gb", mix], [8, 16], [512], settings)
    assert [(p.device, p.world_size) for p in points] == [("h100_80gb", 8), ("h100_80gb", 16),
                                                           ("8 h100_80gb + 8 a100_40gb", 16)]
    mixed = points[-1]
    assert mixed.planned and mixed.as_dict()["device_label"] == "8 x NVIDIA H100 80GB SXM + 8 x NVIDIA A100 40GB SXM"
    raw = point_config(cfg, mixed.device, 16, 512)
    assert raw["topology"]["rank_devices"] == [{"ranks": 8, "device": FAST}, {"ranks": 8, "device": SLOW}]
    alone = engine.plan(parse_config(raw), settings)
    assert alone.max_rank_cost_ms == mixed.step_ms
    assert [r.hbm_cap_bytes for r in alone.ranks] == [int(80 * GIB * 0.85)] * 8 + [int(40 * GIB * 0.85)] * 8
    assert "8 h100_80gb + 8 a100_40gb     16" in table(points)


@pytest.mark.parametrize("mix, words", [
    ("8 h100_80gb + 8 a10", "unknown accelerator 'a10' in '8 h100_80gb + 8 a10'; choose from a100_40gb"),
    ("4 h100_80gb + 8 a100_80gb", "each group must fill whole hosts of 8 GPUs"),
    ("h100_80gb + a100_80gb", "write a mixed fleet as GPUs and an accelerator per group"),
])
def test_a_bad_mixed_candidate_is_one_line_naming_the_flag(mix, words):
    from engine.sweep import sweep

    with pytest.raises(ConfigError) as e:
        sweep(parse_config(tutorial()), [mix], [8], [512])
    assert e.value.field == "--devices" and words in str(e.value) and "\n" not in str(e.value)


def test_a_cpu_measurement_of_a_mixed_fleet_prices_every_rank_on_the_cpu():
    from engine.pricing import priced_for

    cfg = parse_config(fleet(num_tables=8))
    on_cpu = priced_for(cfg, engine.Device.CPU, "dry-run").config
    assert on_cpu.topology.rank_devices is None and on_cpu.topology.compute_device is engine.Device.CPU
    engine.evaluate(on_cpu, engine.plan(cfg).tables)  # priced as CPU ranks, not as the GPUs the config names
    assert priced_for(cfg, engine.Device.CUDA, "validation run").config.topology.rank_devices == \
        cfg.topology.rank_devices
