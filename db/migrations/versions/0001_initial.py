"""The first schema: versioned configs, plans with per-rank estimates, runs and measured metrics.

Revision ID: 0001
Revises:
Create Date: 2026-11-23

Migrations never import db.models: each one freezes the schema as it was when it was written.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

RUN_KINDS = ("dryrun", "validation")
RUN_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _enum(values: tuple[str, ...], name: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=True, length=20)


def upgrade() -> None:
    op.create_table(
        "configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_configs")),
        sa.UniqueConstraint("name", "content_hash", name=op.f("uq_configs_name_content_hash")),
        sa.UniqueConstraint("name", "version", name=op.f("uq_configs_name_version")),
    )
    op.create_table(
        "plans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("config_id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("planner", sa.String(length=100), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("planning_seconds", sa.Float(), nullable=False),
        sa.Column("max_rank_cost_ms", sa.Float(), nullable=False),
        sa.Column("num_tables", sa.Integer(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=500), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.ForeignKeyConstraint(["config_id"], ["configs.id"], name=op.f("fk_plans_config_id_configs"),
                                ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plans")),
        sa.UniqueConstraint("token", name=op.f("uq_plans_token")),
    )
    op.create_index(op.f("ix_plans_config_id"), "plans", ["config_id"])
    op.create_index(op.f("ix_plans_created_at"), "plans", ["created_at"])
    op.create_table(
        "plan_ranks",
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("hbm_bytes", sa.BigInteger(), nullable=False),
        sa.Column("ddr_bytes", sa.BigInteger(), nullable=False),
        sa.Column("cost_ms", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], name=op.f("fk_plan_ranks_plan_id_plans"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("plan_id", "rank", name=op.f("pk_plan_ranks")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("kind", _enum(RUN_KINDS, "run_kind"), nullable=False),
        sa.Column("backend", sa.String(length=100), nullable=False),
        sa.Column("device", sa.String(length=100), nullable=False),
        sa.Column("status", _enum(RUN_STATUSES, "run_status"), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("started_at", _utc(), nullable=True),
        sa.Column("ended_at", _utc(), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("device_info", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], name=op.f("fk_runs_plan_id_plans"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("uid", name=op.f("uq_runs_uid")),
    )
    op.create_index(op.f("ix_runs_plan_id"), "runs", ["plan_id"])
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("unit", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_metrics_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metrics")),
    )
    op.create_index("ix_metrics_run_id_rank", "metrics", ["run_id", "rank"])


def downgrade() -> None:
    op.drop_table("metrics")
    op.drop_table("runs")
    op.drop_table("plan_ranks")
    op.drop_table("plans")
    op.drop_table("configs")
