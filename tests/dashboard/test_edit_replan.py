"""One edit to one table of 1,000: the Tables page's headline and then the Plan page show the new config's plan,
and only the edited table is priced again (engine.enumerate's pricing cache, in the planning worker: the app
under AppTest plans in the server's worker processes, here one). No timing here: the seconds are
bench.interactive's (a real browser on `streamlit run`)."""

from __future__ import annotations

import pytest

import engine
from dashboard.plans import table_matrix
from dashboard.tables import grid, presets, row_checks
from dashboard.ui import services
from dashboard.text import ms_text
from engine import enumerate as enumeration
from tests.dashboard.helpers import edit, goto, plotly_specs, shown, workspace

TABLES = 1000
EDITED = 3  # the grid row edited
NEW_POOLING_FACTOR = 1000.0  # 20x the preset's largest: the table becomes the heaviest on any rank


def _misses() -> int:
    return enumeration._priced.cache_info().misses


def _worker_misses() -> int:
    """Tables priced by the planning worker (the pool has one: the same worker plans every time)."""
    return services.pool().submit("pricing_cache", (), object(), "stats", "test").result(60)[1]


@pytest.fixture
def one_worker(monkeypatch):
    monkeypatch.setenv("PLANNER_WORKERS", "1")
    services.pool().shutdown()
    services.pool.clear()
    services._OUTCOMES.clear()  # plans another test made of the same config: this one counts its own pricing
    yield
    services.pool().shutdown()
    services.pool.clear()


def _load_synthetic(app, count: int) -> None:
    app.selectbox(key="tables_preset").set_value("synthetic").run()
    app.number_input(key="tables_syn_count").set_value(count).run()
    app.button(key="tables_load_preset").click().run()
    assert not app.exception, app.exception
    assert len(workspace(app)["tables"]) == count


def _heatmap_rows(app) -> dict[str, float]:
    """The heatmap's rows (the heaviest tables by estimated cost): each table's cost over the ranks."""
    heat = next(s for s in plotly_specs(app) if s["data"][0]["type"] == "heatmap")["data"][0]
    return {name: sum(v for v in row if v is not None) for name, row in zip(heat["y"], heat["z"])}


@pytest.mark.timeout(600)
def test_one_edit_of_a_thousand_replans_and_prices_only_that_table(one_worker, app):
    _load_synthetic(app, TABLES)
    name = workspace(app)["tables"][EDITED]["name"]
    # Price the preset's tables in this process too: the edited table's geometries are then counted here as the
    # ones priced anew when the edited config is priced.
    engine.plan(engine.parse_config(presets.synthetic(presets.SyntheticSpec(count=TABLES))),
                engine.PlannerSettings(search=False))
    assert services.pool().size == 1
    goto(app, "plan")  # auto-replan is on
    before = app.session_state["ws_plan"]
    assert before.matches(workspace(app)) and len(before.plan.tables) == TABLES
    warm = _worker_misses()  # the worker priced the preset's tables for the first plan
    assert warm >= TABLES
    shown_before = _heatmap_rows(app)  # the heaviest tables

    goto(app, "tables")
    edit(app, "tables_grid", edited={EDITED: {"pooling_factor": NEW_POOLING_FACTOR}})
    assert workspace(app)["constraints"][name]["pooling_factors"] == [NEW_POOLING_FACTOR]
    edited = app.session_state["ws_plan"]  # the Tables page's headline replanned on the edit itself
    assert edited is not before and edited.matches(workspace(app))
    assert any(f"Slowest rank **{ms_text(edited.plan.max_rank_cost_ms)}**" in m for m in shown(app, "markdown"))
    scored = table_matrix._table_alone.cache_info().misses
    goto(app, "plan")
    after = app.session_state["ws_plan"]
    assert after is edited  # the Plan page shows that plan: nothing to plan again
    repriced = _worker_misses() - warm
    rescored = table_matrix._table_alone.cache_info().misses - scored

    # The plan shown is the new config's: made for it, its headline on screen, the edited table's cost in it.
    assert after is not before and after.matches(workspace(app))
    assert engine.config_to_dict(after.config)["constraints"][name]["pooling_factors"] == [NEW_POOLING_FACTOR]
    assert app.metric[0].value == ms_text(after.plan.max_rank_cost_ms)
    old = table_matrix.table_rank_matrix(before.plan, before.config)
    new = table_matrix.table_rank_matrix(after.plan, after.config)
    i = new.tables.index(name)
    old_cost, new_cost = old.values["cost_ms"][i].sum(), new.values["cost_ms"][i].sum()
    assert new_cost > 5 * old_cost
    assert name not in shown_before and _heatmap_rows(app)[name] == pytest.approx(new_cost)  # now among them
    # The table-by-rank matrix scored again only the edited table and the tables the new plan placed differently.
    moved = {n for n, tp in after.plan.tables.items() if tp != before.plan.tables[n]}
    assert rescored == len(moved | {name})

    # Priced again in the worker: the edited table's geometries, each once (here, where every other table of the
    # edited config is priced already, pricing the edited one misses exactly those).
    info = enumeration._priced.cache_info()
    cfg = after.config  # the config the plan was made for (engine.Config)
    enumeration.table_options(cfg, [t.name for t in cfg.tables].index(name))
    geometries = enumeration._priced.cache_info().misses - info.misses
    assert 0 < repriced == geometries
    for t in range(TABLES):
        enumeration.table_options(cfg, t)
    assert _misses() == info.misses + geometries  # every other table was priced here already: the same keys


def test_an_edit_checks_only_the_edited_row_again():
    rows = grid.config_to_rows(presets.synthetic(presets.SyntheticSpec(count=TABLES, seed=1)))
    topology = {"world_size": 8}
    rows[10]["dim"] = 0  # a config with a problem: each row is checked alone, then remembered
    issues, _ = row_checks.row_issues(rows, topology)
    assert [i for i, t in enumerate(issues) if t] == [10]
    before = row_checks._row_problems.cache_info()
    rows[EDITED] = {**rows[EDITED], "pooling_factor": NEW_POOLING_FACTOR}
    issues, _ = row_checks.row_issues(rows, topology)
    after = row_checks._row_problems.cache_info()
    assert [i for i, t in enumerate(issues) if t] == [10]
    assert after.misses - before.misses == 1 and after.hits - before.hits == TABLES - 1
    rows[10]["dim"] = 64  # fixed: the whole config is accepted, no row is checked alone
    assert row_checks.row_issues(rows, topology) == ([""] * TABLES, None)
    assert row_checks._row_problems.cache_info().misses == after.misses
