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
from tests.waits import budget_s, trimmed, until

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


def edit_grid_at(page, grid, column: int, row: int, value: str, budget: float = 60.0) -> None:
    """Type `value` into the data grid's cell (column, row) (focused_grid_cell's numbering): click the first row's
    first cell, arrows until that cell has the focus (checked, not assumed; else again from the click), Enter,
    fill the overlay once it is the editable editor, Enter (typing straight onto a selected cell loses the first
    keystroke). The caller waits for the rerun."""
    grid.scroll_into_view_if_needed()
    editor = page.locator("#portal .gdg-input")

    def opened_on_target() -> bool:
        if editor.count():
            page.keyboard.press("Escape")  # an editor opened on another cell
        try:  # keys pressed while the page reruns were seen to move nothing (two CPU hogs): click once it is idle
            page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=scaled_ms(10_000))
        except Exception:  # noqa: BLE001 - still running: try anyway, the checks below tell
            pass
        box = grid.bounding_box()  # a click each round: a focus left from before the last rerun takes no keys
        page.mouse.click(box["x"] + FIRST_CELL_X_PX, box["y"] + GRID_ROW_Y_PX)
        try:  # the click's focus reaches the grid's cell a frame or more later
            page.wait_for_function("() => /^glide-cell-/.test(document.activeElement?.id ?? '')",
                                   timeout=scaled_ms(5000))
        except Exception:  # noqa: BLE001 - the click was lost: go round again
            return False
        page.wait_for_timeout(150)  # an arrow pressed at once after the click can be lost
        if not _arrow_to(page, (column, row)):
            return False
        page.keyboard.press("Enter")
        try:
            editor.wait_for(timeout=scaled_ms(5000))
        except Exception:  # noqa: BLE001 - the Enter was lost: go round again
            return False
        return editor.is_enabled()  # a read-only cell's editor is disabled: never typed into

    until(opened_on_target, f"the grid's editor on column {column}, row {row}", budget,
          shows=lambda: f"focus on {focused_grid_cell(page)}; " + page_text(page))
    editor.fill(value)
    page.keyboard.press("Enter")


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
    """A Playwright wait that ran out becomes an AssertionError that says what the pages showed then."""
    try:
        return (yield)
    except Exception as e:
        browser = item.funcargs.get("browser")
        if browser is None or type(e).__name__ != "TimeoutError" or "playwright" not in type(e).__module__:
            raise
        said = "\n".join(str(e).strip().splitlines()[:6]) or type(e).__name__  # the timeout and what it waited for
        raise AssertionError(f"{said}\nThe pages showed:\n{pages_shown(browser)}") from e


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
