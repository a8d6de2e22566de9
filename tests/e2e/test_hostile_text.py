"""Hostile user text and an offline browser, in a real Chromium: a table, a plan label, an author, a config name,
a planner note, a run's error and a device filter that look like markdown and HTML show as typed on every page,
make no link, image or dialog, and a forged `?plan=` token is echoed as typed; every request the browser makes
in the whole session goes to the app's own address (no fonts, icons, usage statistics or scripts from another
host: on most training clusters there is no internet)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

import engine
from dashboard.plans.charts import HEATMAP_NAME_CHARS
from dashboard.text import WORD_JOINER, short_name
from db.store import Store
from tests.e2e.conftest import need_browser, new_page, serving
from tests.factories import tutorial

EVIL = "**x** [l](http://example.com) <img src=x onerror=alert(1)> :red[r] $x$"
FORGED_TOKEN = "[x](http://example.com)![i](http://example.com/i.png)"
VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 60_000
MAIN = '[data-testid="stMain"]'
SIDEBAR = '[data-testid="stSidebar"]'
# Everything on the page that links or loads: markdown links and images, plotly's SVG links.
LINKS_AND_IMAGES = """() => Array.from(document.querySelectorAll('a, img, image, iframe, script[src]')).map(e =>
    e.getAttribute('href') || e.getAttribute('xlink:href') || e.getAttribute('src') || '')"""

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def hostile_server(tmp_path):
    """The app on a SQLite database seeded with the tutorial, its first table named EVIL, planned and saved
    with EVIL as label, author and config name, a planner note EVIL, and a failed run whose error is EVIL.
    Yields (url, token)."""
    need_browser()
    db_url = f"sqlite:///{tmp_path / 'planner.db'}"
    cfg = tutorial()
    cfg["tables"][0]["name"] = EVIL
    parsed = engine.parse_config(cfg)
    plan = engine.plan_to_dict(engine.plan(parsed))
    plan["notes"] = [*plan.get("notes", []), EVIL]
    store = Store(db_url)
    try:
        store.upgrade()
        token = store.save_plan(engine.config_to_dict(parsed), plan, label=EVIL, author=EVIL, config_name=EVIL)
        run_id = store.create_run(token, "dryrun", "cpu", "cpu")
        store.update_run(run_id, status="failed", error=EVIL)
    finally:
        store.close()
    with serving(tmp_path, db_url) as url:
        yield url, token


class Session:
    """One browser context that records every request and every dialog, and checks pages as it goes."""

    def __init__(self, browser, url: str, shots):
        self.url, self.shots = url, shots
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
        self.context = self.page.context
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def text(self, selector: str = MAIN) -> str:
        """What a person reads there (the invisible word joiners that keep `:x:` from becoming an emoji out)."""
        return self.page.locator(selector).inner_text().replace(WORD_JOINER, "")

    def check(self, name: str, *, texts: tuple[str, ...] = (), selector: str = MAIN) -> None:
        """Each of `texts` shows as typed, nothing links or loads from elsewhere, no dialog opened."""
        self.page.wait_for_timeout(300)  # let the last rerun's elements settle
        self.page.screenshot(path=str(self.shots / f"{name}.png"))
        shown = self.text(selector)
        for t in texts:
            assert t in shown, f"{name}: {t!r} is not shown as typed in:\n{shown}"
        outside = [h for h in self.page.evaluate(LINKS_AND_IMAGES)
                   if (h.startswith(("http", "//")) and not h.startswith(self.url)) or h in ("x", "i.png")]
        assert not outside, f"{name}: links or images to elsewhere: {outside}"
        assert not self.dialogs, f"{name}: dialogs opened: {self.dialogs}"

    def nav(self, title: str) -> None:
        self.page.locator('[data-testid="stSidebarNavLink"]').filter(has_text=title).first.click()
        self.page.get_by_role("heading", name=title, exact=True).wait_for()


def _wait_for_plan_view(page) -> None:
    page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot')
    page.get_by_text(re.compile(r"^What makes rank \d the slowest$")).wait_for()


def _heatmap_rows(page) -> list[str]:
    page.get_by_role("tab", name="Table-by-rank heatmap").click()
    page.wait_for_selector('.js-plotly-plot .heatmaplayer')
    return page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot .ytick text'))"
                         ".map(e => e.textContent)")


def test_hostile_text_shows_as_typed_and_nothing_leaves_the_origin(hostile_server, browser, tmp_path):
    url, token = hostile_server
    s = Session(browser, url, tmp_path)
    page = s.page
    try:
        page.goto(f"{url}/?plan={token}")  # the share link, opened cold
        _wait_for_plan_view(page)
        assert s.text("h1") == EVIL
        page.get_by_text(re.compile(r"^Planner notes")).click()
        notes = page.locator('[data-testid="stExpanderDetails"]')
        notes.wait_for()
        assert EVIL in notes.inner_text().replace(WORD_JOINER, "").splitlines()
        s.check("shared", texts=(f"config '{EVIL}' v1", f"UTC by {EVIL}"))
        assert short_name(EVIL, HEATMAP_NAME_CHARS) in _heatmap_rows(page)  # a long name: its start and end
        s.check("shared_heatmap")

        page.get_by_role("button", name="Open a copy in my workspace").click()
        page.get_by_role("heading", name="Tables & constraints").wait_for()
        page.wait_for_function("t => document.documentElement.textContent.includes(t)", arg=EVIL)  # the grid's cells
        s.check("tables", selector="body")
        s.check("sidebar", texts=(f"Saved as '{EVIL}'",), selector=SIDEBAR)

        s.nav("Topology")
        box = page.get_by_label("Only runs whose device name contains (optional)")
        box.fill(EVIL)
        box.press("Enter")
        page.locator('[data-testid="stAlertContentInfo"]').filter(has_text="whose device name contains").wait_for()
        s.check("topology", texts=(f"on cuda whose device name contains '{EVIL}' is recorded",))

        s.nav("Plan")
        _wait_for_plan_view(page)
        s.check("plan", texts=(f"saved as '{EVIL}'",))

        s.nav("Compare")
        page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot')
        s.check("compare", texts=(f"{EVIL} (ours, ",))  # the picked plan

        s.nav("Runs")
        page.locator('[data-testid="stAlertContentError"]').wait_for()
        s.check("runs", texts=(f": {EVIL}",))

        s.nav("Save & share")
        page.locator('[data-testid="stCode"]').filter(has_text="?plan=").first.wait_for()
        s.check("save_share", texts=(f"Share link of '{EVIL}'",))

        page.goto(f"{url}/?plan={quote(FORGED_TOKEN, safe='')}")
        page.locator('[data-testid="stAlertContentError"]').wait_for()
        s.check("forged_token", texts=(f"No saved plan has the token '{FORGED_TOKEN}'",))
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))
        raise
    finally:
        s.context.close()

    # data: and blob: URLs are made in the page and fetch nothing
    elsewhere = sorted({r for r in s.requests if not r.startswith((f"{url}/", "data:", "blob:")) and r != url})
    assert len(s.requests) > 20 and not elsewhere, "requests to other hosts:\n" + "\n".join(elsewhere)
