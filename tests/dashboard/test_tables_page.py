"""Tables & constraints page: grid edits, per-row errors, add/delete, presets, import, bulk edit."""

from __future__ import annotations

import json

from dashboard.tables import grid, presets
from tests.dashboard.helpers import edit, goto, shown, workspace
from tests.dashboard.test_importers import TUTORIAL_SNIPPET
from tests.factories import tutorial


def test_opens_on_the_tutorial_config(app):
    assert app.title[0].value == "Tables & constraints"
    assert [t["name"] for t in workspace(app)["tables"]] == [t["name"] for t in tutorial()["tables"]]
    grid = app.dataframe[0].value
    assert grid["name"].tolist()[:2] == ["large_table_0", "large_table_1"] and "issue" in grid.columns
    assert any("4 tables" in c and "2 ranks" in c for c in shown(app, "caption"))


def test_grids_fit_their_rows():
    assert grid.grid_height(4, True) == 35 * 6 + 3 and grid.grid_height(4, False) == 35 * 5 + 3  # no empty rows
    assert grid.grid_height(1000, True) == grid.GRID_MAX_PX


def test_editing_a_cell_changes_the_config(app):
    edit(app, "tables_grid", edited={0: {"dim": 32, "data_type": "fp16"}, 2: {"pooling_factor": 2.5}})
    cfg = workspace(app)
    assert cfg["tables"][0]["embedding_dim"] == 32 and cfg["tables"][0]["data_type"] == "fp16"
    assert cfg["constraints"]["small_table_0"]["pooling_factors"] == [2.5]
    assert not shown(app, "error")


def test_a_bad_cell_shows_its_error_next_to_the_row(app):
    edit(app, "tables_grid", edited={3: {"dim": 0}})
    grid = app.dataframe[0].value
    assert grid["issue"].tolist() == ["", "", "", "dim: must be from 1 to 65,536, got 0"]
    assert grid["dim"].tolist()[3] == 0
    assert "row 4 ('small_table_1'): dim: must be from 1 to 65,536, got 0" in shown(app, "error")[0]
    edit(app, "tables_grid", edited={3: {"dim": 8}})
    assert app.dataframe[0].value["issue"].tolist() == [""] * 4 and not shown(app, "error")


def test_add_and_delete_rows_in_the_grid(app):
    edit(app, "tables_grid", added=[{"name": "extra", "rows": 100, "dim": 16}], deleted=[0, 1])
    names = [t["name"] for t in workspace(app)["tables"]]
    assert names == ["small_table_0", "small_table_1", "extra"]
    assert app.dataframe[0].value["name"].tolist() == names  # folded into the grid's base rows
    app.button(key="tables_add").click().run()
    assert len(workspace(app)["tables"]) == 4 and app.dataframe[0].value["name"].tolist()[-1] == "table_3"


def test_constraints_grid_edits(app):
    edit(app, "tables_constraints_grid",
          edited={0: {"sharding_types": ["row_wise", "table_row_wise"], "compute_kernels": ["fused"]},
                  1: {"min_partition": 0}})
    cons = workspace(app)["constraints"]
    assert cons["large_table_0"] == {"sharding_types": ["row_wise", "table_row_wise"], "compute_kernels": ["fused"]}
    assert app.dataframe[1].value["issue"].tolist()[1] == "min partition: must be from 1 to 65,536, got 0"
    assert "row 2 ('large_table_1'): min partition" in shown(app, "error")[0]


def test_presets_dlrm_and_synthetic(app):
    app.selectbox(key="tables_preset").set_value("dlrm_criteo_1tb").run()
    app.button(key="tables_load_preset").click().run()
    cfg = workspace(app)
    assert len(cfg["tables"]) == 26 and cfg["topology"]["world_size"] == 8
    assert len(app.dataframe[0].value) == 26
    app.selectbox(key="tables_preset").set_value("synthetic").run()
    app.number_input(key="tables_syn_count").set_value(200).run()
    app.number_input(key="tables_syn_seed").set_value(5).run()
    app.button(key="tables_load_preset").click().run()
    cfg = workspace(app)
    assert cfg["tables"] == presets.synthetic(presets.SyntheticSpec(count=200, seed=5))["tables"]
    assert cfg["topology"]["world_size"] == 8  # kept from DLRM: synthetic keeps the topology by default
    assert any("200 tables" in t for t in shown(app, "toast"))


def _import(app, fmt: str, text: str, mode: str = "replace"):
    app.radio(key="tables_import_format").set_value(fmt).run()
    app.text_area(key="tables_import_text").set_value(text)
    app.radio(key="tables_import_mode").set_value(mode)
    app.button(key="tables_import_run").click().run()
    assert not app.exception, app.exception
    return app


def test_import_torchrec_snippet_json_and_csv(app):
    edit(app, "tables_grid", deleted=[0, 1, 2])
    _import(app, "torchrec", TUTORIAL_SNIPPET)
    assert [t["name"] for t in workspace(app)["tables"]] == [t["name"] for t in tutorial()["tables"]]
    _import(app, "csv", "name,rows,dim,sharding_types\ncsv_a,10,4,row_wise\n", mode="append")
    cfg = workspace(app)
    assert len(cfg["tables"]) == 5 and cfg["constraints"]["csv_a"] == {"sharding_types": ["row_wise"]}
    whole = tutorial()
    whole["topology"]["world_size"] = 4
    _import(app, "json", json.dumps(whole))
    assert len(workspace(app)["tables"]) == 4 and workspace(app)["topology"]["world_size"] == 4


def test_an_uploaded_file_is_named_once_the_server_holds_it_then_imported(app):
    app.button(key="tables_import_run").click().run()  # clicked before any file is in (still uploading)
    assert shown(app, "error") == ['Cannot import: nothing to import: paste text or choose a file (a chosen file '
                                   'is in once "Ready to import" names it) (nothing was changed)']
    cfg = tutorial()
    cfg["tables"].pop()
    body = json.dumps(cfg).encode()
    app.file_uploader(key="tables_import_file").upload("**three** [x](y).json", body, "application/json").run()
    assert f"Ready to import: **three** [x](y).json ({len(body)} B)." in shown(app, "caption")  # as typed
    app.button(key="tables_import_run").click().run()
    assert not app.exception and not shown(app, "error")
    assert [t["name"] for t in workspace(app)["tables"]] == [t["name"] for t in cfg["tables"]]


def test_bad_import_says_why_and_changes_nothing(app):
    before = json.dumps(workspace(app))
    _import(app, "torchrec", "EmbeddingBagConfig(name=input(), num_embeddings=1, embedding_dim=1)")
    assert shown(app, "error") == [
        ("Cannot import: line 1: cannot read the call input(): only literals are read (numbers, strings, lists, "
         "dicts, names bound to them, str(...), PoolingType/DataType members); nothing is run (nothing was changed)")]
    assert json.dumps(workspace(app)) == before


def test_an_import_with_wrong_values_lists_every_problem_and_keeps_the_workspace(app):
    edit(app, "tables_grid", edited={0: {"dim": 32}})
    before = json.dumps(workspace(app))
    whole = tutorial()
    whole["tables"][1].update(name="**b** [x](http://e.org) $x$ :red[y]", embedding_dim="64")
    whole["tables"][3]["num_embeddings"] = -5
    whole["topology"]["world_size"] = 3
    _import(app, "json", json.dumps(whole))
    assert shown(app, "error") == [("Cannot import (3 problems); nothing was changed:\n"
                                    "row 2 ('**b** [x](http://e.org) $x$ :red[y]'): dim (embedding_dim): must be an "
                                    "integer, got a string\n"
                                    "row 4 ('small_table_1'): rows (num_embeddings): must be from 1 to "
                                    "1,099,511,627,776, got -5\n"
                                    "Topology, ranks per host (local_world_size): must divide world_size (3) evenly, "
                                    "got 2")]
    assert json.dumps(workspace(app)) == before
    assert not app.get("toast")


def test_bulk_edit_and_bulk_delete(app):
    app.text_input(key="tables_bulk_pattern").set_value("large_*").run()
    app.selectbox(key="tables_bulk_column").set_value("compute_kernels").run()
    app.multiselect(key="tables_bulk_value_compute_kernels").set_value(["fused_uvm_caching"]).run()
    app.button(key="tables_bulk_apply").click().run()
    cons = workspace(app)["constraints"]
    assert cons == {"large_table_0": {"compute_kernels": ["fused_uvm_caching"]},
                    "large_table_1": {"compute_kernels": ["fused_uvm_caching"]}}
    assert app.dataframe[1].value["compute_kernels"].tolist()[0] == ["fused_uvm_caching"]
    app.text_input(key="tables_bulk_pattern").set_value("small_*").run()
    app.button(key="tables_bulk_delete").click().run()
    app.button(key="tables_bulk_delete_confirm").click().run()  # deletes ask first (tests/dashboard/test_bulk_edit.py)
    assert [t["name"] for t in workspace(app)["tables"]] == ["large_table_0", "large_table_1"]


def test_grid_edits_survive_a_trip_to_another_page(app):
    edit(app, "tables_grid", edited={1: {"rows": 777}})
    goto(app, "topology")
    goto(app, "tables")
    assert app.dataframe[0].value["rows"].tolist()[1] == 777
    assert workspace(app)["tables"][1]["num_embeddings"] == 777


def test_two_bad_rows_and_a_duplicate_name_all_show_at_once(app):
    """Issue 12: every problem at once, each on its row, numbered as the grid numbers rows (1-based), listed
    above the grids, never an engine path."""
    edit(app, "tables_grid", edited={1: {"dim": 0}, 2: {"name": "large_table_0"}, 3: {"rows": -1}})
    issues = app.dataframe[0].value["issue"].tolist()
    assert issues == ["name: 'large_table_0' is also the name of row 3; table names must be unique",
                      "dim: must be from 1 to 65,536, got 0",
                      "name: 'large_table_0' is also the name of row 1; table names must be unique",
                      "rows: must be from 1 to 1,099,511,627,776, got -1"]
    assert app.dataframe[1].value["issue"].tolist() == issues  # the constraints grid flags the same rows
    summary = shown(app, "error")[0]
    assert summary.startswith("**4 tables to fix before planning**")
    assert "- row 2 ('large_table_1'): dim: must be from 1 to 65,536, got 0" in summary
    assert "- row 3 ('large_table_0'): name: 'large_table_0' is also the name of row 1" in summary
    assert "tables[" not in summary and "rows 1, 2, 3 and 4 to fix" in " ".join(shown(app, "caption"))
    edit(app, "tables_grid", edited={2: {"name": "small_table_0"}})  # fix only the duplicate
    assert app.dataframe[0].value["issue"].tolist() == ["", "dim: must be from 1 to 65,536, got 0", "",
                                                         "rows: must be from 1 to 1,099,511,627,776, got -1"]


def test_the_summary_lists_the_first_rows_and_counts_the_rest(app):
    edit(app, "tables_grid", added=[{"name": f"bad_{i}", "rows": 10, "dim": 0} for i in range(8)])
    summary = shown(app, "error")[0]
    assert summary.count("\n- row ") == 5 and summary.endswith("- and 3 more")
    assert "- row 5 ('bad_0'): dim: must be from 1 to 65,536, got 0" in summary


def test_a_json_import_with_one_wrong_type_changes_nothing(app):
    """Issue 12: a JSON import with one wrong type replaced every table. It is refused whole and says why."""
    before = json.dumps(workspace(app))
    whole = presets.dlrm_criteo_1tb()
    whole["tables"][4]["embedding_dim"] = "128"
    whole["tables"][9]["name"] = whole["tables"][8]["name"]
    _import(app, "json", json.dumps(whole))
    assert shown(app, "error") == ["Cannot import (3 problems); nothing was changed:\n"
                                   "row 5 ('t_cat_4'): dim (embedding_dim): must be an integer, got a string\n"
                                   "row 10 ('t_cat_8'): name: duplicate table name (also row 9)\n"
                                   "constraints for 't_cat_9': no imported table has this name"]
    assert json.dumps(workspace(app)) == before and len(app.dataframe[0].value) == 4


def test_every_grid_header_fits_its_column():  # 'min partitio', 'cache load facto' were cut
    for column, f in grid.COLUMN_FIELDS.items():
        assert f.width is None or f.width >= len(f.grid_label) * 8 + 24, (column, f.grid_label, f.width)
