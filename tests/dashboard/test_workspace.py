"""The working view (issue 12): the editing pages carry the headline of the config's plan, updated on every edit
(what changed since the last plan, no numbers while the config has errors, a refusal's reason); a newcomer's first
view says what to do next. The headline's numbers themselves: dashboard.plans.headline."""

from __future__ import annotations

import dataclasses

import pytest

import engine
from dashboard.plans import headline
from dashboard.tables import presets
from dashboard.text import ms_text
from tests.dashboard.helpers import edit, goto, plain, shown, workspace


def _strip(at) -> list[str]:
    """The headline's lines as a person reads them: the figure's line, then the change line (one element: the
    change line is its small grey second line)."""
    texts = [m for m in shown(at, "markdown") if "Slowest rank" in m or "Not planned" in m or "Does not fit" in m
             or "No plan]" in m]
    lines = []
    for t in texts:
        first, _, since = t.partition("\n:small[:gray[")
        lines += [first, since.removesuffix("]]")] if since else [first]
    return lines


def _ms(plan: engine.Plan) -> str:
    return ms_text(plan.max_rank_cost_ms)  # 3 significant digits, as the strip shows it


def test_the_tables_page_carries_the_plan_of_the_config_as_edited(app):
    first = app.session_state["ws_plan"]  # planned on the first view: the headline needs no click
    assert first.matches(workspace(app)) and first.planner == "ours"
    strip = _strip(app)
    assert strip[0].startswith(":green-badge[:material/check: Fits] Slowest rank **") and _ms(first.plan) in strip[0]
    assert "**1.000x** the lower bound" in strip[0] and "peak HBM" in strip[0] and "of 27.20 GiB" in strip[0]
    assert strip[1] == "Plan by Ours (engine), 4 tables on 2 ranks, from scratch: the first plan of this session."

    edit(app, "tables_grid", edited={0: {"pooling_factor": 500.0}})  # large_table_0 now dominates its rank
    second = app.session_state["ws_plan"]
    assert second is not first and second.matches(workspace(app))
    assert engine.config_to_dict(second.config)["constraints"]["large_table_0"]["pooling_factors"] == [500.0]
    strip = _strip(app)
    assert _ms(second.plan) in strip[0] and _ms(first.plan) not in strip[0]
    change = headline.change(first.plan, second.plan)
    assert second.replanned  # an edit: re-planned from the plan on screen
    assert strip[1].startswith("Plan by Ours (engine), 4 tables on 2 ranks, re-planned from the plan on screen: ")
    assert strip[1].endswith(f". Since the last plan: {headline.change_text(change)}.")
    assert f"slowest rank {_ms(first.plan)[:-3]} → {_ms(second.plan)}" in strip[1]
    assert app.session_state["ws_previous_plan"] is first
    sidebar = [plain(c.value) for c in app.sidebar.caption]
    assert f"Plan: slowest rank {_ms(second.plan)} by Ours (engine)" in sidebar


def test_the_topology_page_carries_it_too(app):
    goto(app, "topology")
    before = app.session_state["ws_plan"]
    app.number_input(key="topology_world_size").set_value(4).run()
    after = app.session_state["ws_plan"]
    assert after is not before and len(after.plan.ranks) == 4 and after.matches(workspace(app))
    assert _ms(after.plan) in _strip(app)[0] and "4 tables on 4 ranks" in _strip(app)[1]


def test_a_config_error_shows_what_to_fix_and_no_stale_number(app):
    plan = app.session_state["ws_plan"].plan
    edit(app, "tables_grid", edited={0: {"dim": 0}, 2: {"rows": -5}})
    strip = _strip(app)
    assert strip == [":orange-badge[:material/edit: Not planned] Fix 2 rows to plan (see the issue column on Tables & "
                     "constraints)."]
    sidebar = [plain(c.value) for c in app.sidebar.caption]
    everything = " ".join(shown(app, "markdown") + shown(app, "caption") + sidebar)
    assert "Slowest rank" not in everything and _ms(plan) not in everything
    assert "No plan of this config yet (the last plan was made for an earlier config)" in [
        plain(c.value) for c in app.sidebar.caption]
    edit(app, "tables_grid", edited={0: {"dim": 64}, 2: {"rows": 1024}})  # fixed: the same plan again
    assert app.session_state["ws_plan"].matches(workspace(app)) and _ms(plan) in _strip(app)[0]


def test_a_topology_error_says_to_fix_the_topology(app):
    goto(app, "topology")
    app.number_input(key="topology_storage_reservation").set_value(150.0).run()  # percent: at most 99
    strip = _strip(app)
    assert len(strip) == 1 and strip[0].startswith(":orange-badge[:material/edit: Not planned] Fix the topology to "
                                                   "plan: ")


def test_a_config_nothing_fits_says_why_in_one_line(app):
    goto(app, "topology")
    app.number_input(key="topology_hbm_cap").set_value(0.0001)
    app.number_input(key="topology_ddr_cap").set_value(0.0001).run()
    strip = _strip(app)
    assert len(strip) == 1 and strip[0].startswith(":red-badge[:material/block: Does not fit] ")
    assert "not fit" in strip[0] and "\n" not in strip[0] and "What would help" not in strip[0]
    assert not app.session_state["ws_plan"].matches(workspace(app))


# ---- the first view -------------------------------------------------------------------------------


def _guide(at) -> list[str]:
    return [m for m in shown(at, "markdown") if m.startswith("**Start here.**")]


def test_a_newcomer_sees_what_to_do_next_until_they_dismiss_it(app):
    guide = _guide(app)
    assert len(guide) == 1 and "TorchRec tutorial's 4 tables" in guide[0] and "Edit a table" in guide[0]
    assert "Open **Plan**" in guide[0] and "**Save & share**" in guide[0]
    assert _strip(app) and "Slowest rank" in _strip(app)[0]  # the plan it points at is there already
    app.run()
    assert _guide(app)  # a rerun alone is no action
    app.button(key="ws_guide_dismiss").click().run()
    assert not _guide(app)
    goto(app, "topology")
    goto(app, "tables")
    assert not _guide(app)


@pytest.mark.parametrize("action", ["edit", "plan page", "save page", "preset"])
def test_the_guide_goes_once_the_user_acts(app, action):
    assert _guide(app)
    if action == "edit":
        edit(app, "tables_grid", edited={1: {"dim": 32}})
    elif action in ("plan page", "save page"):
        goto(app, action.split()[0].replace("save", "save_share"))
        goto(app, "tables")
    else:
        app.selectbox(key="tables_preset").set_value("dlrm_criteo_1tb").run()
        app.button(key="tables_load_preset").click().run()
        assert len(workspace(app)["tables"]) == 26
    assert not _guide(app)
    edit(app, "tables_grid", edited={})  # and it does not come back
    assert not _guide(app)


def test_the_guide_is_for_the_first_view_only(app):
    goto(app, "topology")
    assert _guide(app)  # the topology page shows it too, under the headline
    assert presets.tutorial()["tables"] == workspace(app)["tables"]


# ---- the headline's numbers ----------------------------------------------------------------------


def _plan(costs: list[float], placements: dict[str, list[int]], hbm: list[int], cap: int = 100) -> engine.Plan:
    """A hand-made plan: each rank's cost (its max_rank_cost_ms the slowest), each table on its ranks."""
    return engine.Plan(
        tables={t: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, tuple(r), None)
                for t, r in placements.items()},
        ranks=tuple(engine.RankStats(rank=i, hbm_bytes=h, ddr_bytes=0, hbm_cap_bytes=cap, ddr_cap_bytes=1000,
                                     perf=engine.Perf(fwd_compute=c)) for i, (c, h) in enumerate(zip(costs, hbm))),
        lower_bound_ms=1.0)


def test_the_headline_says_fits_tight_or_over_as_the_engine_does():
    """The step's peak against the usable memory (the device less the dense model's reservation): under it fits;
    over it but within the device is tight (no out-of-memory note from the engine); the engine's note is over."""
    def with_peak(peak: int, notes=()) -> engine.Plan:
        plan = _plan([1.0, 1.0], {"a": [0]}, [40, 40])
        ranks = tuple(dataclasses.replace(r, memory=engine.MemoryParts(peak_hbm_bytes=peak if r.rank == 0 else 10))
                      for r in plan.ranks)
        return dataclasses.replace(plan, ranks=ranks, notes=tuple(notes))

    fits, tight = headline.headline(with_peak(90)), headline.headline(with_peak(110))
    over = headline.headline(with_peak(130, [engine.OUT_OF_MEMORY + " on 1 of 2 ranks: ..."]))
    assert (fits.fits, fits.into_reservation) == (True, False)
    assert (tight.fits, tight.into_reservation) == (True, True) and not tight.memory[0].fits
    assert (over.fits, over.into_reservation) == (False, False)


def test_headline_numbers_and_what_changed():
    before = _plan([1.92, 1.5], {"a": [0], "b": [1], "c": [1]}, [40, 90])
    after = _plan([1.8, 2.1], {"a": [1], "b": [1], "d": [0]}, [20, 120])
    h = headline.headline(after)
    assert (h.tables, h.ranks, h.slowest_ms, h.slowest_rank) == (3, 2, 2.1, 1)
    assert h.vs_lower_bound == pytest.approx(2.1) and not h.fits
    assert [(m.kind, m.rank, m.peak_bytes, m.cap_bytes) for m in h.memory] == [("hbm", 1, 120, 100)]  # no DDR used
    assert headline.memory_text(h.memory[0]) == "peak HBM 120 B of 100 B (120%, rank 1)"
    c = headline.change(before, after)
    assert (c.moved, c.added, c.removed, c.fits_before, c.fits_after, c.kept) == (1, 1, 1, True, False, 2)
    assert headline.change_text(c) == ("slowest rank 1.92 → 2.10 ms (+9%); 1 table placed differently; 1 table added; "
                                       "1 table removed; no longer fits")
    same = headline.change(before, before)
    assert headline.change_text(same) == "slowest rank 1.92 → 1.92 ms (same); no table placed differently"
    small = headline.change(before, _plan([1.925, 1.5], {"a": [0], "b": [1], "c": [1]}, [40, 90]))
    assert headline.change_text(small) == "slowest rank 1.92 → 1.93 ms (+0.3%); no table placed differently"
    tiny = headline.change(_plan([0.005468123, 1e-3], {"a": [0]}, [1, 1]), _plan([0.0054712, 1e-3], {"a": [0]}, [1, 1]))
    assert headline.change_text(tiny).startswith("slowest rank 0.00547 → 0.00547 ms")  # 3 significant digits
    other = headline.change(before, _plan([40.0, 30.0], {"x": [0], "y": [1]}, [40, 90]))
    assert headline.change_text(other) == "slowest rank 1.92 → 40.0 ms (x21); 2 tables added; 3 tables removed"
