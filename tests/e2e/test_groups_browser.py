"""2D sharding in a real browser on `streamlit run` (1440 x 900): the Topology page takes a sharding group size, says
a bad one with its fix, and the Plan page says the plan is one group's and how many replicas hold it."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import idle, new_page, settled
from tests.waits import until

VIEWPORT = {"width": 1440, "height": 900}
GROUP = "one sharding group: ranks 0-1 of 4, 2 replicas (2D, DMPCollection)"
pytestmark = pytest.mark.timeout(420)


def _set(page, label: str, value: int) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")
    idle(page)


def test_group_size_on_the_topology_page_and_group_and_replicas_on_the_plan_page(browser, app_url, tmp_path):
    page = new_page(browser, VIEWPORT, 120_000)
    page.goto(f"{app_url.rstrip('/')}/topology")  # the page's own address (st.navigation's url path)
    page.get_by_role("heading", name="Topology").wait_for()
    idle(page)
    _set(page, "World size (ranks)", 4)
    _set(page, "Sharding group (ranks, 2D)", 3)
    error = page.get_by_text(re.compile(r"^sharding_group_size 3 does not divide world_size 4"))
    error.wait_for()
    assert "or 0 for one group. Until then the topology keeps 4 ranks in one group." in error.inner_text()
    settled(page)
    page.screenshot(path=str(tmp_path / "1-topology-bad-group.png"))
    _set(page, "Sharding group (ranks, 2D)", 2)
    page.get_by_text("2 replicas of 2 ranks, synced across groups").wait_for()
    assert not page.get_by_text(re.compile(r"^sharding_group_size 3")).is_visible()
    page.get_by_text(re.compile(re.escape(GROUP))).first.wait_for()  # the headline strip under the title
    settled(page)
    page.screenshot(path=str(tmp_path / "2-topology-groups-of-2.png"))
    page.get_by_role("link", name="Plan", exact=True).click()
    page.get_by_role("heading", name="Plan", exact=True).wait_for()
    idle(page)
    page.get_by_text(re.compile(r"The plan is one sharding group: ranks 0-1 of 4, 2 replicas")).wait_for()
    settled(page)
    page.screenshot(path=str(tmp_path / "3-plan-one-group.png"))
    chart_titles = page.locator('[data-testid="stPlotlyChart"] :is(.gtitle, .annotation-text)')
    # settled() holds vacuously before any chart is on the page (seen in a clean-clone CI run): wait for the two
    until(lambda: sum(GROUP in t for t in chart_titles.all_text_contents()) >= 2, "the charts' group titles", 60,
          shows=lambda: str(chart_titles.all_text_contents()))
    titles = chart_titles.all_text_contents()
    assert sum(GROUP in t for t in titles) == 2, titles  # the memory and cost charts' titles
