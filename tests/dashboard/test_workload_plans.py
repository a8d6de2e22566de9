"""dashboard/plans/workload.py and dashboard/serve/workloadwork.py: the figures' numbers against a direct count on a
generated sample, and uploads refused in one line."""

import json
from pathlib import Path

import numpy as np
import pytest

import engine
from dashboard.plans import workload
from dashboard.serve import workloadwork
from tests.factories import tutorial_with_cache_curve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tutorial.json"
ROWS = 3000


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    cfg = engine.load_config(str(EXAMPLE))
    path = tmp_path_factory.mktemp("s") / "ids.parquet"
    path.write_bytes(engine.generated_sample_bytes(cfg, ROWS, 7, "parquet"))
    return cfg, path


def direct(cfg, path):
    """lengths and ids per feature, read with pyarrow directly."""
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    out = {}
    for t in cfg.tables:
        for f in t.feature_names:
            cells = table.column(f).to_pylist()
            out[f] = ([len(c) for c in cells], [i for c in cells for i in c])
    return out


def test_histogram_and_rank_counts_match_a_direct_count(sample):
    cfg, path = sample
    shapes = workloadwork.feature_shapes(cfg, path)
    for f, (lengths, ids) in direct(cfg, path).items():
        assert shapes[f]["pooling"].tolist() == np.bincount(lengths).tolist()
        _, counts = np.unique(ids, return_counts=True)
        assert shapes[f]["counts"].tolist() == sorted(counts.tolist(), reverse=True)
        fig = workload.pooling_histogram(f, shapes[f]["pooling"])
        assert list(fig.data[0].y) == np.bincount(lengths).tolist()
        rf = workload.rank_frequency(f, shapes[f]["ranks"], shapes[f]["lookups"])
        assert rf.layout.xaxis.type == "log" and rf.layout.yaxis.type == "log"
        ranks = list(rf.data[0].x)
        assert ranks[0] == 1 and ranks[-1] == len(counts) and len(ranks) <= workloadwork.MAX_RANK_POINTS
        assert list(rf.data[0].y)[0] == max(counts)


def test_rank_points_are_bounded_and_log_spaced():
    counts = np.arange(100_000, 0, -1)
    ranks, lookups = workloadwork.rank_points(counts, limit=50)
    assert len(ranks) <= 50 and ranks[0] == 1 and ranks[-1] == 100_000
    assert (lookups == counts[ranks - 1]).all()
    assert workloadwork.rank_points(np.zeros(0, np.int64))[0].size == 0


def test_miss_curve_marks_the_chosen_cache(sample):
    cfg, path = sample
    stats = workloadwork.measure(cfg, path)["stats"]
    t = cfg.tables[0]
    curve = stats["tables"][t.name]["miss_ratio_curve"]
    fig = workload.miss_curve(t.name, curve, t.num_embeddings, 0.2)
    assert list(fig.data[0].x) == [p["cache_rows"] for p in curve]
    assert list(fig.data[1].x) == [round(0.2 * t.num_embeddings)]
    assert fig.layout.shapes[0].x0 == round(0.2 * t.num_embeddings)
    assert workload.miss_curve(t.name, curve, t.num_embeddings, 0.5).data[1].x[0] == round(0.5 * t.num_embeddings)


def test_table_clf_typed_or_default():
    assert workload.table_clf({"constraints": {"a": {"cache_load_factor": 0.35}}}, "a") == 0.35
    assert workload.table_clf({"constraints": {}}, "a") == engine.FIELDS["cache_load_factor"].default


def test_table_clf_is_the_plans_choice_when_it_made_one():
    cfg = tutorial_with_cache_curve()
    plan = engine.plan(engine.parse_config(cfg))
    chosen = plan.tables["large_table_1"].cache_load_factor
    assert chosen is not None
    assert workload.table_clf(cfg, "large_table_1", plan) == chosen
    assert workload.table_clf(cfg, "large_table_0", plan) == engine.FIELDS["cache_load_factor"].default


def test_apply_writes_measured_pooling_and_lists_changes(sample):
    cfg, path = sample
    stats = workloadwork.measure(cfg, path)["stats"]
    old = engine.config_to_dict(cfg)
    new = workload.applied_config(stats, cfg)
    lengths = direct(cfg, path)
    for t in cfg.tables:
        want = [sum(lengths[f][0]) / ROWS for f in t.feature_names]
        assert new["constraints"][t.name]["pooling_factors"] == pytest.approx(want)
    ch = workload.changes(old, new)
    assert set(ch["field"]) >= {"pooling_factors", "workload"}
    assert set(ch["table"]) == {t.name for t in cfg.tables}


def test_uploads_refused_in_one_line_naming_feature_and_row(sample):
    cfg, path = sample
    f = cfg.tables[0].feature_names[0]
    ok, err = workloadwork.measure_upload(cfg, path.read_bytes(), "parquet", "mine.parquet")
    assert err is None and ok["stats"]["sample"]["rows"] == ROWS
    csv = engine.generated_sample_bytes(cfg, 20, 1, "csv").decode()
    header, *rows = csv.splitlines()
    bad = [header, *rows[:3], rows[3].replace(rows[3].split(",")[0], '"-4"', 1) if rows[3].split(",")[0] else
           '"-4"' + rows[3], *rows[4:]]
    _, err = workloadwork.measure_upload(cfg, "\n".join(bad).encode(), "csv", "bad.csv")
    assert "\n" not in err and f in err and "3" in err and "bad.csv" in err
    _, err = workloadwork.measure_upload(cfg, path.read_bytes()[:-500], "parquet", "cut.parquet")
    assert err and "\n" not in err and "cut.parquet" in err
    _, err = workloadwork.measure_upload(cfg, b"a,b\n1,2\n", "csv", "cols.csv")
    assert err and "\n" not in err and f in err
    _, err = workloadwork.measure_upload(cfg, b"x" * (workloadwork.MAX_UPLOAD_BYTES + 1), "csv", "huge.csv")
    assert err and "huge.csv" in err and "\n" not in err
    _, err = workloadwork.measure_upload(cfg, b"x", "exe", "a.exe")
    assert err and "\n" not in err


def test_empty_and_foreign_samples_refused_in_one_line(sample):
    cfg, _ = sample
    f = cfg.tables[0].feature_names[0]
    _, err = workloadwork.measure_upload(cfg, b"", "parquet", "empty.parquet")
    assert err == "empty.parquet is empty (0 bytes): write one column per feature and at least one row of ids."
    _, err = workloadwork.measure_upload(cfg, b"other_feature\n1 2\n3\n", "csv", "foreign.csv")
    assert err and "\n" not in err and "foreign.csv" in err and f in err
    _, err = workloadwork.measure_upload(cfg, f"{f}\n".encode(), "csv", "header.csv")
    assert err and "\n" not in err and "header.csv" in err


def test_the_pool_task_parses_the_config_and_sends_back_no_id_counts(sample):
    cfg, path = sample
    measured, err = workloadwork.measure_task(json.dumps(engine.config_to_dict(cfg)), path.read_bytes(), "parquet",
                                              "mine.parquet")
    assert err is None and measured["stats"]["sample"]["file"] == "mine.parquet"
    direct_shapes = workloadwork.feature_shapes(cfg, path)
    for f, shape in measured["shapes"].items():
        assert "counts" not in shape
        assert shape["ranks"].tolist() == direct_shapes[f]["ranks"].tolist()
        assert shape["lookups"].tolist() == direct_shapes[f]["lookups"].tolist()
    _, err = workloadwork.measure_task(json.dumps({"tables": "no"}), path.read_bytes(), "parquet", "mine.parquet")
    assert err.startswith("The workspace config does not read:") and "\n" not in err


def test_summaries_write_numbers_as_the_pages_do():
    table = {"lookups": 12_345_678, "folded_ids": 0, "unique_rows": 4096, "batch_zipf_exponent": None,
             "unique_rows_per_batch": {"mean": 366.4286, "p99": 1202}, "miss_ratio_method": {"method": "exact"}}
    feature = {"samples": 4000, "ids": 3888, "pooling_factor": 0.972, "pooling_p99": 4, "empty_share": 0.39825,
               "unique_ids": 1817, "top_1pct_share": 0.0294, "zipf_exponent": 0.69712}
    row = workload.table_summary({"tables": {"t": table}}).iloc[0].to_dict()
    assert row == {"table": "t", "lookups": "12,345,678", "folded ids": "0", "distinct rows": "4,096",
                   "distinct rows per batch (mean)": "366", "distinct rows per batch (p99)": "1,202",
                   "Zipf exponent (batch)": "n/a", "miss curve": "exact"}
    row = workload.feature_summary({"features": {"f": feature}}).iloc[0].to_dict()
    assert row["empty bags"] == "39.8%" and row["top 1% ids' share of lookups"] == "2.94%"
    assert row["pooling factor (ids/sample)"] == "0.972" and row["Zipf exponent"] == "0.697" and row["ids"] == "3,888"


def test_the_chosen_cache_says_its_share_rows_and_misses():
    curve = [{"cache_rows": 10, "lru_miss_rate": 0.9}, {"cache_rows": 1000, "lru_miss_rate": 0.1}]
    fig = workload.miss_curve("t", curve, 1000, 0.1)
    assert fig.data[1].x == (100,) and fig.data[1].y == (pytest.approx(0.5),)
    assert fig.data[1].name == "chosen cache: 10.0% of rows (100), 50.0% misses"
    assert fig.layout.yaxis.tickformat == ".0%"


def test_the_generated_example_fits_the_upload_limit_for_a_thousand_tables():
    from dashboard.tables import presets
    from dashboard.serve import workloadwork as ww
    tutorial = engine.load_config(str(EXAMPLE))
    assert workload.example_rows(tutorial) == workload.EXAMPLE_ROWS
    big = engine.parse_config(presets.synthetic(presets.SyntheticSpec(count=1000)))
    rows = workload.example_rows(big)
    assert rows == big.topology.batch_size  # one whole batch: per-batch figures are measured
    data = engine.generated_sample_bytes(big, rows, 1, "parquet")
    assert ww.refusal(data, "parquet", "generated.parquet") is None
