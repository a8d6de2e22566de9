"""Listing saved plans is cheap (issue 14): one SELECT of the summary columns, whatever the number of plans,
and no plan or config JSON read - on SQLite files and on PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from typing import Any

from sqlalchemy import event

from db.store import PlanSummary, Store
from tests.db.storetest import sample

JSON_COLUMNS = re.compile(r"\b(plans\.plan|plans\.settings|configs\.config)\b")  # not plans.planner


@contextmanager
def statements(store: Store) -> Iterator[list[tuple[str, list[str]]]]:
    """(SQL, names of the result's columns) of every statement the store sends while in the block."""
    seen: list[tuple[str, list[str]]] = []

    def after(_conn: Any, cursor: Any, sql: str, *_args: Any) -> None:
        seen.append((sql, [d[0] for d in cursor.description or ()]))

    event.listen(store.engine, "after_cursor_execute", after)
    try:
        yield seen
    finally:
        event.remove(store.engine, "after_cursor_execute", after)


def _selects(seen: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    return [(sql, cols) for sql, cols in seen if sql.lstrip().upper().startswith("SELECT")]


def _save(store: Store, k: int, start: int = 0) -> list[str]:
    cfg, plan = sample()
    return [store.save_plan(cfg, plan, label=f"plan {i}", config_name=f"cfg{i % 3}")
            for i in range(start, start + k)]


def test_listing_is_one_select_of_summary_columns_whatever_the_number_of_plans(store: Store) -> None:
    store.list_plans()  # the first use connects: what a connection costs once is not the listing's
    counted = []
    total = 0
    for k in (1, 4, 12):
        _save(store, k - total, start=total)
        total = k
        with statements(store) as seen:
            listed = store.list_plans()
        assert len(listed) == k
        selects = _selects(seen)
        assert len(selects) == 1, [sql for sql, _ in seen]  # no query per plan (config rows joined in)
        sql, cols = selects[0]
        assert not JSON_COLUMNS.search(sql), sql  # neither the plan file nor the config JSON is read
        assert cols == ["token", "label", "author", "created_at", "planner", "name", "version", "num_tables",
                        "world_size", "max_rank_cost_ms"]
        counted.append(len(seen))
    assert len(set(counted)) == 1, counted  # the same statements (a BEGIN on SQLite) for 1, 4 and 12 plans


def test_listed_summaries_equal_the_full_records(store: Store) -> None:
    tokens = _save(store, 5)
    listed = store.list_plans()
    assert [p.token for p in listed] == tokens[::-1]
    for p in listed:
        assert isinstance(p, PlanSummary)
        rec = store.get_plan(p.token)
        assert rec is not None
        assert (p.label, p.author, p.created_at, p.planner, p.config_name, p.config_version, p.max_rank_cost_ms) == \
            (rec.label, rec.author, rec.created_at, rec.planner, rec.config_name, rec.config_version,
             rec.max_rank_cost_ms)
        assert p.created_at.tzinfo is UTC or p.created_at.utcoffset() == UTC.utcoffset(None)
        assert (p.num_tables, p.world_size) == (len(rec.config["tables"]), len(rec.plan["ranks"]))
        assert p.max_rank_cost_ms == rec.plan["max_rank_cost_ms"]
    assert {(p.config_name, p.config_version) for p in listed} == {("cfg0", 1), ("cfg1", 1), ("cfg2", 1)}
    assert [p.token for p in store.list_plans(limit=2)] == tokens[:2:-1]
