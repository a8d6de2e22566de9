"""Compare in a real browser (`streamlit run`, headless Chromium, 1440x900): two saved plans of the tutorial, the
second the first on swapped ranks with one table moved and measured by a run. The page says 1 table moves and 3
only sit on renumbered ranks, the bytes that would move under the renumbering and as numbered, marks the better
plan per headline and shows the measured times beside the estimates. Screenshots: SCREENSHOT_DIR or tmp dir."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest

import engine
from db import runsink
from dashboard.text import ms_text
from db.store import Store
from engine.errors import human_bytes
from tests.e2e.conftest import click_until, need_browser, new_page, serving
from tests.factories import tutorial

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 60_000
SMALL_BYTES = 1024 * 64 * 4  # small_table_1: 1,024 x 64 fp32, SGD keeps no state

pytestmark = pytest.mark.timeout(300)


def _moved(cfg: dict, plan: dict) -> dict:
    """The plan with ranks 0 and 1 swapped, then small_table_1 put back on rank 1: one real move."""
    tables = copy.deepcopy(plan["plan"])
    for tp in tables.values():
        tp["ranks"] = [1 - r for r in tp["ranks"]]
        for s in tp["shards"] or []:
            s["rank"] = 1 - s["rank"]
    small = tables["small_table_1"]
    assert small["sharding_type"] == "table_wise", small
    small["ranks"], small["shards"][0]["rank"] = [1], 1
    parsed = engine.parse_config(cfg)
    return engine.plan_to_dict(engine.evaluate(parsed, engine.parse_plan(tables, parsed), planner="engine"))


@pytest.fixture
def seeded(tmp_path):
    need_browser()
    url = f"sqlite:///{tmp_path / 'compare.db'}"
    store = Store(url)
    try:
        store.upgrade()
        cfg = tutorial()
        plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
        store.save_plan(cfg, plan, label="tutorial, ours", config_name="tutorial")
        b = store.save_plan(cfg, _moved(cfg, plan), label="tutorial, moved", config_name="tutorial")
        run = store.create_run(b, "validation", "nccl", "cuda")
        ranks = [{"rank": 0, "measured_ms": 0.02}, {"rank": 1, "measured_ms": 0.03}]
        runsink.record_result(store, run, {"ranks": ranks, "device": "cuda", "estimated_device": "cuda"})
    finally:
        store.close()
    return url


def _pick(page, labels: list[str]) -> None:
    box = page.locator(".st-key-compare_pick")
    box.locator("input").wait_for()
    clear = box.locator('button[aria-label="Clear all"]')
    if clear.count():
        click_until(page, clear, page.get_by_text("Pick one or more plans."), "the picks to be cleared")
    for label in labels:
        box.locator("input").click()
        page.get_by_role("option", name=re.compile("^" + re.escape(label) + " ")).click()
        page.keyboard.press("Escape")
        box.locator(f'[aria-label^="Remove {label} "]').wait_for()


def test_compare_tells_moves_from_renumbering_with_the_bytes_and_the_better_plan(seeded, browser, tmp_path):
    shots = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with serving(tmp_path, seeded) as url:
        page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
        try:
            page.goto(f"{url}/compare")
            page.get_by_role("heading", name="Compare", exact=True).wait_for()
            _pick(page, ["tutorial, ours", "tutorial, moved"])
            page.get_by_role("heading", name="Differences").wait_for()
            tables = page.get_by_text(re.compile(r"^Tables: 1 table moves"))
            tables.wait_for()
            text = tables.inner_text()
            assert "1 table moves; 3 more only sit on renumbered ranks; 0 stay where they are." in text
            assert (f"moves {human_bytes(SMALL_BYTES)} of weights and optimizer state between ranks (10.0% of the "
                    "2.50 MiB B places), once the ranks are renumbered to keep the most in place (A's rank 0 is 1, "
                    f"1 is 0); {human_bytes(9 * SMALL_BYTES)} with the ranks as numbered.") in text
            page.wait_for_function("document.documentElement.innerHTML.includes('slowest rank, measured on cuda')")
            # The grids draw on a canvas; their cells come into the page's HTML as each grid is drawn (a loaded
            # machine draws the lower ones later): wait for each.
            for cell in ("slowest rank", "vs lower bound", "small_table_1", "renumbered ranks only", ms_text(0.03)):
                page.wait_for_function("(c) => document.documentElement.innerHTML.includes(c)", arg=cell)
            verdict = page.get_by_text(re.compile(r"^A is better on \d+ of \d+ headlines"))
            assert verdict.count() == 1
            cost = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="diamonds: measured")
            cost.locator(".scatterlayer .point").first.wait_for()  # the measured times, over the estimates
            assert cost.locator(".scatterlayer .point").count() == 2
            assert page.locator('[data-testid="stPlotlyChart"]').filter(
                has_text="B - A per rank (each A rank against the B rank it became)").count() == 1
            page.screenshot(path=str(shots / "compare_diff.png"))
            tall = new_page(browser, {"width": 1440, "height": 3000})
            tall.goto(f"{url}/compare")
            _pick(tall, ["tutorial, ours", "tutorial, moved"])
            tall.get_by_text(re.compile(r"^Tables: 1 table moves")).wait_for()
            tall.locator('[data-testid="stPlotlyChart"]').filter(has_text="diamonds: measured").locator(
                ".scatterlayer .point").first.wait_for()  # the last chart drawn
            tall.screenshot(path=str(shots / "compare_diff_tall.png"))
        except Exception:
            page.screenshot(path=str(shots / "compare_failure.png"))
            raise
