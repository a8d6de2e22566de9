"""bench.table_costs_repeat: measure-tables run again and again on a small config, real dry-runs, two checkouts
(this one twice, under two names), and the report read back from its stored run."""

from __future__ import annotations

import json
import subprocess as processes
import sys

from bench import table_costs_repeat as repeat
from bench.suite import ROOT


def _source(tmp_path):
    config = {"topology": {"world_size": 2, "compute_device": "cpu", "batch_size": 2048},  # compute over the fixed step
              "tables": [{"name": "wide", "num_embeddings": 100_000, "embedding_dim": 64, "feature_names": ["f0"]},
                         {"name": "thin", "num_embeddings": 500, "embedding_dim": 4, "feature_names": ["f1"]}],
              "constraints": {"wide": {"sharding_types": ["table_wise", "column_wise"], "min_partition": 16,
                                       "pooling_factors": [8.0]}}}
    path = tmp_path / "source.json"
    path.write_text(json.dumps({"configs": [{"name": "tiny", "config": config, "flags": []}]}))
    return path


def test_the_pairs_median_and_the_medians_ratio_of_a_costs_file():
    costs = {"fixed_ms": 1.0, "tables": {
        "a": {"ms": 10.0, "reps_ms": [8.0, 10.0, 13.0], "embedding_dim": 20,
              "column": {"dim": 8, "ms": 7.0, "reps_ms": [4.5, 7.0, 7.0]}},
        "b": {"ms": 3.0, "reps_ms": [3.0], "embedding_dim": 4}}}
    [(name, (medians, pairs, share))] = repeat.ratios(costs).items()
    assert name == "a" and medians == (7.0 - 1) / (10.0 - 1) and pairs == 0.5 and share == 0.4  # rounds 0.5 0.67 0.5
    costs["tables"]["a"]["column"]["reps_ms"] = [4.5, 5.5, 7.0]  # per round 0.5, 0.5, 0.5
    assert repeat.ratios(costs)["a"][1] == 0.5


def test_two_checkouts_alternate_and_the_report_counts_every_copy(tmp_path):
    out = tmp_path / "repeat.md"
    proc = processes.run([sys.executable, "-m", "bench.table_costs_repeat", "--source", str(_source(tmp_path)),
                          "--configs", "tiny", "--runs", "2", "--roots", ".", ".", "--labels", "one", "two",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.with_suffix(".json").read_text())
    assert [(r["run"], r["checkout"]) for r in data["rows"]] == [(0, "one"), (0, "two"), (1, "two"), (1, "one")]
    assert all(list(r["ratios"]) == ["wide"] and all(0 < v < 2 for v in r["ratios"]["wide"]) for r in data["rows"])
    text = out.read_text()
    assert "| tiny | wide | " in text
    assert "| one | pairs' median | 1 | 2 |" in text and "| two | medians' ratio | 1 | 2 |" in text
    [held] = [s for s in repeat.summary(data["rows"]) if s["checkout"] == "one" and s["way"] == "pairs' median"]
    assert 0 <= held["held_median"] <= min(held["raw_median"], 0.5)  # held to 0.5-1, a half-width copy's range
    hostile = {**data, "meta": {**data["meta"], "labels": ["a|b\n# c", "two"]}}
    hostile["rows"] = [{**r, "checkout": "a|b\n# c" if r["checkout"] == "one" else "two"} for r in data["rows"]]
    lines = repeat.report(hostile, "cmd").splitlines()
    assert any(line.startswith("| a\\|b # c | pairs' median | 1 | 2 |") for line in lines)
    assert not any(line.startswith("# c") for line in lines)  # a label's line break starts no heading
    again = tmp_path / "again.md"
    assert repeat.main(["--report", str(out.with_suffix(".json")), "--out", str(again)]) == 0
    assert again.read_text() == text


def test_bad_arguments_say_what_to_give(tmp_path, capsys):
    assert repeat.main(["--source", str(_source(tmp_path)), "--configs", "nope"]) == 2
    assert "--configs nope not in" in capsys.readouterr().err
    assert repeat.main(["--roots", ".", "--labels", "a", "b"]) == 2
    assert "one --labels name per --roots" in capsys.readouterr().err
    assert repeat.main(["--report", str(tmp_path / "missing.json")]) == 2
    assert "give a file this bench wrote" in capsys.readouterr().err
