"""The real app in a real browser: `streamlit run dashboard/app.py` on a free port with a fresh database in a
temp dir, and Debian's headless Chromium driven by Playwright. Without Chromium or Playwright the tests are
skipped, except with CI=true, where they fail.

Every wait has a budget scaled for a loaded machine (tests.dashboard.helpers.slowdown): Playwright's through
new_page's default timeout, the others through until(). A wait that gives up says what the pages showed."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests import processes
from tests.waits import budget_s, held_within, trimmed, until

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
START_TIMEOUT_S = 60  # on an idle machine; budget_s scales it
UI_TIMEOUT_MS = 60_000  # a page's waits on an idle machine; new_page scales it
READ_TIMEOUT_MS = 5_000  # reading what a page shows after a wait failed


def need_browser() -> None:
    """Skip (fail under CI=true) when Chromium or Playwright is missing."""
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium; scripts/install.sh --dev does)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -r requirements-dev.txt)")
    if not missing:
        return
    message = "missing: " + "; ".join(missing)
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(tmp_path: Path, db_url: str, *flags: str):
    """The app under `streamlit run` on a free port with DATABASE_URL=db_url; yields its url. `flags` are
    more `streamlit run` options. The server leads a process group of its own; it and every process below it
    are ended on leaving, whatever the way out (tests.processes.started)."""
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": db_url, "PLANNER_DATA_DIR": str(tmp_path)}
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log, processes.started(
            [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
             *flags], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT) as proc:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, url, log_path)
        yield url


def healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


def _wait_healthy(proc: subprocess.Popen, url: str, log_path: Path) -> None:
    until(lambda: proc.poll() is not None or healthy(url), f"streamlit to answer {url}/_stcore/health",
          START_TIMEOUT_S, shows=lambda: log_path.read_text()[-2000:])
    if proc.poll() is not None:
        pytest.fail(f"streamlit exited: {log_path.read_text()[-2000:]}")


def new_page(browser, viewport: dict, timeout_ms: float = UI_TIMEOUT_MS):
    """A page in a fresh context (no cookies: a new visitor), every Playwright wait on it `timeout_ms` (on an
    idle machine) scaled for the load now."""
    page = browser.new_context(viewport=viewport).new_page()
    page.set_default_timeout(scaled_ms(timeout_ms))
    return page


def scaled_ms(timeout_ms: float) -> float:
    """A Playwright timeout given for an idle machine, scaled for the load now (budget_s)."""
    return budget_s(timeout_ms / 1000) * 1000


def settled(page) -> None:
    """The page's script run has ended (Streamlit's running indicator gone) and every chart on it is drawn: what
    a screenshot or a read of several elements waits for (not a fixed pause)."""
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
                           ".every((c) => c.querySelector('.js-plotly-plot .main-svg') !== null)")


GRID_ROW_Y_PX = 35 + 17  # a data grid's first row, from its top: the header, then half a row
FIRST_CELL_X_PX = 60  # a data grid's first column after the row marker, from its left edge


def focused_grid_cell(page) -> tuple[int, int] | None:
    """The data grid cell that has the keyboard's focus, as (column, row) in the grid's own numbering (its
    accessible table's cells are `glide-cell-COLUMN-ROW`; column 1 is the first after the row marker); None where
    no cell has it."""
    found = re.fullmatch(r"glide-cell-(\d+)-(\d+)", page.evaluate("() => document.activeElement?.id ?? ''"))
    return (int(found[1]), int(found[2])) if found else None


def _arrow_to(page, target: tuple[int, int], step_s: float = 2.0) -> bool:
    """Press arrows one at a time from the focused cell toward `target` (column, row), each time waiting for the
    focus to reach the next cell (the grid moves it a frame or more after the key); True once it is there. A
    keypress lost under load (seen under two CPU hogs: the editor opened on the read-only row column) or a slow
    one is judged from where the focus really is, so the next press corrects either way."""
    missed = 0
    for _ in range(4 * (abs(target[0]) + abs(target[1])) + 20):
        at = focused_grid_cell(page)
        if at is None or at == target or missed >= 2:  # two presses that moved nothing: click again (the caller)
            return at == target
        if at[0] != target[0]:
            step = 1 if target[0] > at[0] else -1
            key, nxt = ("ArrowRight" if step > 0 else "ArrowLeft"), (at[0] + step, at[1])
        else:
            step = 1 if target[1] > at[1] else -1
            key, nxt = ("ArrowDown" if step > 0 else "ArrowUp"), (at[0], at[1] + step)
        page.keyboard.press(key)
        try:
            page.wait_for_function(
                "(id) => document.activeElement?.id === id || document.activeElement?.tagName === 'CANVAS'",
                arg=f"glide-cell-{nxt[0]}-{nxt[1]}", timeout=scaled_ms(step_s * 1000))
        except Exception:  # noqa: BLE001 - lost or slow: the next round reads where the focus is
            pass
        missed = missed + 1 if focused_grid_cell(page) == at else 0
        if page.evaluate("() => document.activeElement?.tagName") == "CANVAS":  # a dynamic editor's trailing
            return nxt == target and key == "ArrowDown"  # row, which takes a new row, has no accessible cell
    return False


ROW_PX = 35  # a data grid row's height


def selected_grid_cell(grid) -> tuple[int, int] | None:
    """The cell the data grid `grid` (a locator) has selected, as (column, row) in focused_grid_cell's numbering:
    the grid's own state (its accessible table marks the cell aria-selected), whether or not the keyboard's focus
    followed it; None where no cell is selected."""
    ids = grid.evaluate("(g) => [...g.querySelectorAll('[data-testid^=\"glide-cell-\"][aria-selected=\"true\"]')]"
                        ".map((e) => e.dataset.testid)")
    found = [re.fullmatch(r"glide-cell-(\d+)-(\d+)", i) for i in ids]
    cells = [(int(f[1]), int(f[2])) for f in found if f]
    return cells[0] if len(cells) == 1 else None


def _select_by_click(page, grid, overlay, target: tuple[int, int]) -> tuple[float, float] | None:
    """Select the cell `target` (column, row) with clicks alone, no key: the row's height is fixed, so the row is
    clicked at its middle, and the column is found by bisecting x on the column the grid says it selected. Returns
    the point that selected it; None where the cell is not in sight (a row below the grid's box, a column right of
    it, a dynamic editor's trailing row without an accessible cell) or the clicks kept being lost. A click on the
    cell already selected opens its editor (the grid's second-click activation): closed again unless it is the
    target's (a select cell's menu as well as a text editor)."""
    column, row = target
    if grid.locator(f'[data-testid="glide-cell-{column}-{row}"]').count() == 0:
        return None
    box = grid.bounding_box()
    if box is None:
        return None
    y = box["y"] + GRID_ROW_Y_PX + ROW_PX * row
    if y > box["y"] + box["height"] - ROW_PX / 2:
        return None
    x, left, right = FIRST_CELL_X_PX, None, None  # left: an x right of which the column is; right: one left of it
    for _ in range(24):
        before = selected_grid_cell(grid)
        page.mouse.click(box["x"] + x, y)
        moved = held_within(lambda: overlay.count() or selected_grid_cell(grid) != before, 2.0)
        page.wait_for_timeout(60)  # the selection and the focus settle a frame after the click
        now = selected_grid_cell(grid)
        if overlay.count():
            if now == target:
                return box["x"] + x, y
            _close_overlay(page, overlay)
        if not moved or now is None or now[1] != row:
            continue  # the click was lost or is still on its way: the same x again
        if now[0] == column:
            return box["x"] + x, y
        if now[0] < column:
            left = x
            x = (x + right) / 2 if right is not None else x + 60
        else:
            right = x
            if left is None:
                return None
            x = (left + x) / 2
        if x > box["width"] - 4 or (right is not None and left is not None and right - left < 2):
            return None
    return None


def _close_overlay(page, overlay) -> None:
    """Close the grid's overlay editor with Escape (a select cell's takes two: its menu, then the editor)."""
    for _ in range(3):
        if not overlay.count():
            return
        page.keyboard.press("Escape")
        held_within(lambda: overlay.count() == 0, 1.0)


def edit_grid_at(page, grid, column: int, row: int, value: str, budget: float = 60.0) -> None:
    """Type `value` into the data grid's cell (column, row) (focused_grid_cell's numbering) and commit it with Enter.
    The cell is selected with clicks where it is in sight (_select_by_click: the grid's own selection is checked,
    no arrow key needed; under load keys were seen to move nothing for minutes while clicks still landed), else
    from the first row's first cell with arrows (the trailing row that takes a new row, a cell out of sight). Its
    editor opens with Enter, or with a second click on the cell where the key is lost; the value is filled only once
    the editor is open and editable on the target (typing straight onto a selected cell loses the first keystroke).
    Each failed round starts again from the click. The caller waits for the rerun."""
    grid.scroll_into_view_if_needed()
    editor = page.locator("#portal .gdg-input")
    overlay = page.locator('#portal [id^="gdg-overlay-"]')  # any cell's editor (a text box, a select's menu)

    def opened_on_target() -> bool:
        _close_overlay(page, overlay)  # an editor opened on another cell
        try:  # keys pressed while the page reruns were seen to move nothing (two CPU hogs): start once it is idle
            page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=scaled_ms(10_000))
        except Exception:  # noqa: BLE001 - still running: try anyway, the checks below tell
            pass
        point = _select_by_click(page, grid, overlay, (column, row))
        if point is None and not _selected_by_keys(page, grid, (column, row)):
            return False
        if not editor.count():
            page.keyboard.press("Enter")
            if not held_within(editor.count, 3.0) and point is not None:
                page.mouse.click(*point)  # the Enter was lost: the second click on a selected cell opens it too
        try:
            editor.wait_for(timeout=scaled_ms(3000))
        except Exception:  # noqa: BLE001 - neither opened it: go round again
            return False
        on_target = point is None or selected_grid_cell(grid) == (column, row)
        return on_target and editor.is_enabled()  # a read-only cell's editor is disabled: never typed into

    until(opened_on_target, f"the grid's editor on column {column}, row {row}", budget,
          shows=lambda: f"focus on {focused_grid_cell(page)}, selected {selected_grid_cell(grid)}; "
                        + page_text(page))
    editor.fill(value)
    page.keyboard.press("Enter")


def _selected_by_keys(page, grid, target: tuple[int, int]) -> bool:
    """Select `target` from the first row's first cell with arrows (_arrow_to); whether the focus reached it."""
    box = grid.bounding_box()  # a click each round: a focus left from before the last rerun takes no keys
    page.mouse.click(box["x"] + FIRST_CELL_X_PX, box["y"] + GRID_ROW_Y_PX)
    try:  # the click's focus reaches the grid's cell a frame or more later
        page.wait_for_function("() => /^glide-cell-/.test(document.activeElement?.id ?? '')",
                               timeout=scaled_ms(5000))
    except Exception:  # noqa: BLE001 - the click was lost: go round again
        return False
    page.wait_for_timeout(150)  # an arrow pressed at once after the click can be lost
    return _arrow_to(page, target)


def grid_column(grid, header: str) -> int:
    """The grid column (focused_grid_cell's numbering) whose header reads `header`."""
    head = grid.locator("th").filter(has_text=re.compile(rf"^\s*{re.escape(header)}\s*$")).first
    head.wait_for(state="attached")  # the grid's accessible table, hidden
    return int(head.get_attribute("aria-colindex"))


def idle(page, pause_ms: float = 300) -> None:
    """A short pause for a rerun to start, then Streamlit's running indicator gone."""
    page.wait_for_timeout(pause_ms)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden")


@pytest.fixture
def app_url(tmp_path):
    """The app served on a fresh SQLite store of its own (skipped where no browser runs): its URL."""
    need_browser()
    with serving(tmp_path, f"sqlite:///{tmp_path / 'planner.db'}") as url:
        yield url


def click_until(page, target, shown, what: str, budget: float = 60.0, retry_s: float = 5.0) -> None:
    """Click `target` until `shown` (a locator) is visible. A click that lands while Streamlit reruns the page (the
    working view re-plans after each edit) can be lost with the element it hit: seen under two CPU hogs, the
    Presets button clicked and no popover, a 'Clear all' clicked and the picks still there. The target is clicked
    again only while `shown` is still hidden, so a toggle is never closed by a second click."""
    def clicked_and_shown() -> bool:
        if shown.is_visible():
            return True
        try:
            target.click(timeout=scaled_ms(retry_s * 1000))
            shown.wait_for(timeout=scaled_ms(retry_s * 1000))
        except Exception:  # noqa: BLE001 - a timeout here means the click was lost: click again
            return shown.is_visible()
        return True

    until(clicked_and_shown, what, budget, shows=lambda: page_text(page))


def choose(page, label: str, scope=None, budget: float = 60.0) -> None:
    """Pick the radio option or turn on the checkbox or toggle whose label holds `label` (within `scope`, default the
    page), clicking until its input is checked: a click that lands while the page reruns can be lost (a clean-clone
    CI run imported a snippet as JSON after its format's click went nowhere). Never clicks a checked one again."""
    scope = scope or page
    checked = scope.locator("label:has(input:checked)", has_text=label).first
    click_until(page, scope.get_by_text(label).first, checked, f"{label!r} chosen", budget)
    idle(page, 150)


def page_text(page) -> str:
    """What a page shows a person now (its visible text), trimmed."""
    return trimmed(page.locator("body").inner_text(timeout=READ_TIMEOUT_MS))


def pages_shown(browser) -> str:
    """The url and visible text of every open page of `browser`, for a wait's failure."""
    out = []
    for context in browser.contexts:
        for page in context.pages:
            try:
                out.append(f"--- {page.url}\n{page_text(page)}")
            except Exception as e:  # noqa: BLE001 - one unreadable page does not hide the others
                out.append(f"--- {page.url}\n(could not be read: {type(e).__name__})")
    return "\n".join(out) or "(no page open)"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A Playwright wait that ran out becomes an AssertionError that says what the pages showed then, and what the
    test noted on the way out (add_note)."""
    try:
        return (yield)
    except Exception as e:
        browser = item.funcargs.get("browser")
        if browser is None or type(e).__name__ != "TimeoutError" or "playwright" not in type(e).__module__:
            raise
        said = "\n".join(str(e).strip().splitlines()[:6]) or type(e).__name__  # the timeout and what it waited for
        notes = "".join(f"\n{n}" for n in getattr(e, "__notes__", ()))  # what the test added (e.g. a server's logs)
        raise AssertionError(f"{said}\nThe pages showed:\n{pages_shown(browser)}{notes}") from e


@pytest.fixture
def browser():
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                              timeout=scaled_ms(START_TIMEOUT_S * 1000))
        try:
            yield b
        finally:
            b.close()
