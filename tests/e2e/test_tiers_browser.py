"""The offload tiers in Chromium at 1440x900: the tutorial's plan shows HBM and DDR only; a config with one key_value
table (imported as JSON, its ranks given 4 MiB of SSD) plans it and its memory bars gain the SSD panel; the Topology
page shows the SSD inputs, and 0 GiB of SSD makes the Plan page refuse the key_value-only table by name. Screenshots
go to the test's tmp_path (PLANNER_SCREENSHOTS=DIR: there too)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import new_page, settled
from tests.factories import tutorial

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 120_000
MIB = 2**20

pytestmark = pytest.mark.timeout(420)


def _shot(page, tmp_path: Path, name: str) -> None:
    page.screenshot(path=str(tmp_path / name))
    out = os.environ.get("PLANNER_SCREENSHOTS")
    if out:
        page.screenshot(path=str(Path(out) / name))


def _key_value_config() -> str:
    raw = tutorial()
    raw["topology"]["ssd_cap"] = 4 * MIB
    raw["constraints"] = {"large_table_0": {"compute_kernels": ["key_value"], "sharding_types": ["row_wise"]}}
    return json.dumps(raw)


def _import(page, text: str) -> None:
    page.get_by_role("button", name="Import", exact=True).click()
    body = page.locator('[data-testid="stPopoverBody"]')
    body.get_by_text("JSON", exact=True).click()
    settled(page)
    paste = body.locator("textarea")
    paste.fill(text)
    paste.press("Control+Enter")  # the text area's value reaches the server before the click
    settled(page)
    body.get_by_role("button", name="Import", exact=True).click()
    page.get_by_text(re.compile(r"^Imported")).first.wait_for()
    page.keyboard.press("Escape")
    settled(page)


def _plan_page(page, app_url: str | None = None) -> None:
    """The Plan page: opened at its URL (a new session) or, with app_url None, by its link (this session)."""
    if app_url is None:
        page.get_by_role("link", name="Plan", exact=True).click()
    else:
        page.goto(f"{app_url}/plan")
    page.locator(".st-key-plan_memory_chart .main-svg").first.wait_for()
    settled(page)


def test_a_key_value_table_plans_and_its_ssd_shows_beside_hbm_and_ddr(app_url, browser, tmp_path):
    page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    _plan_page(page, app_url)  # the tutorial, as a new session starts
    chart = page.locator(".st-key-plan_memory_chart")
    assert "HBM per rank (GiB)" in chart.inner_text() and "SSD per rank" not in chart.inner_text()
    _shot(page, tmp_path, "tiers-1-tutorial-plan.png")

    page.goto(app_url)
    page.locator('[data-testid="stDataFrameResizable"]').first.wait_for()
    settled(page)
    _import(page, _key_value_config())
    _shot(page, tmp_path, "tiers-2-imported.png")
    _plan_page(page)
    chart = page.locator(".st-key-plan_memory_chart")
    chart.get_by_text("SSD (GiB)").wait_for()
    assert "3.49 MiB free (rank 0)" in chart.inner_text()
    chart.scroll_into_view_if_needed()
    _shot(page, tmp_path, "tiers-3-key-value-plan.png")
    notes = page.get_by_text(re.compile(r"^Planner notes"))
    notes.click()
    page.get_by_text(re.compile(r"key_value \(large_table_0\): TorchRec 1.8's DistributedModelParallel runs on "
                                r"CUDA only")).wait_for()
    _shot(page, tmp_path, "tiers-4-notes.png")

    page.get_by_role("link", name="Topology", exact=True).click()
    ssd = page.get_by_role("spinbutton", name="SSD (GiB)")
    ssd.wait_for()
    settled(page)
    assert ssd.input_value() == "0.004"  # 4 MiB
    assert page.get_by_role("spinbutton", name="SSD (key_value lookups)").input_value() == "0.098"
    _shot(page, tmp_path, "tiers-5-topology.png")
