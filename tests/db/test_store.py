"""Store basics on SQLite and PostgreSQL: versioned configs, plans, runs, metrics, and input checks."""

from __future__ import annotations

import math
from datetime import UTC

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

import engine
from db.models import RunKind, RunStatus
from db.store import Store, StoreError
from tests.db.storetest import counts, load_example, sample


def test_save_config_versions_and_never_overwrites(store: Store) -> None:
    cfg = load_example()
    v1 = store.save_config(cfg, "tutorial")
    assert (v1.name, v1.version) == ("tutorial", 1)
    assert v1.config == engine.config_to_dict(engine.parse_config(cfg))  # every default written out
    assert store.save_config(cfg, "tutorial").id == v1.id  # same content: same version

    changed = load_example()
    changed["topology"]["batch_size"] = 1024
    v2 = store.save_config(changed, "tutorial")
    assert v2.version == 2 and v2.id != v1.id
    versions = store.config_versions("tutorial")
    assert [v.version for v in versions] == [1, 2]
    assert versions[0].config["topology"]["batch_size"] == 512  # version 1 kept as it was
    assert store.save_config(changed, "other").version == 1


def test_invalid_config_names_the_field_and_writes_nothing(store: Store) -> None:
    cfg = load_example()
    cfg["tables"][0]["embedding_dim"] = -4
    before = counts(store)
    with pytest.raises(StoreError, match=r"tables\[0\]\.embedding_dim"):
        store.save_config(cfg, "broken")
    with pytest.raises(StoreError, match="name: must not be empty"):
        store.save_config(load_example(), "  ")
    assert counts(store) == before


def test_save_and_get_plan_round_trip(store: Store) -> None:
    cfg, plan = sample()
    token = store.save_plan(cfg, plan, label="first try", author="ana", config_name="tutorial",
                            settings={"search": False, "time_budget_s": 3.0})
    rec = store.get_plan(token)
    assert rec is not None
    assert rec.token == token and rec.label == "first try" and rec.author == "ana"
    assert rec.plan == plan  # the plan file JSON comes back as saved
    assert rec.config == engine.config_to_dict(engine.parse_config(cfg))
    assert rec.settings == {"search": False, "time_budget_s": 3.0}
    assert (rec.config_name, rec.config_version, rec.planner) == ("tutorial", 1, "engine")
    assert rec.planning_seconds == plan["planning_seconds"]
    assert rec.max_rank_cost_ms == max(r["cost_ms"] for r in plan["ranks"])
    assert rec.created_at.tzinfo is not None and rec.created_at.utcoffset() == UTC.utcoffset(None)
    assert engine.parse_plan(rec.plan, engine.parse_config(rec.config))  # still a valid plan for its config


def test_a_mixed_fleets_plan_is_saved_checked_and_read_back_with_each_ranks_capacity(store: Store) -> None:
    """topology.custom_topology_data goes into the config version and the plan's per-rank capacities into its rows;
    the store's re-estimate (db.estimates) agrees with the planner's."""
    cfg = load_example("tutorial_row_wise")
    cfg["topology"]["custom_topology_data"] = {"hbm_cap": [8 * 2**30, 2 * 2**30]}
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    rec = store.get_plan(store.save_plan(cfg, plan))
    assert rec.config["topology"]["custom_topology_data"] == {"hbm_cap": [8 * 2**30, 2 * 2**30]}
    assert [r["hbm_cap_bytes"] for r in rec.plan["ranks"]] == [int(8 * 2**30 * 0.85), int(2 * 2**30 * 0.85)]
    assert store.save_config(cfg, "mixed").config != store.save_config(load_example("tutorial_row_wise"),
                                                                        "mixed").config  # a new version


def test_tokens_are_unguessable(store: Store) -> None:
    cfg, plan = sample()
    tokens = [store.save_plan(cfg, plan) for _ in range(5)]
    assert len(set(tokens)) == 5
    assert all(len(t) >= 22 and not t.isdigit() and not t.startswith("-") for t in tokens)
    assert store.get_plan("A" * 22) is None
    assert store.get_plan("not a token; DROP TABLE plans") is None
    with pytest.raises(StoreError, match="label: must not contain NUL"):
        store.save_plan(cfg, plan, label="a\x00b")


def test_plan_without_estimates_gets_them_from_the_engine(store: Store) -> None:
    cfg, plan = sample()
    token = store.save_plan(cfg, {"plan": plan["plan"]})  # the placement only
    rec = store.get_plan(token)
    assert rec is not None
    assert [r["rank"] for r in rec.plan["ranks"]] == [0, 1]
    assert rec.max_rank_cost_ms == pytest.approx(plan["max_rank_cost_ms"])


@pytest.mark.parametrize("breakage, field", [
    (lambda p: p["plan"].pop("small_table_1"), "plan.small_table_1"),
    (lambda p: p["plan"]["large_table_0"].update(sharding_type="diagonal"), "plan.large_table_0.sharding_type"),
    (lambda p: p["ranks"][0].update(cost_ms="fast"), "plan.ranks[0].cost_ms"),
    (lambda p: p["ranks"][1].update(rank=7), "plan.ranks[1].rank"),
    (lambda p: p.update(lower_bound_ms=math.nan), "plan: cannot be stored as JSON"),
])
def test_plan_that_does_not_fit_its_config_is_refused(store: Store, breakage, field: str) -> None:
    cfg, plan = sample()
    breakage(plan)
    before = counts(store)
    with pytest.raises(StoreError, match=field.replace("[", r"\[").replace("]", r"\]")):
        store.save_plan(cfg, plan)
    assert counts(store) == before


def test_list_plans_newest_first_with_summaries(store: Store) -> None:
    cfg, plan = sample()
    tokens = [store.save_plan(cfg, plan, label=f"plan {i}", config_name="tut") for i in range(3)]
    listed = store.list_plans()
    assert [p.token for p in listed] == tokens[::-1]
    first = listed[-1]
    assert (first.label, first.config_name, first.config_version, first.num_tables, first.world_size) == \
        ("plan 0", "tut", 1, 4, 2)
    assert [p.token for p in store.list_plans(limit=2)] == tokens[:0:-1]
    with pytest.raises(StoreError, match="limit"):
        store.list_plans(limit=0)


def test_runs_lifecycle(store: Store) -> None:
    cfg, plan = sample()
    token = store.save_plan(cfg, plan)
    run_id = store.create_run(token, "validation", "gloo", "cpu")
    run = store.get_run(run_id)
    assert run is not None
    assert (run.plan_token, run.kind, run.status, run.started_at, run.log) == (token, RunKind.VALIDATION,
                                                                              RunStatus.QUEUED, None, "")
    store.update_run(run_id, status="running", log_append="rank 0 up\n", device_info={"cpus": 2})
    store.update_run(run_id, log_append="rank 1 up\n")
    store.update_run(run_id, status="failed", error="rank 1 ran out of memory")
    run = store.get_run(run_id)
    assert run is not None and run.status == "failed" and str(run.status) == "failed"
    assert run.log == "rank 0 up\nrank 1 up\n"
    assert run.error == "rank 1 ran out of memory" and run.device_info == {"cpus": 2}
    assert run.started_at is not None and run.ended_at is not None and run.ended_at >= run.started_at
    other = store.create_run(token, "dryrun", "fbgemm", "cpu")
    assert [r.id for r in store.runs_for_plan(token)] == [run_id, other]


def test_run_input_errors(store: Store) -> None:
    cfg, plan = sample()
    token = store.save_plan(cfg, plan)
    before = counts(store)
    with pytest.raises(StoreError, match="kind: 'benchmark' is not one of dryrun, validation"):
        store.create_run(token, "benchmark", "gloo", "cpu")
    with pytest.raises(StoreError, match="no plan with token"):
        store.create_run("Q" * 22, "dryrun", "gloo", "cpu")
    with pytest.raises(StoreError, match="'ZZZZZZZZZZZZZZZZZZZZZZ' is not a share token"):
        store.create_run("Z" * 22, "dryrun", "gloo", "cpu")  # 22 characters, but no token the server makes
    with pytest.raises(StoreError, match="no run with id 999"):
        store.update_run(999, status="running")
    run_id = store.create_run(token, "dryrun", "gloo", "cpu")
    with pytest.raises(StoreError, match="status: 'done' is not one of"):
        store.update_run(run_id, status="done")
    assert store.get_run(999) is None
    assert counts(store)["runs"] == before["runs"] + 1


def test_metrics_round_trip_and_bad_values_write_nothing(store: Store) -> None:
    cfg, plan = sample()
    run_id = store.create_run(store.save_plan(cfg, plan), "dryrun", "fbgemm", "cpu")
    rows = [(0, "step_ms", 1.25, "ms"), (1, "step_ms", 1.5, "ms"), (0, "peak_hbm_bytes", 2.0e9, "bytes")]
    store.add_metrics(run_id, rows)
    assert [(m.rank, m.name, m.value, m.unit) for m in store.metrics(run_id)] == rows
    for bad, field in [([(0, "step_ms", math.inf, "ms")], r"metrics\[0\]\.value"),
                       ([(1, "x", 1.0, "ms"), (-1, "x", 1.0, "ms")], r"metrics\[1\]\.rank"),
                       ([(0, "step_ms", 1.0)], r"metrics\[0\]: must be a \(rank, name, value, unit\)")]:
        with pytest.raises(StoreError, match=field):
            store.add_metrics(run_id, bad)
    with pytest.raises(StoreError, match="no run with id"):
        store.add_metrics(run_id + 100, rows)
    assert len(store.metrics(run_id)) == 3


def test_database_enforces_foreign_keys(store: Store) -> None:
    with pytest.raises(sa_exc.IntegrityError), store.engine.begin() as c:
        c.execute(text("INSERT INTO plan_ranks (plan_id, rank, hbm_bytes, ddr_bytes, cost_ms) "
                       "VALUES (12345, 0, 1, 1, 1.0)"))


def test_sqlite_file_uses_wal(new_db_url) -> None:
    store = Store(new_db_url("sqlite"))
    store.upgrade()
    with store.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0


def test_default_location_is_planner_data_dir(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("PLANNER_DATA_DIR", str(tmp_path / "new" / "dir"))
    s = Store()
    s.upgrade()
    cfg, plan = sample()
    token = s.save_plan(cfg, plan)
    s.close()
    assert (tmp_path / "new" / "dir" / "planner.db").is_file()
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'new' / 'dir' / 'planner.db'}")
    assert Store().get_plan(token) is not None
