"""--results names a file a run can write: a bad one is said before anything runs or is recorded, and a results
file that cannot be written after the run records the run failed, never succeeded."""

from __future__ import annotations

from pathlib import Path

import pytest

from db.models import RunKind
from db.runsink import DbSink
from db.store import Store
from engine.config import load_config
from engine.errors import EngineError
from engine.pricing import priced_for
from engine.types import Device
from engine.validate.command import PricedSink
from engine.validate.types import Backend, LauncherKind, RunStatus, ValidationResult
from tests.db.storetest import sample
from tests.validate.conftest import FAST, run_db_cli


@pytest.mark.parametrize("results, says", [
    ("{tmp}", "--results '{tmp}': that is a directory; give a file in it, e.g. '{tmp}/results.json'"),
    ("{tmp}/missing/r.json", "--results '{tmp}/missing/r.json': the folder '{tmp}/missing' does not exist"),
])
def test_a_results_path_no_run_can_write_is_refused_before_the_run(results: str, says: str, tmp_path: Path,
                                                                   plan_files) -> None:
    config, plan = plan_files["table_wise"]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    r = run_db_cli(url, "validate", str(config), "--plan", str(plan), *FAST, "--results",
                   results.format(tmp=tmp_path))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {says.format(tmp=tmp_path)}"), r.stderr
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    store = Store(url)
    store.upgrade()
    assert store.list_plans() == []  # no plan stored, no run recorded


def test_a_results_file_that_cannot_be_written_is_never_recorded_succeeded(tmp_path: Path, plan_files) -> None:
    config, _ = plan_files["table_wise"]
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    store.upgrade()
    cfg = load_config(config)
    token = store.save_plan(*sample("tutorial_table_wise"), config_name="tutorial_table_wise")
    run_id = store.create_run(token, RunKind.VALIDATION.value, "gloo", "cpu")
    sink = PricedSink(DbSink(store, run_id, token), priced_for(cfg, Device.CPU, "validation run"),
                      tmp_path)  # a directory: the file cannot be written there
    result = ValidationResult(RunStatus.SUCCEEDED, (), Backend.GLOO, Device.CPU, 4, 1, 2, LauncherKind.LOCAL)
    with pytest.raises(EngineError, match=f"cannot write the results file {str(tmp_path)!r}"):
        sink.finish(result)
    assert store.get_run(run_id).status.value == "queued"  # nothing recorded; the command records it failed
