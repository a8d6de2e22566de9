"""The Workload page in a real browser on `streamlit run`: a generated Parquet sample uploaded through the file
input is measured and each table's miss curve drawn (plotly, served by the app); a malformed CSV is refused in one
line naming the feature and row. Screenshots at 1440x900 go to /tmp/workload-shots/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import engine
from tests.e2e.conftest import idle, new_page

VIEWPORT = {"width": 1440, "height": 900}
SHOTS = Path("/tmp/workload-shots")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tutorial.json"
pytestmark = pytest.mark.timeout(420)


def open_workload(browser, app_url):
    """A 1440x900 page on the app's Workload page, its reruns ended."""
    page = new_page(browser, VIEWPORT, 120_000)
    page.goto(app_url)
    page.wait_for_selector('[data-testid="stApp"]')
    idle(page)
    page.get_by_role("link", name="Workload").click()
    page.get_by_role("heading", name="Workload").wait_for()
    idle(page)
    return page


def test_upload_draws_miss_curves_and_refuses_a_bad_file(browser, app_url, tmp_path) -> None:
    SHOTS.mkdir(exist_ok=True)
    cfg = engine.load_config(str(EXAMPLE))
    good = tmp_path / "ids.parquet"
    good.write_bytes(engine.generated_sample_bytes(cfg, 2000, 3, "parquet"))
    page = open_workload(browser, app_url)
    page.screenshot(path=str(SHOTS / "1-empty.png"))
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(good))
    idle(page)
    page.get_by_role("button", name="Measure the uploaded sample").click()
    page.get_by_text(re.compile(r"^Measured: ids\.parquet")).wait_for()
    idle(page)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    charts.first.locator(".scatterlayer .trace").first.wait_for()
    text = page.locator('[data-testid="stMain"]').inner_text()
    for t in cfg.tables:
        assert f"{t.name}: LRU miss ratio by cache size" in text
    assert charts.count() >= len(cfg.tables)
    page.screenshot(path=str(SHOTS / "2-measured.png"))
    page.get_by_role("button", name="Apply to tables").click()
    page.get_by_text(re.compile(r"^Applied:")).wait_for()
    idle(page)
    page.screenshot(path=str(SHOTS / "3-applied.png"), full_page=True)

    bad = tmp_path / "bad.csv"
    feature = cfg.tables[0].feature_names[0]
    bad.write_text(f"{feature}\n1 2\nx\n")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(bad))
    idle(page)
    page.get_by_role("button", name="Measure the uploaded sample").click()
    alert = page.locator('[data-testid="stAlertContentError"]').first
    alert.wait_for()
    line = alert.inner_text()
    assert "bad.csv" in line and "\n" not in line.strip()
    page.screenshot(path=str(SHOTS / "4-refused.png"))
