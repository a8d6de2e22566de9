"""Never compare across devices: `dryrun` and `validate` on a config whose compute_device is cuda measure on cpu
here, price the same placement for cpu (engine.pricing.priced_for, the one rule both call), and say so in their
human output and their --json (real CLI processes)."""

from __future__ import annotations

import json

import pytest

import engine
from engine.pricing import priced_for
from tests.factories import EXAMPLES, tutorial
from tests.validate.conftest import FAST, run_cli

NOTE = ("the config says cuda; this {what} measures on cpu, so the plan is priced for cpu (same placement)")


def test_one_rule_prices_the_same_placement_for_the_device_measured():
    cfg = engine.parse_config(tutorial("row_wise"))
    tables = engine.plan(cfg).tables
    p = priced_for(cfg, engine.Device.CPU, "dry-run")
    assert p.config.topology.compute_device is engine.Device.CPU and p.config.tables == cfg.tables
    assert p.note == NOTE.format(what="dry-run")
    assert p.fields() == {"estimated_device": "cpu", "config_device": "cuda"}
    assert p.lines() == ["estimates priced for cpu, the device measured", f"note: {p.note}"]
    on_cpu = engine.parse_config({**tutorial("row_wise"), "topology": {**tutorial("row_wise")["topology"],
                                                                       "compute_device": "cpu"}})
    assert engine.evaluate(p.config, tables).ranks == engine.evaluate(on_cpu, tables).ranks
    same = priced_for(cfg, engine.Device.CUDA, "validation run", local_world_size=1)
    assert same.note is None and same.config.topology.local_world_size == 1


def test_dryrun_on_a_cuda_config_prices_for_cpu_and_says_so(plan_files):
    config, plan = plan_files["row_wise"]
    assert json.loads(config.read_text())["topology"]["compute_device"] == "cuda"
    data = json.loads(run_cli("dryrun", str(config), "--plan", str(plan), "--json", "--iters", "2").stdout)
    assert (data["device"], data["estimated_device"], data["config_device"]) == ("cpu", "cpu", "cuda")
    assert data["notes"][0] == NOTE.format(what="dry-run")
    cfg = engine.load_config(config)
    cpu = engine.evaluate(priced_for(cfg, engine.Device.CPU, "dry-run").config, engine.load_plan(plan, cfg))
    assert [r["estimated_ms"] for r in data["ranks"]] == pytest.approx([r.cost_ms for r in cpu.ranks])
    assert [r["estimated_bytes"] for r in data["ranks"]] == [r.hbm_bytes + r.ddr_bytes for r in cpu.ranks]
    text = run_cli("dryrun", str(config), "--plan", str(plan), "--iters", "1", "--warmup", "0").stdout
    assert "estimates priced for cpu, the device measured" in text
    assert f"note: {NOTE.format(what='dry-run')}" in text


def test_validate_on_a_cuda_config_prices_for_cpu_and_says_so(plan_files, recorded_runs, tmp_path):
    p, data, _ = recorded_runs.runs["row_wise"]  # python -m db validate --json on tutorial_row_wise (cuda)
    assert (data["device"], data["estimated_device"], data["config_device"]) == ("cpu", "cpu", "cuda")
    assert data["notes"] == [NOTE.format(what="validation run")]
    assert f"validate: {NOTE.format(what='validation run')}" in p.stderr
    config, plan = plan_files["row_wise"]
    human = run_cli("validate", str(config), "--plan", str(plan), *FAST, "--out-dir", str(tmp_path / "out"))
    assert human.returncode == 0, human.stderr
    assert "estimates priced for cpu, the device measured" in human.stdout
    assert f"note: {NOTE.format(what='validation run')}" in human.stdout
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["estimated_device"] == "cpu" and written["notes"] == data["notes"]


def test_a_cpu_config_has_no_note(plan_files, tmp_path):
    cfg = {**tutorial("table_wise"), "topology": {**tutorial("table_wise")["topology"], "compute_device": "cpu"}}
    config = tmp_path / "cpu.json"
    config.write_text(json.dumps(cfg))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))))
    data = json.loads(run_cli("dryrun", str(config), "--plan", str(plan), "--json", "--iters", "1").stdout)
    assert (data["estimated_device"], data["config_device"], data["notes"]) == ("cpu", "cpu", [])
    script = json.loads(run_cli("validate", str(EXAMPLES / "tutorial_table_wise.json"), "--plan",
                                str(_plan_for(tmp_path)), "--launcher", "script", "--json",
                                "--out-dir", str(tmp_path / "s")).stdout)
    assert (script["estimated_device"], script["config_device"]) == ("cpu", "cuda")


def _plan_for(tmp_path):
    out = tmp_path / "tw.json"
    cfg = engine.load_config(EXAMPLES / "tutorial_table_wise.json")
    out.write_text(json.dumps(engine.plan_to_dict(engine.plan(cfg))))
    return out
