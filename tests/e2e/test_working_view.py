"""Issue 12 in a real browser on `streamlit run`: the first view says what to do next and already shows the
tutorial's plan; an edit in the grid updates the headline above it (what changed since the last plan); a config
error shows what to fix and no number of the earlier plan, there, in the sidebar or on the Plan page; TorchRec's
planner on 1,000 tables runs in the background with its elapsed time, the app usable meanwhile, and Cancel ends
its process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import choose, click_until, edit_grid_at, grid_column, idle, new_page, until

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 120_000
HEADLINE = ".st-key-ws_headline"
SIDEBAR = '[data-testid="stSidebar"]'
JOB = ".st-key-plan_job"

pytestmark = pytest.mark.timeout(420)


@pytest.fixture
def page(browser, app_url, tmp_path):
    p = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    p.goto(app_url)
    p.wait_for_selector('[data-testid="stApp"]')
    yield p
    p.screenshot(path=str(tmp_path / "last.png"))


def _headline(page) -> str:
    return page.locator(HEADLINE).inner_text()


def _type_into_cell(page, row: int, column: str, value: str) -> None:
    """Edit one cell of the Tables grid (the column found by its header) and commit it with Enter."""
    grid = page.locator('[data-testid="stDataFrameResizable"]').first
    edit_grid_at(page, grid, grid_column(grid, column), row, value)


def _headline_changes(page, before: str, contains: str = "") -> str:
    page.wait_for_function("([sel, before, part]) => { const e = document.querySelector(sel);"
                           " return e !== null && e.innerText !== before && e.innerText.includes(part); }",
                           arg=[HEADLINE, before, contains])
    return _headline(page)


def _goto(page, name: str) -> None:
    page.locator(SIDEBAR).get_by_role("link", name=name, exact=True).click()


def test_first_view_then_edits_update_the_headline_and_an_error_shows_no_stale_plan(page):
    page.locator(HEADLINE).wait_for()
    idle(page, 250)
    first = _headline(page)
    assert re.search(r"Fits\s*Slowest rank [0-9.e-]+ ms \(rank \d\)", first), first
    assert "4 tables on 2 ranks, from scratch: the first plan of this session" in first
    guide = page.locator(".st-key-ws_guide")
    assert "The TorchRec tutorial's 4 tables on 2 GPUs are loaded" in guide.inner_text()

    _type_into_cell(page, 0, "dim", "256")
    edited = _headline_changes(page, first, "Since the last plan")
    assert re.search(r"Since the last plan: slowest rank [0-9.e-]+ → [0-9.e-]+ ms", edited), edited
    assert re.search(r"[0-9.]+x the lower bound", edited), edited  # re-planned from the plan on screen: bounded too
    idle(page, 250)
    assert guide.count() == 0  # the newcomer acted: the guide is gone
    shown = re.search(r"Slowest rank ([0-9.e-]+ ms)", edited).group(1)
    assert f"Plan: slowest rank {shown}" in page.locator(SIDEBAR).inner_text()

    _type_into_cell(page, 1, "dim", "0")
    broken = _headline_changes(page, edited, "Not planned")
    assert "Fix 1 row to plan" in broken and "Slowest rank" not in broken
    idle(page, 250)
    assert "slowest rank" not in page.locator(SIDEBAR).inner_text().lower()

    _goto(page, "Plan")
    page.get_by_text(re.compile(r"^The config has a problem: tables\[1\]\.embedding_dim")).wait_for()
    idle(page, 250)
    assert page.locator('[data-testid="stDataFrame"]').count() == 0  # no per-table sharding of another config
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 0
    assert page.locator('[data-testid="stExpander"]').filter(has_text="made for an earlier config").count() == 1
    assert not page.get_by_text(shown, exact=True).is_visible()  # collapsed: its numbers are not on screen


def _load_synthetic(page, count: int, max_rows: int | None = None) -> None:
    """The Synthetic preset with `count` tables (and at most `max_rows` rows each), its topology too."""
    body = page.locator('[data-testid="stPopoverBody"]')
    choose = body.locator('[data-testid="stSelectbox"]').first
    click_until(page, page.get_by_role("button", name="Presets"), choose, "the Presets popover to open")
    synthetic = page.get_by_role("option", name=re.compile(r"^Synthetic"))
    click_until(page, choose, synthetic, "the preset list to show the synthetic preset")
    synthetic.click()
    for key, value in (("tables_syn_count", count), ("tables_syn_max_rows", max_rows)):
        if value is not None:
            box = page.locator(f".st-key-{key} input")
            box.fill(str(value))
            box.press("Enter")
            idle(page, 250)
    page.get_by_role("button", name="Load preset").click()
    page.get_by_text(re.compile(r"^Loaded preset")).first.wait_for()
    page.keyboard.press("Escape")
    body.wait_for(state="hidden")
    page.get_by_role("tab", name=f"Tables ({count})").wait_for()


def _torchrec_processes(port: str) -> list[int]:
    """Processes running `python -m engine torchrec-plan` whose parent is the app's server (on `port`)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"torchrec-plan" in cmd and port.encode() in parent:
            found.append(int(proc.name))
    return found


def _elapsed(page) -> int:
    return int(re.search(r"in the background: (\d+) s so far", page.locator(JOB).inner_text()).group(1))


def test_torchrec_on_a_thousand_tables_runs_in_the_background_and_cancel_ends_it(page, app_url):
    port = app_url.rsplit(":", 1)[1]
    _load_synthetic(page, 1000)
    page.wait_for_function("([sel]) => { const e = document.querySelector(sel);"
                           " return e !== null && e.innerText.includes('1,000 tables on 8 ranks'); }", arg=[HEADLINE])
    idle(page, 250)
    _goto(page, "Plan")
    page.get_by_role("heading", name="Plan").wait_for()
    idle(page, 250)
    choose(page, "TorchRec's EmbeddingShardingPlanner (baseline)")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_function("([sel]) => document.querySelector(sel)?.innerText"
                           ".includes('planning 1,000 tables in the background')", arg=[JOB])  # the box, then its text
    first = _elapsed(page)
    page.wait_for_function("([sel, n]) => { const m = document.querySelector(sel)?.innerText"
                           ".match(/background: (\\d+) s/); return m !== null && Number(m[1]) > n; }",
                           arg=[JOB, first])  # the fragment redraws the elapsed time on its own
    assert len(_torchrec_processes(port)) == 1

    _goto(page, "Tables & constraints")  # the app stays usable while it runs
    page.locator(HEADLINE).wait_for()
    idle(page, 250)
    assert "Slowest rank" in _headline(page) and "in the background" in page.locator(SIDEBAR).inner_text()
    _goto(page, "Plan")
    page.locator(JOB).wait_for()
    page.get_by_role("button", name="Cancel").click()
    page.get_by_text(re.compile(r"^Cancelled TorchRec's EmbeddingShardingPlanner \(baseline\) after \d+ s")).wait_for()
    idle(page, 250)
    assert page.locator(JOB).count() == 0
    until(lambda: _torchrec_processes(port) == [], "the cancelled job's TorchRec process to end", 10,
          shows=lambda: f"still running: {_torchrec_processes(port)}")
    page.wait_for_function("([sel]) => !document.querySelector(sel).innerText.includes('in the background')",
                           arg=[SIDEBAR])  # the sidebar is drawn once the page's run is done
    page.get_by_role("button", name="Plan", exact=True).wait_for()  # still usable after the cancel
