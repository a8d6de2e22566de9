"""The Workload page in a real browser while a larger sample is measured: the progress line the worker reports
(rows read, counted) is shown beside Cancel, then the figures. Screenshot at 1440x900 in /tmp/workload-shots/."""

from __future__ import annotations

import re

import pytest

import engine
from tests.e2e.conftest import idle
from tests.e2e.test_workload_browser import EXAMPLE, SHOTS, open_workload

ROWS = 300_000  # five chunks of 65,536 rows per pass: several seconds of measuring
pytestmark = pytest.mark.timeout(420)


def test_the_measuring_shows_the_share_of_rows_read(browser, app_url, tmp_path) -> None:
    SHOTS.mkdir(exist_ok=True)
    cfg = engine.load_config(str(EXAMPLE))
    sample = tmp_path / "big.parquet"
    sample.write_bytes(engine.generated_sample_bytes(cfg, ROWS, 5, "parquet"))
    page = open_workload(browser, app_url)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(sample))
    idle(page)
    page.get_by_role("button", name="Measure the uploaded sample").click()
    line = page.get_by_text(re.compile(rf"pass [12] of 2\): \d+% of {ROWS:,} rows read \([\d,]+ ids so far\)"))
    line.first.wait_for()
    text = line.first.inner_text()
    share = int(re.search(r"(\d+)% of", text).group(1))
    assert 0 <= share <= 100 and "big.parquet" in text
    page.screenshot(path=str(SHOTS / "5-progress.png"))
    page.get_by_text(re.compile(r"^Measured: big\.parquet")).wait_for()
