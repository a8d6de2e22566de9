"""bench.interactive --engine: every table preset the dashboard offers, a one-table edit re-planned from the plan on
screen, its figures and report."""

import json

from bench import interactive, interactive_replan
from dashboard.tables import presets


def test_every_table_preset_is_covered_and_1000_tables_too():
    raws = {name: make() for name, make in interactive_replan.PRESETS.items()}
    sizes = {name: len(raw["tables"]) for name, raw in raws.items()}
    assert sizes["tutorial"] == len(presets.tutorial()["tables"])
    assert sizes["dlrm_criteo_1tb"] == len(presets.dlrm_criteo_1tb()["tables"])
    assert sizes["synthetic-200"] == presets.SyntheticSpec().count
    assert sum(n == 1000 for n in sizes.values()) >= 3 and len(presets.TABLE_PRESETS) == 3
    for key, cluster in presets.CLUSTERS.items():  # 1,000 tables on each cluster preset of the Topology page
        topology = raws[f"synthetic-1000 on {cluster.label}"]["topology"]
        assert topology == presets.cluster_topology(key, presets.synthetic(presets.SyntheticSpec())["topology"])


def test_a_preset_that_cannot_hold_the_tables_is_timed_to_its_refusal():
    case = interactive_replan.run_preset("cpu", interactive_replan.PRESETS[
        f"synthetic-1000 on {presets.CLUSTERS['cpu_2'].label}"](), 2, log=lambda s: None)
    assert case["refused"] and case["first_plan_s"] > 0 and case["edits"] == []
    assert "| cpu | 1000 x 2 | refused in " in interactive_replan.markdown(
        {"command": "c", "date": "d", "cpus": 2, "load_before": "1", "load_after": "1", "repeats": 2,
         "presets": [case]})


def test_an_edit_changes_one_table_only():
    raw = presets.tutorial()
    out = interactive_replan.edit(raw, 100.0)
    assert out["constraints"] == {"small_table_1": {"pooling_factors": [100.0]}} and raw["constraints"] == {}
    assert out["tables"] == raw["tables"]


def test_the_engine_bench_end_to_end_on_the_tutorial(tmp_path):
    assert interactive.main(["--engine", "--presets", "tutorial", "--repeats", "2", "--out-dir", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "interactive_replan.json").read_text())
    (case,) = data["presets"]
    assert case["preset"] == "tutorial" and case["deterministic"] and len(case["edits"]) == 2
    for e in case["edits"]:
        assert e["replan_s"] > 0 and e["step_ratio"] > 0 and 0 <= e["moved_tables"] <= 4
        assert e["scratch_step_ms"] > 0 and e["load1"] >= 0
    md = (tmp_path / "interactive_replan.md").read_text()
    assert md.startswith("Made by `python -m bench.interactive --engine --presets tutorial --repeats 2")
    assert "| tutorial | 4 x 2 |" in md and "| yes |" in md
