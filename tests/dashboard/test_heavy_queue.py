"""Issue 14: heavy background jobs (TorchRec's baseline, the capacity sweep) wait for a slot of the server's gate
(jobs.HEAVY). With the gate's one slot held by another job, the page says the job waits, how many are before it and
for how long; its Cancel ends it before it ever starts; once the slot frees it runs as before."""

from __future__ import annotations

import sys

import pytest

from dashboard.serve import jobs
from tests.dashboard.helpers import goto, plain, shown

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def busy_gate(tmp_path, monkeypatch):
    """jobs.HEAVY swapped for a gate of one slot that another session's job holds until `release` exists."""
    gate, release = jobs.Slots(1), tmp_path / "release"
    monkeypatch.setattr(jobs, "HEAVY", gate)
    blocker = jobs.Job([sys.executable, "-c", f"import os, time\nwhile not os.path.exists({str(release)!r}): "
                        "time.sleep(0.02)"], tmp_path / "blocker", slots=gate)
    assert blocker.running
    yield gate, release, blocker
    blocker.close()


def _boxed(at) -> list[str]:
    return [m for m in shown(at, "markdown") if m.startswith(":material/hourglass_top:")]


def test_a_queued_torchrec_baseline_says_it_waits_and_its_cancel_ends_it_unstarted(app, busy_gate):
    gate, _, _ = busy_gate
    goto(app, "plan")
    app.radio(key="plan_planner").set_value("torchrec").run()
    app.button(key="plan_run").click().run()
    assert not app.exception, app.exception
    job = app.session_state["ws_plan_job"].job
    assert job.state is jobs.JobState.QUEUED and job.pid is None and gate.waiting == 1
    [line] = _boxed(app)
    assert line.startswith(":material/hourglass_top: TorchRec's EmbeddingShardingPlanner (baseline) is waiting for "
                           "a free worker: next in line (waited "), line
    assert line.endswith(" s). The rest of the app stays usable; its plan becomes the current one when it finishes "
                         "(if the config is still the same)."), line
    assert app.session_state["ws_plan"].planner == "ours"  # the current plan stays as it was meanwhile
    assert ("TorchRec's EmbeddingShardingPlanner (baseline) is waiting for a free worker in the background (the Plan "
            "page shows its time and a Cancel)") in [plain(c.value) for c in app.sidebar.caption]
    app.button(key="plan_job_cancel").click().run()
    assert not app.exception, app.exception
    assert job.state is jobs.JobState.CANCELLED and job.pid is None and gate.waiting == 0
    assert "ws_plan_job" not in app.session_state and not _boxed(app) and not job.workdir.exists()
    assert any(t.startswith("Cancelled TorchRec's EmbeddingShardingPlanner (baseline) before it started (it waited ")
               for t in shown(app, "toast")), shown(app, "toast")


def test_a_queued_baseline_runs_when_the_slot_frees(app, busy_gate):
    gate, release, blocker = busy_gate
    goto(app, "plan")
    app.radio(key="plan_planner").set_value("torchrec").run()
    app.button(key="plan_run").click().run()
    job = app.session_state["ws_plan_job"].job
    assert job.state is jobs.JobState.QUEUED
    release.touch()
    assert blocker.wait(10) is jobs.JobState.DONE and job.running  # the slot passed on as the blocker ended
    app.run()
    [line] = _boxed(app)
    assert line.startswith(":material/hourglass_top: TorchRec's EmbeddingShardingPlanner (baseline) is planning 4 "
                           "tables in the background: "), line
    assert ("TorchRec's EmbeddingShardingPlanner (baseline) is planning in the background (the Plan page shows its "
            "time and a Cancel)") in [plain(c.value) for c in app.sidebar.caption]
    app.button(key="plan_job_cancel").click().run()
    assert job.state is jobs.JobState.CANCELLED and gate.busy == 0
    assert any(t.startswith("Cancelled TorchRec's EmbeddingShardingPlanner (baseline) after ")
               for t in shown(app, "toast"))


def test_a_queued_sweep_says_it_waits_behind_another(app, busy_gate, tmp_path):
    gate, _, _ = busy_gate
    other = jobs.Job([sys.executable, "-c", "pass"], tmp_path / "other", slots=gate)  # queued first
    at = goto(app, "whatif")
    at.multiselect(key="whatif_devices").set_value(["h100_80gb"])
    at.multiselect(key="whatif_sizes").set_value([2, 8])
    at.run()
    at.button(key="whatif_sweep_run").click().run()
    assert not at.exception, at.exception
    job = at.session_state["whatif_sweep_job"]["job"]
    assert job.state is jobs.JobState.QUEUED and job.ahead == 1
    [line] = _boxed(at)
    assert line.startswith(":material/hourglass_top: The sweep of 2 points is waiting for a free worker: 1 ahead "
                           "(waited "), line
    assert at.button(key="whatif_sweep_run").disabled
    at.button(key="whatif_sweep_cancel").click().run()
    assert job.state is jobs.JobState.CANCELLED and job.pid is None and gate.waiting == 1
    assert "whatif_sweep_job" not in at.session_state and not _boxed(at)
    other.close()
