"""2D sharding on the dashboard: the Topology page edits topology.sharding_group_size (a bad one said with the fix,
the topology in use kept), and the Plan page says the plan is one group's and how many replicas hold it."""

from __future__ import annotations

import engine
from dashboard.plans import whatif
from engine.sweep import sweep as engine_sweep
from tests.dashboard.helpers import goto, plotly_specs, shown, workspace
from tests.factories import tutorial

GROUP = "one sharding group: ranks 0-1 of 4, 2 replicas (2D, DMPCollection)"


def _grouped(app):
    goto(app, "topology")
    app.number_input(key="topology_world_size").set_value(4).run()
    app.number_input(key="topology_sharding_group_size").set_value(2).run()
    assert not app.exception, app.exception
    return app


def test_the_topology_page_sets_the_group_size_and_says_the_replicas(app):
    _grouped(app)
    assert workspace(app)["topology"]["sharding_group_size"] == 2
    assert "2 replicas of 2 ranks, synced across groups" in shown(app, "caption")
    app.number_input(key="topology_sharding_group_size").set_value(0).run()  # back to one group: the field goes
    assert "sharding_group_size" not in workspace(app)["topology"]
    assert "one group: every table sharded over all ranks (DMP)" in shown(app, "caption")


def test_a_group_size_that_does_not_divide_says_the_fix_and_keeps_the_topology(app):
    _grouped(app)
    app.number_input(key="topology_sharding_group_size").set_value(3).run()
    assert shown(app, "error") == ["sharding_group_size 3 does not divide world_size 4: give a divisor of 4 (1, 2) "
                                   "or 0 for one group. Until then the topology keeps 4 ranks in groups of 2."]
    assert workspace(app)["topology"]["sharding_group_size"] == 2  # the last one that fits
    assert app.number_input(key="topology_sharding_group_size").value == 3  # what the user typed stays
    app.number_input(key="topology_world_size").set_value(6).run()  # 3 divides 6 now
    assert not shown(app, "error")
    assert (workspace(app)["topology"]["world_size"], workspace(app)["topology"]["sharding_group_size"]) == (6, 3)


def test_the_plan_page_shows_group_and_replicas_in_the_headline_and_the_charts(app):
    _grouped(app)
    goto(app, "plan")
    app.button(key="plan_run").click().run()
    assert not app.exception, app.exception
    plan = app.session_state["ws_plan"].plan
    assert len(plan.ranks) == 2
    badge = ":blue-badge[:material/grid_view: 2D] The plan is " + GROUP
    assert any(m.startswith(badge) for m in shown(app, "markdown"))
    specs = plotly_specs(app)
    cost = next(s for s in specs if "Estimated cost per rank" in str((s["layout"].get("title") or {}).get("text")))
    assert cost["layout"]["title"]["text"] == f"Estimated cost per rank by component<br><sup>{GROUP}</sup>"
    memory = next(s for s in specs if any(t.get("name") == "usable capacity" for t in s["data"]))
    assert GROUP in [a["text"] for a in memory["layout"]["annotations"]]
    goto(app, "tables")  # an editing page's headline strip
    assert any(GROUP in m for m in shown(app, "markdown"))


def test_a_sweep_point_opens_with_its_group_and_its_row_says_it():
    cfg = engine.parse_config(tutorial())
    points = [p.as_dict() for p in engine_sweep(cfg, ["h100_80gb"], [8], group_sizes=[None, 2],
                                         settings=engine.PlannerSettings(effort=200))]
    assert engine.parse_config(engine.point_config(cfg, "h100_80gb", 8, 512, 2)).topology.sharding_group_size == 2
    assert "sharding_group_size" not in engine.point_config(cfg, "h100_80gb", 8, 512)["topology"]
    assert whatif.points_frame(points)["group (2D)"].tolist() == ["one group", "2 x 4 replicas"]
    assert whatif.point_label(points[1]).endswith("8 GPUs (1 hosts), groups of 2 (2D), batch 512 per rank")
    assert "group (2D)" not in whatif.points_frame(points[:1])


def test_the_what_if_sweep_plans_group_sizes_and_opens_a_grouped_point(app) -> None:
    at = goto(app, "whatif")
    at.text_input(key="whatif_groups").set_value("x").run()
    assert any(e.startswith("2D groups: give ranks per group") for e in shown(at, "error"))
    assert at.button(key="whatif_sweep_run").disabled
    at.text_input(key="whatif_groups").set_value("2 3")
    from tests.dashboard.test_whatif_page import run_sweep

    points = run_sweep(at, ["h100_80gb"], [8])["points"]
    assert [(p["group_size"], p["planned"]) for p in points] == [(None, True), (2, True), (3, False)]
    assert points[2]["reason"] == "sharding_group_size 3 does not divide 8 ranks"
    at.selectbox(key="whatif_point").set_value(1).run()
    at.button(key="whatif_open").click().run()
    assert not at.exception, at.exception
    assert workspace(at)["topology"]["sharding_group_size"] == 2
