"""The Workload page in a real browser while a large sample is measured in a worker process: the progress box shows
at once, the app stays usable (another page and back) and choosing another file stops the measuring; with 1,000
tables one picked table's and feature's charts are drawn, nothing is wider than the window at 1440x900 or 1280x720,
and bad files (corrupt, foreign columns, empty) are refused in one line. Screenshots go to /tmp/workload-shots/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import engine
from tests.e2e.conftest import idle, new_page, settled
from tests.e2e.test_working_view import _load_synthetic

SHOTS = Path("/tmp/workload-shots")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tutorial.json"
BIG_ROWS = 1_100_000  # about 50 MiB of Parquet for the tutorial's four features
pytestmark = pytest.mark.timeout(900)


def _open_workload(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector('[data-testid="stApp"]')
    idle(page)


def _to_workload(page) -> None:
    page.get_by_role("link", name="Workload").click()
    page.get_by_role("heading", name="Workload").wait_for()
    idle(page)


def _no_wider_than_the_window(page) -> None:
    over = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert over <= 0, f"the page is {over} px wider than the window"


def test_a_large_sample_is_measured_in_the_background_and_another_file_stops_it(browser, app_url, tmp_path):
    SHOTS.mkdir(exist_ok=True)
    cfg = engine.load_config(str(EXAMPLE))
    big = tmp_path / "big.parquet"
    big.write_bytes(engine.generated_sample_bytes(cfg, BIG_ROWS, 5, "parquet"))
    small = tmp_path / "small.parquet"
    small.write_bytes(engine.generated_sample_bytes(cfg, 500, 6, "parquet"))
    page = new_page(browser, {"width": 1440, "height": 900}, 180_000)
    _open_workload(page, app_url)
    _to_workload(page)
    upload = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    upload.set_input_files(str(big))
    idle(page)
    page.get_by_role("button", name="Measure the uploaded sample").click()
    box = page.locator(".st-key-workload_progress")
    # the box's container is attached before its text is drawn (seen under load in CI): wait for the text itself
    box.get_by_text(re.compile(r"big\.parquet \(\d+(\.\d+)? MiB\): .* s so far")).first.wait_for()
    page.screenshot(path=str(SHOTS / "5-measuring.png"))
    page.get_by_role("link", name="Tables & constraints").click()  # the app answers while the worker measures
    page.get_by_role("tab", name=re.compile(r"^Tables \(")).wait_for()
    _to_workload(page)
    box.wait_for()
    upload.set_input_files(str(small))
    page.get_by_text(re.compile(r"^Stopped measuring big\.parquet after \d+ s: another file was chosen")).wait_for()
    idle(page)
    assert box.count() == 0
    page.get_by_role("button", name="Measure the uploaded sample").click()
    page.get_by_text(re.compile(r"^Measured: small\.parquet, 500 rows")).wait_for()


def test_a_thousand_tables_and_bad_files_at_two_window_sizes(browser, app_url, tmp_path):
    SHOTS.mkdir(exist_ok=True)
    page = new_page(browser, {"width": 1440, "height": 900}, 300_000)
    _open_workload(page, app_url)
    _load_synthetic(page, 1000)
    _to_workload(page)
    page.get_by_role("button", name=re.compile(r"^Use a generated example sample")).click()
    page.get_by_text(re.compile(r"^Measured: generated\.parquet")).wait_for()
    page.locator('[data-testid="stPlotlyChart"]').nth(2).wait_for()  # drawn after the caption, in the same run
    idle(page)
    settled(page)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 3  # one table's miss curve, one feature's two
    assert page.get_by_text(re.compile(r"^Table to draw \(1,000, most lookups first")).count() == 1
    for size in ({"width": 1440, "height": 900}, {"width": 1280, "height": 720}):
        page.set_viewport_size(size)
        idle(page)
        settled(page)
        _no_wider_than_the_window(page)
        page.screenshot(path=str(SHOTS / f"6-thousand-{size['width']}.png"))
        page.locator('[data-testid="stPlotlyChart"]').first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"6-thousand-{size['width']}-miss-curve.png"))
        page.locator('[data-testid="stPlotlyChart"]').last.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"6-thousand-{size['width']}-feature.png"))
    upload = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    feature = "feature_000"
    bad = {"corrupt.parquet": (b"PAR1" + bytes(range(256)) * 40 + b"PAR1", "is not a readable Parquet file"),
           "foreign.csv": (b"no_such_feature\n1 2\n3\n", f"has no column for feature '{feature}'"),
           "empty.csv": (b"", "empty.csv is empty (0 bytes)")}
    for name, (data, said) in bad.items():
        path = tmp_path / name
        path.write_bytes(data)
        upload.set_input_files(str(path))
        idle(page)
        page.get_by_role("button", name="Measure the uploaded sample").click()
        alert = page.locator('[data-testid="stAlertContentError"]').filter(has_text=name).first
        alert.wait_for()
        line = alert.inner_text().strip()
        assert said in line and "\n" not in line, line
        _no_wider_than_the_window(page)
        page.screenshot(path=str(SHOTS / f"7-refused-{name}.png"))
