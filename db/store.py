"""The Store: the one class that owns database access. Every write goes through Store._write.

Writes run in one transaction each, retried when SQLite stays locked or a concurrent writer took the
same config version; every failure reaches the caller as a one-line StoreError with nothing changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select, update
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session, sessionmaker

from db import bundle as bundles
from db import migrate
from db.checks import (
    check_enum,
    check_int,
    check_json_object,
    check_labels,
    check_metrics,
    check_str,
    check_token,
    is_token,
    normalize_config,
)
from db.errors import StoreError, is_locked, translate
from db.estimates import prepare_plan
from db.models import NAME_LEN, SHORT_LEN, ConfigRow, MetricRow, PlanRow, RunKind, RunRow, RunStatus, utcnow
from db.records import ConfigVersion, MetricRecord, PlanRecord, PlanSummary, RunRecord
from db.session import SQLITE_BEGIN, make_engine, resolve_url
from db.urls import url_for_people
from db.writes import ensure_config, insert_metrics, insert_plan, insert_run, require_plan, require_run

__all__ = ["ConfigVersion", "MetricRecord", "PlanRecord", "PlanSummary", "RunRecord", "Store", "StoreError"]

T = TypeVar("T")
WRITE_ATTEMPTS = 6
RETRY_BASE_S = 0.05
MAX_LIST_LIMIT = 10_000
MAX_ID = 2**31 - 1  # ids are INTEGER columns: 32 bits on PostgreSQL


class Store:
    """Configs, plans, runs and metrics in the database `url` names (None: DATABASE_URL or the SQLite file)."""

    def __init__(self, url: str | None = None):
        self.url: URL = resolve_url(url)
        self.where = url_for_people(self.url)  # what pages, logs and errors show
        self.engine = make_engine(self.url)
        self._read_session = sessionmaker(self.engine, expire_on_commit=False)
        self._write_session = sessionmaker(self.engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}),
                                           expire_on_commit=False)

    def __repr__(self) -> str:
        return f"Store({self.where!r})"

    def close(self) -> None:
        """Close pooled connections (a Store can still be used afterwards; it reconnects)."""
        self.engine.dispose()

    # ---- plumbing -----------------------------------------------------------------------------------

    def _read(self, fn: Callable[[Session], T]) -> T:
        try:
            with self._read_session() as s:
                return fn(s)
        except sa_exc.SQLAlchemyError as e:
            raise translate(e, self.url) from None

    def _write(self, fn: Callable[[Session], T]) -> T:
        """Run fn in one write transaction; retry on lock timeouts and on races for a unique value."""
        for attempt in range(WRITE_ATTEMPTS):
            last = attempt == WRITE_ATTEMPTS - 1
            try:
                with self._write_session.begin() as s:
                    return fn(s)
            except sa_exc.IntegrityError as e:
                if last:
                    raise translate(e, self.url) from None
            except sa_exc.OperationalError as e:
                if last or not is_locked(e):
                    raise translate(e, self.url) from None
            except sa_exc.SQLAlchemyError as e:
                raise translate(e, self.url) from None
            time.sleep(RETRY_BASE_S * (2 ** min(attempt, 4)))
        raise AssertionError("unreachable")

    def upgrade(self, revision: str = "head") -> str | None:
        """Bring the schema up to date (idempotent; the app calls it on start). Returns the old revision."""
        try:
            return migrate.upgrade(self.engine, self.where, revision)
        except sa_exc.SQLAlchemyError as e:
            raise translate(e, self.url) from None

    def schema_revision(self) -> str | None:
        return self._read(lambda s: migrate.current_revision(s.connection()))

    # ---- configs and plans --------------------------------------------------------------------------

    def save_config(self, config: dict, name: str = "untitled") -> ConfigVersion:
        """Store a config under `name`: identical content returns its version, changed content adds one."""
        name = check_str(name, "name", NAME_LEN, empty_ok=False)
        norm = normalize_config(config)
        return self._write(lambda s: ConfigVersion.of(ensure_config(s, name, norm)))

    def config_versions(self, name: str) -> list[ConfigVersion]:
        q = select(ConfigRow).where(ConfigRow.name == name).order_by(ConfigRow.version)
        return self._read(lambda s: [ConfigVersion.of(r) for r in s.scalars(q)])

    def save_plan(self, config: dict, plan: dict, *, label: str = "", author: str = "",
                  config_name: str = "untitled", settings: dict | None = None, recompute: bool = False) -> str:
        """Store a plan (checked against its config) and return its share token. Estimates that differ from
        engine.evaluate's are refused, or with recompute=True replaced by the recomputed ones."""
        label, author, config_name = check_labels(label, author, config_name)
        p = prepare_plan(config, plan, settings, recompute=recompute)

        def write(s: Session) -> str:
            cfg = ensure_config(s, config_name, p.config)
            return insert_plan(s, p, cfg, label=label, author=author).token

        return self._write(write)

    def get_plan(self, token: str) -> PlanRecord | None:
        """The plan with this share token; None when there is none (a malformed token included)."""
        check_str(token, "token", max_len=1 << 16)
        if not is_token(token):
            return None
        q = select(PlanRow).where(PlanRow.token == token)

        def read(s: Session) -> PlanRecord | None:
            row = s.scalar(q)
            return PlanRecord.of(row) if row is not None else None

        return self._read(read)

    def list_plans(self, limit: int = 200) -> list[PlanSummary]:
        """Saved plans, newest first: one SELECT of the summary columns (no plan or config JSON is read), so
        the dashboard can list them on every page run; get_plan(token) reads one plan in full."""
        limit = min(check_int(limit, "limit", 1), MAX_LIST_LIMIT)
        q = PlanSummary.query().order_by(PlanRow.created_at.desc(), PlanRow.id.desc()).limit(limit)
        return self._read(lambda s: [PlanSummary(*r) for r in s.execute(q)])

    # ---- runs and metrics ---------------------------------------------------------------------------

    def create_run(self, token: str, kind: str, backend: str, device: str) -> int:
        check_token(token)
        k = check_enum(kind, "kind", RunKind)
        backend = check_str(backend, "backend", SHORT_LEN)
        device = check_str(device, "device", SHORT_LEN)
        return self._write(lambda s: insert_run(s, require_plan(s, token), k, backend, device).id)

    def update_run(self, run_id: int, *, status: str | None = None, log_append: str | None = None,
                   error: str | None = None, device_info: dict | None = None) -> None:
        """Change a run; log_append is added to the log in the database, so concurrent appends all land."""
        check_int(run_id, "run_id", 1, MAX_ID)
        values: dict[str, Any] = {}
        if status is not None:
            st = check_enum(status, "status", RunStatus)
            now = utcnow()
            values["status"] = st
            if st is not RunStatus.QUEUED:
                values["started_at"] = func.coalesce(RunRow.started_at, now)
            values["ended_at"] = now if st.finished else None
        if log_append:
            values["log"] = RunRow.log + check_str(log_append, "log_append", max_len=1 << 30)
        if error is not None:
            values["error"] = check_str(error, "error", max_len=1 << 30)
        if device_info is not None:
            values["device_info"] = check_json_object(device_info, "device_info")

        def write(s: Session) -> None:
            require_run(s, run_id)
            if values:
                s.execute(update(RunRow).where(RunRow.id == run_id).values(**values)
                          .execution_options(synchronize_session=False))

        self._write(write)

    def add_metrics(self, run_id: int, metrics: Iterable[tuple[int, str, float, str]]) -> None:
        check_int(run_id, "run_id", 1, MAX_ID)
        rows = check_metrics(list(metrics) if not isinstance(metrics, (str, bytes, dict)) else metrics)

        def write(s: Session) -> None:
            require_run(s, run_id)
            insert_metrics(s, run_id, rows)

        self._write(write)

    def runs_for_plan(self, token: str) -> list[RunRecord]:
        check_token(token)

        def read(s: Session) -> list[RunRecord]:
            plan = require_plan(s, token)
            q = select(RunRow).where(RunRow.plan_id == plan.id).order_by(RunRow.created_at, RunRow.id)
            return [RunRecord.of(r, token) for r in s.scalars(q)]

        return self._read(read)

    def get_run(self, run_id: int) -> RunRecord | None:
        check_int(run_id, "run_id", 0, MAX_ID)
        q = select(RunRow, PlanRow.token).join(PlanRow, PlanRow.id == RunRow.plan_id).where(RunRow.id == run_id)

        def read(s: Session) -> RunRecord | None:
            row = s.execute(q).first()
            return RunRecord.of(row[0], row[1]) if row is not None else None

        return self._read(read)

    def metrics(self, run_id: int) -> list[MetricRecord]:
        """A run's metrics in the order they were added."""
        check_int(run_id, "run_id", 1, MAX_ID)

        def read(s: Session) -> list[MetricRecord]:
            require_run(s, run_id)
            q = select(MetricRow).where(MetricRow.run_id == run_id).order_by(MetricRow.id)
            return [MetricRecord.of(m) for m in s.scalars(q)]

        return self._read(read)

    # ---- comparison and sharing ---------------------------------------------------------------------

    def export_bundle(self, token: str) -> dict:
        check_token(token)
        return self._read(lambda s: bundles.export_bundle(s, token))

    def import_bundle(self, bundle: dict, *, recompute: bool = False) -> str:
        """Store a bundle from another database; importing the same bundle again returns the same token.
        Estimates that differ from engine.evaluate's are refused, or with recompute=True replaced."""
        checked = bundles.check_bundle(bundle, recompute)  # a bad bundle fails before any write transaction opens
        return self._write(lambda s: bundles.import_checked(s, checked))
