"""Tables measured on the device, in Chromium at 1440x900: a CPU config imported, `python -m engine measure-tables`
run on it, a file of another world size refused on the Topology page in one line naming the field, the real file
taken (each table priced as measured, the Plan page says so), then taken off again. Screenshots go to the test's
tmp_path (PLANNER_SCREENSHOTS=DIR: there too)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine.table_costs import FORMAT, VERSION, table_record, topology_record
from tests.e2e.conftest import idle, new_page, settled
from tests.e2e.test_tiers_browser import _import
from tests.factories import ROOT

VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 120_000

pytestmark = pytest.mark.timeout(420)


def _shot(page, tmp_path: Path, name: str) -> None:
    page.screenshot(path=str(tmp_path / name), full_page=True)
    out = os.environ.get("PLANNER_SCREENSHOTS")
    if out:
        page.screenshot(path=str(Path(out) / name), full_page=True)


def _config(world: int = 2) -> dict:
    return {"tables": [{"name": f"t{i}", "num_embeddings": (60_000, 40_000, 3_000, 2_000)[i], "embedding_dim": 32,
                        "feature_names": [f"f{i}"]} for i in range(4)],
            "constraints": {f"t{i}": {"pooling_factors": [8.0]} for i in range(4)},
            "topology": {"world_size": world, "local_world_size": world, "compute_device": "cpu",
                         "batch_size": 64, "optimizer": "sgd"}}


def _other_world(path: Path) -> None:
    cfg = engine.parse_config(_config(world=4))
    path.write_text(json.dumps({"format": FORMAT, "version": VERSION, "topology": topology_record(cfg),
                                "fixed_ms": 0.05, "tables": {t.name: {"ms": 1.0, **table_record(t, cfg.constraint(
                                    t.name))} for t in cfg.tables}}))


def _topology(page) -> None:
    page.get_by_role("link", name="Topology", exact=True).click()
    page.get_by_text("Tables measured on the device").first.wait_for()
    settled(page)


def _on_topology(browser, app_url: str):
    """A new page at 1440x900 with _config() imported, on the Topology page."""
    page = new_page(browser, VIEWPORT, UI_TIMEOUT_MS)
    page.goto(app_url)
    page.locator('[data-testid="stDataFrameResizable"]').first.wait_for()
    settled(page)
    _import(page, json.dumps(_config()))
    _topology(page)
    return page


def _upload(page, path: Path) -> None:
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    idle(page)
    page.get_by_role("button", name="Use these costs").click()
    idle(page)


def test_measured_costs_are_refused_taken_and_taken_off_in_the_browser(app_url, browser, tmp_path):
    cfg_path, costs, bad = tmp_path / "cpu.json", tmp_path / "costs.json", tmp_path / "four ranks.json"
    cfg_path.write_text(json.dumps(_config()))
    subprocess.run([sys.executable, "-m", "engine", "measure-tables", str(cfg_path), "--out", str(costs),
                    "--iters", "2", "--warmup", "0", "--reps", "1"], cwd=ROOT, check=True, capture_output=True)
    _other_world(bad)
    page = _on_topology(browser, app_url)
    _upload(page, bad)
    error = page.get_by_text(re.compile(r"^Cannot use four ranks\.json: topology\.world_size: four ranks\.json was "
                                        r"measured with world_size 4, the config has 2"))
    error.wait_for()
    _shot(page, tmp_path, "costs-1-refused.png")
    _upload(page, costs)
    page.get_by_text(re.compile(r"^In use: 4 of 4 tables priced as measured alone")).wait_for()
    page.get_by_text(re.compile(r"^Measured table costs in use\. ")).first.wait_for()
    _shot(page, tmp_path, "costs-2-in-use.png")
    page.get_by_role("link", name="Plan", exact=True).click()
    page.get_by_text("4 tables priced as measured alone on the device").wait_for()
    settled(page)
    _shot(page, tmp_path, "costs-3-plan.png")
    _topology(page)
    page.get_by_role("button", name="Stop using the measured costs").click()
    page.get_by_text(re.compile(r"^Measured table costs no longer in use")).wait_for()
    assert page.get_by_text(re.compile(r"^In use: 4 of 4")).count() == 0
    _shot(page, tmp_path, "costs-4-off.png")


def test_the_tables_are_measured_from_the_page_in_the_browser(app_url, browser, tmp_path):
    """Measure them here: the job's box while it runs, then the file in use and kept for download."""
    page = _on_topology(browser, app_url)
    page.get_by_role("button", name="Measure them here").click()
    page.get_by_text(re.compile(r"(Measuring 4 tables|The measurement is waiting)")).first.wait_for()
    _shot(page, tmp_path, "measure-1-running.png")
    page.get_by_text(re.compile(r"^In use: 4 of 4 tables priced as measured alone")).wait_for(timeout=300_000)
    page.get_by_text(re.compile(r"^Measured 4 tables on this server's CPU; the costs are in use\.")).first.wait_for()
    page.get_by_role("button", name="Download the measured costs").wait_for()
    assert page.get_by_text(re.compile(r"^The measurement was not used")).count() == 0
    _shot(page, tmp_path, "measure-2-in-use.png")
