"""The planning workspace in a real browser: `streamlit run dashboard/app.py` on a fresh database, driven by
headless Chromium (Debian's) through Playwright: load the tutorial preset, plan, see the charts, save, and
open the share link in a fresh browser context to see the same plan, read-only."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from db.store import Store

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}
START_TIMEOUT_S = 60
UI_TIMEOUT_MS = 60_000

pytestmark = pytest.mark.timeout(300)


def _need_chromium() -> None:
    if CHROMIUM.exists():
        return
    message = f"{CHROMIUM} is missing: apt-get install chromium (scripts/install.sh --dev does)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """The app under `streamlit run` on a free port with its own SQLite database; yields (url, db url)."""
    _need_chromium()
    port = _free_port()
    db_url = f"sqlite:///{tmp_path / 'planner.db'}"
    env = {**os.environ, "DATABASE_URL": db_url, "PLANNER_DATA_DIR": str(tmp_path)}
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.2)
        if proc.poll() is not None:
            break
    else:
        proc.kill()
        pytest.fail(f"streamlit did not start in {START_TIMEOUT_S} s: {(tmp_path / 'server.log').read_text()[-2000:]}")
    if proc.poll() is not None:
        pytest.fail(f"streamlit exited: {(tmp_path / 'server.log').read_text()[-2000:]}")
    yield url, db_url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def browser():
    _need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def _load_preset(page, label: str) -> None:
    page.get_by_role("button", name="Presets").click()
    page.locator('[data-testid="stPopoverBody"] [data-testid="stSelectbox"]').click()
    page.get_by_role("option", name=label).click()
    page.get_by_role("button", name="Load preset").click()
    page.get_by_text(re.compile(r"^Loaded preset")).wait_for()  # the toast: the rerun is done
    page.keyboard.press("Escape")  # widgets keep a popover open after a rerun; close it like a user would
    page.locator('[data-testid="stPopoverBody"]').wait_for(state="hidden")


def _plan_view_ready(page) -> str:
    """Wait for the plan's charts; returns the slowest-rank metric as shown."""
    page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot', timeout=UI_TIMEOUT_MS)
    page.get_by_text("Estimated cost per rank by component").first.wait_for(timeout=UI_TIMEOUT_MS)
    page.get_by_text("HBM per rank (GiB)").first.wait_for(timeout=UI_TIMEOUT_MS)
    page.get_by_text(re.compile(r"^What makes rank \d the slowest$")).wait_for(timeout=UI_TIMEOUT_MS)
    return page.locator('[data-testid="stMetricValue"]').first.inner_text()


def test_tutorial_plan_saved_and_opened_from_its_share_link(server, browser, tmp_path):
    url, db_url = server
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
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
        assert re.fullmatch(r"[0-9.e-]+ ms", slowest)
        assert page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').count() >= 2

        page.get_by_role("link", name="Save & share").click()
        page.get_by_label("Label").fill("e2e tutorial")
        page.get_by_role("button", name="Save plan").click()
        link = page.locator('[data-testid="stCode"]').filter(has_text="?plan=")
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

    fresh = browser.new_context(viewport=VIEWPORT).new_page()  # no cookies, no session: a colleague's browser
    fresh.set_default_timeout(UI_TIMEOUT_MS)
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
