"""Session-level reads and writes shared by the Store and bundle import; callers own the transaction."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

from db.checks import content_hash, new_token
from db.estimates import PreparedPlan
from db.errors import StoreError
from db.models import ConfigRow, MetricRow, PlanRankRow, PlanRow, RunKind, RunRow, RunStatus, utcnow


def _name_lock_key(name: str) -> int:
    """A signed 64-bit key for PostgreSQL's advisory locks, from the config name."""
    return int.from_bytes(hashlib.sha256(f"config-name:{name}".encode()).digest()[:8], "big", signed=True)


def lock_config_name(s: Session, name: str) -> None:
    """Writers of one config name take turns until their transaction ends. On PostgreSQL two transactions would
    otherwise both read version N and both insert N+1: one is refused by the unique constraint, and with many
    writers the retries run out (16 processes lost 8 of 480 saves). A transaction-scoped advisory lock makes the
    read of the latest version and the insert one step. SQLite needs none: its writers begin IMMEDIATE, one at a
    time."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _name_lock_key(name)})


def ensure_config(s: Session, name: str, config: dict) -> ConfigRow:
    """The version of `name` holding exactly this config, adding version N+1 when none does."""
    digest = content_hash(config)
    lock_config_name(s, name)  # before reading: a writer that waited sees what the one before it added
    row = s.scalar(select(ConfigRow).where(ConfigRow.name == name, ConfigRow.content_hash == digest))
    if row is not None:
        return row
    latest = s.scalar(select(func.max(ConfigRow.version)).where(ConfigRow.name == name)) or 0
    # The unique constraint on (name, version) still stands behind the lock: a writer that races anyway retries.
    row = ConfigRow(name=name, version=latest + 1, content_hash=digest, config=config, created_at=utcnow())
    s.add(row)
    s.flush()
    return row


def plan_by_token(s: Session, token: str) -> PlanRow | None:
    return s.scalar(select(PlanRow).where(PlanRow.token == token))


def require_plan(s: Session, token: str) -> PlanRow:
    row = plan_by_token(s, token)
    if row is None:
        raise StoreError(f"no plan with token {token!r} in this database (see `python -m db list`)")
    return row


def require_run(s: Session, run_id: int) -> RunRow:
    row = s.get(RunRow, run_id)
    if row is None:
        raise StoreError(f"no run with id {run_id} in this database")
    return row


def insert_plan(s: Session, p: PreparedPlan, cfg: ConfigRow, *, token: str | None = None, label: str = "",
                author: str = "", created_at: datetime | None = None) -> PlanRow:
    row = PlanRow(token=token or new_token(), config_id=cfg.id, content_hash=p.content_hash, planner=p.planner,
                  settings=p.settings, plan=p.plan, planning_seconds=p.planning_seconds,
                  max_rank_cost_ms=p.max_rank_cost_ms, num_tables=p.num_tables, world_size=p.world_size,
                  label=label, author=author, created_at=created_at or utcnow())
    s.add(row)
    s.flush()
    s.execute(insert(PlanRankRow), [
        {"plan_id": row.id, "rank": r.rank, "hbm_bytes": r.hbm_bytes, "ddr_bytes": r.ddr_bytes,
         "cost_ms": r.cost_ms} for r in p.ranks])
    return row


def insert_run(s: Session, plan: PlanRow, kind: RunKind, backend: str, device: str, *,
               uid: str | None = None, status: RunStatus = RunStatus.QUEUED, **fields: object) -> RunRow:
    """A run row; `fields` may carry created_at, started_at, ended_at, log, error and device_info."""
    row = RunRow(uid=uid or new_token(), plan_id=plan.id, kind=kind, backend=backend, device=device,
                 status=status, created_at=fields.pop("created_at", None) or utcnow(),
                 log=fields.pop("log", ""), device_info=fields.pop("device_info", None) or {}, **fields)
    s.add(row)
    s.flush()
    return row


def insert_metrics(s: Session, run_id: int, rows: Sequence[dict]) -> None:
    if rows:
        s.execute(insert(MetricRow), [dict(r, run_id=run_id) for r in rows])
