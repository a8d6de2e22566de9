"""bench.table_costs_turns: a measure-tables file's figures on made-up files whose answer is known, and one stored
config (bench/results/measured_turns.json's later-7) measured both ways for real and judged against its stored run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import engine
from bench import table_costs_turns as bench
from bench.suite import ROOT

STORED = ROOT / "bench" / "results" / "measured_turns.json"


@pytest.fixture(scope="module")
def later7():
    data = json.loads(STORED.read_text())
    c = next(c for c in data["configs"] if c["name"] == "later-7")
    return c, bench.on_cpu(engine.parse_config(c["config"]))


def test_the_stored_runs_flags_become_the_settings():
    s = bench.settings(["--iters", "20", "--batches", "0", "--warmup", "2"], seed=3, turns=False)
    assert (s.iters, s.batches, s.warmup, s.seed, s.turns) == (20, 0, 2, 3, False)
    assert bench.settings([], seed=0, turns=True) == engine.DryrunSettings(seed=0, turns=True)


def test_probes_that_cost_their_tables_alone_read_no_error_and_nothing_beyond(later7):
    c, cfg = later7
    data = json.loads(json.dumps(c["table_costs"]["file"]))
    fixed = data["fixed_ms"]
    for p in data["probes"]:  # each probe exactly its tables alone: nothing beyond them, no pressure to fit
        p["ms"] = fixed + sum(data["tables"][n]["ms"] - fixed for n in p["tables"])
    got = bench.file_figures(cfg, data)
    assert got["beyond_alone"] == pytest.approx(0.0, abs=1e-12) and got["pressure_per_row"] == 0.0
    assert got["probe_error"] == pytest.approx(0.0, abs=1e-12) and got["piece_ms"] == 0.0
    assert got["held_out_pressure"] == pytest.approx(0.0, abs=1e-12) == got["held_out_pieces"]
    for p in data["probes"]:  # 0.2 ms for each table beyond a rank's first: the pieces price it, held out too
        p["ms"] = fixed + sum(data["tables"][n]["ms"] - fixed for n in p["tables"]) + 0.2 * (len(p["tables"]) - 1)
    got = bench.file_figures(cfg, data)
    assert got["piece_ms"] == pytest.approx(0.2) and got["probe_error"] == pytest.approx(0.0, abs=1e-9)
    assert got["held_out_pieces"] == pytest.approx(0.0, abs=1e-9) and got["held_out_pressure"] > 0.01
    for p in data["probes"]:  # each 20% of its ms beyond alone, which no pressure explains where there is none
        alone = sum(data["tables"][n]["ms"] - fixed for n in p["tables"]) + fixed
        p["ms"] = alone / 0.8
    got = bench.file_figures(cfg, data)
    assert got["beyond_alone"] == pytest.approx(0.2)
    spread = [np.std(np.log(t["reps_ms"]), ddof=1) for t in data["tables"].values()]
    assert got["table_spread"] == pytest.approx(float(np.median(spread)))


def test_the_stored_config_is_measured_both_ways_and_judged_held_out(tmp_path):
    out = tmp_path / "turns.md"
    assert bench.main(["--json", str(STORED), "--only", "later-7", "--runs", "1", "--out", str(out)]) == 0
    got = json.loads(out.with_suffix(".json").read_text())
    assert [(r["config"], r["schedule"]) for r in got["rows"]] == [("later-7", s) for s in bench.SCHEDULES]
    for r in got["rows"]:
        assert r["file"]["schedule"] == r["schedule"] and r["probe_error"] is not None
        assert len(r["file"]["fixed_reps_ms"]) == 3 and all(p["ms"] > 0 for p in r["file"]["probes"])
    assert set(got["held_out"]) == {f"{s} #1" for s in bench.SCHEDULES}
    for found in got["held_out"].values():
        naming = next(v for k, v in found.items() if k.startswith("the estimate names"))
        assert naming["applies"] <= 1 and any(k.startswith("per-rank error") for k in found)
    text = out.read_text()
    assert "| later-7 |" in text and "| ranks in turns | 1 |" in text
    again = tmp_path / "again.md"  # the files judged again, nothing timed: the same figures from the same engine
    assert bench.main(["--report", str(out.with_suffix(".json")), "--out", str(again)]) == 0
    assert "Judged again by `python -m bench.table_costs_turns --report" in again.read_text()
    assert json.loads(again.with_suffix(".json").read_text())["held_out"] == got["held_out"]


def test_no_config_to_measure_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no measured config"):
        bench.main(["--json", str(STORED), "--only", "nope", "--out", str(tmp_path / "x.md")])
    with pytest.raises(SystemExit, match="give a file this bench wrote"):
        bench.main(["--report", str(STORED), "--out", str(tmp_path / "x.md")])
    with pytest.raises(SystemExit, match="--runs must be 1 or more"):
        bench.main(["--json", str(STORED), "--runs", "0", "--out", str(tmp_path / "x.md")])
