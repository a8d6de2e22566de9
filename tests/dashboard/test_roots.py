"""The modules that start processes from the checkout (planning workers, TorchRec's planner, measuring runs) run
them in the checkout's root, with it on PYTHONPATH: moving a module into a folder must not move its ROOT."""

from __future__ import annotations

from dashboard.serve import planpool, runner
from dashboard.ui import services
from tests.factories import ROOT


def test_every_process_root_is_the_checkout():
    assert (ROOT / "pyproject.toml").is_file()
    assert planpool.ROOT == runner.ROOT == services.ROOT == ROOT
