"""The grid model: config <-> rows, data_editor deltas, per-row validation mapped from engine errors, bulk edits."""

from __future__ import annotations

import engine
from dashboard.tables import grid, row_checks
from tests.factories import tutorial

TOPO = {"world_size": 2}


def _rows() -> list[dict]:
    return grid.config_to_rows(tutorial())


def test_rows_round_trip_keeps_constraints_the_grid_does_not_show():
    cfg = tutorial()
    cfg["tables"][0]["feature_names"] = ["f1", "f2"]
    cfg["constraints"] = {"large_table_0": {"pooling_factors": [2.0, 4.0], "num_poolings": [1.0, 2.0],
                                            "is_weighted": True, "sharding_types": ["row_wise"],
                                            "compute_kernels": ["fused"], "min_partition": 8,
                                            "cache_load_factor": 0.5}}
    rows = grid.config_to_rows(cfg)
    assert rows[0]["features"] == "f1, f2" and rows[0]["pooling_factor"] == 3.0
    back = grid.rows_to_config(rows, cfg["topology"])
    assert engine.parse_config(back) == engine.parse_config(cfg)
    rows[0]["pooling_factor"] = 5.0  # an edited mean replaces the per-feature list
    assert grid.rows_to_config(rows, TOPO)["constraints"]["large_table_0"]["pooling_factors"] == [5.0]


def test_editing_another_field_keeps_the_workload_block():
    """A measured workload block (python -m engine stats --apply) has no column: it rides in _extra, so an edit of
    another cell of the row does not drop it."""
    cfg = tutorial()
    rows_n = cfg["tables"][0]["num_embeddings"]
    block = {"from": {"file": "s.parquet", "rows": 100, "modified": "2026-11-27T00:00:00Z"},
             "miss_ratio_curve": [{"cache_rows": 10, "lru_miss_rate": 0.5},
                                  {"cache_rows": rows_n, "lru_miss_rate": 0.1}]}
    cfg["constraints"] = {"large_table_0": {"workload": block}}
    rows = grid.config_to_rows(cfg)
    rows[0]["dim"] = 64  # the user edits another field of the same row
    back = grid.rows_to_config(rows, cfg["topology"])
    assert back["constraints"]["large_table_0"]["workload"] == block
    assert engine.parse_config(back).constraint("large_table_0").workload is not None


def test_apply_edits_edits_then_deletes_then_adds():
    delta = {"edited_rows": {"1": {"dim": 16.0, "features": "x, y"}}, "deleted_rows": [0],
             "added_rows": [{"name": "new", "rows": 7, "dim": 3}]}
    out = grid.apply_edits(_rows(), delta)
    assert [r["name"] for r in out] == ["large_table_1", "small_table_0", "small_table_1", "new"]
    assert out[0]["dim"] == 16 and isinstance(out[0]["dim"], int)
    cfg = grid.rows_to_config(out, TOPO)
    assert cfg["tables"][0]["feature_names"] == ["x", "y"]
    assert cfg["tables"][3] == {"name": "new", "num_embeddings": 7, "embedding_dim": 3, "pooling": "sum",
                                "data_type": "fp32"}
    fixed = grid.apply_edits(_rows(), delta, allow_structure=False)
    assert len(fixed) == 4 and fixed[1]["dim"] == 16
    assert grid.changes_structure(delta) and not grid.changes_structure({"edited_rows": {0: {"dim": 1}}})


def test_issues_name_row_and_column():
    rows = _rows()
    rows[1]["dim"] = 0
    rows[2]["min_partition"] = 0
    rows[3]["pooling"] = "max"
    issues, outside = row_checks.row_issues(rows, TOPO)
    assert issues == ["", "dim: must be from 1 to 65,536, got 0", "min partition: must be from 1 to 65,536, got 0",
                      "pooling: unknown value 'max'; use one of: sum, mean, none"]
    assert outside is None


def test_cross_row_and_topology_issues():
    rows = _rows()
    rows[2]["name"] = "large_table_0"
    issues, _ = row_checks.row_issues(rows, TOPO)
    assert issues == ["name: 'large_table_0' is also the name of row 3; table names must be unique", "",
                      "name: 'large_table_0' is also the name of row 1; table names must be unique", ""]
    issues, outside = row_checks.row_issues(_rows(), {"world_size": 4, "local_world_size": 3})
    assert not any(issues)
    assert outside == "Topology, ranks per host: must divide world_size (4) evenly, got 3"


def test_every_problem_shows_at_once_each_on_its_row():
    """Two bad rows and a duplicate name: all flagged in one pass (the duplicate is not held back until the
    other rows are fixed), each row numbered as the grid numbers it, no engine path in any message."""
    rows = _rows()
    rows[1]["dim"] = 0
    rows[1]["pooling"] = "max"  # a second problem on the same row
    rows[3]["rows"] = -5
    rows[3]["name"] = "large_table_0"
    rows[2]["features"] = "large_table_feature_1, extra"  # row 2's feature
    issues, outside = row_checks.row_issues(rows, TOPO)
    assert issues == [
        "name: 'large_table_0' is also the name of row 4; table names must be unique",
        "dim: must be from 1 to 65,536, got 0; pooling: unknown value 'max'; use one of: sum, mean, none; "
        "features: 'large_table_feature_1' is also a feature of row 3; feature names must be unique",
        "features: 'large_table_feature_1' is also a feature of row 2; feature names must be unique",
        "rows: must be from 1 to 1,099,511,627,776, got -5; "
        "name: 'large_table_0' is also the name of row 1; table names must be unique"]
    assert outside is None and not any("tables[" in t for t in issues)
    assert row_checks.issue_lines(rows, issues)[0] == (
        "row 1 ('large_table_0'): name: 'large_table_0' is also the name of row 4; table names must be unique")
    rows = _rows() + [dict(_rows()[0]) for _ in range(7)]
    issues, _ = row_checks.row_issues(rows, TOPO)
    assert issues[0] == ("name: 'large_table_0' is also the name of rows 5, 6, 7, 8, 9 and 2 more; table names "
                         "must be unique")


def test_problems_only_the_whole_config_shows_land_on_their_row():
    """A table whose lookups are within bounds alone (one rank) but not over the topology's ranks: found with the
    other rows' problems, on its row."""
    rows = _rows()
    rows[0]["dim"] = 0
    rows[2]["pooling_factor"] = 1.0e6
    issues, outside = row_checks.row_issues(rows, {"world_size": 1024, "batch_size": 2**24})
    assert issues[0] == "dim: must be from 1 to 65,536, got 0"
    assert issues[2].startswith("pooling factor: table 'small_table_0' looks up") and not issues[1] + issues[3]
    assert outside is None


def test_empty_cells_are_reported_not_crashed_on():
    rows = grid.apply_edits(_rows(), {"added_rows": [{}]})
    issues, _ = row_checks.row_issues(rows, TOPO)
    assert issues[4] == ("name: must be a non-empty string, got null; rows: must be an integer, got null; "
                         "dim: must be an integer, got null")


def test_locate_constraint_fields():
    rows = _rows()
    assert row_checks.locate("constraints.small_table_1.cache_load_factor", rows) == (3, "cache_load_factor")
    assert row_checks.locate("tables[2].num_embeddings", rows) == (2, "rows")
    assert row_checks.locate("topology.world_size", rows) == (None, None)


def test_bulk_set_and_delete_by_glob():
    rows, n = grid.bulk_set(_rows(), "large_*", "sharding_types", ["row_wise"])
    assert n == 2
    cfg = grid.rows_to_config(rows, TOPO)
    assert set(cfg["constraints"]) == {"large_table_0", "large_table_1"}
    rows, n = grid.bulk_delete(rows, "small_table_?")
    assert n == 2 and [r["name"] for r in rows] == ["large_table_0", "large_table_1"]
    assert grid.matching(_rows(), "*") == [0, 1, 2, 3]
    assert grid.matching(_rows(), "") == [] and grid.matching(_rows(), "  ") == []  # no pick-everything default


def test_new_rows_get_unique_names_and_frames_have_editor_types():
    rows = _rows()
    rows.append(grid.new_table_row(rows))
    rows.append(grid.new_table_row(rows))
    assert rows[-2]["name"] != rows[-1]["name"]
    issues, _ = row_checks.row_issues(rows, TOPO)
    frame = grid.tables_frame(rows, issues)
    assert list(frame.columns) == list(grid.TABLE_COLUMNS)
    assert str(frame["rows"].dtype) == "Int64" and frame["issue"].tolist() == [""] * 6
    cons = grid.constraints_frame(rows, issues)
    assert list(cons.columns) == list(grid.CONSTRAINT_COLUMNS) and cons["sharding_types"].iloc[0] == []
    assert frame.index.tolist() == cons.index.tolist() == [1, 2, 3, 4, 5, 6]  # numbered as messages name rows
    assert grid.weight_bytes(_rows()) == 2 * 4096 * 64 * 4 + 2 * 1024 * 64 * 4


def test_a_virtual_table_stays_virtual_through_the_grid_and_its_edits():
    """use_virtual_table, total_num_buckets and the eviction policy have no column: they ride in the table's row, so
    an edit of the row keeps them."""
    raw = tutorial()
    policy = {"type": "count_based", "eviction_threshold": 3}
    raw["tables"][0].update(use_virtual_table=True, total_num_buckets=64, virtual_table_eviction_policy=policy)
    rows = grid.apply_edits(grid.config_to_rows(raw), {"edited_rows": {0: {"rows": 8192}, 1: {"rows": 100}}})
    out = grid.rows_to_config(rows, raw["topology"])
    assert out["tables"][0]["use_virtual_table"] is True and out["tables"][0]["num_embeddings"] == 8192
    assert out["tables"][0]["total_num_buckets"] == 64 and out["tables"][0]["virtual_table_eviction_policy"] == policy
    assert not {"use_virtual_table", "total_num_buckets", "virtual_table_eviction_policy"} & out["tables"][1].keys()
    assert engine.parse_config(out).table("large_table_0").total_num_buckets == 64
