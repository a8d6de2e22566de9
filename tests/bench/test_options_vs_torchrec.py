"""bench.options_vs_torchrec: both planners on one config, both plans by both estimators, and its summary lines."""

from __future__ import annotations

from bench.options_vs_torchrec import compare, markdown, new_options_config, without_sync


def test_both_plans_are_scored_by_both_estimators_and_summarised():
    seeded = [dict(compare(new_options_config(s)), seed=s) for s in (0, 3)]
    assert "torchrec_refuses" in seeded[1]  # TorchRec's planner refuses seed 3's kernels: counted, not compared
    r = seeded[0]
    assert r["ours_ms"] <= r["theirs_ms"] and isinstance(r["ours_tr"], float) and isinstance(r["theirs_tr"], float)
    grouped = new_options_config(0)
    assert grouped["topology"]["sharding_group_size"] == 4
    flat = compare(without_sync(grouped))  # the group without the sync term: cheaper by our estimator
    assert flat["ours_ms"] < r["ours_ms"]
    text = markdown({"seed 0": r}, seeded, ["--seeds", "2"])
    assert "Command: `python -m bench.options_vs_torchrec --seeds 2`" in text and "load average" in text
    assert "TorchRec's planner plans 1 of 2, ours plans all 1" in text
    assert "| seed 0 | " in text
