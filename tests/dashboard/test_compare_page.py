"""Compare page: saved plans side by side (with the constants that priced each), TorchRec's plan for the same
config with the config's lower bound, headline and per-rank differences with the better plan marked, tables that
move apart from renumbered ranks and the bytes that would move, DDR for CPU plans, measured beside the estimates
and measured over estimated per rank where runs exist, flagged with the calibration at hand."""

from __future__ import annotations

import copy
import time

import pytest

import engine
from db import runsink
from dashboard.plans import table_text
from dashboard.plans.measured import ratio_text
from dashboard.text import ms_text
from tests.dashboard.helpers import goto, plotly_specs, shown, values
from tests.dashboard.test_runs_page import _slow_run
from tests.factories import tutorial, with_changes


def _save_two(store) -> tuple[str, str]:
    free = tutorial()
    rw = tutorial("row_wise")
    a = store.save_plan(free, engine.plan_to_dict(engine.plan(engine.parse_config(free))), label="free choice")
    b = store.save_plan(rw, engine.plan_to_dict(engine.plan(engine.parse_config(rw))), label="all row-wise")
    return a, b


def _saved(store, cfg: dict, label: str, **changes) -> str:
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    return store.save_plan(cfg, {**plan, **changes}, label=label)


def _renumbered(cfg: dict, plan: dict, perm: list[int]) -> dict:
    """The same placement with rank r called perm[r], scored by the engine."""
    tables = copy.deepcopy(plan["plan"])
    for tp in tables.values():
        tp["ranks"] = [perm[r] for r in tp["ranks"]]
        for s in tp["shards"] or []:
            s["rank"] = perm[s["rank"]]
    parsed = engine.parse_config(cfg)
    return engine.plan_to_dict(engine.evaluate(parsed, engine.parse_plan(tables, parsed)))


def _pick(app, *tokens: str) -> None:
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{t}" for t in tokens]).run()
    assert not app.exception, app.exception


def test_the_unsaved_current_plan_alone(app):
    goto(app, "compare")
    assert app.multiselect(key="compare_pick").value == ["current"]
    assert not [h for h in app.subheader if h.value == "Differences"]


def test_a_plan_just_saved_opens_beside_the_newest_other(app, store):
    a, b = _save_two(store)
    goto(app, "save_share")
    app.button(key="save_run").click().run()
    token = app.session_state["ws_plan"].token
    assert token and token not in (a, b)
    goto(app, "compare")
    assert app.multiselect(key="compare_pick").value == [f"saved:{token}", f"saved:{b}"]


def test_clear_all_shows_the_empty_state_and_the_page_polls_only_while_a_baseline_runs(app, store, polls):
    """The browser test's 'Clear all' once left the page as it was: the page polled every second with no TorchRec
    job (a run_every fragment called on every run), and a poll's run made Streamlit drop the messages of the run
    that the click started. No job, no polling; and 'Clear all' draws the empty state at once, every time."""
    a, b = _save_two(store)
    goto(app, "compare")
    pick = app.multiselect(key="compare_pick")
    assert len(pick.value) == 2 and not shown(app, "info")
    for _ in range(2):  # the first 'Clear all' and another after picking again
        app.multiselect(key="compare_pick").set_value([]).run()
        assert not app.exception, app.exception
        assert shown(app, "info") == ["Pick one or more plans."]
        assert app.multiselect(key="compare_pick").value == []
        app.multiselect(key="compare_pick").set_value([f"saved:{a}", f"saved:{b}"]).run()
        assert not app.exception and [h.value for h in app.subheader if h.value == "Differences"]
    assert polls == []


def test_the_picks_come_back_after_a_visit_to_another_page(app, store):
    a, b = _save_two(store)
    _pick(app, b)
    goto(app, "topology")  # Streamlit forgets the picker's state there
    goto(app, "compare")
    assert app.multiselect(key="compare_pick").value == [f"saved:{b}"]
    app.multiselect(key="compare_pick").set_value([]).run()
    goto(app, "topology")
    goto(app, "compare")
    assert app.multiselect(key="compare_pick").value == [] and shown(app, "info") == ["Pick one or more plans."]


def test_two_saved_plans_side_by_side_with_their_differences(app, store):
    a, b = _save_two(store)
    _pick(app, a, b)
    summary = app.dataframe[0].value
    assert [p.split(" (")[0] for p in summary["plan"]] == ["free choice", "all row-wise"]
    assert summary["slowest rank ms"].tolist() == [ms_text(store.get_plan(t).max_rank_cost_ms) for t in (a, b)]
    titles = [s["layout"]["title"]["text"] for s in plotly_specs(app)]
    assert titles[:2] == ["Estimated cost per rank", "HBM per rank (step's peak)"]
    assert titles[2] == "B - A per rank"
    assert [t["name"].split(" (")[0] for t in plotly_specs(app)[0]["data"]] == ["free choice", "all row-wise"]
    head = app.dataframe[1].value.set_index("headline")
    pa, pb = store.get_plan(a).plan, store.get_plan(b).plan
    assert head.loc["slowest rank", "better"] == "A"
    assert head.loc["slowest rank", "B - A %"] == pytest.approx(
        (pb["max_rank_cost_ms"] / pa["max_rank_cost_ms"] - 1) * 100)
    texts = shown(app, "markdown")
    assert "**Tables:** 4 tables move; 0 stay where they are." in "\n".join(texts)
    assert any("moves 1.25 MiB of weights and optimizer state between ranks (50.0% of the 2.50 MiB B places)" in t
               for t in texts)
    moved = app.dataframe[2].value
    assert moved["change"].tolist() == ["moves"] * 4 and moved["in B"].str.startswith("row_wise").all()
    ranks = app.dataframe[3].value
    assert ranks["B - A ms"].tolist() == [table_text.ms_cell(rb["cost_ms"] - ra["cost_ms"], signed=True)
                                          for ra, rb in zip(pa["ranks"], pb["ranks"])]
    assert all(t.endswith(" ms") for t in ranks["A ms"]) and all(t.endswith("iB") for t in ranks["A peak MiB"])
    assert ranks["faster"].tolist() == ["A", "A"]
    assert any(c.startswith("No run has measured these plans yet") for c in shown(app, "caption"))
    assert summary["estimates"].tolist() == ["TorchRec's default constants for cuda"] * 2


def test_the_same_layout_on_renumbered_ranks_is_not_a_move(app, store):
    cfg = tutorial()
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    a = store.save_plan(cfg, plan, label="ours")
    b = store.save_plan(cfg, _renumbered(cfg, plan, [1, 0]), label="ranks swapped")
    _pick(app, a, b)
    texts = "\n".join(shown(app, "markdown"))
    assert "**Tables:** 0 tables move; 4 more only sit on renumbered ranks; 0 stay where they are." in texts
    assert ("moves 0 B of weights and optimizer state between ranks (0.0% of the 2.50 MiB B places), once the "
            "ranks are renumbered to keep the most in place (A's rank 0 is 1, 1 is 0); 2.50 MiB with the ranks as "
            "numbered.") in texts
    assert app.dataframe[2].value["change"].tolist() == ["renumbered ranks only"] * 4


def test_cpu_plans_compare_their_ddr(app, store):
    a = _saved(store, with_changes(tutorial(), compute_device="cpu"), "cpu free")
    b = _saved(store, with_changes(tutorial("row_wise"), compute_device="cpu"), "cpu row-wise")
    _pick(app, a, b)
    memory = next(s for s in plotly_specs(app) if "per rank (step's peak)" in s["layout"]["title"]["text"])
    assert memory["layout"]["title"]["text"] == "DDR per rank (step's peak)"
    assert values(memory["data"][0]["y"]) == pytest.approx(  # MiB: the unit of the largest (2.84 MiB)
        [r["memory_peak_ddr_bytes"] / 1024**2 for r in store.get_plan(a).plan["ranks"]])
    assert memory["layout"]["yaxis"]["title"]["text"] == "MiB"
    assert min(values(memory["data"][0]["y"])) > 0
    assert "peak DDR of a rank" in app.dataframe[1].value["headline"].tolist()
    peaks = app.dataframe[0].value["peak memory"].tolist()
    assert all(p.endswith(" DDR") and not p.startswith("0 B") for p in peaks), peaks


def test_a_plan_without_a_lower_bound_gets_its_configs(app, store):
    cfg = tutorial()
    ours = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    token = store.save_plan(cfg, {**ours, "planner": "torchrec", "lower_bound_ms": None}, label="no bound")
    assert store.get_plan(token).plan.get("lower_bound_ms") is None
    _pick(app, token)
    summary = app.dataframe[0].value
    assert summary["vs lower bound"].tolist() == [table_text.ratio_cell(ours["max_rank_cost_ms"]
                                                                        / ours["lower_bound_ms"])]
    assert any(c.startswith("no bound (") and "the bound depends on the config only" in c
               for c in shown(app, "caption"))


def test_measured_over_estimated_where_a_run_exists(app, store):
    a, b = _save_two(store)
    run = store.create_run(a, "dryrun", "fbgemm", "cpu")  # the plan is for cuda; the dry-run priced it for cpu
    runsink.record_result(store, run, {"ranks": [
        {"rank": 0, "measured_ms": 0.25, "estimated_ms": 0.3, "estimated_compute_ms": 0.2},
        {"rank": 1, "measured_ms": 0.5, "estimated_ms": 0.3, "estimated_compute_ms": 0.25}],
        "device": "cpu", "estimated_device": "cpu"})
    old = store.create_run(b, "dryrun", "torch", "cpu")  # no estimate of its own: never compared with cuda's
    runsink.record_result(store, old, {"ranks": [{"rank": 0, "measured_ms": 0.4}, {"rank": 1, "measured_ms": 0.4}]})
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}", f"saved:{b}"]).run()
    ratios = next(s for s in plotly_specs(app) if s["layout"]["title"]["text"].startswith("Measured / estimated"))
    assert [t["name"].split(" (")[0] for t in ratios["data"]][:2] == ["free choice", "all row-wise"]
    assert values(ratios["data"][0]["y"]) == pytest.approx([1.25, 2.0])  # a dry-run: kernels over compute
    flagged = next(w for w in shown(app, "warning") if w.startswith("**free choice"))
    assert "time 1.25x-2.00x" in flagged and "shards not checked" in flagged
    assert any(t.startswith("**all row-wise") and "time n/a" in t for t in shown(app, "success"))
    table = app.dataframe[-1].value
    assert table["time ratio"].tolist() == ["1.25x", "2.00x", "n/a", "n/a"]
    cost = plotly_specs(app)[0]  # runs on cpu of plans priced for cuda: not drawn over cuda's estimates
    assert cost["layout"]["title"]["text"] == "Estimated cost per rank"
    assert [t["type"] for t in cost["data"]] == ["bar", "bar"]
    assert any(c.startswith("Not drawn here: free choice (") for c in shown(app, "caption"))
    head = app.dataframe[1].value.set_index("headline")
    assert head.loc["slowest rank, measured on cpu"].tolist()[:2] == ["0.500 ms", "0.400 ms"]
    assert head.loc["slowest rank, measured on cpu", "better"] == "B"
    assert head.loc["measured / estimated on cpu (that rank)", "A"] == "2.00x"  # the run's own (cpu) estimate
    ranks = app.dataframe[3].value
    assert ranks["A measured ms"].tolist() == ["0.250 ms", "0.500 ms"]
    assert ranks["B measured ms"].tolist() == ["0.400 ms", "0.400 ms"]
    assert "Slowest rank 1: its kernels took 0.500 ms; estimated 0.250 ms for cpu, 50.0% low." in flagged
    assert "Ids: not recorded" in flagged
    assert table["embedding work"].tolist() == ["", "", "", ""]  # these runs recorded no rank's own work


def test_measured_times_beside_the_estimates_of_the_same_device(app, store):
    a = _saved(store, with_changes(tutorial(), compute_device="cpu"), "cpu free")
    b = _saved(store, with_changes(tutorial("row_wise"), compute_device="cpu"), "cpu row-wise")
    run = store.create_run(b, "validation", "gloo", "cpu")
    runsink.record_result(store, run, {"ranks": [{"rank": 0, "measured_ms": 0.5}, {"rank": 1, "measured_ms": 0.75}],
                                       "device": "cpu", "estimated_device": "cpu"})
    _pick(app, a, b)
    cost = plotly_specs(app)[0]
    assert cost["layout"]["title"]["text"] == "Estimated cost per rank (diamonds: measured)"
    diamonds = [t for t in cost["data"] if t["type"] == "scatter"]
    assert [t["name"].split(" (")[0] for t in diamonds] == ["cpu row-wise"] and values(diamonds[0]["y"]) == [0.5, 0.75]
    assert diamonds[0]["marker"]["color"] == cost["data"][1]["marker"]["color"]
    est = store.get_plan(b).plan["ranks"][1]["cost_ms"]
    head = app.dataframe[1].value.set_index("headline")
    assert head.loc["slowest rank, measured on cpu"].tolist()[:2] == ["n/a", "0.750 ms"]
    assert head.loc["measured / estimated on cpu (that rank)", "B"] == ratio_text(0.75 / est)
    assert app.dataframe[3].value["B measured / est."].tolist()[1] == table_text.ratio_cell(0.75 / est)


def test_a_run_40x_slower_than_estimated_is_flagged_on_compare_too(app, store):
    a, _ = _save_two(store)
    _slow_run(store, a)
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}"]).run()
    flagged = next(w for w in shown(app, "warning") if w.startswith("**free choice"))
    assert "time 44x-59x · peak memory 9.19x · shards yes, all 2 ranks" in flagged
    assert any(c.startswith("Time outside 0.8x-1.25x: calibrate") for c in shown(app, "caption"))
    app.button(key="compare_calibrate_cpu").click().run()
    assert not app.exception and app.session_state["ws_config"]["topology"]["compute_device"] == "cpu"


@pytest.mark.timeout(300)
def test_add_torchrecs_plan_for_the_same_config(app, store, polls):
    a, _ = _save_two(store)
    goto(app, "compare")
    app.multiselect(key="compare_pick").set_value([f"saved:{a}"]).run()
    app.button(key="compare_add_torchrec").click().run()
    assert "compare_torchrec_job" in app.session_state  # running in its own process; the page stays usable
    assert app.button(key="compare_add_torchrec").disabled
    assert polls and set(polls) == {1.0}  # its elapsed time, redrawn every second while it runs
    deadline = time.monotonic() + 240
    while "compare_torchrec_job" in app.session_state and time.monotonic() < deadline:
        time.sleep(0.5)
        app.run()  # the browser's fragment polls; here each run looks
    polls.clear()
    app.run()  # the run after the one that collected it shows the picked plans
    assert not app.exception and not shown(app, "error"), shown(app, "error")
    assert polls == []  # no job: no polling
    picked = app.multiselect(key="compare_pick").value
    assert len(picked) == 2 and picked[1] == "extra:TorchRec for free choice"
    summary = app.dataframe[0].value
    assert summary["planner"].tolist() == ["engine", "torchrec"]
    bound = store.get_plan(a).plan["lower_bound_ms"]
    torchrec = app.session_state["ws_extra_plans"]["TorchRec for free choice"]["plan"]
    assert not torchrec.lower_bound_ms  # TorchRec gives none: the page adds the config's
    assert summary["vs lower bound"].tolist() == [table_text.ratio_cell(store.get_plan(a).max_rank_cost_ms / bound),
                                                  table_text.ratio_cell(torchrec.max_rank_cost_ms / bound)]
