"""`python -m engine` as a user runs it: real subprocesses, real files, exit codes and what is printed."""

import json
import subprocess
import sys

import pytest

import engine
from tests.factories import EXAMPLES, ROOT, tutorial, write


def run(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_plan_prints_a_per_rank_and_per_table_summary():
    out = run("plan", EXAMPLES / "tutorial_table_wise.json").stdout
    assert "4 tables on 2 ranks" in out
    assert "rank" in out and "HBM used" in out and "cost ms" in out
    for name in ("large_table_0", "large_table_1", "small_table_0", "small_table_1"):
        assert name in out
    assert "1 x [4096, 64]" in out


def test_plan_json_and_out_file_hold_the_same_plan(tmp_path):
    out_file = tmp_path / "plan.json"
    stdout = run("plan", EXAMPLES / "tutorial_column_wise.json", "--json", "--out", out_file).stdout
    printed = json.loads(stdout)
    written = json.loads(out_file.read_text())
    # one encoding serves both: the file is the printed text byte for byte, as --out alone writes it
    assert out_file.read_text() == stdout == json.dumps(written, indent=1) + "\n"
    alone = tmp_path / "alone.json"
    run("plan", EXAMPLES / "tutorial_column_wise.json", "--out", alone)
    assert json.loads(alone.read_text())["plan"] == written["plan"] and alone.read_text().endswith("}\n")
    assert printed["plan"] == written["plan"]
    tp = printed["plan"]["large_table_0"]
    assert tp == {"sharding_type": "column_wise", "compute_kernel": "fused", "ranks": [0, 1],
                  "shards": [{"offsets": [0, 0], "sizes": [4096, 32], "rank": 0},
                             {"offsets": [0, 32], "sizes": [4096, 32], "rank": 1}]}
    assert [r["rank"] for r in printed["ranks"]] == [0, 1]
    assert printed["max_rank_cost_ms"] == max(r["cost_ms"] for r in printed["ranks"]) > 0
    assert {"hbm_bytes", "ddr_bytes", "fwd_compute_ms", "bwd_comms_ms"} <= set(printed["ranks"][0])


def test_torchrec_format_prints_parameter_shardings():
    out = run("plan", EXAMPLES / "tutorial_data_parallel.json", "--torchrec-format").stdout
    assert out.startswith("{'': {'large_table_0': ParameterSharding(sharding_type='data_parallel', "
                          "compute_kernel='dense', ranks=[0, 1], sharding_spec=None)")


def test_estimate_scores_a_plan_made_elsewhere(tmp_path):
    plan_file = tmp_path / "p.json"
    run("plan", EXAMPLES / "tutorial_row_wise.json", "--out", plan_file)
    planned = json.loads(plan_file.read_text())
    est = json.loads(run("estimate", EXAMPLES / "tutorial_row_wise.json", "--plan", plan_file, "--json").stdout)
    assert est["plan"] == planned["plan"] and est["planner"] == "file"
    assert est["ranks"] == planned["ranks"]
    # a hand-edited plan: everything on rank 0
    for tp in planned["plan"].values():
        tp.update(sharding_type="table_wise", ranks=[0], shards=[{"offsets": [0, 0], "sizes": [
            tp["shards"][0]["sizes"][0] * 2, 64], "rank": 0}])
    write(tmp_path, planned, "all_on_0.json")
    est = json.loads(run("estimate", EXAMPLES / "tutorial.json", "--plan", tmp_path / "all_on_0.json",
                         "--json").stdout)
    assert est["bottleneck_rank"] == 0 and est["ranks"][1]["cost_ms"] == 0 and est["ranks"][1]["hbm_bytes"] == 0


def one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0]
    return lines[0]


@pytest.mark.parametrize("content,words", [
    ("{not json", ["not valid JSON", "line 1"]),
    ('{"tables": [], "topology": {"world_size": 2}}', ["tables: must be a non-empty list"]),
    ('{"tables": [{"name": "t", "num_embeddings": -1, "embedding_dim": 4}], "topology": {"world_size": 2}}',
     ["tables[0].num_embeddings", "from 1 to"]),
    ('[1, 2]', ["must be an object"]),
])
def test_malformed_configs_fail_with_one_line(tmp_path, content, words):
    one_line_error(run("plan", write(tmp_path, content), check=False), *words)


def test_missing_file_fails_with_one_line(tmp_path):
    one_line_error(run("plan", tmp_path / "nope.json", check=False), "does not exist")


@pytest.mark.parametrize("args, words", [
    ((), ["required: command", "python -m engine --help"]),
    (("plann",), ["invalid choice: 'plann'", "'plan'"]),
])
def test_a_missing_or_unknown_command_is_one_line(args, words):
    one_line_error(run(*args, check=False), *words)


def test_table_larger_than_all_memory_names_table_bytes_and_fixes(tmp_path):
    cfg = tutorial("table_wise")
    cfg["tables"][0]["num_embeddings"] = 400_000_000  # 95 GiB of fp32 weights, table_wise only
    line = one_line_error(run("plan", write(tmp_path, cfg), check=False), "large_table_0", "does not fit",
                          "GiB", "What would help", "row_wise")
    assert "usable per rank" in line


def test_everything_too_big_reports_total_need_and_capacity(tmp_path):
    cfg = tutorial()
    for t in cfg["tables"]:
        t["num_embeddings"] = 2_000_000_000
    one_line_error(run("plan", write(tmp_path, cfg), check=False), "do not fit", "TiB", "ranks have",
                   "largest tables are")


def test_too_big_is_refused_by_the_reader_with_the_planners_message(tmp_path):
    """`plan` refuses tables that cannot fit as soon as they are read (before the constraints): the same line
    as the planner's own refusal; parse_config alone still reads the whole config and raises only ConfigError."""
    cfg = tutorial()
    for t in cfg["tables"]:
        t["num_embeddings"] = 2_000_000_000
    planner_line = None
    try:
        engine.plan(engine.parse_config(cfg))
    except engine.PlanningError as e:
        planner_line = f"error: {e}"
    cli = run("plan", write(tmp_path, cfg), check=False)
    assert cli.returncode == 2 and cli.stderr.strip() == planner_line
    cfg["constraints"] = {"large_table_0": {"pooling_factors": "lots"}}  # a constraint error too
    assert "do not fit" in run("plan", write(tmp_path, cfg, "both.json"), check=False).stderr
    with pytest.raises(engine.ConfigError, match="pooling_factors"):
        engine.parse_config(cfg)  # the dashboard's reader: field errors only


def test_constraints_that_exclude_every_option(tmp_path):
    cfg = tutorial("table_wise")
    cfg["topology"]["compute_device"] = "cpu"
    cfg["constraints"]["small_table_1"]["compute_kernels"] = ["fused_uvm"]
    one_line_error(run("plan", write(tmp_path, cfg), check=False), "small_table_1", "exclude every option")


def test_plan_that_does_not_match_the_config(tmp_path):
    plan_file = tmp_path / "p.json"
    run("plan", EXAMPLES / "tutorial_row_wise.json", "--out", plan_file)
    data = json.loads(plan_file.read_text())
    data["plan"]["large_table_0"]["shards"][1]["sizes"] = [1000, 64]
    write(tmp_path, data, "bad.json")
    one_line_error(run("estimate", EXAMPLES / "tutorial.json", "--plan", tmp_path / "bad.json", check=False),
                   "plan.large_table_0.shards", "cover")


def test_planning_does_not_import_torch():
    code = ("import sys, engine.cli; engine.cli.main(['plan', 'examples/tutorial.json', '--json']); "
            "assert 'torch' not in sys.modules and 'torchrec' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
