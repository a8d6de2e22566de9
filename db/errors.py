"""StoreError, and the one place that turns driver errors into one line a user can act on."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL

from db.urls import scrub, url_for_people
from engine import one_line


class StoreError(Exception):
    """Anything the store cannot do, as one line naming what went wrong and what would help."""


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__


def is_locked(exc: BaseException) -> bool:
    """SQLite's busy/locked errors: worth retrying after busy_timeout gave up."""
    msg = _first_line(exc).lower()
    return isinstance(exc, sa_exc.OperationalError) and ("database is locked" in msg or "database is busy" in msg)


def translate(exc: BaseException, url: URL) -> StoreError:
    """A StoreError for a driver or SQLAlchemy error, naming the database without its password (which is
    scrubbed from the driver's message too)."""
    where = url_for_people(url)
    msg = one_line(scrub(_first_line(exc), url))
    low = msg.lower()
    if "readonly database" in low or "read-only" in low or "read only" in low:
        return StoreError(f"the database {where} is read-only; nothing was changed "
                          "(make the file writable or point DATABASE_URL at a writable database)")
    if "no such table" in low or ("relation" in low and "does not exist" in low):
        return StoreError(f"the database {where} has no planner schema yet; run `python -m db init` first")
    if is_locked(exc):
        return StoreError(f"the database {where} stayed locked by another writer; try again")
    if "unable to open database file" in low:
        return StoreError(f"cannot open the SQLite file {where}: check that the folder exists and is writable")
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)) and url.get_backend_name() != "sqlite":
        return StoreError(f"cannot reach the database at {where}: {msg} "
                          "(is the server running, and is DATABASE_URL right?)")
    if isinstance(exc, sa_exc.IntegrityError):
        return StoreError(f"the database {where} refused the write ({msg}); nothing was changed")
    return StoreError(f"database error on {where}: {msg}")
