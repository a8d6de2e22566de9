"""A run's ids (dashboard.plans.run_ids): an uploaded sample is checked as the Workload page checks one and stored
under the data directory by its content's hash, under the name it was uploaded with (a file name, never a shell
word or a path); refused uploads (too big, not a sample, a bad cell, too few rows) are one line naming the file
and keep nothing; and which ids a stored run used, as a line. A real dry-run started as the Runs page starts one
on an uploaded sample is recorded with the sample's name. The page itself: tests/dashboard/test_runs_page.py."""

from __future__ import annotations

import pytest

import engine
from dashboard.plans import run_ids
from dashboard.serve import runner
from dashboard.tables import importers
from tests.factories import tutorial

HOSTILE = "$(touch pwned) `id`; rm -rf ~ 'clicks'.parquet"
RUN_WAIT_S = 240


@pytest.fixture
def cfg() -> engine.Config:
    return engine.parse_config(tutorial())


def _parquet(cfg: engine.Config, rows: int = 2048) -> bytes:
    return engine.generated_sample_bytes(cfg, rows, 3, "parquet")


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_sample_is_stored_by_content_under_the_name_it_was_uploaded_with(cfg, tmp_path):
    data = _parquet(cfg)
    path, error = run_ids.store_sample(cfg, data, HOSTILE, tmp_path)
    assert error is None and path.name == HOSTILE and path.read_bytes() == data
    assert path.parent.parent == tmp_path and len(path.parent.name) == run_ids.HASH_CHARS
    again, _ = run_ids.store_sample(cfg, data, HOSTILE, tmp_path)
    assert again == path and _files(tmp_path) == [str(path.relative_to(tmp_path))]  # no temp file left over
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name, stored", [("../../etc/x.csv", "x.csv"), ("C:\\Users\\me\\ids.npz", "ids.npz"),
                                          ("..", "sample.parquet"), ("a" * 300 + ".csv", "sample.csv")])
def test_a_name_never_leaves_the_samples_folder(name, stored):
    assert run_ids.file_name(name, run_ids.suffix_of(name) or "parquet") == stored


def test_refused_uploads_are_one_line_naming_the_file_and_keep_nothing(cfg, tmp_path):
    feature = cfg.tables[0].feature_names[0]
    bad = f"{','.join(f for t in cfg.tables for f in t.feature_names)}\n" + "1,2,3,4\n" * 3 + "x,1,1,1\n"
    cases = {
        "big.parquet": (b"0" * (importers.MAX_SAMPLE_BYTES + 1), "big.parquet is 64.00 MiB: samples up to 64.00 MiB"),
        "ids.txt": (b"1\n", "ids.txt: not a .parquet, .csv or .npz file"),
        "bad.csv": (bad.encode(), f"sample 'bad.csv' feature '{feature}' row 3: holds 'x', not a whole number"),
        "short.parquet": (_parquet(cfg, 10), "short.parquet has 10 rows; one step of this plan takes"),
    }
    for name, (data, start) in cases.items():
        path, error = run_ids.store_sample(cfg, data, name, tmp_path)
        assert path is None and error.startswith(start), (name, error)
        assert "\n" not in error and str(tmp_path) not in error and ".upload-" not in error, error
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_which_ids_a_run_used_as_one_line():
    sample = {"ids": {"source": "sample", "file": "clicks.parquet", "bytes": 3 * 2**20, "rows_used": 4096,
                      "batches": 4, "cycled": True}}
    assert run_ids.ids_text(sample) == "sample clicks.parquet (3.00 MiB, 4,096 rows in 4 batches, cycled)"
    generated = {"ids": {"source": "synthetic", "seed": 0, "distribution": "zipf", "zipf_alpha": 1.1, "batches": 1}}
    assert run_ids.ids_text(generated) == "generated: zipf 1.1 distribution, seed 0, 1 distinct batch"
    assert run_ids.ids_text({}) == run_ids.ids_text(None) == "not recorded"


@pytest.mark.timeout(600)
def test_a_dry_run_on_an_uploaded_sample_is_recorded_with_its_name(cfg, store, tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_DATA_DIR", str(tmp_path))
    path, error = run_ids.store_sample(cfg, _parquet(cfg), HOSTILE)
    assert error is None and path.is_relative_to(tmp_path / run_ids.SAMPLES)
    token = store.save_plan(tutorial(), engine.plan_to_dict(engine.plan(cfg)), label="tutorial")
    run_id = runner.start(store, token, "dryrun", runner.Options(iters=2, extra={"ids": str(path), "backend": "torch"}))
    assert runner.wait(run_id, RUN_WAIT_S)
    rec = store.get_run(run_id)
    assert str(rec.status) == "succeeded", rec.error
    ids = rec.device_info["ids"]
    assert (ids["source"], ids["file"], ids["bytes"]) == ("sample", HOSTILE, path.stat().st_size)
    assert run_ids.ids_text(rec.device_info).startswith(f"sample {HOSTILE} (")
    assert not (tmp_path / "pwned").exists() and not (runner.ROOT / "pwned").exists()
    embedding = {m.rank: m.value for m in store.metrics(run_id) if m.name == "embedding_ms"}
    assert sorted(embedding) == [0, 1] and all(v > 0 for v in embedding.values())


def test_the_sample_is_one_argument_of_either_run_command(tmp_path):
    path = str(tmp_path / "ab" / HOSTILE)
    for kind in runner.KINDS:
        argv = runner.build_argv(kind, tmp_path, "tok", 7, runner.Options(extra={"ids": path}))
        assert argv[argv.index("--ids") + 1] == path and argv.count(path) == 1, kind
