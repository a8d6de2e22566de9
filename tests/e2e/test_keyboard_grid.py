"""Issue 28 item 2 in Chromium, with key presses only: Tab from the toolbar reaches the tables grid, the arrows mark
and move a cell, Enter opens the cell's editor, typing and Enter commit the edit and the headline re-plans (Streamlit
1.67's data editor does this itself); the toolbar's buttons show a focus ring, and so do the grid's own (shown
while one holds the focus, not only on hover); Tab from an open popover's button goes
into the popover (dashboard.ui.keyboard) and Escape brings the focus back."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import new_page, settled

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 120_000
CANVAS = '[data-testid="data-grid-canvas"]'
DIM_COLUMN = 4  # hidden cells: 0 row marker, 1 row number, 2 name, 3 rows, 4 dim
ACTIVE = ("() => { const e = document.activeElement; const bar = e.closest('[data-testid=\"stElementToolbar\"]');"
          " return {testid: e.getAttribute('data-testid') || '', text: e.textContent,"
          " ring: getComputedStyle(e).boxShadow, label: e.getAttribute('aria-label') || '',"
          " shown: bar ? getComputedStyle(bar).opacity : '1'}; }")

pytestmark = pytest.mark.timeout(420)


def _press(page, key: str) -> dict:
    page.keyboard.press(key)
    page.wait_for_timeout(300)  # the grid moves its selection on a later frame
    return page.evaluate(ACTIVE)


def test_the_tables_grid_is_edited_with_the_keyboard_only(app_url, browser, tmp_path):
    page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    page.goto(app_url)
    page.locator(CANVAS).first.wait_for()
    settled(page)
    page.wait_for_timeout(1500)  # the first view's plan lands in a rerun of its own, which draws the grid again
    settled(page)
    headline = page.locator(".st-key-ws_headline").inner_text()
    page.get_by_role("button", name="Add table").focus()  # the toolbar's last button: the keyboard's way in
    assert page.evaluate(ACTIVE)["ring"] != "none"  # a visible focus ring
    toolbar = []
    for _ in range(10):  # the tab, then the grid's own toolbar (add row, columns, download, search, fullscreen)
        active = _press(page, "Tab")
        if active["testid"].startswith(("data-grid-canvas", "glide-cell-")):  # the grid or its cell
            break
        if active["testid"] == "stBaseButton-elementToolbar":
            toolbar.append(active)
    else:
        pytest.fail(f"Tab never reached the grid: focus is on {page.evaluate(ACTIVE)}")
    # the grid's own toolbar showed only on mouse hover: Tab reached invisible buttons with no ring
    assert {b["label"] for b in toolbar} >= {"Add row", "Download as CSV", "Search", "Fullscreen"}, toolbar
    assert all(b["shown"] == "1" and b["ring"] != "none" for b in toolbar), toolbar
    page.screenshot(path=str(tmp_path / "grid-focused.png"))
    # The first arrow marks the first cell where Tab left none marked (it varies with timing), then each moves one
    # to the right along the first row, to dim.
    moves = [_press(page, "ArrowRight")["testid"]]
    while moves[-1] != f"glide-cell-{DIM_COLUMN}-0" and len(moves) < DIM_COLUMN + 1:
        moves.append(_press(page, "ArrowRight")["testid"])
    assert moves[-1] == f"glide-cell-{DIM_COLUMN}-0" and all(m.endswith("-0") for m in moves), moves
    page.keyboard.press("Enter")
    editor = page.locator("#portal .gdg-input")
    editor.wait_for()
    assert page.evaluate("document.activeElement.classList.contains('gdg-input')")  # typing goes into the editor
    page.keyboard.press("Control+a")
    page.keyboard.type("32")
    page.screenshot(path=str(tmp_path / "grid-editing.png"))
    page.keyboard.press("Enter")
    page.wait_for_function("(sel) => document.querySelector(sel)?.innerText.includes('Since the last plan')",
                           arg=".st-key-ws_headline")  # the edit re-planned: the strip says what changed
    settled(page)
    assert page.locator(f'[data-testid="glide-cell-{DIM_COLUMN}-0"]').text_content() == "32"
    assert page.locator(".st-key-ws_headline").inner_text() != headline


def test_tab_from_an_open_popover_goes_into_it_and_escape_comes_back(app_url, browser):
    """Streamlit draws a popover's body at the end of the page: Tab from the Import button went on through the page
    (17 presses on this page) before its first control. dashboard.ui.keyboard sends it in; Escape closes it."""
    page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    page.goto(app_url)
    page.locator(CANVAS).first.wait_for()
    settled(page)
    button = page.locator('[data-testid="stPopoverButton"]').filter(has_text="Import")
    button.focus()
    page.keyboard.press("Enter")
    body = page.locator('[data-testid="stPopoverBody"]')
    body.get_by_role("radio", name="JSON").wait_for()  # the popover's first control, drawn
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('[data-testid=\"stPopoverBody\"]') !== null"), \
        page.evaluate(ACTIVE)
    assert page.evaluate("document.activeElement.type") == "radio", page.evaluate(ACTIVE)
    page.keyboard.press("ArrowRight")  # the format radio: JSON -> CSV, by keys
    page.wait_for_function("() => document.activeElement.type === 'radio' && document.activeElement.checked"
                           " && document.activeElement.closest('label')?.innerText.includes('CSV')")
    page.keyboard.press("Escape")
    body.wait_for(state="detached")
    assert page.evaluate(ACTIVE)["testid"] == "stPopoverButton" and page.evaluate(ACTIVE)["ring"] != "none"
