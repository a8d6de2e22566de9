"""Engine creation: DATABASE_URL, else a SQLite file in PLANNER_DATA_DIR (default ./data).

SQLite connections get WAL, foreign keys and a busy timeout; a file without write permission is opened
read-only (even by root), so writes fail cleanly instead of changing a file its owner protected.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Engine, create_engine, make_url

from db.errors import StoreError
from db.urls import NOT_SHOWN, scrub, url_for_people
from engine import one_line

DATABASE_URL_ENV = "DATABASE_URL"
DATA_DIR_ENV = "PLANNER_DATA_DIR"
DEFAULT_DATA_DIR = "data"
SQLITE_FILE = "planner.db"
SQLITE_BUSY_TIMEOUT_MS = 15_000
CONNECT_TIMEOUT_S = 3  # an unreachable server fails fast instead of hanging the app
# Execution option naming how a SQLite transaction begins: IMMEDIATE takes the write lock up front, so two
# writers queue on busy_timeout instead of failing on a read-to-write lock upgrade.
SQLITE_BEGIN = "sqlite_begin"
# Query keys the pysqlite driver takes; without uri=true it drops any other (mode=ro) with a warning.
SQLITE_DRIVER_KEYS = ("uri", "timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements")
URL_EXAMPLES = "examples: sqlite:///data/planner.db, postgresql+psycopg://user@host:5432/db"


def parse_url(text: str) -> URL:
    """DATABASE_URL's text as a URL; raises StoreError naming what is wrong, never echoing a password."""
    shown = url_for_people(text)
    try:
        return make_url(text)
    except sa_exc.ArgumentError:
        problem = "" if shown == NOT_SHOWN else f": {shown}"
    except ValueError:  # SQLAlchemy's int() of the port: h:abc, or [::1 without its ]
        problem = (f": the port in {shown} is not a number, or an IPv6 host lacks its closing ] "
                   "(postgresql+psycopg://user@[::1]:5432/db)")
    raise StoreError(f"{DATABASE_URL_ENV} is not a database URL{problem} ({URL_EXAMPLES})")


def resolve_url(url: str | None = None) -> URL:
    """The URL given, else DATABASE_URL, else sqlite:///<PLANNER_DATA_DIR or ./data>/planner.db."""
    text = url or os.environ.get(DATABASE_URL_ENV, "").strip()
    if not text:
        data_dir = Path(os.environ.get(DATA_DIR_ENV, "").strip() or DEFAULT_DATA_DIR)
        return URL.create("sqlite", database=str((data_dir / SQLITE_FILE).absolute()))
    parsed = parse_url(text)
    if parsed.drivername == "postgresql" or parsed.drivername == "postgres":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3 is the driver we ship
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file behind a plain SQLite URL; None for other backends, in-memory and `uri=true` databases."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:") or url.query.get("uri"):
        return None
    return Path(url.database)


def is_read_only(url: URL) -> bool:
    """True for a SQLite file that exists without write permission (we open it read-only)."""
    path = sqlite_path(url)
    return path is not None and _read_only(path)


def _read_only(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:  # missing (it will be created) or not reachable (mkdir reports that)
        return False
    return not (mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) or not os.access(path, os.W_OK)


def _check_sqlite_url(url: URL) -> None:
    """A SQLite URL names a file only: no user, host or port (they would be dropped and the path opened here),
    and SQLite's own URI arguments (mode=ro) only with uri=true (the driver drops them with a warning)."""
    if url.username or url.password or url.host or url.port:
        raise StoreError(f"{DATABASE_URL_ENV}: {url_for_people(url)}: a SQLite URL names a file on this machine, "
                         "with no user, password, host or port (sqlite:///relative/path.db, "
                         "sqlite:////absolute/path.db)")
    ignored = sorted(set(url.query) - set(SQLITE_DRIVER_KEYS))
    if ignored and not url.query.get("uri"):
        raise StoreError(f"{DATABASE_URL_ENV}: {url_for_people(url)}: SQLite takes ?{'&'.join(ignored)} only with "
                         "uri=true (sqlite:///file:data/planner.db?mode=ro&uri=true); a file without write "
                         "permission is opened read-only without it")


def _sqlite_engine(url: URL, path: Path | None) -> Engine:
    _check_sqlite_url(url)
    connect_args: dict[str, Any] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    read_only = path is not None and _read_only(path)
    if path is not None:
        if not read_only:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the data folder {str(path.parent)!r}: {e.strerror or e} "
                                 f"(set {DATA_DIR_ENV} or {DATABASE_URL_ENV})") from None
        mode = "ro" if read_only else "rwc"
        # The URI form is the only way to ask SQLite for a read-only connection.
        uri = f"file:{quote(path.as_posix())}?mode={mode}"
        url = URL.create(url.drivername, database=uri, query={"uri": "true"})
    engine = create_engine(url, connect_args=connect_args)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves, below
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys = ON")
        if not read_only and path is not None:
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; a crash loses no committed data
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def make_engine(url: URL) -> Engine:
    """An Engine for a resolved URL; raises StoreError for a URL whose driver is missing."""
    try:
        if url.get_backend_name() == "sqlite":
            return _sqlite_engine(url, sqlite_path(url))
        connect_args: dict[str, Any] = {}
        if url.get_backend_name() == "postgresql":
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        return create_engine(url, connect_args=connect_args, pool_pre_ping=True)
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, ImportError) as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise StoreError(f"{DATABASE_URL_ENV}: cannot use {url_for_people(url)}: {one_line(scrub(why, url))}") \
            from None
