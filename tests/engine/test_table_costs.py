"""Tables measured alone (engine.table_costs, `engine measure-tables`, `engine plan --table-costs`): a table's
compute_scale multiplies every piece's compute, the scale is the measured time beyond the fixed step and the working
set over the estimate of the table alone, the planner places against it, a file of another topology or table is
refused naming the field, and the commands run end to end on this machine's kernels."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest

import engine
import engine.table_costs
from engine.estimate import table_workset
from engine.table_costs import (COLLECTIVES_NOTE, FORMAT, VERSION, alone_estimate, apply_table_costs, column_ratio,
                                gain_margin, pressure_fit, table_record, topology_record)
from engine.workset import pressure
from tests.engine.test_cli import run
from tests.factories import write


def _config(world: int = 2, dims=(64, 64, 64), rows=(20_000, 20_000, 20_000)) -> dict:
    return {"tables": [{"name": f"t{i}", "num_embeddings": r, "embedding_dim": d, "feature_names": [f"f{i}"]}
                       for i, (r, d) in enumerate(zip(rows, dims))],
            "constraints": {f"t{i}": {"pooling_factors": [40.0], "sharding_types": ["table_wise"]}
                            for i in range(len(rows))},
            "topology": {"world_size": world, "local_world_size": world, "compute_device": "cpu", "batch_size": 128,
                         "optimizer": "sgd"}}


def _costs(cfg: engine.Config, ms: dict[str, float], fixed: float = 0.05) -> dict:
    return {"format": FORMAT, "version": VERSION, "topology": topology_record(cfg), "device_name": "test CPU",
            "backend": "fbgemm", "fixed_ms": fixed,
            "tables": {n: {"ms": v, **table_record(cfg.table(n), cfg.constraint(n))} for n, v in ms.items()}}


def _tw(cfg: engine.Config, ranks: dict[str, int]) -> dict:
    return {t.name: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (ranks[t.name],),
                                     (engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), ranks[t.name]),))
            for t in cfg.tables}


def test_compute_scale_multiplies_the_tables_compute_and_nothing_else():
    raw = _config()
    cfg = engine.parse_config(raw)
    plan = _tw(cfg, {"t0": 0, "t1": 1, "t2": 1})
    before = engine.evaluate(cfg, plan).ranks
    raw["constraints"]["t0"]["compute_scale"] = 3.0
    scaled = engine.evaluate(engine.parse_config(raw), plan).ranks
    assert scaled[1] == before[1]  # the other rank is untouched
    p0, s0 = before[0].perf, scaled[0].perf
    ws = before[0].workset_ms
    assert ws > 0 and scaled[0].workset_ms == 0  # a measured table's time holds its working set
    assert s0.fwd_compute + s0.bwd_compute == pytest.approx(3 * (p0.fwd_compute + p0.bwd_compute - ws))
    assert (s0.fwd_comms, s0.bwd_comms, s0.prefetch_compute) == (p0.fwd_comms, p0.bwd_comms, p0.prefetch_compute)
    assert engine.config_to_dict(engine.parse_config(raw))["constraints"]["t0"]["compute_scale"] == 3.0


@pytest.mark.parametrize("bad", [0, -1, 101, "x"])
def test_a_bad_compute_scale_names_the_field(bad):
    raw = _config()
    raw["constraints"]["t1"]["compute_scale"] = bad
    with pytest.raises(engine.ConfigError, match=r"constraints\.t1\.compute_scale"):
        engine.parse_config(raw)


def test_the_scale_is_the_measured_time_beyond_the_fixed_step_over_the_estimate_alone():
    cfg = engine.parse_config(_config())
    est, ws = alone_estimate(cfg, "t1")
    assert est > 0 and ws > 0
    fixed = 0.05
    got, notes = apply_table_costs(cfg, _costs(cfg, {"t1": fixed + 2.5 * est}, fixed), "costs.json")
    assert got.constraint("t1").compute_scale == pytest.approx(2.5)
    assert got.constraint("t0").compute_scale is None  # not measured: the estimate as it is
    one, plan = engine.table_costs.alone(got, "t1")
    alone_rank = engine.evaluate(replace(got, tables=one.tables, constraints={"t1": got.constraint("t1")}), plan)
    # the table alone is priced at what was measured: its share, and the fixed step every rank carries once
    assert alone_rank.ranks[0].perf.fwd_compute + alone_rank.ranks[0].perf.bwd_compute == \
        pytest.approx(fixed + 2.5 * est)
    assert got.topology.profile.step_ms == fixed and got.topology.profile.source.startswith("measure-tables: ")
    assert notes[0] == "fixed step 0.05 ms per rank, as measured"
    assert "compute of 1 of 3 tables as measured alone on test CPU (fbgemm, costs.json)" in notes[1]
    assert "2 tables not in costs.json keep the estimate" in notes[2]
    # a profile that prices its own fixed step (python -m db calibrate) keeps it, and the scale is the same
    raw = _config()
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "step_ms": 0.3}
    own = engine.parse_config(raw)
    kept, said = apply_table_costs(own, _costs(own, {"t1": fixed + 2.5 * est}, fixed), "costs.json")
    assert kept.topology.profile.step_ms == 0.3 and kept.constraint("t1").compute_scale == pytest.approx(2.5)
    assert said[0] == "the profile's own fixed step kept (0.3 ms), not the measured 0.05 ms"
    # a measurement under the fixed step is held to the floor, and says so
    low, said = apply_table_costs(cfg, _costs(cfg, {"t1": fixed / 2}, fixed), "costs.json")
    assert low.constraint("t1").compute_scale == pytest.approx(0.01)
    assert any(n.startswith("scale held to 0.01-100 for t1") for n in said)


def test_the_planner_gives_a_table_measured_slow_a_rank_of_its_own():
    cfg = engine.parse_config(_config(world=2, dims=(64, 64, 64)))
    est = {t.name: sum(alone_estimate(cfg, t.name)) for t in cfg.tables}
    # the estimate: three equal tables; measured, t2 costs three times the others
    measured, _ = apply_table_costs(cfg, _costs(cfg, {"t0": est["t0"], "t1": est["t1"], "t2": 3 * est["t2"]}, 0.0))
    plan = engine.plan(measured)
    on = {name: tp.ranks for name, tp in plan.tables.items()}
    assert on["t0"] == on["t1"] != on["t2"]  # t2 alone, the two cheap ones together
    assert engine.evaluate(measured, plan.tables).max_rank_cost_ms == pytest.approx(plan.max_rank_cost_ms)


def test_a_file_of_another_topology_or_table_is_refused_naming_the_field():
    cfg = engine.parse_config(_config())
    costs = _costs(cfg, {"t0": 1.0})
    other = engine.parse_config(_config(world=4))
    with pytest.raises(engine.ConfigError, match=r"topology\.world_size: c\.json was measured with world_size 2, "
                                                 r"the config has 4: measure again"):
        apply_table_costs(other, costs, "c.json")
    gpu = _config()
    gpu["topology"]["compute_device"] = "cuda"
    with pytest.raises(engine.ConfigError, match=r"topology\.compute_device: .* the config has 'cuda': measure on "
                                                 r"cuda \(measure-tables --device cuda\), or plan for cpu"):
        apply_table_costs(engine.parse_config(gpu), costs, "c.json")
    bigger = engine.parse_config(_config(rows=(30_000, 20_000, 20_000)))
    with pytest.raises(engine.ConfigError, match=r"tables\.t0\.num_embeddings: c\.json measured it with "
                                                 r"num_embeddings 20000, the config has 30000"):
        apply_table_costs(bigger, costs, "c.json")
    costs["tables"]["gone"] = dict(costs["tables"]["t0"])
    with pytest.raises(engine.ConfigError, match=r"tables\.gone: .*does not have"):
        apply_table_costs(cfg, costs, "c.json")
    # names the file gives are quoted as one short line: no newline, no layout, whatever they hold
    odd = {**_costs(cfg, {"t0": 1.0}), "device_name": "cpu\n# heading | " + "x" * 5000, "backend": 7}
    _, said = apply_table_costs(cfg, odd, "c.json")
    assert all("\n" not in n and len(n) < 600 for n in said)
    assert "on cpu\\n# heading | xxx" in said[1] and "(?, c.json)" in said[1]
    for bad, what in (({"format": "x"}, "no \"format\""), ({**costs, "version": 9}, "version 9"),
                      ({**costs, "fixed_ms": "soon"}, "fixed_ms"),
                      ({**costs, "tables": {"t0": {"ms": 0}}}, "table 't0' has no measured")):
        with pytest.raises(engine.EngineError, match=what):
            apply_table_costs(cfg, bad, "c.json")


def test_measure_tables_then_plan_with_them_end_to_end(tmp_path):
    cfg_path = write(tmp_path, _config(dims=(16, 64, 128)))
    out = tmp_path / "costs.json"
    said = run("measure-tables", cfg_path, "--out", out, "--iters", 3, "--warmup", 1, "--reps", 2).stdout
    assert "measured 3 tables alone on " in said and f"wrote {out}" in said
    data = json.loads(out.read_text())
    assert data["format"] == FORMAT and data["topology"]["world_size"] == 2 and data["reps"] == 2
    assert set(data["tables"]) == {"t0", "t1", "t2"}
    assert all(len(t["reps_ms"]) == 2 and t["ms"] > 0 for t in data["tables"].values())
    # the fixed step: the median of its rounds (not timed against the tables: under load the order can flip)
    assert len(data["fixed_reps_ms"]) == 2 and 0 < data["fixed_ms"] == pytest.approx(np.median(data["fixed_reps_ms"]))
    # each round deals the three tables into two probe ranks: one of two tables (one alone says nothing)
    assert [(p["round"], len(p["tables"])) for p in data["probes"]] == [(1, 2), (2, 2)]
    assert all(p["ms"] > 0 and set(p["tables"]) <= {"t0", "t1", "t2"} for p in data["probes"])
    plan = json.loads(run("plan", cfg_path, "--table-costs", out, "--json").stdout)
    assert any(n.startswith("compute of 3 of 3 tables as measured alone on ") for n in plan["notes"])
    assert any(n.startswith("tables' pressure on each other ") for n in plan["notes"])
    coll = data["collectives"]  # gloo all-to-alls among the config's 2 ranks, timed
    assert coll["world_size"] == 2 and coll["backend"] == "gloo" and 0 < coll["round_ms"] == coll["all_to_all_ms"]
    assert any(n.startswith(f"collectives priced at {coll['round_ms']:.3g} ms a round") for n in plan["notes"])
    # the same scales as the engine's API gives, so the plan is the one it makes
    cfg = engine.parse_config(_config(dims=(16, 64, 128)))
    measured, _ = apply_table_costs(cfg, data, str(out))
    assert {n: tp["ranks"] for n, tp in plan["plan"].items()} == \
        {n: list(tp.ranks) for n, tp in engine.plan(measured).tables.items()}


def test_plan_says_what_is_wrong_with_a_costs_file_in_one_line(tmp_path):
    cfg_path = write(tmp_path, _config())
    proc = run("plan", cfg_path, "--table-costs", tmp_path / "none.json", check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    other = write(tmp_path, _costs(engine.parse_config(_config(world=4)), {"t0": 1.0}), "c.json")
    proc = run("plan", cfg_path, "--table-costs", other, check=False)
    assert proc.returncode == 2 and "topology.world_size" in proc.stderr and "measure-tables" in proc.stderr
    proc = run("measure-tables", cfg_path, "--reps", 0, check=False)
    assert proc.returncode == 2 and "--reps must be from 1 to 1000" in proc.stderr


def test_a_table_named_as_the_fixed_step_is_measured_as_itself(tmp_path):
    raw = _config(rows=(2_000, 2_000, 2_000))
    raw["tables"][0]["name"] = "fixed_step"
    raw["constraints"]["fixed_step"] = raw["constraints"].pop("t0")
    cfg_path = write(tmp_path, raw)
    out = tmp_path / "costs.json"
    run("measure-tables", cfg_path, "--out", out, "--iters", 2, "--warmup", 0, "--reps", 2)
    data = json.loads(out.read_text())
    assert set(data["tables"]) == {"fixed_step", "t1", "t2"}
    assert len(data["tables"]["fixed_step"]["reps_ms"]) == len(data["fixed_reps_ms"]) == 2
    proc = run("measure-tables", cfg_path, "--out", tmp_path / "no" / "such" / "dir.json", "--iters", 1, check=False)
    assert proc.returncode == 2 and "cannot write --out" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ---- the tables' pressure on each other (probe ranks) ------------------------------------------------------------


def _big(world: int = 2) -> dict:
    """t0, t1: 5 MiB touched per step each; t2, t3: a few KiB."""
    raw = _config(world, dims=(128, 128, 16, 16), rows=(200_000, 200_000, 1_000, 1_000))
    return raw


def _probe_ms(cfg: engine.Config, alone: dict[str, float], fixed: float, names: list[str], a: float,
              piece: float = 0.0) -> float:
    own = {n: table_workset(cfg.table(n), cfg.constraint(n), cfg.topology) for n in names}
    b, r = sum(v[0] for v in own.values()), sum(v[1] for v in own.values())
    x = r * float(pressure(b)) - sum(v[1] * float(pressure(v[0])) for v in own.values())
    return fixed + sum(alone[n] - fixed for n in names) + a * x + piece * (len(names) - 1)


def test_the_pressure_is_fitted_from_the_probe_ranks_and_a_probe_prices_as_measured():
    cfg = engine.parse_config(_big())
    alone, fixed, a = {"t0": 1.0, "t1": 1.2, "t2": 0.3, "t3": 0.2}, 0.05, 2e-4  # a: ms per touched row
    groups = [["t0", "t1"], ["t2", "t3"], ["t0", "t2", "t3"]]
    costs = {**_costs(cfg, alone, fixed), "probes": [{"round": 1, "tables": g, "ms": _probe_ms(cfg, alone, fixed, g, a)}
                                                     for g in groups]}
    got, said = pressure_fit(cfg, costs)
    assert got == pytest.approx(a, rel=1e-9)
    assert [round(r["beyond_alone_ms"], 9) >= 0 for r in said] == [True] * 3
    priced, notes = apply_table_costs(cfg, costs, "costs.json")
    assert dict(priced.topology.profile.terms)["cpu_pressure_row_work"] == pytest.approx(a * cfg.topology.ddr_mem_bw)
    assert notes[-1] == COLLECTIVES_NOTE  # the profile measure-tables made prices no collectives, and says so
    assert notes[-3] == ("tables' pressure on each other as 3 probe ranks measured on test CPU: 200 ns per touched "
                         "row at full pressure")
    assert notes[-2].startswith("a table beyond a rank's first is not priced: 3 probe ranks, at least 4 fit it")
    assert priced.topology.profile.piece_ms == 0 and priced.topology.profile.step_ms == fixed
    # every probe rank, and every table alone, prices as measured (its scale, its own pressure off, the rank's on)
    for g in [*groups, ["t0"], ["t3"]]:
        rank = engine.evaluate(priced, _tw(priced, {t.name: 0 if t.name in g else 1 for t in cfg.tables})).ranks[0]
        assert rank.perf.fwd_compute + rank.perf.bwd_compute == pytest.approx(_probe_ms(cfg, alone, fixed, g, a),
                                                                              rel=1e-6)


def test_a_table_beyond_a_ranks_first_is_fitted_beside_the_pressure_and_priced_per_piece():
    cfg = engine.parse_config(_big())
    alone, fixed, a, piece = {"t0": 1.0, "t1": 1.2, "t2": 0.3, "t3": 0.2}, 0.05, 2e-4, 0.03
    groups = [["t0", "t1"], ["t2", "t3"], ["t0", "t2", "t3"], ["t1", "t2"], ["t0", "t1", "t2", "t3"]]
    probes = [{"round": 1, "tables": g, "ms": _probe_ms(cfg, alone, fixed, g, a, piece)} for g in groups]
    costs = {**_costs(cfg, alone, fixed), "probes": probes}
    fit = engine.table_costs.probe_fit(cfg, costs)
    assert fit.pressure_ms_per_row == pytest.approx(a, rel=1e-6) and fit.piece_ms == pytest.approx(piece, rel=1e-6)
    assert gain_margin(cfg, costs)[0] == pytest.approx(0.0, abs=1e-9)  # both terms: every probe as measured
    priced, notes = apply_table_costs(cfg, costs, "costs.json")
    prof = priced.topology.profile
    assert prof.piece_ms == pytest.approx(piece) and prof.step_ms == pytest.approx(fixed - piece, abs=1e-12)
    assert ("a table beyond a rank's first priced at 0.03 ms, as 5 probe ranks measured on test CPU (each piece a "
            "rank holds costs that, the fixed step less it)") in notes
    # every probe rank, and every table alone (one piece: the fixed step as measured), prices as measured
    for g in [*groups, ["t0"], ["t3"]]:
        rank = engine.evaluate(priced, _tw(priced, {t.name: 0 if t.name in g else 1 for t in cfg.tables})).ranks[0]
        assert rank.perf.fwd_compute + rank.perf.bwd_compute == pytest.approx(
            _probe_ms(cfg, alone, fixed, g, a, piece), rel=1e-6)
    # over the fixed step: a rank of one piece is priced that much over its fixed step, and the note says so
    dear = {**costs, "probes": [{**p, "ms": _probe_ms(cfg, alone, fixed, p["tables"], a, 0.08)} for p in probes]}
    priced_dear, said = apply_table_costs(cfg, dear, "costs.json")
    assert (priced_dear.topology.profile.piece_ms, priced_dear.topology.profile.step_ms) == (pytest.approx(0.08), 0.0)
    assert any(n.endswith("so a rank of one piece is priced 0.03 ms over its fixed step as measured, every rank "
                          "holding pieces alike)") for n in said)
    # no pieces measured beyond the first: nothing priced; a profile of the user's keeps its own fixed costs
    flat = {**costs, "probes": [{**p, "ms": _probe_ms(cfg, alone, fixed, p["tables"], a)} for p in probes]}
    assert engine.table_costs.probe_fit(cfg, flat).piece_ms == pytest.approx(0.0, abs=1e-9)
    for piece_ms in (0.01, 0.0):
        own = replace(cfg, topology=replace(cfg.topology, profile=engine.parse_profile(
            {"device": "cpu", "backend": "gloo", "hosts": 1, "step_ms": 0.4, "piece_ms": piece_ms})))
        kept, said = apply_table_costs(own, costs, "costs.json")
        assert (kept.topology.profile.piece_ms, kept.topology.profile.step_ms) == (piece_ms, 0.4)
        assert any(n.startswith(f"the profile's own fixed costs kept (piece_ms {piece_ms:.3g} ms), not the 0.03 ms")
                   for n in said)
        # it prices the pressure alone, fitted without the b it does not price, and --min-gain auto reads that fit
        alone_fit = engine.table_costs.probe_fit(cfg, costs, pieces=False)
        assert alone_fit.pressure_ms_per_row > a  # the pieces' cost, left to the pressure to explain
        assert dict(kept.topology.profile.terms)[engine.PRESSURE_TERM] == pytest.approx(
            alone_fit.pressure_ms_per_row * cfg.topology.ddr_mem_bw)
        margin, note = gain_margin(own, costs)
        assert margin > 0 and margin == pytest.approx(np.sqrt(2) * np.median([alone_fit.error(r)
                                                                               for r in alone_fit.rows]))
        assert note.endswith("(in sample; the pressure alone: the profile keeps its own fixed costs)")


def _noisy_probes(cfg, alone, fixed, a, off):
    groups = [["t0", "t1"], ["t2", "t3"], ["t0", "t2", "t3"], ["t1", "t2"], ["t0", "t3"]]
    return [{"round": 1, "tables": g, "ms": _probe_ms(cfg, alone, fixed, g, a) * (1 + e)} for g, e in zip(groups, off)]


def test_min_gain_auto_is_sqrt_2_times_the_estimates_median_error_on_the_probe_ranks(tmp_path):
    cfg = engine.parse_config(_big())
    alone, fixed, a = {"t0": 1.0, "t1": 1.2, "t2": 0.3, "t3": 0.2}, 0.05, 2e-4
    exact = {**_costs(cfg, alone, fixed), "probes": _noisy_probes(cfg, alone, fixed, a, [0.0] * 5)}
    assert gain_margin(cfg, exact)[0] == pytest.approx(0.0, abs=1e-9)  # the probes price exactly as measured
    # probes measured off their price by a seeded +-5..15%: the margin follows that error, re-fitted
    off = [0.15, -0.08, 0.05, -0.12, 0.10]
    noisy = {**_costs(cfg, alone, fixed), "probes": _noisy_probes(cfg, alone, fixed, a, off)}
    fit, piece, rows = engine.table_costs.probe_fit(cfg, noisy)
    errs = [abs(fit * r["past_own_rows"] + piece * (r["tables"] - 1) - r["beyond_alone_ms"]) / r["ms"] for r in rows]
    assert errs == pytest.approx([engine.table_costs.probe_fit(cfg, noisy).error(r) for r in rows])
    margin, note = gain_margin(cfg, noisy)
    assert margin == pytest.approx(np.sqrt(2) * np.median(errs)) and 0.05 < margin < 0.2
    assert note == (f"--min-gain auto: {margin:.1%}, sqrt(2) x the estimate's {np.median(errs):.1%} median error on "
                    "the 5 probe ranks measured with the table costs (in sample)")
    wild = {**_costs(cfg, alone, fixed), "probes": _noisy_probes(cfg, alone, fixed, a, [3.0, -0.7, 2.5, 3.0, -0.6])}
    assert gain_margin(cfg, wild)[0] == engine.table_costs.MAX_AUTO_MARGIN
    assert gain_margin(cfg, wild)[1].endswith(", held to 50%")
    few = {**_costs(cfg, alone, fixed), "probes": noisy["probes"][:2]}
    with pytest.raises(engine.EngineError, match="the file has 2 \\(at least 3\\); measure again"):
        gain_margin(cfg, few)
    # the command: ours against a baseline, kept unless it beats it by the margin the probes give
    cfg_path, costs_path = write(tmp_path, _big()), write(tmp_path, noisy, "costs.json")
    ours = json.loads(run("plan", cfg_path, "--json", "--table-costs", costs_path).stdout)
    crowded = {t.name: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (0,),
                                        (engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), 0),))
               for t in cfg.tables}
    base = write(tmp_path, engine.plan_to_dict(engine.evaluate(cfg, crowded)), "base.json")
    got = json.loads(run("plan", cfg_path, "--json", "--table-costs", costs_path, "--baseline", base,
                         "--min-gain", "auto").stdout)
    assert got["plan"] == ours["plan"] and note in got["notes"]
    assert any(n.startswith("ours replaces the baseline plan (--baseline)") and f"over the {margin:.1%} --min-gain" in n
               for n in got["notes"])
    proc = run("plan", cfg_path, "--baseline", base, "--min-gain", "auto", check=False)
    assert proc.returncode == 2 and "--min-gain auto reads the estimate's error from the probe ranks of " \
        "--table-costs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    few_path = write(tmp_path, few, "few.json")
    proc = run("plan", cfg_path, "--table-costs", few_path, "--baseline", base, "--min-gain", "auto", check=False)
    assert proc.returncode == 2 and "(at least 3)" in proc.stderr and "Traceback" not in proc.stderr


def test_the_planner_keeps_two_large_working_sets_apart_when_the_probes_measured_their_pressure():
    cfg = engine.parse_config(_big())
    alone, fixed = {"t0": 1.0, "t1": 1.0, "t2": 1.0, "t3": 1.0}, 0.05  # alone, every pairing costs the same
    probe = [{"round": 1, "tables": ["t0", "t1"], "ms": 2.6}, {"round": 1, "tables": ["t2", "t3"], "ms": 1.95}]
    priced, _ = apply_table_costs(cfg, {**_costs(cfg, alone, fixed), "probes": probe})
    plan = engine.plan(priced)
    assert plan.tables["t0"].ranks != plan.tables["t1"].ranks
    crowded = engine.evaluate(priced, _tw(priced, {"t0": 0, "t1": 0, "t2": 1, "t3": 1}))
    assert plan.max_rank_cost_ms < crowded.max_rank_cost_ms - 0.3
    assert plan.lower_bound_ms <= plan.max_rank_cost_ms  # the bound leaves the pressure out, and says so
    assert any(n.startswith("lower bound: the tables' measured costs spread evenly") for n in plan.notes)
    # probes that measured no pressure (the pair ran as its tables alone): the term is off, and said so
    calm = [{"round": 1, "tables": ["t0", "t1"], "ms": 1.95}]
    flat, notes = apply_table_costs(cfg, {**_costs(cfg, alone, fixed), "probes": calm}, "c.json")
    assert dict(flat.topology.profile.terms)["cpu_pressure_row_work"] == 0
    assert "measured none" in notes[-3]


def test_a_profile_that_prices_the_collectives_gets_no_warning_about_them():
    raw = _big()
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "collective_ms": 0.47,
                                  "source": "db calibrate: validation runs"}
    priced, notes = apply_table_costs(engine.parse_config(raw), _costs(engine.parse_config(raw), {"t0": 1.0}))
    assert COLLECTIVES_NOTE not in notes and priced.topology.profile.collective_ms == 0.47
    assert "1.24x slower per step" in COLLECTIVES_NOTE and "python -m db calibrate" in COLLECTIVES_NOTE


def test_a_measured_collective_round_prices_every_sharding_type_a_plan_adds():
    raw = _big()
    cfg = engine.parse_config(raw)
    costs = {**_costs(cfg, {t.name: 1.0 for t in cfg.tables}), "collectives": {"world_size": 2, "round_ms": 0.4}}
    priced, notes = apply_table_costs(cfg, costs, "c.json")
    assert priced.topology.profile.collective_ms == 0.4 and COLLECTIVES_NOTE not in notes
    assert any(n.startswith("collectives priced at 0.4 ms a round, as measure-tables timed gloo all-to-alls among 2 "
                            "processes on test CPU") for n in notes)
    tw = engine.evaluate(priced, _tw(priced, {"t0": 0, "t1": 1, "t2": 0, "t3": 1}))
    free = engine.evaluate(apply_table_costs(cfg, _costs(cfg, {t.name: 1.0 for t in cfg.tables}))[0],
                           _tw(priced, {"t0": 0, "t1": 1, "t2": 0, "t3": 1}))
    assert tw.max_rank_cost_ms > free.max_rank_cost_ms + 0.4  # table_wise's rounds, at 0.4 ms each
    other = {**costs, "collectives": {"world_size": 4, "round_ms": 0.4}}  # measured among another number of ranks
    assert COLLECTIVES_NOTE in apply_table_costs(cfg, other)[1]
    with pytest.raises(engine.EngineError, match='"collectives" has no "round_ms" in ms'):
        apply_table_costs(cfg, {**costs, "collectives": {"round_ms": "fast"}})


def test_a_gpu_config_keeps_its_estimate_of_the_pressure_and_says_why():
    raw = _big()
    raw["topology"]["compute_device"] = "cuda"
    cfg = engine.parse_config(raw)
    probe = [{"round": 1, "tables": ["t0", "t1"], "ms": 2.6}]
    priced, notes = apply_table_costs(cfg, {**_costs(cfg, {"t0": 1.0, "t1": 1.0}), "probes": probe})
    assert priced.topology.profile is cfg.topology.profile  # no CPU terms on a GPU topology
    assert notes[-1].startswith("the tables' pressure on each other is priced on CPU topologies only")


def test_a_file_without_probe_ranks_leaves_the_pressure_unpriced_and_says_so():
    cfg = engine.parse_config(_big())
    priced, notes = apply_table_costs(cfg, _costs(cfg, {"t0": 1.0, "t1": 1.0}), "old.json")
    assert "cpu_pressure_row_work" not in dict(priced.topology.profile.terms)
    assert notes[-2].startswith("the tables' pressure on each other is not priced: the file has no probe ranks")
    rank = engine.evaluate(priced, _tw(priced, {"t0": 0, "t1": 0, "t2": 1, "t3": 1})).ranks[0]
    assert rank.workset_ms == 0  # measured tables: their times hold their working sets, as before the probes


@pytest.mark.parametrize("probes, why", [
    ({"x": 1}, '"probes" is not a list'),
    ([{"tables": ["t0"], "ms": 1.0}], "probe 0 does not list two or more distinct tables"),
    ([{"tables": ["t0", "t0"], "ms": 1.0}], "probe 0 does not list two or more distinct tables"),
    ([{"tables": ["t0", "t1"], "ms": 1.0}, {"tables": ["t0", "nope"], "ms": 1.0}], "probe 1 does not list"),
    ([{"tables": ["t0", "t1"], "ms": -1}], 'probe 0 has no measured "ms" (above 0 and under 1,000,000)'),
    ([{"tables": ["t0", "t1"], "ms": True}], 'probe 0 has no measured "ms" (above 0 and under 1,000,000)'),
    ([{"tables": ["t0", "t1"], "ms": 1e7}], 'probe 0 has no measured "ms" (above 0 and under 1,000,000)'),
    (["t0"], "probe 0 does not list"),
])
def test_a_bad_probe_is_refused_naming_it(probes, why):
    cfg = engine.parse_config(_big())
    costs = {**_costs(cfg, {"t0": 1.0, "t1": 1.0}), "probes": probes}
    with pytest.raises(engine.EngineError, match=re.escape(why)):
        apply_table_costs(cfg, costs, "c.json")


# ---- column pieces: a half-width copy measured alone ------------------------------------------------------------


def _wide(world: int = 2) -> dict:
    """t0: 128 wide, may be split by columns; t1: table-wise only."""
    raw = _config(world, dims=(128, 64), rows=(200_000, 2_000))
    raw["constraints"]["t0"]["sharding_types"] = ["table_wise", "column_wise"]
    return raw


def _cw(cfg: engine.Config, widths: list[int]) -> dict:
    t = cfg.table("t0")
    offs = [sum(widths[:k]) for k in range(len(widths))]
    shards = tuple(engine.Shard((0, o), (t.num_embeddings, w), k) for k, (o, w) in enumerate(zip(offs, widths)))
    return {"t0": engine.TablePlan(engine.ShardingType.COLUMN_WISE, engine.ComputeKernel.FUSED,
                                   tuple(range(len(widths))), shards),
            "t1": engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (len(widths) - 1,),
                                   (engine.Shard((0, 0), (2_000, 64), len(widths) - 1),))}


def test_a_column_piece_costs_its_column_share_to_the_measured_exponent_of_its_table():
    cfg = engine.parse_config(_wide(world=4))
    fixed, whole, half = 0.05, 2.05, 1.25  # the half-width copy: 0.6 of the whole's compute, g = log 0.6 / log 0.5
    costs = {**_costs(cfg, {"t0": whole, "t1": 0.3}, fixed),
             "probes": [{"round": 1, "tables": ["t0", "t1"], "ms": 2.4}]}  # 0.1 ms beyond their times alone
    costs["tables"]["t0"]["column"] = {"dim": 64, "ms": half}
    priced, notes = apply_table_costs(cfg, costs, "costs.json")
    g = priced.constraint("t0").column_exponent
    assert g == pytest.approx(np.log(0.6) / np.log(0.5)) and priced.constraint("t1").column_exponent is None
    assert any(n.startswith("column pieces of 1 tables priced from half-width copies measured alone: ") for n in notes)
    assert dict(priced.topology.profile.terms)["cpu_pressure_row_work"] > 0  # the pressure is priced
    for widths in ([64, 64], [32, 32, 32, 32], [96, 32]):
        ranks = engine.evaluate(priced, _cw(priced, widths)).ranks
        for k, w in enumerate(widths[:-1]):  # a piece alone on its rank: its share^g of the whole, as measured
            compute = ranks[k].perf.fwd_compute + ranks[k].perf.bwd_compute  # with the rank's fixed step
            assert compute == pytest.approx(fixed + (whole - fixed) * (w / 128) ** g, rel=1e-6)
    # without the half-width copy, a piece costs its share of the estimate, and gets its table's pressure back
    costs["tables"]["t0"].pop("column")
    before, _ = apply_table_costs(cfg, costs, "costs.json")
    half_before = engine.evaluate(before, _cw(before, [64, 64])).ranks[0]
    assert half_before.workset_ms < 0 and priced.constraint("t0").compute_scale == before.constraint("t0").compute_scale
    assert abs(half_before.perf.fwd_compute + half_before.perf.bwd_compute - half) > 0.05
    assert engine.config_to_dict(priced)["constraints"]["t0"]["column_exponent"] == pytest.approx(g)


def test_a_column_copys_ratio_is_the_median_of_its_rounds_pairs():
    cfg = engine.parse_config(_wide(world=4))
    costs = _costs(cfg, {"t0": 9.0, "t1": 0.3}, 0.0)
    # a round's pair shares that moment's state: 0.5 in two rounds of three, whatever the state
    costs["tables"]["t0"]["reps_ms"] = [7.0, 11.2, 9.0]
    costs["tables"]["t0"]["column"] = {"dim": 64, "ms": 5.6, "reps_ms": [3.5, 5.6, 6.0]}
    assert column_ratio(costs["tables"]["t0"], 0.0) == pytest.approx(0.5)
    assert column_ratio(costs["tables"]["t0"], 0.0, pairs=False) == pytest.approx(5.6 / 9.0)  # the medians' ratio
    priced, _ = apply_table_costs(cfg, costs, "c.json")
    assert priced.constraint("t0").column_exponent == pytest.approx(1.0)
    costs["tables"]["t0"]["column"]["reps_ms"] = [5.6]  # not one per round: the medians' ratio
    assert column_ratio(costs["tables"]["t0"], 0.0) == pytest.approx(5.6 / 9.0)
    for where in (costs["tables"]["t0"], costs["tables"]["t0"]["column"]):
        for bad in ([], [1.0, -2.0], "x", [True]):
            saved, where["reps_ms"] = where["reps_ms"], bad
            with pytest.raises(engine.EngineError, match=r"table 't0' has (\"column\" )?\"reps_ms\" that is not a"):
                apply_table_costs(cfg, costs, "c.json")
            where["reps_ms"] = saved


@pytest.mark.parametrize("column, why", [
    ({"dim": 0, "ms": 1.0}, 'table \'t0\' has a "column" record without a "dim" and a measured "ms"'),
    ({"dim": 64, "ms": -1}, 'table \'t0\' has a "column" record without'),
    ({"dim": 64.0, "ms": 1.0}, 'table \'t0\' has a "column" record without'),
    ("x", 'table \'t0\' has a "column" record without'),
    ({"dim": 128, "ms": 1.0}, "tables.t0.embedding_dim"),
])
def test_a_bad_column_record_is_refused_naming_the_table(column, why):
    cfg = engine.parse_config(_wide())
    costs = _costs(cfg, {"t0": 2.0, "t1": 0.3})
    costs["tables"]["t0"]["column"] = column
    with pytest.raises(engine.EngineError, match=re.escape(why)):
        apply_table_costs(cfg, costs, "c.json")


@pytest.mark.parametrize("bad", [-0.5, 2.5, "x"])
def test_a_bad_column_exponent_names_the_field(bad):
    raw = _wide()
    raw["constraints"]["t0"]["column_exponent"] = bad
    with pytest.raises(engine.ConfigError, match=r"constraints\.t0\.column_exponent"):
        engine.parse_config(raw)


@pytest.mark.parametrize("half, g", [(1.25, 0.0), (0.35, 1.0)])  # slower than the whole (noise); under its share
def test_a_measured_ratio_past_what_an_exponent_gives_is_held_and_said(half, g):
    cfg = engine.parse_config(_wide(world=4))
    costs = _costs(cfg, {"t0": 1.05, "t1": 0.3}, 0.05)
    costs["tables"]["t0"]["column"] = {"dim": 64, "ms": half}
    priced, notes = apply_table_costs(cfg, costs, "c.json")
    assert priced.constraint("t0").column_exponent == g
    assert any("g held to 0-1 for t0" in n for n in notes)
    # held to its share: two halves of the table on one rank never cost less than the table whole on it
    two = _cw(priced, [64, 64])
    two["t0"] = replace(two["t0"], ranks=(0, 0), shards=tuple(replace(s, rank=0) for s in two["t0"].shards))
    split = engine.evaluate(priced, two).ranks[0]
    whole = engine.evaluate(priced, _tw(priced, {"t0": 0, "t1": 3})).ranks[0]
    assert split.perf.fwd_compute + split.perf.bwd_compute >= whole.perf.fwd_compute + whole.perf.bwd_compute - 1e-9


def test_measure_tables_dry_runs_a_half_width_copy_of_each_table_that_may_be_split_by_columns(tmp_path):
    raw = _wide()
    raw["tables"][0]["num_embeddings"] = 20_000
    raw["tables"].append({"name": "t2", "num_embeddings": 1_000, "embedding_dim": 4, "feature_names": ["f2"]})
    raw["constraints"]["t2"] = {"pooling_factors": [4.0]}  # every type allowed, but 4 wide: no narrower copy
    cfg_path = write(tmp_path, raw)
    out = tmp_path / "costs.json"
    said = run("measure-tables", cfg_path, "--out", out, "--iters", 2, "--warmup", 1, "--reps", 2,
               "--progress").stderr
    # each round dry-runs the copy next to its table, after it in round 1 and before it in round 2
    runs = [re.sub(r"^\[\d/2\] \d+/\d+ (.*): [0-9.]+ ms$", r"\1", line) for line in said.splitlines()
            if re.match(r"^\[\d/2\] \d+/", line)]
    assert len(runs) == 2 * 5  # t0, its copy, t1, t2, the fixed step
    first, second = runs[:5], runs[5:]
    assert first.index("t0 at 64 of its columns") == first.index("t0") + 1
    assert second.index("t0 at 64 of its columns") == second.index("t0") - 1
    data = json.loads(out.read_text())
    col = data["tables"]["t0"]["column"]
    assert col["dim"] == 64 and col["ms"] > 0 and len(col["reps_ms"]) == len(data["tables"]["t0"]["reps_ms"]) == 2
    assert "column" not in data["tables"]["t1"] and "column" not in data["tables"]["t2"]
    plan = json.loads(run("plan", cfg_path, "--table-costs", out, "--json").stdout)
    assert any(n.startswith("column pieces of 1 tables priced from half-width copies") for n in plan["notes"])


def test_a_rounds_tables_fixed_step_and_probes_are_timed_in_turns_as_the_ranks_of_one_dry_run(monkeypatch):
    from engine.dryrun.table_costs import measure_tables
    from tests.engine.test_dryrun import _recorded_turns

    cfg = engine.parse_config(_config(world=1, rows=(2_000, 2_000, 2_000)))  # one rank: no gloo processes here
    turns, counts = _recorded_turns(monkeypatch)
    data = measure_tables(cfg, engine.DryrunSettings(iters=6, warmup=1), reps=2)
    assert data["schedule"] == "ranks in turns"
    # a round: 3 tables alone, the fixed step and one probe rank of the three, 5 ranks; 6 steps in turns of 4 and 2
    assert counts == [6] * 10
    for round_turns in (turns[:10], turns[10:]):
        units = [t[0] for t in round_turns[:5]]
        assert len(set(units)) == 5 and [t[0] for t in round_turns[5:]] == units
        assert [t[1] for t in round_turns] == [4] * 5 + [2] * 5
    assert [len(p["tables"]) for p in data["probes"]] == [3, 3] and all(p["ms"] > 0 for p in data["probes"])
    assert all(len(t["reps_ms"]) == 2 for t in data["tables"].values()) and len(data["fixed_reps_ms"]) == 2

    del turns[:], counts[:]
    apart = measure_tables(cfg, engine.DryrunSettings(iters=6, warmup=1, turns=False), reps=1)  # --one-rank-at-a-time
    assert apart["schedule"] == "one rank after another" and counts == [6] * 5
    ranks = [t[0] for t in turns]
    assert all(ranks[2 * k] == ranks[2 * k + 1] for k in range(5)) and len(set(ranks)) == 5
    # together over --max-bytes (each unit alone fits: the probe holds 1.5 MiB, all units 3 MiB): one after another
    small = measure_tables(cfg, engine.DryrunSettings(iters=2, warmup=0, max_bytes=2 << 20), reps=1)
    assert small["schedule"] == "one rank after another" and all(t["ms"] > 0 for t in small["tables"].values())


def test_units_of_a_round_share_one_backend_and_each_is_fed_by_its_own_config():
    from engine.dryrun.run import run_units
    from engine.table_costs import alone, together

    cfg = engine.parse_config(_config(world=2, rows=(2_000, 2_000, 2_000)))
    units = [alone(cfg, "t0"), alone(cfg, "t1"), together(cfg, ["t0", "t1"])]
    got = run_units(units, engine.DryrunSettings(iters=3, warmup=1))
    assert len(got.ms) == 3 and all(ms > 0 for ms in got.ms) and got.schedule == "ranks in turns"
    assert got.device.value == "cpu" and got.backend.value in ("fbgemm", "torch")
    with pytest.raises(engine.EngineError, match="over --max-bytes"):
        run_units(units, engine.DryrunSettings(iters=1, max_bytes=1000))
    with pytest.raises(engine.EngineError, match="--iters must be >= 1"):
        run_units(units, engine.DryrunSettings(iters=0))
