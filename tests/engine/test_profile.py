"""Device profiles and their fit, pure numpy: the fit recovers known fixed costs and bandwidths exactly from
synthetic steps, leave-one-out splits by config, a fitted calibration prices a plan exactly as the fit says, and a
profile applies only to its device and host count."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import engine
from engine.calibrate import (
    StepObservation,
    apply_calibration,
    combine,
    fit,
    leave_one_out,
    median_error,
    nnls,
    observation,
    predict,
)
from engine.profile import DeviceProfile, published_cuda, step_counts
from engine.types import Device, ShardingType
from tests.factories import TRUE_STEP_COSTS, synthetic_step, tutorial
from tests.factories import synthetic_step_runs as synthetic_runs

CPU_PROFILE = {"device": "cpu", "backend": "gloo", "hosts": 1, "cores_per_host": 2, "step_ms": 3.0,
               "collective_ms": 0.4, "launch_ms": 0.25, "piece_ms": 0.05}


def test_fit_recovers_known_fixed_costs_and_bandwidths_exactly():
    cal = fit(synthetic_runs(), Device.CPU)
    prof = cal.profile
    assert (prof.step_ms, prof.collective_ms, prof.launch_ms, prof.piece_ms) == pytest.approx((3.0, 0.4, 0.25, 0.05),
                                                                                             rel=1e-9)
    assert cal.patch == pytest.approx({"ddr_mem_bw": 5e6, "intra_host_bw": 2e6}, rel=1e-9)
    assert (prof.device, prof.backend, prof.hosts, prof.cores_per_host) == (Device.CPU, "gloo", 1, 2)
    assert cal.r2 == pytest.approx(1.0) and cal.median_error == pytest.approx(0.0, abs=1e-9)
    assert cal.n_runs == 14 and cal.run_ids == tuple(range(1, 15)) and "inter_host_bw" not in cal.patch


def test_leave_one_out_predicts_each_config_from_the_others_only():
    runs = synthetic_runs()
    held = leave_one_out(runs, Device.CPU)
    assert sorted(h.run_ids for h in held) == [o.run_ids for o in runs]
    assert median_error(held) == pytest.approx(0.0, abs=1e-9)
    spoiled = [StepObservation(o.features, o.measured_ms * (3.0 if o.group == "config0" else 1.0), o.assumed_bw,
                               o.group, o.run_ids, 1, 2) for o in runs]
    for h in leave_one_out(spoiled, Device.CPU):  # config0's runs never inform their own prediction
        if h.group == "config0":
            assert h.errors == pytest.approx(2 / 3)
        others = fit([o for o in spoiled if o.group != h.group], Device.CPU)
        step, per_rank, own = predict(others, next(o for o in spoiled if o.run_ids == h.run_ids))
        assert h.step_ms == pytest.approx(step) and h.rank_ms == pytest.approx(per_rank)
        assert h.busy_ms == pytest.approx(own) and (per_rank >= own).all()
    with pytest.raises(engine.EngineError, match="at least two configs"):
        leave_one_out([o for o in runs if o.group == "config1"], Device.CPU)


def test_a_bandwidth_the_runs_do_not_determine_stays_as_configured():
    runs = synthetic_runs()
    costs = np.array(TRUE_STEP_COSTS)
    costs[4] = 0.0  # lookups free: the measured steps do not grow with them
    flat = [StepObservation(o.features, np.full(len(o.measured_ms), 1.0), o.assumed_bw, o.group, o.run_ids, 1, 2)
            for o in runs]
    for i, o in enumerate(runs):
        flat[i].measured_ms[:] = synthetic_step(o.features, costs, cores=2)
    cal = fit(flat, Device.CPU)
    assert "ddr_mem_bw" not in cal.patch and any("ddr_mem_bw: the runs do not determine it" in n for n in cal.notes)
    with pytest.raises(engine.EngineError, match="python -m db validate"):
        fit([], Device.CPU)
    mixed = [StepObservation(o.features, o.measured_ms, o.assumed_bw, o.group, o.run_ids, 1 + i % 2, 2)
             for i, o in enumerate(runs)]
    with pytest.raises(engine.EngineError, match="one host count"):
        fit(mixed, Device.CPU)


def test_lookups_the_steps_cannot_see_are_fitted_to_each_ranks_own_embedding_time():
    """4 ranks on 2 cores whose plans spread the same lookup work alike: the step is the host's work over its cores,
    so the lookups' cost is a constant the fixed step absorbs. Held at a configured bandwidth 10x too slow, that
    made every other cost fit 0 (on the VM measured: R^2 -90); the ranks' own embedding times fit it instead."""
    rng = np.random.default_rng(3)
    true = np.array([3.0, 0.4, 0.0, 0.05, 1 / 5e6, 0.0, 0.0])
    runs = []
    for i in range(10):
        x = np.zeros((4, 7))
        x[:, 0], x[:, 1], x[:, 2], x[:, 3] = 1.0, 15 * (1 + i % 2), 1 + i % 2, rng.integers(1, 10, 4)
        x[:, 4] = 8e7 * rng.dirichlet(np.full(4, 60.0))  # the same lookup work, spread about evenly
        step = synthetic_step(x, true, cores=2)
        runs.append(StepObservation(x, np.full(4, step), (5e5, 6e8, 1e7), f"config{i % 3}", (i + 1,), 1, 2,
                                    own_ms=x[:, 4] * true[4]))
    cal = fit(runs, Device.CPU)
    assert cal.patch["ddr_mem_bw"] == pytest.approx(5e6, rel=1e-9)
    assert any("fitted to each rank's own embedding time" in n for n in cal.notes)
    assert cal.r2 > 0.999 and cal.median_error < 1e-3
    assert (cal.profile.step_ms, cal.profile.collective_ms, cal.profile.piece_ms) == pytest.approx((3.0, 0.4, 0.05))
    blind = fit([replace(o, own_ms=None) for o in runs], Device.CPU)  # the same runs without their own times
    assert "ddr_mem_bw" not in blind.patch and blind.median_error > 100 * cal.median_error


def test_runs_of_one_plan_are_combined_rank_by_rank():
    o = synthetic_runs(1)[0]
    runs = [replace(o, measured_ms=o.measured_ms * k, run_ids=(i,), plan="p") for i, k in enumerate((1.0, 3.0, 1.2))]
    other = replace(o, run_ids=(9,), plan="q")
    merged = combine([*runs, other])
    assert [m.run_ids for m in merged] == [(0, 1, 2), (9,)]
    assert merged[0].measured_ms == pytest.approx(o.measured_ms * 1.2)
    assert fit([*runs, other], Device.CPU).n_runs == 4


def test_nnls_clips_at_zero():
    x = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    c = nnls(x, np.array([3.0, 2.0, 1.0]))  # unconstrained least squares wants a negative slope
    assert c[0] == 0 and c[1] == pytest.approx(2.0)


def _cpu(name: str | None = None, world_size: int = 2) -> dict:
    cfg = tutorial(name)
    cfg["topology"].update(compute_device="cpu", world_size=world_size, local_world_size=world_size)
    return cfg


def test_a_fit_on_real_plans_prices_them_as_the_estimator_does():
    """Steps made by the estimator under a known profile; the fit's calibration, applied to each config, gives every
    rank the same estimate again (the fit and the estimator agree term by term)."""
    truth = {"patch": {"ddr_mem_bw": 4e6, "intra_host_bw": 1.5e6}, "profile": CPU_PROFILE}
    runs, configs = [], []
    for i, (name, ws) in enumerate([("table_wise", 2), ("row_wise", 2), ("data_parallel", 2), ("column_wise", 4),
                                    (None, 4), ("table_row_wise", 4), ("row_wise", 4), ("table_column_wise", 2)]):
        raw = _cpu(name, ws)
        tables = engine.plan(engine.parse_config(raw), engine.PlannerSettings(search=False)).tables
        priced = engine.evaluate(engine.parse_config(apply_calibration(raw, truth)), tables)
        busy = np.array([r.cost_ms for r in priced.ranks])
        runs.append(observation(engine.parse_config(raw), tables, np.full(ws, busy.max()), cores_per_host=2,
                                group=f"{name}-{ws}", run_id=i))
        configs.append((raw, tables, busy))
    cal = fit(runs, Device.CPU)
    assert cal.median_error == pytest.approx(0.0, abs=1e-9)
    for o, (raw, tables, busy) in zip(runs, configs):
        again = engine.evaluate(engine.parse_config(apply_calibration(raw, cal.as_dict())), tables)
        assert [r.cost_ms for r in again.ranks] == pytest.approx(busy, rel=1e-9)
        assert predict(cal, o)[1] == pytest.approx(busy, rel=1e-9)
        assert predict(cal, o)[0] == pytest.approx(busy.max(), rel=1e-9)


def test_step_counts_follow_dmp():
    cfg = engine.parse_config(_cpu())
    t = engine.plan(cfg, engine.PlannerSettings(search=False)).tables
    mixed = dict(t)
    types = [ShardingType.ROW_WISE, ShardingType.COLUMN_WISE, ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE]
    for (name, tp), st in zip(t.items(), types):  # only the sharding type matters to the counts
        mixed[name] = engine.TablePlan(st, tp.compute_kernel, (0, 1) if st is ShardingType.DATA_PARALLEL else tp.ranks,
                                       None if st is ShardingType.DATA_PARALLEL else tp.shards)
    counts = step_counts(cfg.topology, mixed, dp_bytes=1024)
    # 2 ranks: 3 sharded types x 3 input all-to-alls, their output dists (row-wise: an all-reduce on gloo, 2
    # rounds, and an all-gather back) and one DDP all-reduce: 16 collectives (torch.profiler), 18 latency rounds
    assert (counts.input_rounds, counts.fwd_rounds, counts.bwd_rounds) == (9, 4, 5)
    assert counts.pieces.sum() == 5  # three one-shard pieces and a replica on each rank
    assert step_counts(cfg.topology, mixed, dp_bytes=1024, backend="nccl").fwd_rounds == 3  # a real reduce-scatter
    tw = step_counts(cfg.topology, t)
    assert tw.rounds == 5 and tw.launches.tolist() == [1.0, 1.0]
    four = engine.parse_config(_cpu(None, 4))
    assert step_counts(four.topology, engine.plan(four, engine.PlannerSettings(search=False)).tables).rounds == 15


def test_a_profile_prices_only_its_device_and_host_count():
    raw = _cpu()
    plain = engine.plan(engine.parse_config(raw))
    raw["topology"]["profile"] = CPU_PROFILE
    cfg = engine.parse_config(raw)
    priced = engine.evaluate(cfg, plain.tables)
    assert priced.max_rank_cost_ms > plain.max_rank_cost_ms + CPU_PROFILE["step_ms"]
    replanned = engine.plan(cfg)
    assert replanned.lower_bound_ms >= CPU_PROFILE["step_ms"]
    assert any("step priced with profile cpu/gloo on 1 host" in n for n in replanned.notes)
    assert engine.parse_config(engine.config_to_dict(cfg)) == cfg
    raw["topology"].update(compute_device="cuda")  # the CPU profile does not price a GPU topology
    gpu = engine.plan(engine.parse_config(raw))
    assert any("not applied" in n for n in gpu.notes)
    raw["topology"].pop("profile")
    assert [r.cost_ms for r in gpu.ranks] == [r.cost_ms for r in engine.plan(engine.parse_config(raw)).ranks]


def test_published_gpu_figures_say_so():
    raw = tutorial()
    raw["topology"]["profile"] = "published"
    cfg = engine.parse_config(raw)
    assert cfg.topology.profile == published_cuda(1)
    p = engine.plan(cfg)
    assert any("defaults from published figures until a GPU profile is measured" in n for n in p.notes)
    assert p.max_rank_cost_ms >= 5 * published_cuda(1).collective_ms  # a table-wise step's five collectives
    assert engine.parse_config(engine.config_to_dict(cfg)) == cfg
    assert published_cuda(2).collective_ms > published_cuda(1).collective_ms
    raw["topology"]["compute_device"] = "cpu"
    with pytest.raises(engine.ConfigError, match="cuda only"):
        engine.parse_config(raw)


@pytest.mark.parametrize("change, field", [
    ({"backend": "nccl"}, "topology.profile.backend"),
    ({"step_ms": -1}, "topology.profile.step_ms"),
    ({"hosts": 0}, "topology.profile.hosts"),
    ({"colour": 1}, "topology.profile.colour"),
    ({"device": "tpu"}, "topology.profile.device"),
])
def test_a_bad_profile_is_one_config_error_naming_the_field(change, field):
    raw = _cpu()
    raw["topology"]["profile"] = {**CPU_PROFILE, **change}
    with pytest.raises(engine.ConfigError) as e:
        engine.parse_config(raw)
    assert str(e.value).startswith(field)


def test_apply_calibration_sets_the_profile_and_its_device():
    cal = fit(synthetic_runs(), Device.CPU).as_dict()
    out = apply_calibration(tutorial(), json.loads(json.dumps(cal)))  # the tutorial says cuda
    assert out["topology"]["compute_device"] == "cpu" and out["topology"]["profile"]["backend"] == "gloo"
    assert out["topology"]["ddr_mem_bw"] == pytest.approx(5e6)
    assert apply_calibration(tutorial(), {"ddr_mem_bw": 1e6})["topology"]["compute_device"] == "cuda"
    with pytest.raises(engine.ConfigError, match="calibration.batch_size"):
        apply_calibration(tutorial(), {"batch_size": 3})
    prof = DeviceProfile(Device.CPU, "gloo", 1, 2)
    assert prof.shares_cores(engine.parse_config(_cpu(None, 4)).topology)
    assert not prof.shares_cores(engine.parse_config(_cpu(None, 2)).topology)
