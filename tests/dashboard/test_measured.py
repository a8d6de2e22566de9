"""Measured over estimated (dashboard.plans.measured): per-rank ratios from a run's metrics, never across devices,
the flags raised outside 0.8-1.25 with what to do, and which constants priced a plan."""

from __future__ import annotations

import pytest

import engine
from dashboard.plans import measured, plan_deltas, plan_diff, plan_files
from tests.dashboard.helpers import typed, typed_config
from tests.db.storetest import load_example, sample
from tests.factories import tutorial, with_changes

PLAN = typed({"ranks": [{"rank": 0, "cost_ms": 0.25, "fwd_compute_ms": 0.1, "bwd_compute_ms": 0.1,
                         "hbm_bytes": 1_850_000, "ddr_bytes": 0},
                        {"rank": 1, "cost_ms": 0.25, "fwd_compute_ms": 0.1, "bwd_compute_ms": 0.1,
                         "hbm_bytes": 1_850_000, "ddr_bytes": 0}]})


def validation_metrics(step_ms=(10.9, 14.7), est_ms=0.25, peak=17_000_000, est_bytes=1_850_000, match=(1.0, 1.0)):
    rows = []
    for r in (0, 1):
        rows += [(r, "step_ms", step_ms[r], "ms"), (r, "iteration_ms", step_ms[r], "ms"),
                 (r, "estimated_ms", est_ms, "ms"), (r, "peak_bytes", peak, "bytes"),
                 (r, "estimated_bytes", est_bytes, "bytes"), (r, "shards_match", match[r], "")]
    return rows


def test_ratios_per_rank_from_the_runs_own_estimates():
    frame = measured.run_frame(PLAN, validation_metrics(), "validation", same_device=False)
    assert frame["time_ratio"].tolist() == pytest.approx([10.9 / 0.25, 14.7 / 0.25])
    assert frame["memory_ratio"].tolist() == pytest.approx([17_000_000 / 1_850_000] * 2)
    assert frame["shards_match"].tolist() == [True, True]
    assert measured.span_text(measured.span(frame, "time_ratio")) == "44x-59x"
    assert measured.shards_text(frame) == "yes, all 2 ranks"


def test_the_plans_estimate_stands_in_only_for_its_own_device():
    metrics = [(0, "step_ms", 0.3, "ms"), (1, "step_ms", 0.3, "ms")]
    across = measured.run_frame(PLAN, metrics, "dryrun", same_device=False)
    assert across["time_ratio"].isna().all() and across["estimated_ms"].isna().all()
    same = measured.run_frame(PLAN, metrics, "dryrun", same_device=True)
    assert same["estimated_ms"].tolist() == pytest.approx([0.2, 0.2])  # a dry-run: the compute part only
    assert same["shards_match"].isna().all() and measured.shards_text(same) == "not checked"


def test_flags_outside_the_band_say_what_to_do():
    frame = measured.run_frame(PLAN, validation_metrics(match=(1.0, 0.0)), "validation", same_device=False)
    flags = {f.what: f for f in measured.flags(frame, "validation", "cpu")}
    assert set(flags) == {"time", "memory", "shards"}
    assert flags["time"].calibrate and "rank 1" in flags["time"].text and "59x" in flags["time"].text
    assert "calibrate the bandwidths from the validation runs on cpu" in flags["time"].text
    assert not flags["memory"].calibrate and "headroom" in flags["memory"].text
    assert measured.shards_text(frame) == "no: rank 1 differs"
    inside = measured.run_frame(PLAN, validation_metrics(step_ms=(0.26, 0.3), peak=2_000_000), "validation", False)
    assert measured.flags(inside, "validation", "cpu") == []
    fast = measured.run_frame(PLAN, validation_metrics(step_ms=(0.1, 0.1), peak=2_000_000), "validation", False)
    assert [f.what for f in measured.flags(fast, "validation", "cpu")] == ["time"]
    assert measured.ratio_text(0.4) == "0.40x" and measured.ratio_text(None) == "n/a"


def test_which_constants_priced_a_plan():
    cfg = engine.config_to_dict(engine.parse_config(tutorial()))
    assert measured.profile(typed_config(cfg)) == "TorchRec's default constants for cuda"
    assert measured.profile(typed_config(cfg), None, "cpu") == "TorchRec's default constants for cpu"
    fast = with_changes(tutorial(), hbm_mem_bw=2e9)
    assert measured.profile(typed_config(fast)) == "the config's own bandwidths for cuda (not calibrated)"
    cal = {"device": "cuda", "device_name": "H100", "patch": {"hbm_mem_bw": 2e9}, "r2": 0.9, "n_runs": 3}
    fast = typed_config(fast)
    assert measured.profile(fast, {"calibration": cal}) == "a calibration from 3 runs on cuda (H100) (R^2 0.900)"
    assert measured.profile(fast, {"calibration": cal}, "cpu").startswith("the config's own bandwidths for cpu")
    prof = {"device": "cpu", "backend": "gloo", "hosts": 1, "step_ms": 3.0, "source": "measured: 8 runs"}
    with_prof = with_changes(tutorial(), compute_device="cpu", profile=prof)
    with_prof = typed_config(with_prof)
    assert measured.profile(with_prof) == ("TorchRec's default constants for cpu with the device profile cpu/gloo "
                                           "on 1 host (measured)")
    assert measured.profile(typed_config(with_prof), None, "cuda") == "TorchRec's default constants for cuda"


# ---- what the Compare page shows of saved plans side by side (what Store.compare gave, before the page) ---------


def _two_saved(store) -> tuple[str, str, dict, dict]:
    cfg, table_wise = sample("tutorial_table_wise")
    _, row_wise = sample("tutorial_row_wise")
    return (store.save_plan(cfg, table_wise, label="tw"), store.save_plan(load_example("tutorial_row_wise"),
            row_wise, label="rw"), table_wise, row_wise)


def _frame(store, token: str):
    """As the Compare page reads a saved plan's measurement: its latest run, that run's metrics per rank."""
    rec = store.get_plan(token)
    run = measured.latest_run(store.runs_for_plan(token))
    if run is None:
        return None
    cfg = engine.parse_config(rec.config)
    return measured.run_frame(engine.read_plan_file(rec.plan, cfg), store.metrics(run.id), str(run.kind),
                              measured.same_device(cfg, run))


def test_the_measured_time_of_a_saved_plan_comes_from_its_latest_succeeded_run(store) -> None:
    a, b, _, _ = _two_saved(store)
    step = measured.MEASURED_TIME[0]
    old = store.create_run(a, "validation", "gloo", "cpu")
    store.add_metrics(old, [(0, step, 9.0, "ms"), (1, step, 9.0, "ms")])
    store.update_run(old, status="succeeded")
    good = store.create_run(a, "validation", "gloo", "cpu")
    store.add_metrics(good, [(0, step, 2.0, "ms"), (0, step, 4.0, "ms"), (1, step, 5.0, "ms"),
                             (1, "peak_hbm_bytes", 7.0, "bytes")])
    store.update_run(good, status="succeeded")
    broken = store.create_run(a, "validation", "gloo", "cpu")  # newer, but failed: not the measurement
    store.add_metrics(broken, [(0, step, 100.0, "ms")])
    store.update_run(broken, status="failed")
    dry = store.create_run(b, "dryrun", "fbgemm", "cpu")  # plan b: only a running dry-run, not finished
    store.add_metrics(dry, [(1, step, 1.5, "ms")])
    frame = _frame(store, a)
    assert frame["rank"].tolist() == [0, 1] and frame["measured_ms"].tolist() == [pytest.approx(3.0), 5.0]
    assert _frame(store, b) is None
    store.update_run(dry, status="succeeded")
    assert _frame(store, b)["measured_ms"].tolist()[1] == pytest.approx(1.5)


def test_saved_plans_side_by_side_per_rank_and_per_table(store) -> None:
    a, b, plan_a, plan_b = _two_saved(store)
    (pa, ca), (pb, cb) = (plan_files.parse(store.get_plan(t).plan, store.get_plan(t).config) for t in (a, b))
    ranks = plan_deltas.rank_frame(pa, pb)
    assert ranks["rank"].tolist() == [0, 1]
    assert ranks["A ms"].tolist() == pytest.approx([r["cost_ms"] for r in plan_a["ranks"]])
    assert ranks["B ms"].tolist() == pytest.approx([r["cost_ms"] for r in plan_b["ranks"]])
    per_table = plan_diff.diff(pa, ca, pb, cb).tables.set_index("table")
    assert set(per_table.index) == {"large_table_0", "large_table_1", "small_table_0", "small_table_1"}
    for name, row in per_table.iterrows():
        tp = plan_a["plan"][name]
        assert row["in A"] == f"table_wise {tp['compute_kernel']} [{', '.join(map(str, tp['ranks']))}]"
        assert row["in B"].startswith("row_wise ") and row["in B"].endswith("[0, 1]")

