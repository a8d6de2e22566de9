"""dashboard.plans.table_costs: a measure-tables file applied to the workspace config as `plan --table-costs`
applies it, refused in one line naming the field when it does not fit, never trusted for what it can be recomputed
from, and taken off again; the Topology page shows it in use and takes it off (AppTest; the upload itself, which
AppTest cannot make, in tests/e2e/test_table_costs_browser.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import engine
from dashboard.plans import analysis
from dashboard.plans import table_costs as tcosts
from engine.table_costs import FORMAT, VERSION, table_record, topology_record
from tests.dashboard.helpers import goto, shown


def _config(world: int = 2) -> dict:
    return {"tables": [{"name": f"t{i}", "num_embeddings": 200_000 if i < 2 else 1_000, "embedding_dim": 64,
                        "feature_names": [f"f{i}"]} for i in range(4)],
            "constraints": {f"t{i}": {"pooling_factors": [30.0]} for i in range(4)},
            "topology": {"world_size": world, "local_world_size": world, "compute_device": "cpu",
                         "batch_size": 128, "optimizer": "sgd"}}


def _file(raw: dict, probes: list | None = None, **over) -> bytes:
    cfg = engine.parse_config(raw)
    data = {"format": FORMAT, "version": VERSION, "topology": topology_record(cfg), "device_name": "test CPU",
            "backend": "fbgemm", "fixed_ms": 0.05,
            "tables": {t.name: {"ms": 1.0 if t.num_embeddings > 1_000 else 0.2,
                                **table_record(t, cfg.constraint(t.name))} for t in cfg.tables},
            "probes": [{"round": 1, "tables": ["t0", "t1"], "ms": 2.9},
                       {"round": 1, "tables": ["t2", "t3"], "ms": 0.38}] if probes is None else probes}
    return json.dumps({**data, **over}).encode()


def test_a_file_is_applied_as_the_cli_applies_it_and_taken_off_again():
    raw = _config()
    got = tcosts.apply(raw, _file(raw), "costs.json")
    assert got.problem == "" and tcosts.in_use(got.config) == 4
    cli, notes = engine.apply_table_costs(engine.parse_config(raw), json.loads(_file(raw)), "costs.json")
    assert got.config == engine.config_to_dict(cli) and list(got.notes) == notes
    prof = got.config["topology"]["profile"]
    assert prof["step_ms"] == 0.05 and prof["cpu_pressure_row_work"] > 0 and prof["source"].startswith("measure-tables")
    assert any("pressure on each other as 2 probe ranks" in n for n in got.notes)
    off = engine.without_table_costs(got.config)
    assert tcosts.in_use(off) == 0 and "profile" not in off["topology"]  # measure-tables made that profile
    assert engine.parse_config(off) == engine.parse_config(raw)
    # a second file replaces the first: its own fixed step, not "the profile's own kept"
    again = tcosts.apply(got.config, _file(raw, fixed_ms=0.08), "second.json")
    assert again.config["topology"]["profile"]["step_ms"] == 0.08


def test_why_the_slowest_rank_is_slow_names_what_its_tables_cost_each_other():
    raw = _config()
    cfg = engine.parse_config(tcosts.apply(raw, _file(raw), "c.json").config)
    assert engine.prices_pressure(cfg.topology) and not engine.prices_pressure(engine.parse_config(raw).topology)
    crowded = {t.name: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (r,),
                                        (engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), r),))
               for t, r in zip(cfg.tables, (0, 0, 1, 1))}  # the two large tables together on rank 0
    plan = engine.evaluate(cfg, crowded)
    lines = analysis.bottleneck(plan, pressure=True)
    said = [line for line in lines if "cost each other beyond their times alone" in line]
    assert len(said) == 1 and said[0].startswith("Its tables touch ") and plan.ranks[0].workset_ms > 0
    assert not any("cost each other" in line for line in analysis.bottleneck(plan))  # the estimate's own wording


def test_a_calibrated_profile_keeps_its_figures_when_the_costs_come_off():
    raw = _config()
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "step_ms": 0.3,
                                  "source": "db calibrate: 4 runs", "cpu_id_work": 123.0}
    got = tcosts.apply(raw, _file(raw), "c.json")
    prof = got.config["topology"]["profile"]
    assert prof["step_ms"] == 0.3 and prof["cpu_id_work"] == 123.0 and prof["cpu_pressure_row_work"] > 0
    off = engine.without_table_costs(got.config)["topology"]["profile"]
    assert off["step_ms"] == 0.3 and off["cpu_id_work"] == 123.0 and "cpu_pressure_row_work" not in off


def test_a_fixed_step_set_in_a_profile_of_the_users_comes_off_with_the_costs_and_a_new_file_replaces_it():
    raw = _config()  # a profile of CPU terms only (db calibrate --terms): no fixed step of its own
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "cpu_id_work": 123.0,
                                  "source": "CPU terms only: no fixed costs measured"}
    two_ranks = {"world_size": 2, "round_ms": 0.4}
    got = tcosts.apply(raw, _file(raw, collectives=two_ranks), "c.json")
    prof = got.config["topology"]["profile"]
    assert (prof["step_ms"], prof["collective_ms"], prof["cpu_id_work"]) == (0.05, 0.4, 123.0)
    assert prof["set_by_table_costs"] == ["collective_ms", "step_ms"]
    assert not any("own fixed step kept" in n for n in got.notes)
    off = engine.without_table_costs(got.config)
    assert engine.parse_config(off) == engine.parse_config(raw)  # the user's profile as it was: no step, no round
    assert off["topology"]["profile"]["step_ms"] == 0.0 and "set_by_table_costs" not in off["topology"]["profile"]
    # a second file replaces the first's figures, in the dashboard and in plan --table-costs on the priced config
    again = tcosts.apply(got.config, _file(raw, fixed_ms=0.08), "second.json")
    cli, notes = engine.apply_table_costs(engine.parse_config(got.config), json.loads(_file(raw, fixed_ms=0.08)))
    assert again.config == engine.config_to_dict(cli)
    prof = again.config["topology"]["profile"]
    assert prof["step_ms"] == 0.08 and prof["collective_ms"] == 0.0 and prof["set_by_table_costs"] == ["step_ms"]
    assert any("fixed step 0.08 ms per rank, as measured" in n for n in notes)


def test_the_line_in_use_says_which_figures_are_the_files_and_which_the_profiles_own():
    tail = ' (docs/estimator.md, "Tables measured alone").'
    head = "In use: 4 of 4 tables priced as measured alone on the device; as the file measured them: "
    raw = _config()
    made = tcosts.apply(raw, _file(raw), "c.json").config  # measure-tables makes the profile
    assert tcosts.in_use_text(made) == head + "the fixed step and the tables' pressure on each other" + tail
    terms_only = _config()
    terms_only["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "cpu_id_work": 1.0}
    got = tcosts.apply(terms_only, _file(terms_only, collectives={"world_size": 2, "round_ms": 0.4}), "c.json").config
    assert tcosts.in_use_text(got) == (head + "the fixed step, the collective round and the tables' pressure on each "
                                       "other" + tail)
    calibrated = _config()
    calibrated["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "step_ms": 0.3}
    got = tcosts.apply(calibrated, _file(calibrated), "c.json").config
    assert tcosts.in_use_text(got) == (head + "the tables' pressure on each other; your profile's own fixed step "
                                       "kept" + tail)
    assert engine.measured_fixed_costs("published") == () and engine.measured_fixed_costs(None) == ()


@pytest.mark.parametrize("data, why", [
    (b"{not json", "is not JSON"),
    ("\udcff".encode("utf-8", "surrogatepass"), "is not JSON"),
    (json.dumps([1, 2]).encode(), 'no "format": "table-costs"'),
    (_file(_config(world=4)), "topology.world_size: c.json was measured with world_size 4"),
    (_file(_config(), probes=[{"tables": ["t0", "nope"], "ms": 1.0}]), "probe 0 does not list"),
    (_file(_config(), fixed_ms="<script>"), '"fixed_ms" \'<script>\' is not a time in ms'),
])
def test_a_bad_file_is_refused_in_one_line_naming_what_is_wrong(data, why):
    got = tcosts.apply(_config(), data, "c.json")
    assert got.config is None and why in got.problem and "\n" not in got.problem


def test_a_file_too_large_is_refused_before_it_is_read():
    got = tcosts.apply(_config(), b" " * (tcosts.MAX_BYTES + 1), "big.json")
    assert got.config is None and "files up to 16.00 MiB are taken here" in got.problem


def test_a_hostile_file_name_is_one_short_line():
    got = tcosts.apply(_config(), b"{", "a\nb\x1b[31m" + "x" * 500)
    assert "\n" not in got.problem and "\x1b" not in got.problem and len(got.problem) < 400


def test_the_topology_page_shows_measured_costs_in_use_and_takes_them_off(app):
    raw = _config()
    app.session_state["ws_config"] = tcosts.apply(raw, _file(raw), "c.json").config
    goto(app, "topology")
    assert any("In use: 4 of 4 tables priced as measured alone" in s for s in shown(app, "success"))
    assert app.button(key="topology_costs_use").disabled  # nothing uploaded
    goto(app, "plan")
    assert any("4 tables priced as measured alone on the device" in c for c in shown(app, "caption"))
    goto(app, "topology")
    app.button(key="topology_costs_off").click().run()
    assert not app.exception and tcosts.in_use(app.session_state["ws_config"]) == 0
    assert not any("In use: 4 of 4" in s for s in shown(app, "success"))
    assert engine.parse_config(app.session_state["ws_config"]) == engine.parse_config(raw)


def test_the_page_counts_measure_tables_dry_runs_and_its_progress_lines():
    import numpy as np

    from engine.table_costs import probe_groups

    for n, w in [(1, 2), (3, 2), (4, 8), (17, 4), (1_000, 8), (5, 5), (10, 3)]:
        probes = len(probe_groups([str(i) for i in range(n)], w, np.random.default_rng(0)))
        assert tcosts.dry_runs(n, w, 3) == 3 * (n + 1 + probes)
        assert tcosts.dry_runs(n, w, 3, columns=n) == 3 * (2 * n + 1 + probes)  # and a half-width copy each
    cfg = {"tables": [{"name": f"t{i}", "num_embeddings": 100, "embedding_dim": d, "feature_names": [f"f{i}"]}
                      for i, d in enumerate((64, 4, 64, 8))],
           "constraints": {"t2": {"sharding_types": ["table_wise", "row_wise"]}},
           "topology": {"world_size": 2, "compute_device": "cpu"}}
    assert tcosts.column_copies(cfg) == 2  # t0 (64 wide) and t3 (8): t1 is too narrow, t2 is never split by columns
    assert tcosts.column_copies({"tables": [{"name": "t0"}]}) == 0  # a config that does not parse: none counted
    text = "[1/3] 1/5 t0: 1.0 ms\nnote: x\n[1/3] 2/5 t1: 2.0 ms\n[1/3] 3/5 t2"  # the last one still being written
    assert tcosts.progress(text) == (2, "round 1 of 3, 2/5 t1: 2.0 ms") and tcosts.progress("") == (0, "")
    args = tcosts.measure_args(Path("c.json"), Path("o.json"), 2)
    assert args[:3] == ["-m", "engine", "measure-tables"] and args[args.index("--reps") + 1] == "2"
    with pytest.raises(ValueError):
        tcosts.measure_args(Path("c.json"), Path("o.json"), 0)


MEASURE_WAIT_S = 300


def test_the_topology_page_measures_the_tables_here_and_uses_the_file(app, polls):
    """A real measure-tables process on this machine's CPU, started from the page, its file applied as an upload."""
    raw = _config()
    for t in raw["tables"]:
        t["num_embeddings"] = min(t["num_embeddings"], 5_000)
    app.session_state["ws_config"] = raw
    at = goto(app, "topology")
    assert polls == []  # nothing measured, no polling
    at.number_input(key="topology_measure_reps").set_value(1).run()
    # 4 tables, the fixed step, 4 half-width copies (64 wide: each may be split by columns), 2 probe ranks
    assert any(c.startswith("On this server's CPU: 11 dry-runs of the 4 tables alone, 4 of them also at half width")
               for c in shown(at, "caption"))
    at.button(key="topology_measure_run").click().run()
    assert not at.exception, at.exception
    assert at.button(key="topology_measure_run").disabled  # one measurement at a time
    deadline = time.monotonic() + MEASURE_WAIT_S
    while "topology_measure_job" in at.session_state and time.monotonic() < deadline:
        time.sleep(1.0)
        at.run()  # the page collects the finished job on its next run (a browser's fragment polls)
        assert not at.exception, at.exception
    assert polls  # its progress while it ran
    assert not shown(at, "error"), shown(at, "error")
    assert tcosts.in_use(at.session_state["ws_config"]) == 4
    assert any("In use: 4 of 4 tables priced as measured alone" in s for s in shown(at, "success"))
    data = json.loads(at.session_state["topology_measure_result"]["file"])
    assert set(data["tables"]) == {"t0", "t1", "t2", "t3"} and data["reps"] == 1 and data["probes"]
    # the file's figures, applied as the CLI applies them (nothing of the page's own)
    cli, _ = engine.apply_table_costs(engine.parse_config(raw), data, "measured-table-costs.json")
    assert engine.parse_config(at.session_state["ws_config"]) == cli
    assert at.get("download_button")  # the file, kept for the user


def test_a_measurement_that_fails_says_why_in_one_line_and_changes_nothing(app):
    raw = _config()
    raw["tables"][0]["num_embeddings"] = 20_000_000  # 20M x 64 fp32 = 4.8 GiB: over the dry-run's 4 GiB cap
    app.session_state["ws_config"] = raw
    at = goto(app, "topology")
    at.number_input(key="topology_measure_reps").set_value(1).run()
    at.button(key="topology_measure_run").click().run()
    deadline = time.monotonic() + MEASURE_WAIT_S
    while "topology_measure_job" in at.session_state and time.monotonic() < deadline:
        time.sleep(1.0)
        at.run()
        assert not at.exception, at.exception
    errors = shown(at, "error")
    assert len(errors) == 1 and errors[0].startswith("The measurement was not used: ") and "\n" not in errors[0]
    assert "over --max-bytes 4.00 GiB" in errors[0] and "run the command below on the machine" in errors[0]
    assert tcosts.in_use(at.session_state["ws_config"]) == 0  # the page writes the topology's defaults out:
    assert engine.parse_config(at.session_state["ws_config"]) == engine.parse_config(raw)  # nothing else changed


def test_a_gpu_config_is_told_to_measure_on_its_gpu(app):
    raw = _config()
    raw["topology"]["compute_device"] = "cuda"
    app.session_state["ws_config"] = raw
    at = goto(app, "topology")
    assert not [b for b in at.button if b.key == "topology_measure_run"]  # this server's CPU is not the device
    assert any("--device cuda" in c for c in shown(at, "caption"))


def test_the_pages_count_of_dry_runs_is_the_number_measure_tables_makes(tmp_path):
    """The progress box's total: a real measure-tables run prints one progress line per dry-run it counts (tables,
    the fixed step, the half-width copies, the probe ranks), so "k of N dry-runs done" ends at N."""
    from tests.engine.test_cli import run
    from tests.factories import write

    raw = {"tables": [{"name": f"t{i}", "num_embeddings": 500, "embedding_dim": d, "feature_names": [f"f{i}"]}
                      for i, d in enumerate((64, 4, 32, 16, 8))],
           "constraints": {"t2": {"sharding_types": ["table_wise"]}},
           "topology": {"world_size": 2, "compute_device": "cpu", "batch_size": 16}}
    out = tmp_path / "costs.json"
    said = run("measure-tables", write(tmp_path, raw), "--out", out, "--iters", 1, "--warmup", 0, "--reps", 2,
               "--progress").stderr
    done, _ = tcosts.progress(said)
    assert tcosts.column_copies(raw) == 3  # t0, t3, t4: t1 is too narrow, t2 is never split by columns
    assert done == tcosts.dry_runs(5, 2, 2, tcosts.column_copies(raw)) == 2 * (5 + 1 + 3 + 2)
    assert set(json.loads(out.read_text())["tables"]["t4"]["column"]) == {"dim", "ms", "reps_ms"}
