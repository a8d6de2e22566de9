"""SQLAlchemy 2 models: versioned configs, plans with per-rank estimates, runs and their measured metrics.

Every change to this file needs an Alembic revision in db/migrations/versions (a test compares the two).
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from engine import RunStatus  # the one definition; re-exported for the store's modules

NAME_LEN = 200
LABEL_LEN = 500
TOKEN_LEN = 64
HASH_LEN = 64  # sha256 hex
SHORT_LEN = 100

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class RunKind(enum.StrEnum):
    DRYRUN = "dryrun"          # kernels measured on one process
    VALIDATION = "validation"  # the sharded model run on real ranks


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """Aware UTC datetimes on every backend (SQLite drops the zone; we put it back on reading)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _enum(cls: type[enum.Enum], name: str) -> Enum:
    # VARCHAR + CHECK on every backend: no PostgreSQL ENUM type to migrate when a member is added.
    return Enum(cls, name=name, native_enum=False, create_constraint=True, length=20,
                values_callable=lambda e: [m.value for m in e], validate_strings=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class ConfigRow(Base):
    """One version of a named config; editing a config adds a version, nothing is overwritten."""

    __tablename__ = "configs"
    __table_args__ = (
        UniqueConstraint("name", "version"),
        UniqueConstraint("name", "content_hash"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    version: Mapped[int] = mapped_column(Integer)
    content_hash: Mapped[str] = mapped_column(String(HASH_LEN))
    config: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PlanRow(Base):
    """A saved plan: the config version it was made for, who made it and how, and the plan file JSON."""

    __tablename__ = "plans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[str] = mapped_column(String(TOKEN_LEN), unique=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("configs.id", ondelete="RESTRICT"), index=True)
    content_hash: Mapped[str] = mapped_column(String(HASH_LEN))
    planner: Mapped[str] = mapped_column(String(SHORT_LEN))
    settings: Mapped[dict] = mapped_column(JSON)
    plan: Mapped[dict] = mapped_column(JSON)
    planning_seconds: Mapped[float] = mapped_column(Float)
    max_rank_cost_ms: Mapped[float] = mapped_column(Float)
    num_tables: Mapped[int] = mapped_column(Integer)
    world_size: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(LABEL_LEN), default="")
    author: Mapped[str] = mapped_column(String(NAME_LEN), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)

    config_row: Mapped[ConfigRow] = relationship(lazy="joined")


class PlanRankRow(Base):
    """The estimate for one rank of a plan, copied out of the plan JSON so comparisons can query it."""

    __tablename__ = "plan_ranks"

    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    hbm_bytes: Mapped[int] = mapped_column(BigInteger)
    ddr_bytes: Mapped[int] = mapped_column(BigInteger)
    cost_ms: Mapped[float] = mapped_column(Float)


class RunRow(Base):
    """A measurement of a plan: a kernel dry-run or a validation run, with its log and outcome."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uid: Mapped[str] = mapped_column(String(TOKEN_LEN), unique=True)  # stable across export/import
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    kind: Mapped[RunKind] = mapped_column(_enum(RunKind, "run_kind"))
    backend: Mapped[str] = mapped_column(String(SHORT_LEN))
    device: Mapped[str] = mapped_column(String(SHORT_LEN))
    status: Mapped[RunStatus] = mapped_column(_enum(RunStatus, "run_status"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    log: Mapped[str] = mapped_column(Text, default="")
    error: Mapped[str | None] = mapped_column(Text)
    device_info: Mapped[dict] = mapped_column(JSON)


class MetricRow(Base):
    """One measured number of a run on one rank, with its unit."""

    __tablename__ = "metrics"
    __table_args__ = (Index("ix_metrics_run_id_rank", "run_id", "rank"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    rank: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(SHORT_LEN))
