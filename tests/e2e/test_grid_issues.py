"""Issue 12 in a real browser: two bad rows and a duplicate name all flagged at once, each on its numbered row;
world size 2 -> 4 on the Topology page keeps one host and says so."""

from __future__ import annotations

import html
import re

import pytest

from tests.e2e.conftest import edit_grid_at, new_page

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 60_000
NAME_COL = 2  # hidden cell columns: 0 row marker, 1 row number, 2 name
ISSUE_COL = 3  # hidden cell columns: 0 row marker, 1 row number, 2 name, 3 issue (once a row has one)

pytestmark = pytest.mark.timeout(300)


def _idle(page) -> None:
    page.wait_for_timeout(200)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')")
    page.wait_for_timeout(300)


def _edit_cell(page, down: int, right: int, value: str) -> None:
    """Type into the grid cell `down` rows below the first and `right` columns right of the name column."""
    edit_grid_at(page, page.locator('[data-testid="stDataFrameResizable"]').first, NAME_COL + right, down, value)
    _idle(page)


def _issue_shown(page, row: int, text: str) -> None:
    """Wait until the grid's issue cell of `row` (0-based) holds `text` (the hidden cells mirror the canvas)."""
    page.wait_for_function("([sel, text]) => document.querySelector(sel)?.textContent.includes(text)",
                           arg=[f'[data-testid="glide-cell-{ISSUE_COL}-{row}"]', text])


def _cells(page, col: int) -> list[str]:
    """Column `col` of the grid as its hidden cells hold it (0: row marker, 1: row number, 2: name, 3: issue)."""
    found = re.findall(rf'data-testid="glide-cell-{col}-(\d+)"[^>]*>(.*?)</td>', page.content())
    return [html.unescape(text) for _, text in sorted(found, key=lambda m: int(m[0]))]


def test_every_grid_problem_at_once_and_world_size_keeps_the_hosts(app_url, browser, tmp_path):
    page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    try:
        page.goto(app_url)
        page.wait_for_selector('[data-testid="stDataFrame"]')
        _idle(page)
        _edit_cell(page, 1, 2, "0")  # row 2, dim (name, rows, dim)
        _issue_shown(page, 1, "dim: must be")
        _edit_cell(page, 3, 2, "-1")  # row 4, rows (name, issue, rows)
        _issue_shown(page, 3, "rows: must be")
        _edit_cell(page, 2, 0, "large_table_0")  # row 3's name: row 1's
        _issue_shown(page, 2, "is also the name of row 1")
        assert _cells(page, 1)[:4] == ["1", "2", "3", "4"]
        assert _cells(page, 3)[:4] == [
            "name: 'large_table_0' is also the name of row 3; table names must be unique",
            "dim: must be from 1 to 65,536, got 0",
            "name: 'large_table_0' is also the name of row 1; table names must be unique",
            "rows: must be from 1 to 1,099,511,627,776, got -1"]
        summary = page.locator('[data-testid="stAlertContentError"]').filter(has_text="to fix before planning")
        assert summary.inner_text().count("row ") >= 4 and "tables[" not in page.content()
        page.screenshot(path=str(tmp_path / "grid.png"))

        page.get_by_role("link", name="Topology").click()
        world = page.locator(".st-key-topology_world_size input")
        world.fill("4")
        world.press("Enter")
        page.get_by_text(re.compile(r"^1 host x 4 ranks = 4 ranks")).wait_for()
        page.get_by_text("4 ranks per host").wait_for()
        assert page.locator(".st-key-topology_hosts input").input_value() == "1"
        page.screenshot(path=str(tmp_path / "topology.png"))
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))
        raise
