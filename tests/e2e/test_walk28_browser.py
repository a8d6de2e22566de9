"""Three leftovers of issue 28's walk, in a real browser on `streamlit run` with 1,000 tables:
- the Plan page's per-table frame shows its kernel and cache columns whole at 1440x900 and 1280x720 (every column in
  view, each visible cell's text narrower than its column, as Chromium draws and measures them), and why each cache
  is that size is listed under it;
- the sweep's reasons a point does not fit are readable whole at 1280x720 (the table's last column was cut);
- an edit that leaves the plan as it was (a feature renamed) says in the headline that it was planned and nothing
  changed, each such edit in a row counted.
The grids draw on a canvas: column edges are read from a screenshot of the header (glide draws a line between
header cells), cell texts from the hidden cells that mirror it."""

from __future__ import annotations

import html
import io
import re
from statistics import median

import pandas as pd
import pytest
from PIL import Image

import engine
from dashboard.plans import table_text
from dashboard.tables.grid import grid_height
from tests.e2e.conftest import idle, new_page, serving, settled
from tests.e2e.test_working_view import HEADLINE, _goto, _headline, _headline_changes, _load_synthetic, _type_into_cell

VIEWPORTS = ({"width": 1440, "height": 900}, {"width": 1280, "height": 720})
UI_TIMEOUT_MS = 120_000
CELL_PAD_PX = 2 * 8  # glide's padding either side of a cell's text
FONT = '14px "Source Sans", sans-serif'  # the grids' cells (Streamlit's theme: 0.875rem)


def _frame(page, header: str):
    """The data frame with a column `header` (its hidden header cells mirror the canvas)."""
    return page.locator('[data-testid="stDataFrame"]').filter(
        has=page.locator("th", has_text=re.compile(rf"^\s*{re.escape(header)}\s*$")))

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def page(browser, tmp_path):
    with serving(tmp_path, f"sqlite:///{tmp_path / 'planner.db'}") as url:
        p = new_page(browser, VIEWPORTS[0], UI_TIMEOUT_MS)
        p.goto(url)
        p.wait_for_selector('[data-testid="stApp"]')
        p.locator(HEADLINE).wait_for()
        idle(p)
        yield p
        p.screenshot(path=str(tmp_path / "last.png"))


def _text_px(page, texts: list[str]) -> list[float]:
    """Each text's width as Chromium draws it in the grids' font."""
    return page.evaluate("([font, texts]) => { const c = document.createElement('canvas').getContext('2d');"
                         " c.font = font; return texts.map((t) => c.measureText(t).width); }", [FONT, texts])


def _column_edges(grid) -> list[int]:
    """x of the frame's left edge, each line between two header cells, and its right edge (px from the grid's left),
    from a screenshot of the header's top (above its text, only the lines are darker than the background)."""
    shot = Image.open(io.BytesIO(grid.screenshot())).convert("L")
    y = 8
    row = [shot.getpixel((x, y)) for x in range(shot.width)]
    background = median(row)
    dark = [x for x, v in enumerate(row) if v < background - 8]
    return [x for i, x in enumerate(dark) if i == 0 or x - dark[i - 1] > 1]  # one x per line


def _cells(grid, col: int) -> list[str]:
    """The hidden cells of column `col` (0: the first column) that mirror the rows drawn."""
    found = re.findall(rf'data-testid="glide-cell-{col}-(\d+)"[^>]*>(.*?)</td>', grid.inner_html())
    return [html.unescape(t) for _, t in sorted(found, key=lambda m: int(m[0]))]


def _headers(grid) -> list[str]:
    return [h.strip() for h in grid.locator("th").all_inner_texts() if h.strip()]


def test_the_plan_tables_kernel_and_cache_columns_read_whole(page, tmp_path):
    kernels = [k.value for k in engine.ComputeKernel]  # the width the frame gives each kernel holds it, in Chromium
    widths = [table_text.column_px(pd.DataFrame({"kernel": [k]}), "kernel") for k in kernels]
    for kernel, drawn, width in zip(kernels, _text_px(page, kernels), widths):
        assert drawn + CELL_PAD_PX <= width, (kernel, drawn, width)

    _load_synthetic(page, 1000)
    idle(page)
    _goto(page, "Plan")
    grid = _frame(page, "kernel")
    grid.wait_for(state="attached")
    for viewport in VIEWPORTS:
        page.set_viewport_size(viewport)
        settled(page)
        grid.scroll_into_view_if_needed()
        page.wait_for_timeout(500)  # the canvas redrawn at the new width
        page.screenshot(path=str(tmp_path / f"plan_table_{viewport['width']}.png"))
        scroller = grid.locator(".dvn-scroller").first
        assert scroller.evaluate("(e) => e.scrollWidth <= e.clientWidth + 1"), "a column is out of view"
        headers, edges = _headers(grid), _column_edges(grid)
        assert headers == ["table", "rows", "dim", "sharding", "kernel", "ranks", "shards", "cache"], headers
        assert len(edges) == len(headers) + 1, (viewport, edges)
        for column in ("kernel", "cache"):
            i = headers.index(column)
            texts = [t for t in _cells(grid, i) if t]
            assert texts, (column, grid.inner_html()[:500])
            room = edges[i + 1] - edges[i]
            for text, drawn in zip(texts, _text_px(page, texts)):
                assert drawn + CELL_PAD_PX <= room, (viewport, column, text, drawn, room)
        assert "fused_uvm_caching" in _cells(grid, headers.index("kernel"))
        assert "0.2 (default)" in _cells(grid, headers.index("cache"))

    page.get_by_text(re.compile(r"^Why each cache is that size \(\d+ tables with a UVM cache\)")).click()
    note = page.get_by_text(re.compile(r"and \d+ more: cache load factor 0\.2 \(the default\); miss rate 80\.0%"))
    note.wait_for()
    box, view = note.bounding_box(), page.viewport_size
    assert box["x"] + box["width"] <= view["width"]  # wrapped within the page, not cut
    page.screenshot(path=str(tmp_path / "plan_cache_notes.png"))


def _pick(page, key: str, labels: list[str]) -> None:
    box = page.locator(f".st-key-{key}")
    box.locator('[aria-label="Clear all"]').first.click()
    idle(page)
    for label in labels:
        box.locator("input").click()
        page.get_by_role("option", name=label, exact=True).click()
        page.keyboard.press("Escape")
        idle(page)


def test_why_a_sweep_point_does_not_fit_is_readable_whole_at_1280(page, tmp_path):
    page.set_viewport_size(VIEWPORTS[1])
    _load_synthetic(page, 1000, max_rows=10_000_000_000)  # too large for 8 or 16 GPUs
    idle(page)
    _goto(page, "What-if")
    page.get_by_role("heading", name="What-if").wait_for()
    idle(page)
    _pick(page, "whatif_devices", ["NVIDIA A100 40GB SXM"])
    _pick(page, "whatif_sizes", ["8", "16"])
    page.get_by_role("button", name="Sweep 2 points").click()
    page.get_by_text(re.compile(r"^0 of 2 points fit")).wait_for()
    idle(page)
    listed = page.locator(".st-key-whatif_refusals")
    listed.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "sweep_refusals_1280.png"))
    text = listed.inner_text()
    assert text.startswith("Why 2 points do not fit"), text
    for gpus in (8, 16):
        line = re.search(rf"NVIDIA A100 40GB SXM, {gpus} GPUs \(\d+ hosts?\), batch \d+ per rank: (.*)", text)
        assert line, text
        reason = line.group(1)  # whole: the sentence and what would help
        assert reason.startswith("The tables do not fit: together they need at least ") and \
            "What would help: " in reason and reason.endswith("(topology.world_size)."), reason
    box = listed.bounding_box()
    assert box["x"] + box["width"] <= VIEWPORTS[1]["width"]  # wrapped within the page
    assert listed.evaluate("(e) => e.scrollWidth <= e.clientWidth + 1")
    frame = _frame(page, "why not")
    assert "The tables do not fit" in _cells(frame, _headers(frame).index("why not"))
    frame.screenshot(path=str(tmp_path / "sweep_frame_1280.png"))
    assert frame.bounding_box()["height"] <= grid_height(2, False) + 2  # two rows, not two and seven empty ones


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=["1440x900", "1280x720"])
def test_an_edit_that_leaves_the_plan_as_it_was_says_it_was_planned(page, viewport, tmp_path):
    """A table's feature name is the config's, not the plan's: the edit is planned and the plan is the same. (A value
    typed over itself never reaches the app: Streamlit's grid drops an edit equal to the cell's value, in the
    browser; the bulk edit's same-value case is tests/dashboard/test_edit_landed.py's.)"""
    page.set_viewport_size(viewport)
    idle(page)
    first = _headline(page)
    shown = re.search(r"Slowest rank ([0-9.,]+ ms)", first).group(1)
    _type_into_cell(page, 0, "features", "another_feature")
    once = _headline_changes(page, first, "Edit planned")
    assert f"Edit planned: same plan, slowest rank {shown} (same)." in once, once
    assert f"Slowest rank {shown}" in once
    page.screenshot(path=str(tmp_path / f"edit_planned_{viewport['width']}.png"))
    _type_into_cell(page, 1, "features", "feature_b")  # again, on another table: this one shows too
    twice = _headline_changes(page, once, "2 edits in a row planned")
    assert f"2 edits in a row planned: same plan, slowest rank {shown} (same)." in twice, twice
    _type_into_cell(page, 0, "dim", "32")  # a change: what changed, as before
    changed = _headline_changes(page, twice, "Since the last plan")
    assert "edits in a row" not in changed and "Edit planned" not in changed, changed
