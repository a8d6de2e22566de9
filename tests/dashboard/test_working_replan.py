"""The working view re-plans an edited config from the plan on screen (issue 28 item 14): one table edited of a
preset's 200 moves that table or few, where a plan from scratch moves many; "Plan from scratch" is one click
away, shows the two plans' slowest ranks and what switching moves, and can be adopted; the first plan, a new
preset's and a topology change plan from scratch, and the headline says which it is."""

from __future__ import annotations

import engine
from dashboard.plans import headline
from dashboard.text import ms_text
from dashboard.ui import services
from tests.dashboard.helpers import edit, goto, shown, workspace
from tests.dashboard.test_edit_replan import _load_synthetic

TABLES = 200  # the synthetic preset's default
EDITED = 3
FEW = TABLES // 20  # tables a one-table edit may move in the re-plan (it moves tables to win back the slowest rank)
POOLING = 100.0  # twice the preset's largest pooling factor: the edited table's rank becomes the slowest


def _change_line(at) -> str:
    line = next(m for m in shown(at, "markdown") if "Slowest rank" in m)
    return line.partition("\n:small[:gray[")[2].removesuffix("]]")


def _scratch(config: dict) -> engine.Plan:
    """The config planned from scratch here, as the working view's planner does (the same settings)."""
    settings = engine.PlannerSettings(search=True, effort=services.DEFAULT_EFFORT, time_budget_s=services.SAFETY_STOP_S)
    return engine.plan(engine.parse_config(config), settings)


def _moved(before: engine.Plan, after: engine.Plan) -> int:
    return headline.change(before, after).moved


def test_a_one_table_edit_replans_from_the_plan_on_screen_and_moves_little(app):
    assert "from scratch: the first plan of this session" in _change_line(app)
    _load_synthetic(app, TABLES)
    loaded = app.session_state["ws_plan"]
    assert not loaded.replanned and ", from scratch: " in _change_line(app)  # its own topology, its own tables

    edit(app, "tables_grid", edited={EDITED: {"pooling_factor": POOLING}})
    name = workspace(app)["tables"][EDITED]["name"]
    after = app.session_state["ws_plan"]
    assert after.matches(workspace(app)) and after.replanned
    assert engine.config_to_dict(after.config)["constraints"][name]["pooling_factors"] == [POOLING]
    moved = _moved(loaded.plan, after.plan)
    scratch_moved = _moved(loaded.plan, _scratch(workspace(app)))
    assert moved <= FEW and scratch_moved >= 5 * max(moved, 1)  # from scratch, the same edit moves many tables
    line = _change_line(app)
    assert "re-planned from the plan on screen: " in line and "moved between ranks" in line
    assert f"{moved:,} table{'' if moved == 1 else 's'} placed differently" in line or (
        moved == 0 and "no table placed differently" in line)
    assert not app.exception


def test_plan_from_scratch_is_one_click_away_shows_the_difference_and_can_be_adopted(app):
    _load_synthetic(app, TABLES)
    edit(app, "tables_grid", edited={EDITED: {"pooling_factor": POOLING}})
    replan = app.session_state["ws_plan"]
    assert replan.replanned
    app.button(key="ws_scratch").click().run()
    assert not app.exception, app.exception
    scratch = _scratch(workspace(app))
    offer = next(m for m in shown(app, "markdown") if m.startswith("From scratch: "))
    assert f"slowest rank **{ms_text(scratch.max_rank_cost_ms)}**" in offer
    assert f"against **{ms_text(replan.plan.max_rank_cost_ms)}** for the plan on screen" in offer
    moved = engine.replan_moved_bytes(replan.config, engine.read_old_plan(engine.plan_to_dict(replan.plan)),
                                      scratch.tables)
    assert moved.total_bytes > 0 and f"switching to it moves {engine.human_bytes(moved.total_bytes)}" in offer
    assert app.session_state["ws_plan"] is replan  # shown beside it, not adopted yet

    app.button(key="ws_scratch_use").click().run()
    adopted = app.session_state["ws_plan"]
    assert adopted is not replan and not adopted.replanned and adopted.matches(workspace(app))
    assert adopted.plan.tables == scratch.tables
    assert app.session_state["ws_previous_plan"] is replan
    line = _change_line(app)
    assert "from scratch: asked for" in line
    assert f"Since the last plan: slowest rank {ms_text(replan.plan.max_rank_cost_ms)[:-3]} → " in line
    assert not any(m.startswith("From scratch: ") for m in shown(app, "markdown"))  # adopted: nothing to compare


def test_keep_the_replan_closes_the_comparison(app):
    _load_synthetic(app, TABLES)
    edit(app, "tables_grid", edited={EDITED: {"pooling_factor": POOLING}})
    replan = app.session_state["ws_plan"]
    app.button(key="ws_scratch").click().run()
    assert any(m.startswith("From scratch: ") for m in shown(app, "markdown"))
    app.button(key="ws_scratch_keep").click().run()
    assert not any(m.startswith("From scratch: ") for m in shown(app, "markdown"))
    assert app.session_state["ws_plan"] is replan


def test_a_topology_change_plans_from_scratch_and_says_so(app):
    edit(app, "tables_grid", edited={1: {"pooling_factor": 30.0}})
    assert app.session_state["ws_plan"].replanned
    goto(app, "topology")
    app.number_input(key="topology_batch_size").set_value(1024).run()
    after = app.session_state["ws_plan"]
    assert after.matches(workspace(app)) and not after.replanned
    assert "from scratch: the topology changed" in _change_line(app)
    assert after.plan.tables == _scratch(workspace(app)).tables
