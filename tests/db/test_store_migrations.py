"""Alembic: upgrades from empty and from the first revision, models match migrations, newer schemas refused."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from db import migrate
from db.models import Base
from db.store import Store, StoreError
from tests.db.storetest import TABLES, sample


def _first_revision() -> str:
    revisions = list(migrate.script_directory().walk_revisions())  # newest first
    return revisions[-1].revision


def test_empty_database_is_upgraded_to_head(db_url: str) -> None:
    store = Store(db_url)
    assert store.schema_revision() is None
    assert store.upgrade() is None  # started from nothing
    assert store.schema_revision() == migrate.head_revision()
    assert set(TABLES) <= set(inspect(store.engine).get_table_names())
    assert store.upgrade() == migrate.head_revision()  # again: a no-op
    store.close()


def test_database_at_first_revision_is_upgraded_keeping_its_data(db_url: str) -> None:
    store = Store(db_url)
    store.upgrade(_first_revision())
    assert store.schema_revision() == _first_revision()
    token = store.save_plan(*sample(), label="made on the first schema")
    Store(db_url).upgrade()  # what the app does on start
    assert store.schema_revision() == migrate.head_revision()
    rec = store.get_plan(token)
    assert rec is not None and rec.label == "made on the first schema"
    (listed,) = store.list_plans()  # listable from the summary columns, with its figures
    assert (listed.token, listed.num_tables, listed.world_size, listed.max_rank_cost_ms) == \
        (token, len(rec.config["tables"]), len(rec.plan["ranks"]), rec.max_rank_cost_ms)
    store.close()


def test_models_and_migrations_agree(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


def test_schema_from_a_newer_planner_is_refused(store: Store) -> None:
    with store.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    with pytest.raises(StoreError, match="newer than this planner knows"):
        store.upgrade()
    with store.engine.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "9999_from_the_future"


def test_store_without_schema_says_to_run_init(db_url: str) -> None:
    store = Store(db_url)
    with pytest.raises(StoreError, match="no planner schema yet; run `python -m db init`"):
        store.list_plans()
    with pytest.raises(StoreError, match="python -m db init"):
        store.save_plan(*sample())
    store.close()
