"""Reliability: concurrent writer processes lose nothing; read-only files and dead servers fail cleanly."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import func, select

from db.models import ConfigRow, RunRow, RunStatus
from db.store import Store, StoreError
from tests.db.storetest import REPO, cli_env, counts, free_port, run_cli, sample

WRITER = Path(__file__).with_name("concurrent_writer.py")
SAVES_PER_WRITER = 20


def test_two_writer_processes_lose_nothing(store: Store, db_url: str) -> None:
    shared = store.create_run(store.save_plan(*sample(), label="shared"), "validation", "gloo", "cpu")
    start_at = time.time() + 2.0
    procs = {w: subprocess.Popen([sys.executable, str(WRITER), db_url, w, str(SAVES_PER_WRITER), str(shared),
                                  str(start_at)], cwd=REPO, env=cli_env(db_url), stderr=subprocess.PIPE, text=True)
             for w in ("a", "b")}
    for w, p in procs.items():
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, f"writer {w} failed: {err}"

    labels = {p.label for p in store.list_plans(limit=1000)}
    expected = {f"{w}-{i}" for w in "ab" for i in range(SAVES_PER_WRITER)}
    assert expected <= labels and len(labels) == 2 * SAVES_PER_WRITER + 1
    n = 2 * SAVES_PER_WRITER
    c = counts(store)
    assert (c["plans"], c["runs"], c["plan_ranks"]) == (n + 1, n + 1, 2 * (n + 1))
    assert c["metrics"] == 2 * n + n  # two per run, plus one progress row per save on the shared run
    log = store.get_run(shared).log  # every concurrent append landed
    assert sorted(log.splitlines()) == sorted(expected)
    with store.engine.connect() as conn:
        versions = conn.execute(select(ConfigRow.version).where(ConfigRow.name == "edited")).scalars().all()
        assert sorted(versions) == list(range(1, n + 1))  # one version each, no gap, no duplicate
        assert conn.execute(select(func.count()).select_from(ConfigRow).where(ConfigRow.name == "shared")
                            ).scalar_one() == 1
        done = select(func.count()).select_from(RunRow).where(RunRow.status == RunStatus.SUCCEEDED)
        assert conn.execute(done).scalar_one() == n


VERSION_WRITER = Path(__file__).with_name("version_writer.py")
RACING_WRITERS, SAVES_EACH = 16, 30


@pytest.mark.parametrize("round_", [1, 2])
def test_sixteen_processes_saving_new_versions_of_one_name_lose_nothing(store: Store, db_url: str,
                                                                         round_: int) -> None:
    """Issue 14's race: N processes each save K plans of their own configs under one config name at once. Every
    save lands, versions run 1..N*K with no gap and no duplicate, and each version holds the config saved with
    it; one content saved by all N is one version."""
    name = f"race-{round_}"
    start_at = time.time() + 8.0  # the writers import, plan and connect first
    procs = [subprocess.Popen([sys.executable, str(VERSION_WRITER), db_url, str(w), str(SAVES_EACH), name,
                               str(start_at)], cwd=REPO, env=cli_env(db_url), stderr=subprocess.PIPE, text=True)
             for w in range(RACING_WRITERS)]
    failed = []
    for w, p in enumerate(procs):
        _, err = p.communicate(timeout=300)
        if p.returncode != 0:
            failed.append(f"writer {w}: {err.strip().splitlines()[-1:]}")
    assert not failed, failed
    n = RACING_WRITERS * SAVES_EACH
    plans = [p for p in store.list_plans(limit=1000) if p.label.count("-") == 1]
    assert sorted(p.label for p in plans) == sorted(f"{w}-{i}" for w in range(RACING_WRITERS)
                                                    for i in range(SAVES_EACH))
    assert counts(store)["plans"] == n
    versions = store.config_versions(name)
    assert [v.version for v in versions] == list(range(1, n + 1))
    with store.engine.connect() as conn:
        sizes = conn.execute(select(ConfigRow.config).where(ConfigRow.name == name)).scalars().all()
    assert sorted(c["topology"]["batch_size"] for c in sizes) == sorted(
        1000 + w * 100 + i for w in range(RACING_WRITERS) for i in range(SAVES_EACH))
    assert [v.version for v in store.config_versions(f"{name}-same")] == [1]


def test_threads_sharing_one_store(store: Store) -> None:
    """The dashboard shares one Store between its sessions' threads."""
    cfg, plan = sample()

    def work(i: int) -> str:
        token = store.save_plan(cfg, plan, label=f"thread {i}")
        store.add_metrics(store.create_run(token, "dryrun", "fbgemm", "cpu"), [(0, "step_ms", float(i), "ms")])
        assert store.get_plan(token) is not None
        return token

    with ThreadPoolExecutor(max_workers=6) as pool:
        tokens = list(pool.map(work, range(24)))
    assert {p.token for p in store.list_plans()} == set(tokens)
    assert counts(store)["metrics"] == 24


def test_processes_initialising_one_fresh_database_at_once(db_url: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-m", "db", "init"], cwd=REPO, env=cli_env(db_url),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert sum("upgraded from empty" in out for out, _ in outs) == 1
    store = Store(db_url)
    assert store.list_plans() == []
    store.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_only_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "planner.db"
    url = f"sqlite:///{path}"
    writable = Store(url)
    writable.upgrade()
    token = writable.save_plan(*sample(), label="kept")
    writable.close()
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    before = _sha(path)

    store = Store(url)
    store.upgrade()  # already at head: opening for reading works
    assert [p.token for p in store.list_plans()] == [token]
    assert store.export_bundle(token)["label"] == "kept"
    for write in (lambda: store.save_plan(*sample()), lambda: store.create_run(token, "dryrun", "gloo", "cpu"),
                  lambda: store.save_config(sample()[0], "x")):
        with pytest.raises(StoreError, match="is read-only; nothing was changed"):
            write()
    r = run_cli(url, "save", "--config", str(REPO / "examples" / "tutorial.json"), "--plan",
                str(_plan_file(tmp_path)))
    assert r.returncode == 2 and "read-only" in r.stderr and "Traceback" not in r.stderr
    store.close()
    assert _sha(path) == before


def _plan_file(tmp_path: Path) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(sample()[1]))
    return p


def test_unreachable_postgresql_is_a_clear_error() -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/planner"  # nothing listens there
    store = Store(url)
    for call in (store.upgrade, store.list_plans, lambda: store.save_plan(*sample())):
        with pytest.raises(StoreError, match=r"cannot reach the database at postgresql\+psycopg://postgres@") as e:
            call()
        assert "\n" not in str(e.value)
    r = run_cli(url, "list")
    assert r.returncode == 2 and r.stderr.startswith("error: cannot reach the database")
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_password_never_shown() -> None:
    url = f"postgresql+psycopg://planner:s3cret-pw@127.0.0.1:{free_port()}/planner"
    with pytest.raises(StoreError) as e:
        Store(url).list_plans()
    assert "s3cret-pw" not in str(e.value)
    with pytest.raises(StoreError, match="is not a database URL") as e:
        Store("pg:/planner:s3cret-pw@host:port:x/db")
    assert "s3cret-pw" not in str(e.value)


def test_data_dir_that_cannot_be_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("PLANNER_DATA_DIR", str(blocker / "data"))
    with pytest.raises(StoreError, match="cannot create the data folder"):
        Store()
    assert os.listdir(tmp_path) == ["a-file"]
