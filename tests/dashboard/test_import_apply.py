"""Imports into the workspace, all or nothing: every problem listed by grid row or field, the workspace as it
was after a refusal, and accepted imports that the engine accepts as they are."""

from __future__ import annotations

import copy
import json

import pytest

import engine
from dashboard.tables import grid, import_apply, row_checks
from tests.factories import tutorial


def _run(fmt: str, data, mode: str = "replace", workspace: dict | None = None,
         valid: bool = True) -> import_apply.Outcome:
    ws = workspace if workspace is not None else tutorial()
    before = copy.deepcopy(ws)
    out = import_apply.run(fmt, data, ws, mode)
    assert ws == before, "the workspace given to run() was changed"
    assert all(p and p.isprintable() for p in out.problems), out.problems
    assert out.message.isprintable()
    if out.config is not None and valid:
        engine.parse_config(out.config)
    return out


def test_one_wrong_type_refuses_the_whole_import_and_lists_every_problem():
    cfg = tutorial()
    cfg["tables"][1]["embedding_dim"] = "64"
    cfg["tables"][3]["num_embeddings"] = 0
    cfg["tables"][3]["pooling"] = "max"
    cfg["constraints"] = {"small_table_0": {"min_partition": 0, "colour": 1}, "nope": {}}
    cfg["topology"] = {"world_size": 0, "hbm_cap": -1}
    out = _run("json", json.dumps(cfg))
    assert out.config is None and out.message == "Cannot import (8 problems); nothing was changed:"
    assert list(out.problems) == [
        "row 2 ('large_table_1'): dim (embedding_dim): must be an integer, got a string",
        # every constraint field, as engine.fields declares them (a new field joins the list)
        "row 3 ('small_table_0'): 'colour': unknown field; known fields: "
        + ", ".join(f.name for f in engine.CONSTRAINT_FIELD_DECLS),
        "row 3 ('small_table_0'): min partition: must be from 1 to 65,536, got 0",
        "row 4 ('small_table_1'): rows (num_embeddings): must be from 1 to 1,099,511,627,776, got 0",
        "row 4 ('small_table_1'): pooling: unknown value 'max'; use one of: sum, mean, none",
        "constraints for 'nope': no imported table has this name",
        "Topology, world size (world_size): must be from 1 to 16,384, got 0",
        "Topology, HBM (hbm_cap): must be from 0 to 1,125,899,906,842,624, got -1",
    ]


def test_a_csvs_problems_are_numbered_by_its_lines_and_the_grids_rows_are_named_as_such_when_appending():
    text = "name,rows,dim,features\nfresh,10,4,f1\nlarge_table_1,10,4,f2\nfresh,10,4,large_table_feature_0\n"
    out = _run("csv", text, mode="append")
    assert list(out.problems) == [
        "line 3 ('large_table_1'): name: duplicate table name (also the grid's row 2)",
        "line 4 ('fresh'): name: duplicate table name (also line 2)",
        "line 4 ('fresh'): features: feature 'large_table_feature_0' is already used by the grid's row 1",
    ]
    json_out = _run("json", json.dumps([{"name": "large_table_1", "num_embeddings": 1, "embedding_dim": 4}]),
                    mode="append")  # JSON has no lines that tables keep: the grid's rows number them
    assert list(json_out.problems) == ["row 5 ('large_table_1'): name: duplicate table name (also row 2)"]


def test_tables_that_are_not_objects_or_lack_fields_are_named_by_row():
    out = _run("json", json.dumps([5, {"num_embeddings": 1}, {"name": ["x"], "num_embeddings": 1, "embedding_dim": 1}]))
    assert list(out.problems) == [
        "row 1: must be an object with name, num_embeddings, embedding_dim; got 5",
        "row 2: name: is required", "row 2: dim (embedding_dim): is required",
        "row 3: name: must be a non-empty string, got a list",
    ]


def test_names_and_keys_from_the_input_stay_one_line():
    bad = "a\nb\u2028c\x00" + "x" * 100
    out = _run("json", json.dumps({"tables": [{"name": bad, "num_embeddings": 1, "embedding_dim": 1, bad: 1}]}))
    assert out.config is None and len(out.problems) == 2
    assert out.problems[0].startswith("row 1 ('a\\nb\\u2028c\\x00xxx") and "..." in out.problems[0]


def test_accepted_imports_replace_or_append_and_keep_the_rest():
    out = _run("csv", "name,rows,dim,pooling_factor,kernels\nc1,10,4,2.5,batched_fused\n", mode="append")
    cfg = out.config
    assert [t["name"] for t in cfg["tables"]][-2:] == ["small_table_1", "c1"]
    assert cfg["constraints"]["c1"] == {"compute_kernels": ["fused"], "pooling_factors": [2.5]}
    assert cfg["topology"] == tutorial()["topology"] and out.message == "Imported 1 table from CSV."
    whole = tutorial()
    whole["topology"] = {"world_size": 4, "compute_device": "CPU"}
    out = _run("json", json.dumps(whole))
    assert engine.parse_config(out.config).topology.compute_device is engine.Device.CPU
    assert out.message == "Imported 4 tables from JSON (topology replaced)."
    out = _run("json", json.dumps(whole), mode="append", workspace={"tables": [], "topology": {"world_size": 2}})
    assert out.config["topology"] == {"world_size": 2} and "its topology was not used" in out.message


def test_what_the_grid_cannot_hold_is_refused_with_its_reason():
    table = {"name": "t", "num_embeddings": 1, "embedding_dim": 1, "feature_names": ["a,b", " c"]}
    out = _run("json", json.dumps([table]))
    assert [p.split(": features: ")[1] for p in out.problems] == [
        "feature 'a,b' has a comma or surrounding spaces, which the grid cannot hold; rename it",
        "feature ' c' has a comma or surrounding spaces, which the grid cannot hold; rename it"]


def test_an_import_over_the_engines_totals_is_refused():
    tables = [{"name": f"t{i}", "num_embeddings": 2**40, "embedding_dim": 256, "data_type": "fp32"} for i in range(80)]
    out = _run("json", json.dumps(tables))
    assert out.config is None and out.problems == (
        "Tables: hold 81920.00 TiB of weights together; at most 65536.00 TiB are planned",)


def test_an_append_to_a_workspace_that_already_has_problems_checks_only_the_import():
    ws = tutorial()
    ws["tables"][0]["embedding_dim"] = 0  # being fixed in the grid
    out = _run("csv", "name,rows,dim\nextra,10,4\n", mode="append", workspace=ws, valid=False)
    assert [t["name"] for t in out.config["tables"]][-1] == "extra"
    assert row_checks.row_issues(grid.config_to_rows(out.config), out.config["topology"])[0][0].startswith("dim:")


@pytest.mark.parametrize("fmt, data", [("json", b"\x89PNG\r\n\x1a\n"), ("csv", "name,rows\x00,dim\n"),
                                       ("torchrec", "x = 2**2**2**2**2**2"), ("json", "")])
def test_every_failure_is_one_message(fmt, data):
    out = _run(fmt, data)
    assert out.config is None and len(out.problems) == 1 and out.message.startswith("Cannot import: ")
    assert out.message.endswith("(nothing was changed)")


def test_a_file_with_endless_problems_lists_the_first_ones_and_says_it_stopped():
    bad = [{"name": f"t{i}", "num_embeddings": "a", "embedding_dim": -1, "colour": 1} for i in range(10_000)]
    out = _run("json", json.dumps(bad))
    assert out.message == f"Cannot import (more than {import_apply.MAX_PROBLEMS} problems); nothing was changed:"
    assert len(out.problems) == import_apply.MAX_PROBLEMS + 1 and out.problems[-1] == import_apply.STOPPED
    assert out.problems[:3] == (("row 1 ('t0'): 'colour': unknown field; known fields: name, num_embeddings, "
                                 "embedding_dim, feature_names, pooling, data_type, use_virtual_table, "
                                 "total_num_buckets, virtual_table_eviction_policy"),
                                "row 1 ('t0'): rows (num_embeddings): must be an integer, got a string",
                                "row 1 ('t0'): dim (embedding_dim): must be from 1 to 65,536, got -1")


def test_a_csv_import_with_bad_cells_and_bad_values_changes_nothing_and_lists_them():
    workspace = tutorial()
    out = import_apply.run("csv", "name,rows,dim\na,abc,4\nb,10,x\n", workspace, "replace")
    assert out.config is None and out.problems == ("line 2, column rows: 'abc' is not a number",
                                                   "line 3, column dim: 'x' is not a number")
    assert workspace == tutorial()
    out = import_apply.run("csv", "name,rows,dim\na,0,4\na,10,0\n", workspace, "replace")
    assert out.config is None and out.problems == (
        "line 2 ('a'): rows (num_embeddings): must be from 1 to 1,099,511,627,776, got 0",
        "line 3 ('a'): dim (embedding_dim): must be from 1 to 65,536, got 0",
        "line 3 ('a'): name: duplicate table name (also line 2)")
    # issue 28: an unreadable cell and the other lines' problems at once, in one numbering (the file's lines)
    out = import_apply.run("csv", "name,rows,dim\na,0,4\nb,abc,4\n\nc,10,0\n", workspace, "replace")
    assert out.config is None and out.problems == (
        "line 2 ('a'): rows (num_embeddings): must be from 1 to 1,099,511,627,776, got 0",
        "line 3, column rows: 'abc' is not a number",
        "line 5 ('c'): dim (embedding_dim): must be from 1 to 65,536, got 0")
    assert not any("tables[" in p for p in out.problems)
