"""Issue 28 item 10 in a real browser on `streamlit run`: the working view's headline figure and its change line
("Since the last plan: slowest rank A → B ms") always describe the same pair of plans. A MutationObserver records
every state of the headline the browser renders while edits replan the config, the tutorial's and a 1,000-table
preset's; in every recorded state that shows both, the figure is the change line's B."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import idle, need_browser, new_page, serving
from tests.e2e.test_working_view import HEADLINE, _headline, _headline_changes, _load_synthetic, _type_into_cell

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 120_000
FIGURE = re.compile(r"Slowest rank ([0-9.,]+ ms)")
CHANGE = re.compile(r"Since the last plan: slowest rank [0-9.,]+ → ([0-9.,]+ ms)")
# Every text the headline (its strip's element) shows, in order, as the browser renders it.
RECORD = """() => {
  window.__headlines = [];
  const note = () => {
    const e = document.querySelector('%s');
    const t = e === null ? '' : e.innerText;
    const all = window.__headlines;
    if (all.length === 0 || all[all.length - 1] !== t) all.push(t);
  };
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, characterData: true,
                                                     attributes: true});
  note();
}""" % HEADLINE

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def page(browser, tmp_path):
    need_browser()
    with serving(tmp_path, f"sqlite:///{tmp_path / 'planner.db'}") as url:
        p = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
        p.goto(url)
        p.wait_for_selector('[data-testid="stApp"]')
        yield p
        p.screenshot(path=str(tmp_path / "last.png"))


def _disagreeing(texts: list[str]) -> list[str]:
    """The recorded headlines whose figure is not the change line's 'after'."""
    out = []
    for t in texts:
        figure, change = FIGURE.search(t), CHANGE.search(t)
        if figure and change and figure.group(1) != change.group(1):
            out.append(t)
    return out


def _edits(page, cells: list[tuple[int, str, str]]) -> list[str]:
    """Type each (row, column, value) into the grid, each once the headline showed the last one's plan; the
    headlines the browser rendered meanwhile."""
    page.evaluate(RECORD)
    for row, column, value in cells:
        before = _headline(page)
        _type_into_cell(page, row, column, value)
        _headline_changes(page, before, "Since the last plan")
        idle(page)
    return page.evaluate("() => window.__headlines")


def test_figure_and_change_line_describe_the_same_plans_on_every_frame(page):
    page.locator(HEADLINE).wait_for()
    idle(page)
    seen = _edits(page, [(0, "dim", "256"), (1, "dim", "128"), (0, "pooling factor", "40"), (2, "dim", "32"),
                         (0, "dim", "64")])
    changes = [t for t in seen if CHANGE.search(t)]
    assert len(changes) >= 5, seen  # each edit's change line was rendered
    assert _disagreeing(seen) == [], "\n---\n".join(seen)

    _load_synthetic(page, 1000)
    page.wait_for_function("([sel]) => document.querySelector(sel)?.innerText.includes('1,000 tables on 8 ranks')",
                           arg=[HEADLINE])
    idle(page)
    seen = _edits(page, [(3, "pooling factor", "100"), (5, "pooling factor", "200"), (3, "dim", "32")])
    assert len([t for t in seen if CHANGE.search(t)]) >= 3, seen
    assert _disagreeing(seen) == [], "\n---\n".join(seen)
