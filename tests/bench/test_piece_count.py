"""bench.piece_count: the split's premise (the one table and the n tables look up the same ids a step, on ranks of
one dry-run) and a small run end to end, its figures read back from its own rounds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import piece_count as bench


def test_the_one_table_and_the_n_tables_share_ids_rows_and_bytes():
    cfg, plan = bench.split_config(4, 2048, "sgd")
    ranks = {n: tp.ranks[0] for n, tp in plan.items()}
    assert ranks["one"] == 0 and {ranks[f"group{k}"] for k in range(4)} == {1}
    assert sorted(ranks[f"alone{k}"] for k in range(4)) == [2, 3, 4, 5] and ranks["fixed"] == 6
    group = [cfg.table(f"group{k}") for k in range(4)]
    assert sum(t.num_embeddings for t in group) == cfg.table("one").num_embeddings
    assert sum(cfg.constraint(t.name).pooling_factors[0] for t in group) == cfg.constraint("one").pooling_factors[0]
    assert cfg.topology.world_size == bench.WORLD  # the global batch, whatever n is


def test_a_small_run_reports_its_rounds(tmp_path):
    out = tmp_path / "pieces.md"
    assert bench.main(["--rounds", "2", "--optimizers", "sgd", "--rows", "512", "--splits", "2", "4",
                       "--out", str(out)]) == 0
    got = json.loads(out.with_suffix(".json").read_text())
    assert [(r["optimizer"], r["rows"], r["n"]) for r in got["rows"]] == [("sgd", 512, 2), ("sgd", 512, 4)]
    for r in got["rows"]:
        a = np.array(r["rounds"])
        assert a.shape == (2, 4) and (a[:, 3] > 0).all()
        assert r["lookups"][0] == r["lookups"][1] > 0  # one table and n tables: the same ids a step
        assert r["per_piece_ms"] == pytest.approx(float(np.median((a[:, 1] - a[:, 0]) / (r["n"] - 1))))
        assert r["group_over_one"] == pytest.approx(float(np.median(a[:, 1] / a[:, 0])))
    assert "| sgd | 512 | 4 |" in out.read_text() and "- sgd: a table beyond the first adds" in out.read_text()


def test_splits_the_world_cannot_hold_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="--splits from 2 to 9"):
        bench.main(["--splits", "10", "--out", str(tmp_path / "x.md")])
