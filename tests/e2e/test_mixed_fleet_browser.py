"""A mixed fleet in a real browser at 1440x900: the Topology page's host groups get a device each (a bad name first,
said in one line naming the group, the topology kept as it was), then the Plan page's charts label each rank with
its device. Screenshots of each step land in the test's tmp_path."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import choose, edit_grid_at, idle, new_page, settled

VIEWPORT = {"width": 1440, "height": 900}
EDITOR = '.st-key-topology_host_groups [data-testid="stDataFrameResizable"]'
HOSTS_COL = 1  # the editor's grid columns: 0 its row marker, 1 hosts
HOSTS, HBM, DDR, SSD, DEVICE = 0, 1, 2, 3, 4  # columns right of the hosts column

pytestmark = pytest.mark.timeout(300)


def _edit(page, row: int, col: int, value: str) -> None:
    """Type into the host-group editor's cell (its empty last row takes a new group), then wait for the rerun."""
    edit_grid_at(page, page.locator(EDITOR), HOSTS_COL + col, row, value)
    idle(page)


def _error(page, text: str) -> None:
    shown = page.locator('[data-testid="stAlertContentError"]').filter(has_text=text)
    shown.wait_for()
    shown.scroll_into_view_if_needed()


def test_host_groups_name_their_device_and_the_plan_labels_ranks_with_it(app_url, browser, tmp_path):
    page = new_page(browser, VIEWPORT)
    try:
        page.goto(app_url)
        page.wait_for_selector('[data-testid="stDataFrame"]')
        page.get_by_role("link", name="Topology").click()
        for key, value in (("topology_world_size", "16"), ("topology_hosts", "2")):
            box = page.locator(f".st-key-{key} input")
            box.fill(value)
            box.press("Enter")
            idle(page)
        choose(page, "Hosts differ in memory or device")
        page.locator(EDITOR).wait_for()
        idle(page)

        _edit(page, 0, DEVICE, "a10")  # a device no profile has
        _error(page, "Group 1: unknown device 'a10'; known devices: a100_40gb, a100_80gb, h100_80gb")
        page.screenshot(path=str(tmp_path / "1-bad-device.png"))

        _edit(page, 0, HOSTS, "0")
        _edit(page, 0, DEVICE, "h100_80gb")
        _error(page, "Host 1 (no group) has no device")
        _edit(page, 1, HOSTS, "1")
        _edit(page, 1, DDR, "512")
        _edit(page, 1, DEVICE, "a100_40gb")
        summary = page.get_by_text("hosts 1: 40.00 GiB HBM, 512.00 GiB DDR, a100_40gb")  # blank HBM: the device's
        summary.wait_for()
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        page.get_by_text("each rank priced with its device's published figures").wait_for()
        summary.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "2-topology-devices.png"))

        page.get_by_role("link", name="Plan").click()
        page.get_by_role("button", name="Plan", exact=True).click()  # auto-replan may have planned already
        page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').first.wait_for()
        idle(page)
        settled(page)
        title = page.locator('[data-testid="stPlotlyChart"] .xtitle').filter(has_text="a100_40gb").first
        assert title.text_content() == "rank (0-7 h100_80gb, 8-15 a100_40gb)"
        page.screenshot(path=str(tmp_path / "3-plan-devices.png"))
    finally:
        page.context.close()
