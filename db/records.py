"""What the store hands out: frozen records built from rows, never live ORM objects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, select

from db.models import ConfigRow, MetricRow, PlanRow, RunKind, RunRow, RunStatus


@dataclass(frozen=True)
class ConfigVersion:
    id: int
    name: str
    version: int
    config: dict
    created_at: datetime

    @classmethod
    def of(cls, row: ConfigRow) -> ConfigVersion:
        return cls(row.id, row.name, row.version, row.config, row.created_at)


@dataclass(frozen=True)
class PlanSummary:
    token: str
    label: str
    author: str
    created_at: datetime
    planner: str
    config_name: str
    config_version: int
    num_tables: int
    world_size: int
    max_rank_cost_ms: float

    @classmethod
    def of(cls, row: PlanRow) -> PlanSummary:
        c = row.config_row
        return cls(row.token, row.label, row.author, row.created_at, row.planner, c.name, c.version,
                   row.num_tables, row.world_size, row.max_rank_cost_ms)

    @staticmethod
    def query() -> Select:
        """The summaries' columns alone, in the fields' order, the config's name and version joined in: one
        query, no plan or config JSON read (the figures are columns of `plans`, filled on save)."""
        return (select(PlanRow.token, PlanRow.label, PlanRow.author, PlanRow.created_at, PlanRow.planner,
                       ConfigRow.name, ConfigRow.version, PlanRow.num_tables, PlanRow.world_size,
                       PlanRow.max_rank_cost_ms)
                .join(ConfigRow, ConfigRow.id == PlanRow.config_id))


@dataclass(frozen=True)
class PlanRecord:
    token: str
    label: str
    author: str
    created_at: datetime
    planner: str
    settings: dict
    planning_seconds: float
    config: dict
    plan: dict
    config_name: str
    config_version: int
    max_rank_cost_ms: float

    @classmethod
    def of(cls, row: PlanRow) -> PlanRecord:
        c = row.config_row
        return cls(row.token, row.label, row.author, row.created_at, row.planner, row.settings,
                   row.planning_seconds, c.config, row.plan, c.name, c.version, row.max_rank_cost_ms)


@dataclass(frozen=True)
class RunRecord:
    id: int
    plan_token: str
    kind: RunKind
    backend: str
    device: str
    status: RunStatus
    started_at: datetime | None
    ended_at: datetime | None
    log: str
    error: str | None
    device_info: dict
    created_at: datetime
    uid: str

    @classmethod
    def of(cls, row: RunRow, plan_token: str) -> RunRecord:
        return cls(row.id, plan_token, row.kind, row.backend, row.device, row.status, row.started_at,
                   row.ended_at, row.log, row.error, row.device_info, row.created_at, row.uid)


@dataclass(frozen=True)
class MetricRecord:
    rank: int
    name: str
    value: float
    unit: str

    @classmethod
    def of(cls, row: MetricRow) -> MetricRecord:
        return cls(row.rank, row.name, row.value, row.unit)
