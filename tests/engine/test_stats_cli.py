"""`python -m engine stats` and `python -m engine.stats.generate` as a user runs them: real subprocesses, real
Parquet, CSV and NPZ files; a bad sample is one line naming the feature and the row, and nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine import limits as L
from engine.config import config_to_dict, load_config
from tests.factories import ROOT, write

CONFIG = {"tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 16, "feature_names": ["a", "b"]},
                     {"name": "t1", "num_embeddings": 50, "embedding_dim": 8, "feature_names": ["c"]}],
          "topology": {"world_size": 2, "local_world_size": 2, "batch_size": 64}}


def run(*args, module="engine"):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("stats_cli")
    cfg = write(d, CONFIG)
    for fmt in ("parquet", "csv", "npz"):
        proc = run(cfg, "--rows", 1500, "--seed", 5, "--out", d / f"s.{fmt}", "--format", fmt,
                   module="engine.stats.generate")
        assert proc.returncode == 0, proc.stderr
    return d, cfg


def stats(cfg, sample, *extra):
    proc = run("stats", cfg, sample, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_three_formats_give_the_same_statistics_and_a_rerun_the_same_output(files):
    d, cfg = files
    results = {fmt: stats(cfg, d / f"s.{fmt}") for fmt in ("parquet", "csv", "npz")}
    for r in results.values():
        r.pop("sample")
    assert results["parquet"] == results["csv"] == results["npz"]
    assert run("stats", cfg, d / "s.parquet", "--json").stdout == run("stats", cfg, d / "s.parquet", "--json").stdout
    t = results["parquet"]["tables"]["t0"]
    assert t["folded_ids"] > 0 and t["unique_rows"] <= 1000 and t["unique_rows_per_batch"]["batches"] == 1500 // 64


def test_the_generator_is_seeded(files, tmp_path):
    d, cfg = files
    for seed, same in ((5, True), (6, False)):
        assert run(cfg, "--rows", 1500, "--seed", seed, "--out", tmp_path / "again.parquet",
                   module="engine.stats.generate").returncode == 0
        again = pq.read_table(tmp_path / "again.parquet").to_pydict()
        assert (again == pq.read_table(d / "s.parquet").to_pydict()) is same


def test_the_generators_zipf_draws_every_feature_so(files, tmp_path):
    d, cfg = files
    shares = {}
    for s in (0, 1.05):
        assert run(cfg, "--rows", 1500, "--seed", 5, "--zipf", s, "--out", tmp_path / f"z{s}.parquet",
                   module="engine.stats.generate").returncode == 0
        shares[s] = [f["top_1pct_share"] for f in stats(cfg, tmp_path / f"z{s}.parquet")["features"].values()]
    assert max(shares[0]) < 0.1 < min(shares[1.05])  # uniform everywhere, then skewed everywhere
    bad = run(cfg, "--rows", 10, "--zipf", 7, "--out", tmp_path / "x.parquet", module="engine.stats.generate")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--zipf must be from 0 to 5" in bad.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_out_apply_and_batch_size(files, tmp_path):
    d, cfg = files
    out, applied = tmp_path / "stats.json", tmp_path / "tuned.json"
    printed = stats(cfg, d / "s.parquet", "--out", out, "--apply", applied, "--batch-size", 100)
    assert json.loads(out.read_text()) == printed
    assert printed["batch_size"] == 100 and printed["tables"]["t1"]["unique_rows_per_batch"]["batches"] == 15
    tuned = load_config(applied)  # reads back as a config
    f = printed["features"]
    assert tuned.constraint("t0").pooling_factors == (f["a"]["pooling_factor"], f["b"]["pooling_factor"])
    assert tuned.constraint("t1").num_poolings == (1.0,)
    assert tuned.tables == load_config(cfg).tables and tuned.topology == load_config(cfg).topology
    mtime = os.stat(d / "s.parquet").st_mtime
    assert printed["sample"]["modified"].startswith(__import__("datetime").datetime.fromtimestamp(
        int(mtime), tz=__import__("datetime").timezone.utc).strftime("%Y-%m-%dT%H:%M"))
    w = tuned.constraint("t0").workload  # the rest goes into the config's workload block: no sidecar any more
    t0 = printed["tables"]["t0"]
    assert (w.source_file, w.source_rows, w.source_modified) == ("s.parquet", 1500, printed["sample"]["modified"])
    assert w.unique_rows == t0["unique_rows"] and w.batch_size == 100
    assert w.miss_ratio_curve == tuple((p["cache_rows"], p["lru_miss_rate"]) for p in t0["miss_ratio_curve"])
    assert w.unique_rows_per_batch_mean == t0["unique_rows_per_batch"]["mean"]
    assert w.unique_rows_per_batch_p99 == t0["unique_rows_per_batch"]["p99"]
    assert w.pooling_factors == (f["a"]["pooling_factor"], f["b"]["pooling_factor"])
    assert w.miss_ratio_method == "exact"
    assert not (tmp_path / "tuned.workload.json").exists()
    again = tmp_path / "again.json"  # the applied config round-trips: its block written back as read
    again.write_text(json.dumps(config_to_dict(tuned)))
    assert json.loads(again.read_text()) == json.loads(applied.read_text())


def test_plan_adds_the_working_set_per_rank(files, tmp_path):
    d, cfg = files
    plan = tmp_path / "plan.json"
    assert run("plan", cfg, "--out", plan).returncode == 0
    ws = stats(cfg, d / "s.parquet", "--plan", plan)["working_set"]
    assert [r["rank"] for r in ws["per_rank"]] == [0, 1] and ws["steps"] == 1500 // 128
    assert all(0 < r["mean_bytes"] <= r["p99_bytes"] <= r["max_bytes"] for r in ws["per_rank"])
    human = run("stats", cfg, d / "s.parquet", "--plan", plan)
    assert human.returncode == 0 and "rank 1:" in human.stdout and "t0" in human.stdout


def parquet(path, columns: dict, types=None):
    schema = pa.schema([(k, types.get(k, pa.list_(pa.int64())) if types else pa.list_(pa.int64())) for k in columns])
    pq.write_table(pa.table(columns, schema=schema), path)
    return path


def fails(tmp_path, cfg, sample, *needles):
    out, applied = tmp_path / "o.json", tmp_path / "c.json"
    proc = run("stats", cfg, sample, "--json", "--out", out, "--apply", applied)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert not out.exists() and not applied.exists()
    return lines[0]


GOOD = {"a": [[1], [2]], "b": [[], [3]], "c": [[4, 5], []]}


def test_a_missing_column_names_the_expected_features(files, tmp_path):
    _, cfg = files
    bad = {"a": GOOD["a"], "bb": GOOD["b"], "c": GOOD["c"]}
    fails(tmp_path, cfg, parquet(tmp_path / "s.parquet", bad), "feature 'b'", "a, b, c", "bb")
    (tmp_path / "s.csv").write_text("a,c\n1,2\n")
    fails(tmp_path, cfg, tmp_path / "s.csv", "feature 'b'", "a, b, c")


def test_non_integer_cells_name_the_feature_and_row(files, tmp_path):
    _, cfg = files
    floats = dict(GOOD, b=[[1.0], [2.0, 3.5]])
    fails(tmp_path, cfg, parquet(tmp_path / "f.parquet", floats, {"b": pa.list_(pa.float64())}),
          "feature 'b' row 1", "3.5")
    strings = dict(GOOD, c=[["x"], []])
    fails(tmp_path, cfg, parquet(tmp_path / "t.parquet", strings, {"c": pa.list_(pa.string())}), "feature 'c' row 0")
    (tmp_path / "s.csv").write_text("a,b,c\n1 2,3,\n4,5 x 6,7\n")
    fails(tmp_path, cfg, tmp_path / "s.csv", "feature 'b' row 1", "'x'")
    nulls = dict(GOOD, a=[[1], None])
    fails(tmp_path, cfg, parquet(tmp_path / "n.parquet", nulls), "feature 'a' row 1", "empty list")


def test_negative_ids_name_the_feature_and_row(files, tmp_path):
    _, cfg = files
    fails(tmp_path, cfg, parquet(tmp_path / "s.parquet", dict(GOOD, c=[[4], [5, -2]])), "feature 'c' row 1", "-2")
    (tmp_path / "s.csv").write_text("a,b,c\n1,2,3\n4,5,6\n7,-8,9\n")
    fails(tmp_path, cfg, tmp_path / "s.csv", "feature 'b' row 2", "negative")
    np.savez(tmp_path / "s.npz", **{"a.lengths": [1, 1], "a.values": [1, -1], "b.lengths": [0, 0],
                                    "b.values": np.zeros(0, np.int64), "c.lengths": [1, 0], "c.values": [3]})
    fails(tmp_path, cfg, tmp_path / "s.npz", "feature 'a' row 1", "negative")


def test_npz_lengths_that_do_not_match_the_values(files, tmp_path):
    _, cfg = files
    np.savez(tmp_path / "s.npz", **{"a.lengths": [1, 3], "a.values": [1, 2], "b.lengths": [0, 0],
                                    "b.values": np.zeros(0, np.int64), "c.lengths": [1, 0], "c.values": [3]})
    fails(tmp_path, cfg, tmp_path / "s.npz", "feature 'a' row 1", "a.lengths ask for more ids")
    np.savez(tmp_path / "s.npz", **{"a.lengths": [1, 0], "a.values": [1, 2], "b.lengths": [0, 0],
                                    "b.values": np.zeros(0, np.int64), "c.lengths": [1, 0], "c.values": [3]})
    fails(tmp_path, cfg, tmp_path / "s.npz", "feature 'a'", "holds 2 ids but a.lengths add up to 1")


def test_a_truncated_parquet_file(files, tmp_path):
    d, cfg = files
    whole = (d / "s.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2])
    fails(tmp_path, cfg, tmp_path / "cut.parquet", "cut.parquet", "not a readable Parquet file")


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(files, tmp_path):
    _, cfg = files
    big = tmp_path / "big.parquet"
    with open(big, "wb") as f:
        f.truncate(L.MAX_SAMPLE_BYTES + 1)  # sparse: no disk used
    fails(tmp_path, cfg, big, "big.parquet", "MAX_SAMPLE_BYTES", "16.00 GiB")


def test_an_unknown_format_and_a_missing_file(files, tmp_path):
    _, cfg = files
    (tmp_path / "s.txt").write_text("a,b,c\n")
    fails(tmp_path, cfg, tmp_path / "s.txt", "'.txt'", ".parquet, .csv or .npz")
    fails(tmp_path, cfg, tmp_path / "none.parquet", "does not exist")


def test_exact_lookups_sets_where_the_sampled_replay_takes_over(files):
    """--exact-lookups N: a table with more lookups than N gets the sampled (SHARDS) curve, one with fewer the exact
    one; the default is EXACT_MAX_LOOKUPS; out of range is one line naming the option."""
    d, cfg = files
    exact = stats(cfg, d / "s.parquet")["tables"]["t0"]
    lookups = exact["lookups"]
    assert exact["miss_ratio_method"]["method"] == "exact"
    sampled = stats(cfg, d / "s.parquet", "--exact-lookups", lookups - 1)["tables"]["t0"]
    assert sampled["miss_ratio_method"]["method"] == "shards"
    again = stats(cfg, d / "s.parquet", "--exact-lookups", lookups)["tables"]["t0"]
    assert again["miss_ratio_method"] == exact["miss_ratio_method"]
    bad = run("stats", cfg, d / "s.parquet", "--exact-lookups", 0)
    assert bad.returncode != 0 and "--exact-lookups" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["parquet", "csv", "npz"])
def test_progress_counts_the_rows_read(tmp_path, fmt):
    """--progress (stderr not a terminal): one line per whole percent of the sample's rows read, counted from the
    chunks read (65,536 rows each for Parquet and NPZ, 4 MiB blocks of CSV), ending at 100% with the ids the
    statistics count; stdout is unchanged, and without --progress stderr says nothing."""
    cfg = write(tmp_path, {"tables": [{"name": "t", "num_embeddings": 500, "embedding_dim": 8,
                                       "feature_names": ["a", "b"]}], "topology": {"world_size": 1, "batch_size": 8}})
    sample = tmp_path / f"s.{fmt}"
    proc = run(cfg, "--rows", 150_000, "--seed", 3, "--out", sample, "--format", fmt, module="engine.stats.generate")
    assert proc.returncode == 0, proc.stderr
    plain, shown = run("stats", cfg, sample, "--json"), run("stats", cfg, sample, "--json", "--progress")
    assert plain.returncode == shown.returncode == 0, shown.stderr
    assert plain.stderr == "" and shown.stdout == plain.stdout
    ids = sum(f["ids"] for f in json.loads(plain.stdout)["features"].values())
    lines = shown.stderr.splitlines()
    shares = [int(line.split(" ", 2)[1].rstrip("%")) for line in lines]
    assert shares == sorted(set(shares))
    if fmt != "csv":
        assert shares == [100 * r // 150_000 for r in (65_536, 131_072, 150_000)]
    assert lines[-1] == f"stats: 100% of 150,000 rows read ({ids:,} ids so far)"


def test_on_a_terminal_the_progress_line_is_redrawn_in_place():
    """On a terminal the line is rewritten in place (carriage return, then erase to the end of line) and ended with
    one newline; a file that does not tell its rows gets the rows so far."""
    import io

    from engine.stats.command import ProgressLine

    out = io.StringIO()
    line = ProgressLine(out, tty=True)
    line.update(65_536, 150_000, 1_000)
    line.update(150_000, 150_000, 2_500)
    line.end()
    assert out.getvalue() == ("\rstats: 43% of 150,000 rows read (1,000 ids so far)\x1b[K"
                              "\rstats: 100% of 150,000 rows read (2,500 ids so far)\x1b[K\n")
    out = io.StringIO()
    ProgressLine(out, tty=False).update(70_000, None, 9)
    assert out.getvalue() == "stats: 70,000 rows read (9 ids so far)\n"
