"""The planning workspace in a real browser: `streamlit run dashboard/app.py` on a fresh database, driven by
headless Chromium (Debian's) through Playwright: load the tutorial preset, plan, see the charts, save, and open
the share link in a fresh browser context; use a calibration and see it survive the next edit on the page."""

from __future__ import annotations

import re

import pytest

from dashboard.tables.presets import GBPS_TO_BYTES_PER_MS
from db.store import Store
from tests.dashboard.test_calibration import HBM_BW, INTRA_BW, NOTE, seed_runs
from tests.e2e.conftest import click_until, need_browser, new_page, serving

VIEWPORT = {"width": 1280, "height": 800}
UI_TIMEOUT_MS = 60_000

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def server(tmp_path):
    """The app on a fresh SQLite database; yields (url, db url)."""
    need_browser()
    db_url = f"sqlite:///{tmp_path / 'planner.db'}"
    with serving(tmp_path, db_url) as url:
        yield url, db_url


@pytest.fixture
def calibrated_server(tmp_path):
    """The app on a SQLite database seeded, before it starts, with a saved plan and three succeeded validation
    runs on cuda (tests/dashboard/test_calibration.py's runs: they fit HBM_BW and INTRA_BW exactly)."""
    need_browser()
    db_url = f"sqlite:///{tmp_path / 'planner.db'}"
    store = Store(db_url)
    try:
        store.upgrade()
        seed_runs(store)
    finally:
        store.close()
    with serving(tmp_path, db_url) as url:
        yield url


def _load_preset(page, label: str) -> None:
    choose = page.locator('[data-testid="stPopoverBody"] [data-testid="stSelectbox"]')
    click_until(page, page.get_by_role("button", name="Presets"), choose, "the Presets popover to open")
    option = page.get_by_role("option", name=label)
    click_until(page, choose, option, f"the preset list to show {label!r}")
    option.click()
    page.get_by_role("button", name="Load preset").click()
    page.get_by_text(re.compile(r"^Loaded preset")).wait_for()  # the toast: the rerun is done
    page.keyboard.press("Escape")  # widgets keep a popover open after a rerun; close it like a user would
    page.locator('[data-testid="stPopoverBody"]').wait_for(state="hidden")


def _plan_view_ready(page) -> str:
    """Wait for the plan's charts (the page's default timeout, scaled: new_page); returns the slowest-rank metric as
    shown."""
    page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot')
    page.get_by_text("Estimated cost per rank by component").first.wait_for(timeout=UI_TIMEOUT_MS)
    page.get_by_text("HBM per rank (GiB)").first.wait_for(timeout=UI_TIMEOUT_MS)
    page.get_by_text(re.compile(r"^What makes rank \d the slowest$")).wait_for(timeout=UI_TIMEOUT_MS)
    return page.locator('[data-testid="stMetricValue"]').first.inner_text()


def test_tutorial_plan_saved_and_opened_from_its_share_link(server, browser, tmp_path):
    url, db_url = server
    page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    try:
        page.goto(url)
        page.wait_for_selector('[data-testid="stApp"]')
        page.wait_for_selector('[data-testid="stDataFrame"]')
        _load_preset(page, "DLRM-DCNv2, Criteo 1TB (MLPerf): 26 tables, dim 128, 8 GPUs")
        page.get_by_role("tab", name="Tables (26)").wait_for()
        _load_preset(page, "TorchRec tutorial: 4 tables (2 x 4096x64, 2 x 1024x64), 2 GPUs")
        page.get_by_role("tab", name="Tables (4)").wait_for()
        page.wait_for_function("document.documentElement.innerHTML.includes('large_table_0')")  # the grid's cells
        assert "t_cat_0" not in page.content()

        page.get_by_role("link", name="Plan").click()
        page.get_by_role("button", name="Plan", exact=True).click()
        page.get_by_text(re.compile(r"^Planned 4 tables on 2 ranks")).wait_for()
        slowest = _plan_view_ready(page)
        assert re.fullmatch(r"[0-9.]+ ms", slowest)  # 3 significant digits in plain decimals, the unit kept
        cut = page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stMetricValue\"] *')]"
                            ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)")
        assert not cut, f"metrics cut off at 1280 px: {cut}"  # once '0.00547...', its unit lost
        assert page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').count() >= 2

        page.get_by_role("link", name="Save & share").click()
        page.get_by_label("Label").fill("e2e tutorial")
        page.get_by_role("button", name="Save plan").click()
        link = page.locator('[data-testid="stCode"]').filter(has_text="?plan=").first  # the share box
        link.wait_for()
        share_url = link.inner_text().strip()
        assert share_url.startswith(f"{url}/?plan=")
        page.screenshot(path=str(tmp_path / "saved.png"))
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))
        raise

    token = share_url.split("?plan=", 1)[1]
    store = Store(db_url)
    rec = store.get_plan(token)
    assert rec is not None and rec.label == "e2e tutorial" and len(rec.plan["plan"]) == 4
    store.close()

    fresh = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)  # no cookies, no session: a colleague's browser
    fresh.goto(share_url)
    fresh.get_by_role("heading", name="e2e tutorial").wait_for()
    fresh.get_by_text(re.compile(r"^Read-only")).wait_for()
    assert _plan_view_ready(fresh) == slowest
    html = fresh.content()
    for name, tp in rec.plan["plan"].items():
        assert name in html and tp["sharding_type"] in html
    assert fresh.get_by_role("link", name="Tables & constraints").count() == 0  # read-only: no workspace pages

    fresh.goto(f"{url}/?plan=AAAAAAAAAAAAAAAAAAAAAA")
    fresh.get_by_text("No saved plan has the token 'AAAAAAAAAAAAAAAAAAAAAA'").wait_for()


def _number_input(page, key: str):
    """A number input by its widget key (Streamlit puts `st-key-<key>` on the widget's container)."""
    return page.locator(f".st-key-{key} input")


def _commit_number(page, key: str, value: str) -> None:
    box = _number_input(page, key)
    box.fill(value)
    box.press("Enter")


def test_used_calibration_survives_the_next_edit_on_the_topology_page(calibrated_server, browser, tmp_path):
    """The inputs must show the fitted bandwidths: they send their values back on every edit, and old ones
    (897 / 600 GiB/s) there would replace the fit and drop the calibration."""
    hbm_gbps, intra_gbps = f"{HBM_BW / GBPS_TO_BYTES_PER_MS:.1f}", f"{INTRA_BW / GBPS_TO_BYTES_PER_MS:.1f}"
    sidebar = '[data-testid="stSidebar"]'
    page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    try:
        page.goto(calibrated_server)
        page.wait_for_selector('[data-testid="stApp"]')
        page.get_by_role("link", name="Topology").click()
        use = page.get_by_role("button", name="Use this calibration")
        use.wait_for()
        assert _number_input(page, "topology_hbm_mem_bw").input_value() == "897.0"  # TorchRec's default
        use.click()
        page.locator('[data-testid="stAlertContentSuccess"]').filter(has_text=f"In use: {NOTE}.").wait_for()
        page.locator(sidebar).get_by_text(NOTE, exact=True).wait_for()
        assert _number_input(page, "topology_hbm_mem_bw").input_value() == hbm_gbps

        _commit_number(page, "topology_batch_size", "1024")
        _commit_number(page, "topology_world_size", "4")  # shown in the sidebar: both edits are in once it is
        page.locator(sidebar).get_by_text("4 tables · 4 ranks · cuda").wait_for()
        page.get_by_text(re.compile(r"^1 host x 4 ranks = 4 ranks, cuda")).wait_for()  # the hosts stay as set
        assert _number_input(page, "topology_batch_size").input_value() == "1024"
        assert _number_input(page, "topology_hbm_mem_bw").input_value() == hbm_gbps
        assert _number_input(page, "topology_intra_host_bw").input_value() == intra_gbps
        assert page.locator(sidebar).get_by_text(NOTE, exact=True).count() == 1
        assert page.get_by_text(f"In use: {NOTE}.").count() == 1
        assert use.is_disabled()  # the fit is still the one in use
        page.screenshot(path=str(tmp_path / "calibrated.png"))
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))
        raise
