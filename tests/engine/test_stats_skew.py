"""The skew a sample shows, as the estimate uses it: the Zipf exponent whose draws touch the sample's measured
distinct rows per batch, written to the config by `stats --apply` (issue 25, part 2)."""

from __future__ import annotations

import json

import pytest

from engine import atomicfile
from engine.cli import main
from engine.config import load_config, parse_config
from engine.stats.compute import workload_stats
from engine.stats.generate import to_bytes
from engine.workset import MAX_ZIPF, distinct_rows, zipf_matching

CONFIG = {
    "tables": [{"name": "skewed", "num_embeddings": 20_000, "embedding_dim": 16, "feature_names": ["a"]},
               {"name": "flat", "num_embeddings": 20_000, "embedding_dim": 16, "feature_names": ["b"]}],
    "topology": {"world_size": 2, "local_world_size": 2, "batch_size": 256, "compute_device": "cpu"},
}


@pytest.mark.parametrize("s", [0.3, 0.8, 1.0, 1.6, 3.0])
def test_zipf_matching_inverts_distinct_rows(s):
    ids, rows = 4096.0, 50_000.0
    assert zipf_matching(ids, rows, distinct_rows(ids, rows, s)) == pytest.approx(s, abs=2e-3)


def test_zipf_matching_edges():
    assert zipf_matching(100, 1000, distinct_rows(100, 1000)) == 0.0  # as many as uniform ids touch
    assert zipf_matching(100, 1000, 1000) == 0.0
    assert zipf_matching(10_000, 1000, 1.0) == MAX_ZIPF
    assert zipf_matching(0, 1000, 0) == 0.0


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    cfg = parse_config(CONFIG)
    d = tmp_path_factory.mktemp("skew")
    path = d / "sample.parquet"
    atomicfile.write_bytes(path, to_bytes(cfg, 4096, seed=3, fmt="parquet"))
    return cfg, d, path, workload_stats(cfg, path)


def test_the_fitted_skew_reproduces_the_measured_distinct_rows_per_batch(measured):
    cfg, _, _, result = measured
    t = result["tables"]["skewed"]
    s = t["batch_zipf_exponent"]
    assert s == pytest.approx(0.8, abs=0.1)  # feature a is drawn Zipf(0.8) by the generator
    per = t["unique_rows_per_batch"]
    ids = result["features"]["a"]["pooling_factor"] * per["batch_size"]
    assert distinct_rows(ids, 20_000, s) == pytest.approx(per["mean"], rel=0.01)
    # uniform ids over 1.25x the rows, folded: the first quarter of the rows is drawn twice as often, a mild skew
    assert result["tables"]["flat"]["batch_zipf_exponent"] < s / 2


def test_apply_writes_the_skew_the_estimate_reads(measured, tmp_path, capsys):
    cfg, d, path, result = measured
    cfg_path = tmp_path / "config.json"
    cfg_path.write_text(json.dumps(CONFIG))
    out = tmp_path / "applied.json"
    assert main(["stats", str(cfg_path), str(path), "--apply", str(out)]) == 0
    capsys.readouterr()
    applied = load_config(str(out))
    s = applied.constraint("skewed").zipf_exponent
    assert s == pytest.approx(result["tables"]["skewed"]["batch_zipf_exponent"])
    assert applied.constraint("skewed").workload.zipf_exponent == s  # the workload block says it too
