"""Plan page: plan with a progress bar, see the per-table sharding, charts, heatmap, bottleneck, downloads;
replan after an edit; errors in one line. TorchRec's planner as the baseline: test_plan_background."""

from __future__ import annotations

import json
import re

from dashboard.plans import analysis
from dashboard.text import ms_text, sig_text
from tests.dashboard.helpers import edit, goto, plotly_specs, shown, workspace


def _plan_now(app):
    goto(app, "plan")
    app.button(key="plan_run").click().run()
    assert not app.exception, app.exception
    return app


def test_plan_the_tutorial_and_see_it(app):
    _plan_now(app)
    assert app.progress[0].value == 100
    assert app.progress[0].proto.text.startswith("Planned 4 tables on 2 ranks")
    plan = app.session_state["ws_plan"].plan
    secs = re.search(r" in ([\d,.]+) s ", app.progress[0].proto.text).group(1)  # 3 significant digits, never "0.00"
    assert secs == sig_text(plan.planning_seconds) and len(secs.replace(".", "").replace(",", "").lstrip("0")) == 3
    assert set(plan.tables) == {"large_table_0", "large_table_1", "small_table_0", "small_table_1"}
    frame = app.dataframe[0].value
    assert frame["sharding"].tolist() == [plan.tables[t].sharding_type.value for t in frame["table"]]
    specs = plotly_specs(app)
    titles = [str((s["layout"].get("title") or {}).get("text")) for s in specs]
    assert "Estimated cost per rank by component" in titles and any("Tables by rank" in t for t in titles)
    memory = next(s for s in specs if any(t.get("name") == "used" for t in s["data"]))
    parts = analysis.memory_parts(plan)  # the step's peak part by part (engine.memory), stacked in the HBM panel
    assert [t["name"] for t in memory["data"]] == ["usable capacity", *parts, "usable capacity", "used"]
    assert app.metric[4].label == "Tightest headroom"
    assert app.metric[0].value == ms_text(plan.max_rank_cost_ms)  # 3 significant digits: never cut off
    story = [m for m in shown(app, "markdown") if m.startswith("- Rank")]
    assert story and f"Rank {plan.bottleneck_rank}" in story[0]
    assert len(app.get("download_button")) == 4
    columns = json.loads(app.dataframe[0].proto.columns)  # rows with thousands separators (7,275,445), not 7275445
    assert columns["rows"]["type_config"]["format"] == "localized", columns


def test_replans_on_edit_and_shows_config_errors(app):
    _plan_now(app)
    first = app.session_state["ws_plan"]
    goto(app, "tables")
    edit(app, "tables_grid", edited={0: {"rows": 100000}})
    goto(app, "plan")  # "Replan on edits" is on: no click needed
    second = app.session_state["ws_plan"]
    assert second is not first and second.matches(workspace(app))
    assert second.config.tables[0].num_embeddings == 100000
    goto(app, "tables")
    edit(app, "tables_grid", edited={0: {"dim": 0}})
    goto(app, "plan")
    assert shown(app, "error") == ["The config has a problem: tables[0].embedding_dim: must be from 1 to 65,536, "
                                   "got 0. Fix it on Tables & constraints or Topology."]
    # the last plan is another config's: never shown as the current one, only collapsed and labelled
    assert not app.dataframe and not plotly_specs(app) and not app.get("download_button")
    last = app.session_state["ws_plan"].plan.max_rank_cost_ms  # 3 significant digits, as everywhere (was :.4g)
    assert any(c.startswith(f"By Ours (engine): slowest rank {ms_text(last)}. ") for c in shown(app, "caption"))
    assert [e.label for e in app.expander] == ["The last plan, made for an earlier config (4 tables): not this "
                                               "config's"]


def test_a_plan_that_cannot_fit_says_what_would_help(app):
    goto(app, "topology")
    app.number_input(key="topology_hbm_cap").set_value(0.0001)
    app.number_input(key="topology_ddr_cap").set_value(0.0001).run()  # 107 KB: no table fits
    _plan_now(app)
    errors = shown(app, "error")
    assert len(errors) == 1 and errors[0].startswith("No plan: ") and "not fit" in errors[0]
    assert "What would help" in errors[0] and "\n" not in errors[0]
    assert not app.session_state["ws_plan"].matches(workspace(app)) and not app.dataframe


def test_heatmap_metric_and_rows(app):
    app.selectbox(key="tables_preset").set_value("synthetic").run()
    app.number_input(key="tables_syn_count").set_value(60).run()
    app.button(key="tables_load_preset").click().run()
    _plan_now(app)
    app.radio(key="plan_heat_metric").set_value("hbm_bytes")
    app.number_input(key="plan_heat_rows").set_value(10).run()
    heat = next(s for s in plotly_specs(app) if s["data"][0]["type"] == "heatmap")
    assert len(heat["data"][0]["y"]) == 10 and heat["layout"]["title"]["text"] == "Tables by rank: HBM (bytes)"


def test_the_plan_is_the_command_lines_plan_at_the_same_effort(app):
    # the search is bounded by work: the dashboard's plan is the CLI's with the effort it records
    import json

    import engine

    goto(app, "plan")
    app.number_input(key="plan_effort").set_value(3000).run()
    _plan_now(app)
    current = app.session_state["ws_plan"]
    assert current.settings["effort"] == 3000 and "time_budget_s" not in current.settings
    again = engine.plan_to_dict(engine.plan(current.config, engine.PlannerSettings(effort=3000)))
    shown_plan = engine.plan_to_dict(current.plan)
    for d in (again, shown_plan):
        d.pop("planning_seconds")
    assert json.dumps(shown_plan, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_a_step_peak_into_the_reservation_is_tight_not_over_capacity(app):
    """The synthetic 1,000-table preset's step peaks past the usable HBM (the device less the dense model's
    reservation) on one rank, within the device: the engine notes no out-of-memory, and neither does the page."""
    from dashboard.plans import headline
    from dashboard.tables import presets
    from dashboard.ui import state

    app.session_state[state.CONFIG] = presets.synthetic(presets.SyntheticSpec(count=1000))
    _plan_now(app)
    plan = app.session_state["ws_plan"].plan
    h = headline.headline(plan)
    assert h.fits and h.into_reservation  # the figures this test is about (else the preset changed)
    room = app.metric[4]
    assert room.value.startswith("-") and room.proto.delta == "into the reservation"
    goto(app, "tables")
    strip = [m for m in shown(app, "markdown") if "Slowest rank" in m]
    assert strip and "Tight" in strip[0] and "Over capacity" not in strip[0]


def test_one_table_reads_as_one_table_and_a_replan_has_its_bound(app):
    """Walked at 1280x720 (issue 28's fit and finish): a one-table config read '1 tables' in the sidebar, the
    plan's caption and its progress bar; a re-planned plan's 'Vs lower bound' read n/a with the help "TorchRec's
    plans carry no bound", though our planner made it. A re-plan from the plan on screen now carries the
    planner's bound (engine.planner.plan_lower_bound_ms), the same a plan from scratch reports."""
    edit(app, "tables_grid", deleted=[1, 2, 3])
    _plan_now(app)
    assert app.progress[0].proto.text.startswith("Planned 1 table on 2 ranks")
    captions = shown(app, "caption")
    assert any(c.startswith("Plan by Ours (engine) · 1 table · ") for c in captions), captions
    assert "1 table · 2 ranks · cuda" in shown(app.sidebar, "caption")
    assert not any("1 tables" in c for c in captions + shown(app, "markdown")), captions
    assert app.metric[2].label == "Vs lower bound" and app.metric[2].value.endswith("x")  # from scratch: a bound
    goto(app, "tables")
    edit(app, "tables_grid", edited={0: {"rows": 8192}})  # the working view re-plans from the plan on screen
    goto(app, "plan")
    replanned = app.session_state["ws_plan"]
    assert replanned.replanned and replanned.plan.lower_bound_ms > 0
    assert app.metric[2].value.endswith("x")
    assert app.metric[2].proto.help == "slowest rank over a bound no plan can beat"


def test_the_guide_names_the_pages_it_points_at(app):
    """The first view's guide is drawn under the headline of every editing page: on Topology there is no 'grid
    below', so it names the pages."""
    goto(app, "topology")
    guide = [m for m in shown(app, "markdown") if m.startswith("**Start here.**")]
    assert len(guide) == 1 and "**Tables & constraints**" in guide[0] and "below" not in guide[0]
    assert "above the grid" not in guide[0]
