"""Comparison queries: plans side by side per rank (memory, estimated and measured cost) and per table."""

from __future__ import annotations

import pytest

from db.compare import MEASURED_TIME_METRIC
from db.store import Store, StoreError
from tests.db.storetest import load_example, make_plan, sample


def _two_plans(store: Store) -> tuple[str, str, dict, dict]:
    cfg, table_wise = sample("tutorial_table_wise")
    _, row_wise = sample("tutorial_row_wise")
    return (store.save_plan(cfg, table_wise, label="tw"), store.save_plan(load_example("tutorial_row_wise"),
            row_wise, label="rw"), table_wise, row_wise)


def test_per_rank_memory_and_estimated_cost(store: Store) -> None:
    a, b, plan_a, plan_b = _two_plans(store)
    out = store.compare([a, b])
    assert [p.token for p in out["plans"]] == [a, b]
    assert [row["rank"] for row in out["per_rank"]] == [0, 1]
    for row in out["per_rank"]:
        for token, plan in ((a, plan_a), (b, plan_b)):
            est = plan["ranks"][row["rank"]]
            assert row[token] == {"hbm_bytes": est["hbm_bytes"], "ddr_bytes": est["ddr_bytes"],
                                  "cost_ms": est["cost_ms"], "measured_ms": None}


def test_per_table_says_where_each_plan_put_it(store: Store) -> None:
    a, b, plan_a, _ = _two_plans(store)
    per_table = {row["table"]: row for row in store.compare([a, b])["per_table"]}
    assert set(per_table) == {"large_table_0", "large_table_1", "small_table_0", "small_table_1"}
    for name, row in per_table.items():
        tp = plan_a["plan"][name]
        assert row[a] == f"table_wise {tp['compute_kernel']} [{', '.join(map(str, tp['ranks']))}]"
        assert row[b].startswith("row_wise ") and row[b].endswith("[0, 1]")


def test_measured_time_comes_from_the_latest_succeeded_run(store: Store) -> None:
    a, b, _, _ = _two_plans(store)
    old = store.create_run(a, "validation", "gloo", "cpu")
    store.add_metrics(old, [(0, MEASURED_TIME_METRIC, 9.0, "ms"), (1, MEASURED_TIME_METRIC, 9.0, "ms")])
    store.update_run(old, status="succeeded")
    good = store.create_run(a, "validation", "gloo", "cpu")
    store.add_metrics(good, [(0, MEASURED_TIME_METRIC, 2.0, "ms"), (0, MEASURED_TIME_METRIC, 4.0, "ms"),
                             (1, MEASURED_TIME_METRIC, 5.0, "ms"), (1, "peak_hbm_bytes", 7.0, "bytes")])
    store.update_run(good, status="succeeded")
    broken = store.create_run(a, "validation", "gloo", "cpu")  # newer, but failed: not the measurement
    store.add_metrics(broken, [(0, MEASURED_TIME_METRIC, 100.0, "ms")])
    store.update_run(broken, status="failed")
    dry = store.create_run(b, "dryrun", "fbgemm", "cpu")  # plan b: only a running dry-run reported
    store.add_metrics(dry, [(1, MEASURED_TIME_METRIC, 1.5, "ms")])

    per_rank = store.compare([a, b])["per_rank"]
    assert [row[a]["measured_ms"] for row in per_rank] == [pytest.approx(3.0), pytest.approx(5.0)]
    assert [row[b]["measured_ms"] for row in per_rank] == [None, pytest.approx(1.5)]


def test_plans_of_different_world_sizes(store: Store) -> None:
    cfg4 = load_example()
    cfg4["topology"].update(world_size=4, local_world_size=4)
    big = store.save_plan(cfg4, make_plan(cfg4))
    cfg, plan = sample()
    small = store.save_plan(cfg, plan)
    per_rank = store.compare([small, big, small])["per_rank"]  # a repeated token counts once
    assert [row["rank"] for row in per_rank] == [0, 1, 2, 3]
    assert per_rank[3][small] is None and per_rank[3][big]["hbm_bytes"] >= 0
    assert set(per_rank[0]) == {"rank", small, big}


def test_compare_input_errors(store: Store) -> None:
    a, _, _, _ = _two_plans(store)
    with pytest.raises(StoreError, match="one or more plan tokens"):
        store.compare([])
    with pytest.raises(StoreError, match="no plan with token 'QQQQQQQQQQQQQQQQQQQQQQ'"):
        store.compare([a, "Q" * 22])
    with pytest.raises(StoreError, match="is not a share token"):
        store.compare([a, "1; DROP TABLE plans"])
