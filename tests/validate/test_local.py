"""Real 2-rank validation runs on gloo/CPU through the local launcher (torchrun), one per sharding type:
the result's shape, shards that match the plan, measured times, estimates beside them, and the database rows.
"""

from __future__ import annotations

import pytest

from db.store import Store
from tests.validate.conftest import SHARDING_TYPES

RANK_FIELDS = {"rank", "iteration_ms", "measured_ms", "peak_bytes", "state_bytes", "shards_match", "mismatches",
               "estimated_ms", "estimated_compute_ms", "estimated_comms_ms", "estimated_bytes"}


@pytest.mark.parametrize("sharding_type", SHARDING_TYPES)
def test_run_succeeds_with_the_json_shape(recorded_runs, sharding_type):
    p, data, _ = recorded_runs.runs[sharding_type]
    assert p.returncode == 0, p.stderr[-3000:]
    assert data["status"] == "succeeded" and data["error"] is None
    assert (data["backend"], data["device"], data["launcher"], data["nproc"]) == ("gloo", "cpu", "local", 2)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    for r in data["ranks"]:
        assert RANK_FIELDS <= set(r), set(r)


@pytest.mark.parametrize("sharding_type", SHARDING_TYPES)
def test_every_rank_holds_the_shards_of_the_plan(recorded_runs, sharding_type):
    _, data, _ = recorded_runs.runs[sharding_type]
    assert data["shards_match"] is True
    for r in data["ranks"]:
        assert r["shards_match"] is True and r["mismatches"] == []


@pytest.mark.parametrize("sharding_type", SHARDING_TYPES)
def test_iterations_are_timed_and_estimates_stand_beside_them(recorded_runs, sharding_type):
    _, data, _ = recorded_runs.runs[sharding_type]
    for r in data["ranks"]:
        assert r["iteration_ms"] > 0 and r["measured_ms"] == r["iteration_ms"]
        # the rank's own embedding work (engine.validate.embtime), also through DDP's data-parallel lookups
        assert 0 < r["embedding_forward_ms"] and 0 < r["embedding_backward_ms"] and 0 <= r["embedding_optimizer_ms"]
        assert 0 < r["embedding_ms"] < r["iteration_ms"]
        assert r["estimated_ms"] > 0
        assert r["estimated_ms"] == pytest.approx(r["estimated_compute_ms"] + r["estimated_comms_ms"])
        assert r["peak_bytes"] >= 0 and r["state_bytes"] > 0 and r["estimated_bytes"] > 0
    assert data["estimate_compute_bw_bytes_per_ms"] > 0 and data["estimate_comms_bw_bytes_per_ms"] > 0
    assert data["ids"] == {"source": "synthetic", "seed": 0, "distribution": "config", "batches": 5}


def test_the_ranks_hold_the_weights_the_plan_gives_them(recorded_runs):
    """Tutorial tables are fp32 and the optimizer is SGD (no state): state_bytes is exactly the weights."""
    weights = 4 * 64 * (4096 * 2 + 1024 * 2)
    for st in ("table_wise", "row_wise", "column_wise"):
        _, data, _ = recorded_runs.runs[st]
        assert sum(r["state_bytes"] for r in data["ranks"]) == weights, st
    _, dp, _ = recorded_runs.runs["data_parallel"]
    assert [r["state_bytes"] for r in dp["ranks"]] == [weights, weights]


def test_results_file_and_out_dir_hold_the_run(recorded_runs):
    import json

    for st, (_, data, out_dir) in recorded_runs.runs.items():
        results = out_dir.parent / f"{st}.results.json"
        assert json.loads(results.read_text())["ranks"] == data["ranks"]
        assert sorted(p.name for p in (out_dir / "ranks").iterdir()) == ["rank0.json", "rank1.json"]
        assert (out_dir / "job.log").stat().st_size > 0


def test_each_run_is_stored_with_measured_and_estimated_metrics(recorded_runs):
    store = Store(recorded_runs.database_url)
    plans = store.list_plans()
    assert len(plans) == len(SHARDING_TYPES)
    for plan in plans:
        (run,) = store.runs_for_plan(plan.token)
        assert (getattr(run.kind, "value", run.kind), getattr(run.status, "value", run.status)) == \
            ("validation", "succeeded")
        assert (run.backend, run.device) == ("gloo", "cpu")
        assert run.error is None and run.started_at is not None and run.ended_at is not None
        assert run.device_info["estimate_compute_bw_bytes_per_ms"] > 0 and run.device_info["torch_version"]
        assert "torch.distributed.run" in run.log or "rank" in run.log
        by_rank: dict[int, dict[str, float]] = {}
        for m in store.metrics(run.id):
            by_rank.setdefault(m.rank, {})[m.name] = m.value
        assert sorted(by_rank) == [0, 1]
        for values in by_rank.values():
            assert values["step_ms"] > 0 and values["step_ms"] == values["iteration_ms"]
            assert values["estimated_ms"] > 0 and values["shards_match"] == 1.0


def test_compare_reads_the_measured_time(recorded_runs):
    """What the Compare page reads of each saved plan: its latest run's measured time on every rank."""
    from dashboard.plans import measured, plan_files

    store = Store(recorded_runs.database_url)
    for summary in store.list_plans():
        rec = store.get_plan(summary.token)
        run = measured.latest_run(store.runs_for_plan(summary.token))
        plan, cfg = plan_files.parse(rec.plan, rec.config)
        frame = measured.run_frame(plan, store.metrics(run.id), str(run.kind), measured.same_device(cfg, run))
        assert (frame["measured_ms"] > 0).all() and len(frame) == len(plan.ranks)
