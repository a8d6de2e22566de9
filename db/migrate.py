"""Schema upgrades with Alembic, configured in code (script_location is db/migrations; no alembic.ini).

An upgrade runs in one transaction that holds the write lock (SQLite BEGIN IMMEDIATE, a PostgreSQL
advisory lock), so two apps starting at once on a fresh database do not both create the tables.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from db.errors import StoreError
from db.session import SQLITE_BEGIN

SCRIPT_LOCATION = Path(__file__).resolve().parent / "migrations"
UPGRADE_LOCK_KEY = 0x706C616E  # any constant shared by every planner process ("plan")


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.attributes["connection"] = connection
    return cfg


def script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head = script_directory().get_current_head()
    assert head is not None, "db/migrations/versions holds no revision"
    return head


def current_revision(conn: Connection) -> str | None:
    """The database's schema revision; None for a database the planner never touched."""
    return MigrationContext.configure(conn).get_current_revision()


def _check_known(revision: str | None, where: str) -> None:
    if revision is None:
        return
    try:
        known = script_directory().get_revision(revision) is not None
    except CommandError:
        known = False
    if not known:
        raise StoreError(f"the database {where} has schema revision {revision!r}, newer than this planner "
                         f"knows (latest {head_revision()!r}); upgrade the planner to open it")


def upgrade(engine: Engine, where: str, revision: str = "head") -> str | None:
    """Bring the schema to `revision`; returns the revision it started from. A no-op when already there."""
    with engine.connect() as conn:
        start = current_revision(conn)
    _check_known(start, where)
    target = head_revision() if revision == "head" else revision
    if start == target:
        return start  # nothing to write: works on a read-only database too
    with engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": UPGRADE_LOCK_KEY})
        start = current_revision(conn)  # again, under the lock: another process may have upgraded meanwhile
        _check_known(start, where)
        if start != target:
            command.upgrade(alembic_config(conn), revision)
    return start
