"""The per-table workload block (constraints.TABLE.workload): checked at the door with one line naming the table and
field, written back as read, and its miss-ratio curve read as the estimates read it (engine.cachecurve)."""

from __future__ import annotations

import copy
import math

import pytest

from engine.cachecurve import miss_rate
from engine.config import config_to_dict, parse_config
from engine.errors import ConfigError

ROWS = 10_000
CURVE = [{"cache_rows": 10, "lru_miss_rate": 0.8}, {"cache_rows": 100, "lru_miss_rate": 0.4},
         {"cache_rows": 1000, "lru_miss_rate": 0.1}, {"cache_rows": ROWS, "lru_miss_rate": 0.1}]
BLOCK = {"from": {"file": "ids.parquet", "rows": 5000, "modified": "2026-11-27T00:10:00Z"},
         "miss_ratio_curve": CURVE, "miss_ratio_method": "exact", "batch_size": 512, "unique_rows": 4000,
         "unique_rows_per_batch": {"mean": 300.5, "p99": 340}, "zipf_exponent": 1.05, "pooling_factors": [1.5, 2.0]}


def config(block=BLOCK, **constraints) -> dict:
    return {"tables": [{"name": "t", "num_embeddings": ROWS, "embedding_dim": 16, "feature_names": ["a", "b"]}],
            "constraints": {"t": {"workload": copy.deepcopy(block), **constraints}},
            "topology": {"world_size": 1}}


def test_the_block_reads_and_writes_back_as_it_was():
    cfg = parse_config(config())
    w = cfg.constraint("t").workload
    assert w.miss_ratio_curve == ((10, 0.8), (100, 0.4), (1000, 0.1), (ROWS, 0.1))
    assert (w.source_file, w.source_rows, w.source_modified) == ("ids.parquet", 5000, "2026-11-27T00:10:00Z")
    assert (w.unique_rows_per_batch_mean, w.unique_rows_per_batch_p99) == (300.5, 340)
    assert w.zipf_exponent == 1.05 and w.pooling_factors == (1.5, 2.0) and w.batch_size == 512
    out = config_to_dict(cfg)
    assert out["constraints"]["t"]["workload"] == BLOCK
    assert parse_config(out) == cfg
    minimal = {"from": BLOCK["from"], "miss_ratio_curve": CURVE}  # only these two are required
    assert config_to_dict(parse_config(config(minimal)))["constraints"]["t"]["workload"] == {
        **minimal, "miss_ratio_method": "exact"}


def test_a_config_without_blocks_writes_none():
    data = config()
    del data["constraints"]["t"]["workload"]
    assert "workload" not in config_to_dict(parse_config(data))["constraints"].get("t", {})


def _with(path: list, value) -> dict:
    block = copy.deepcopy(BLOCK)
    node = block
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return block


@pytest.mark.parametrize("path, value, field, words", [
    (["miss_ratio_curve", 2, "lru_miss_rate"], 0.5, "constraints.t.workload.miss_ratio_curve[2].lru_miss_rate",
     "above the smaller cache's 0.4"),
    (["miss_ratio_curve", 1, "lru_miss_rate"], 1.5, "constraints.t.workload.miss_ratio_curve[1].lru_miss_rate",
     "from 0 to 1"),
    (["miss_ratio_curve", 0, "lru_miss_rate"], -0.1, "constraints.t.workload.miss_ratio_curve[0].lru_miss_rate",
     "from 0 to 1"),
    (["miss_ratio_curve", 2, "cache_rows"], 100, "constraints.t.workload.miss_ratio_curve[2].cache_rows",
     "above the previous point's 100"),
    (["miss_ratio_curve", 3, "cache_rows"], ROWS + 1, "constraints.t.workload.miss_ratio_curve[3].cache_rows",
     f"from 1 to {ROWS:,}"),
    (["miss_ratio_curve"], [], "constraints.t.workload.miss_ratio_curve", "non-empty list"),
    (["miss_ratio_curve", 0, "cache_rows"], "ten", "constraints.t.workload.miss_ratio_curve[0].cache_rows",
     "must be an integer"),
    (["from"], KeyError, "constraints.t.workload.from", "is required"),
    (["from", "rows"], KeyError, "constraints.t.workload.from.rows", "is required"),
    (["miss_ratio_method"], "guess", "constraints.t.workload.miss_ratio_method", "exact, shards"),
    (["pooling_factors"], [1.0], "constraints.t.workload.pooling_factors", "one number per feature (2)"),
    (["unique_rows_per_batch", "p99"], -1, "constraints.t.workload.unique_rows_per_batch.p99", ">= 0"),
    (["colour"], "red", "constraints.t.workload.colour", "unknown field"),
])
def test_a_bad_block_is_refused_with_one_line_naming_the_table_and_field(path, value, field, words):
    with pytest.raises(ConfigError) as e:
        parse_config(config(_with(path, value)))
    text = str(e.value)
    assert "\n" not in text and text.startswith(field + ":"), text
    assert words in text, text


def test_the_miss_rate_is_read_off_the_curve_in_log_cache_size():
    w = parse_config(config()).constraint("t").workload
    at = lambda rows: miss_rate(w, ROWS, rows / ROWS)  # noqa: E731
    assert at(10) == pytest.approx(0.8) and at(100) == pytest.approx(0.4) and at(1000) == pytest.approx(0.1)
    assert at(math.sqrt(10 * 100)) == pytest.approx(0.6)  # half way in log size: half way in miss rate
    assert at(5) == pytest.approx(0.9)  # below the smallest point: linear from 1.0 at an empty cache
    assert at(5000) == pytest.approx(0.1)
    rates = [at(r) for r in range(1, ROWS, 97)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))  # never rises with the cache
