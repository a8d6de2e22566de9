"""bench.schedule: the rank share's spread and the halves' agreement, on made-up rounds whose answer is known, and one
stored plan dry-run both ways for real (bench/results/measured_kept.json's later-4, two rounds each)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import schedule
from bench.suite import ROOT

STORED = ROOT / "bench" / "results" / "measured_kept.json"


def test_a_drift_that_moves_every_rank_alike_leaves_no_share_spread():
    base = np.array([4.0, 5.0, 6.0])
    drift = np.array([1.0, 1.3, 0.8, 1.1])[:, None]
    assert schedule.share_spread(base * drift) == pytest.approx(0.0, abs=1e-12)
    alone = base * drift
    alone[:, 0] *= [1.0, 1.3, 0.8, 1.1]  # rank 0 drifts on its own
    assert schedule.share_spread(alone) > 0.05


def test_the_halves_agree_when_steady_and_not_when_the_slowest_rank_moves_every_other_round():
    steady = np.tile([4.0, 5.0, 6.0], (4, 1))
    assert schedule.halves(steady) == (True, 1.0)
    flip = steady.copy()
    flip[1::2] = [6.5, 5.0, 4.0]  # odd rounds: rank 0 slowest, order reversed
    same, rho = schedule.halves(flip)
    assert not same and rho == -1.0
    assert schedule.halves(steady[:, :2])[1] is None  # no Spearman under 3 ranks


def test_the_stored_plans_are_read_once_each_on_the_cpu_and_only_with_enough_ranks():
    data = json.loads(STORED.read_text())
    found = schedule.plans(data, min_ranks=3)
    names = {c["name"]: c for c in data["configs"]}
    assert found and all(cfg.topology.world_size >= 3 for _, _, cfg, _ in found)
    assert all(cfg.topology.compute_device.value == "cpu" for _, _, cfg, _ in found)
    kept = [n for n, c in names.items() if c.get("torchrec_plan") is None and c.get("ours_plan")]
    assert all(who == "ours" for n, who, _, _ in found if n in kept)  # TorchRec's plan kept as ours: dry-run once
    assert len(found) == sum(1 + (c.get("torchrec_plan") is not None) for c in names.values()
                             if c.get("ours_plan") and c["config"]["topology"]["world_size"] >= 3)


def test_a_stored_plan_is_dry_run_both_ways_and_reported(tmp_path):
    out = tmp_path / "schedule.md"
    assert schedule.main(["--json", str(STORED), "--only", "later-4", "--rounds", "2", "--out", str(out)]) == 0
    got = json.loads(out.with_suffix(".json").read_text())
    (row,) = got["plans"]
    assert (row["config"], row["who"], row["ranks"]) == ("later-4", "ours", 4)
    for name in schedule.SCHEDULES:
        ms = np.array(row[name]["ms"])
        assert ms.shape == (2, 4) and (ms > 0).all()
        assert row[name]["spread"] == pytest.approx(schedule.share_spread(ms))
        assert row[name]["slowest_ms"] == pytest.approx(np.median(ms, axis=0).max())
    text = out.read_text()
    assert "| later-4 | ours | 4 |" in text and "halves name the same slowest rank in" in text


def test_too_few_rounds_and_no_plan_with_enough_ranks_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="--rounds must be 2 or more"):
        schedule.main(["--json", str(STORED), "--rounds", "1", "--out", str(tmp_path / "x.md")])
    with pytest.raises(SystemExit, match="no stored plan has --min-ranks"):
        schedule.main(["--json", str(STORED), "--min-ranks", "9", "--out", str(tmp_path / "x.md")])
