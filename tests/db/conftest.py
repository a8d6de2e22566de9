"""Fixtures for the store tests: a real PostgreSQL server started here, fresh databases, sample plans.

Every store test runs on SQLite and on PostgreSQL (the `store` fixture's params). The server is a
throwaway cluster under /tmp (initdb + pg_ctl from Debian's postgresql); TEST_DATABASE_URL names an
existing server instead. Without either, PostgreSQL tests skip locally and FAIL when CI=true.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from db.store import Store
from tests.db.storetest import free_port

BACKENDS = ["sqlite", "postgresql"]


# ---- a throwaway PostgreSQL server --------------------------------------------------------------------


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def _as_postgres(cmd: list[str]) -> list[str]:
    """initdb refuses to run as root: run the server's tools as the postgres user when we are root."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def _start_server(bindir: Path, root: Path) -> int:
    data = root / "data"
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                                 "-E", "UTF8", "--no-sync"]), check=True, capture_output=True)
    for _ in range(3):  # another process may take the free port before the server binds it
        port = free_port()
        opts = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=200")
        r = subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l",
                                         str(root / "server.log"), "-w", "-t", "60", "start"]),
                           capture_output=True, text=True, check=False)
        if r.returncode == 0:
            return port
    raise RuntimeError(f"PostgreSQL did not start: {r.stderr.strip()} (log: {root / 'server.log'})")


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """A URL with rights to create databases: TEST_DATABASE_URL, or a server this fixture starts."""
    if os.environ.get("TEST_DATABASE_URL"):
        yield os.environ["TEST_DATABASE_URL"]
        return
    bindir = _pg_bin()
    if bindir is None:
        msg = "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg + "; CI must run the PostgreSQL tests")
        pytest.skip(msg)
    root = Path(tempfile.mkdtemp(prefix="planner-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = _start_server(bindir, root)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate",
                                     "stop"]), capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


class PgDatabases:
    """Creates fresh databases on the test server and drops them afterwards."""

    def __init__(self, admin_url: str):
        self.admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.created: list[str] = []

    def new(self) -> str:
        name = f"planner_test_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        self.created.append(name)
        return make_url(str(self.admin.url)).set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self.admin.connect() as c:
            for name in self.created:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.admin.dispose()


@dataclass(frozen=True)
class PasswordDatabase:
    """A database whose owner must give its password (scram-sha-256 in pg_hba.conf): url has no password."""

    url: str
    user: str
    password: str


def _hba_allows_only_password(admin, user: str, add: bool) -> None:
    """Put (or take out) the first pg_hba.conf line: `user` logs in over TCP with its password only."""
    with admin.connect() as c:
        hba = Path(c.execute(text("SHOW hba_file")).scalar_one())
        line = f"host all {user} 127.0.0.1/32 scram-sha-256\n"
        body = hba.read_text()
        hba.write_text(line + body if add else body.replace(line, ""))
        assert c.execute(text("SELECT pg_reload_conf()")).scalar_one()


def _refused(url: str) -> bool:
    engine = create_engine(url)
    try:
        with engine.connect():
            return False
    except OperationalError as e:
        return "password authentication failed" in str(e)
    finally:
        engine.dispose()


@pytest.fixture
def pg_password_db(pg_admin_url: str) -> Iterator[PasswordDatabase]:
    """A fresh database owned by a new role with a password, on the test server, which checks that password
    (the server the suite starts trusts every other login). Needs write access to the server's pg_hba.conf."""
    admin = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    suffix = uuid.uuid4().hex[:12]
    user, password, name = f"planner_pw_{suffix}", f"TOPSECRET{suffix}", f"planner_pw_{suffix}"
    with admin.connect() as c:
        hba = Path(c.execute(text("SHOW hba_file")).scalar_one())
        if not os.access(hba, os.W_OK):
            admin.dispose()
            pytest.skip(f"{hba} is not writable here: cannot make the server check a password")
        c.execute(text(f"CREATE ROLE {user} LOGIN PASSWORD '{password}'"))
        c.execute(text(f'CREATE DATABASE "{name}" OWNER {user}'))
    _hba_allows_only_password(admin, user, add=True)
    url = make_url(pg_admin_url).set(username=user, password=None, database=name)
    wrong = url.set(password="not-" + password).render_as_string(hide_password=False)
    for _ in range(100):  # the reload reaches the server's postmaster a moment after pg_reload_conf returns
        if _refused(wrong):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the server kept taking a wrong password after pg_hba.conf asked for the right one")
    try:
        yield PasswordDatabase(url.render_as_string(hide_password=False), user, password)
    finally:
        _hba_allows_only_password(admin, user, add=False)
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            c.execute(text(f"DROP ROLE IF EXISTS {user}"))
        admin.dispose()


@pytest.fixture
def new_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """new_db_url("sqlite" | "postgresql") -> the URL of a fresh, empty database."""
    pg: list[PgDatabases] = []

    def make(kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{tmp_path / f'planner-{uuid.uuid4().hex[:8]}.db'}"
        if not pg:
            pg.append(PgDatabases(request.getfixturevalue("pg_admin_url")))
        return pg[0].new()

    yield make
    for p in pg:
        p.drop_all()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def db_url(backend: str, new_db_url: Callable[[str], str]) -> str:
    """A fresh, empty database (no schema yet) on each backend."""
    return new_db_url(backend)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A Store on a fresh database with the schema in place, on each backend."""
    s = Store(db_url)
    s.upgrade()
    yield s
    s.close()
