"""Runs and Compare in a real browser at 1440x900: a stored validation run 44-59x slower than estimated shows
its ratios, whether the shards matched and the flag without scrolling, and the calibration is one click away;
Compare shows the same ratios. Screenshots go to SCREENSHOT_DIR when set (else the test's temp dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import engine
from db.store import Store
from tests.dashboard.test_runs_page import _slow_run
from tests.e2e.conftest import new_page, serving, settled
from tests.factories import tutorial

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 30_000


@pytest.fixture
def seeded(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = Store(url)
    store.upgrade()
    plans = []
    for label, cfg in (("tutorial, row-wise", tutorial("row_wise")), ("tutorial, free choice", tutorial())):
        plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
        plans.append(store.save_plan(cfg, plan, label=label, config_name="tutorial"))
    _slow_run(store, plans[0], match=(True, False))
    _slow_run(store, plans[1])  # the newest plan: the Runs page shows it first
    store.close()
    return url, plans


def _shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _in_view(page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"]


def test_runs_and_compare_tell_the_truth_at_1440x900(seeded, browser, tmp_path):
    db_url, _ = seeded
    shots = _shots(tmp_path)
    with serving(tmp_path, db_url) as url:
        page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
        page.goto(f"{url}/runs")
        page.get_by_role("heading", name="Runs", exact=True).wait_for()
        page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot')
        settled(page)
        page.screenshot(path=str(shots / "runs.png"))
        tall = new_page(browser, {"width": 1440, "height": 2400})
        tall.goto(f"{url}/runs")
        tall.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot')
        settled(tall)
        tall.screenshot(path=str(shots / "runs_tall.png"))
        shards = page.locator('[data-testid="stMetric"]').filter(has_text="Shards match the plan")
        time = page.locator('[data-testid="stMetric"]').filter(has_text="Time, measured / estimated")
        assert "yes, all 2 ranks" in shards.inner_text() and "44x-59x" in time.inner_text()
        assert _in_view(page, shards) and _in_view(page, time)
        flag = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text="Time: on rank 1")
        assert _in_view(page, flag)
        page.get_by_role("button", name="Calibrate cpu estimates from these runs (1 run)").click()
        page.get_by_text("Estimates calibrated from 1 run on cpu", exact=False).first.wait_for()
        page.screenshot(path=str(shots / "runs_calibrated.png"))

        page.goto(f"{url}/compare")
        page.get_by_role("heading", name="Compare", exact=True).wait_for()
        page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot')
        settled(page)
        page.screenshot(path=str(shots / "compare.png"))
        tall = new_page(browser, {"width": 1440, "height": 2600})
        tall.goto(f"{url}/compare")
        tall.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot')
        settled(tall)
        tall.screenshot(path=str(shots / "compare_tall.png"))
        assert page.get_by_text("time 44x-59x", exact=False).count() >= 1
