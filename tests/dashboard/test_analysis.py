"""What the pages compute about plans: imbalance, the table-by-rank matrix, the bottleneck story, moved
tables, measured times; checked against the engine's own per-rank numbers."""

from __future__ import annotations

import pytest

import engine
from dashboard.plans import analysis, table_matrix
from dashboard.tables import presets
from tests.dashboard.helpers import typed, typed_config
from tests.factories import tutorial, tutorial_with_cache_curve


def _plan(cfg: dict) -> dict:
    return engine.plan_to_dict(engine.plan(engine.parse_config(cfg), engine.PlannerSettings(effort=2_000)))


@pytest.fixture(scope="module")
def synthetic() -> tuple[dict, dict]:
    cfg = presets.synthetic(presets.SyntheticSpec(count=40, seed=3))
    return cfg, _plan(cfg)


def test_matrix_columns_add_up_to_the_plans_ranks(synthetic):
    cfg, plan = synthetic
    m = table_matrix.table_rank_matrix(typed(plan, cfg), typed_config(cfg))
    assert m.values["cost_ms"].shape == (40, 8) and m.tables == list(plan["plan"])
    for r in plan["ranks"]:
        assert m.values["cost_ms"][:, r["rank"]].sum() == pytest.approx(r["cost_ms"])
        assert m.values["hbm_bytes"][:, r["rank"]].sum() == r["hbm_bytes"]
    heavy = table_matrix.heaviest_tables(m, "hbm_bytes", 5)
    totals = m.values["hbm_bytes"].sum(axis=1)
    assert totals[heavy[0]] == totals.max() and len(heavy) == 5


def test_imbalance_and_bottleneck_story(synthetic):
    cfg, plan = synthetic
    imb = analysis.imbalance(typed(plan, cfg))
    costs = [r["cost_ms"] for r in plan["ranks"]]
    assert imb.max_ms == max(costs) and imb.ratio == pytest.approx(max(costs) / (sum(costs) / len(costs)))
    assert imb.bottleneck_rank == plan["bottleneck_rank"]
    m = table_matrix.table_rank_matrix(typed(plan, cfg), typed_config(cfg))
    lines = analysis.bottleneck(typed(plan, cfg), m)
    assert lines[0].startswith(f"Rank {imb.bottleneck_rank} is the slowest")
    top = m.tables[int(m.values["cost_ms"][:, imb.bottleneck_rank].argmax())]
    assert any(top in line for line in lines)
    assert any("lower bound" in line for line in lines)


def test_bottleneck_mentions_a_full_hbm():
    plan = {"plan": {}, "lower_bound_ms": None, "ranks": [
        {"rank": 0, "cost_ms": 2.0, "fwd_compute_ms": 2.0, "hbm_bytes": 95, "hbm_cap_bytes": 100},
        {"rank": 1, "cost_ms": 1.0, "fwd_compute_ms": 1.0, "hbm_bytes": 10, "hbm_cap_bytes": 100}]}
    lines = analysis.bottleneck(typed(plan))
    assert lines[0] == "Rank 0 is the slowest at 2.00 ms per step, 33.3% above the average rank (1.50 ms)."
    assert lines[1] == "Most of its time is forward compute: 2.00 ms (100%)."
    assert lines[-1] == ("Its HBM is 95% full with what it stores (95 B of 100 B usable), which limits what can move "
                         "to it.")
    peaked = dict(plan, ranks=[dict(r, memory_peak_hbm_bytes=98) for r in plan["ranks"]])
    assert analysis.bottleneck(typed(peaked))[-1].endswith("can move to it; at the step's peak it needs 98 B.")


def test_moved_tables_between_two_placements():
    tw = engine.load_config("examples/tutorial_table_wise.json")
    rw = engine.load_config("examples/tutorial_row_wise.json")
    a, b = engine.plan_to_dict(engine.plan(tw)), engine.plan_to_dict(engine.plan(rw))
    moved = analysis.moved_tables(typed(a, tw), typed(b, rw))
    assert moved["table"].tolist() == [t.name for t in tw.tables]
    assert moved["after"].str.startswith("row_wise").all()
    assert analysis.moved_tables(typed(a, tw), typed(a, tw)).empty


def test_table_frame_and_compare_frames():
    cfg = tutorial()
    plan = _plan(cfg)
    frame = analysis.table_frame(typed(plan, cfg), typed_config(cfg))
    assert frame["table"].tolist() == [t["name"] for t in cfg["tables"]]
    assert frame.loc[0, "shards"] == "1 x [4096, 64]"
    both = analysis.compare_frame({"a": typed(plan, cfg), "b": typed(plan, cfg)})
    assert len(both) == 4 and set(both["plan"]) == {"a", "b"}
    summary = analysis.summary_frame({"a": typed(plan, cfg)})
    assert summary.loc[0, "slowest rank ms"] == pytest.approx(plan["max_rank_cost_ms"])


def test_the_table_frame_says_which_cache_size_a_plan_gave_and_why():
    cfg = tutorial_with_cache_curve()
    plan = _plan(cfg)
    frame = analysis.table_frame(typed(plan, cfg), typed_config(cfg)).set_index("table")
    note = plan["plan"]["large_table_1"]["cache_note"]
    assert note and "ids.parquet" in note
    clf = plan["plan"]["large_table_1"].get("cache_load_factor")
    # the column: the load factor and where it comes from, short enough to read in the frame; the why, whole, below it
    assert frame.loc["large_table_1", "cache"] == (f"{clf:.4g} (from the curve)" if clf is not None else
                                                   f"{engine.FIELDS['cache_load_factor'].default:.4g} (default)")
    assert frame.loc["large_table_0", "cache"] == ""  # no UVM cache
    assert analysis.cache_notes(typed(plan, cfg)) == [(note, ["large_table_1"])]


def test_cache_notes_name_each_note_once_with_its_tables():
    cfg = tutorial()
    cfg["constraints"] = {t["name"]: {"sharding_types": ["table_wise"], "compute_kernels": ["fused_uvm_caching"]}
                         for t in cfg["tables"]}
    cfg["constraints"]["small_table_1"]["cache_load_factor"] = 0.5
    plan = typed(_plan(cfg), cfg)
    frame = analysis.table_frame(plan, typed_config(cfg)).set_index("table")
    assert frame.loc["large_table_0", "cache"] == "0.2 (default)"
    assert frame.loc["small_table_1", "cache"] == "0.5 (typed)"
    notes = analysis.cache_notes(plan)
    assert [names for _, names in notes] == [["large_table_0", "large_table_1", "small_table_0"], ["small_table_1"]]
    assert notes[0][0].startswith("cache load factor 0.2 (the default)")


def test_run_metrics_as_a_table_and_progress():
    metrics = [(0, "step_ms", 2.0, "ms"), (0, "step_ms", 4.0, "ms"), (1, "step_ms", 5.0, "ms"),
               (0, "weight_bytes", 10.0, "bytes")]
    table = analysis.metrics_table(metrics)
    assert list(table.columns) == ["rank", "step_ms [ms]", "weight_bytes [bytes]"]
    assert table["step_ms [ms]"].tolist() == [3.0, 5.0]
    assert analysis.run_progress("$ engine dryrun 1/2\nrank 3/8 done\n") == pytest.approx(3 / 8)
    assert analysis.run_progress("$ python -m engine dryrun a/b\nstarting\n") is None


def test_headroom_is_the_tightest_rank_and_parts_come_from_the_plan():
    plan = {"ranks": [{"rank": 0, "hbm_bytes": 10, "hbm_cap_bytes": 100, "ddr_bytes": 0, "ddr_cap_bytes": 0},
                      {"rank": 1, "hbm_bytes": 70, "hbm_cap_bytes": 100, "ddr_bytes": 0, "ddr_cap_bytes": 0}]}
    assert analysis.headroom(typed(plan), "hbm") == analysis.Headroom(rank=1, free_bytes=30, cap_bytes=100)
    assert analysis.headroom(typed(plan), "ddr") is None and analysis.device_memory(typed(plan)) == "hbm"
    over = {"ranks": [dict(plan["ranks"][0], hbm_bytes=130)]}
    assert analysis.headroom(typed(over), "hbm").free_bytes == -30
    assert analysis.memory_parts(typed(plan)) is None  # plans without parts
    mem = [{"weights_bytes": 8 * (i + 1), "optimizer_bytes": 2, "output_grad_bytes": 1, "cache_bytes": 0,
            "held_bytes": 10, "peak_bytes": 11 + 8 * i, "peak_hbm_bytes": 80 + i, "peak_ddr_bytes": 0,
            "reserved_bytes": 5} for i in range(2)]  # engine.memory's MemoryParts.as_dict()
    flat = {"ranks": [{**r, **{f"memory_{k}": v for k, v in m.items()}} for r, m in zip(plan["ranks"], mem)]}
    want = {"weights": [8.0, 16.0], "optimizer": [2.0, 2.0], "output grad": [1.0, 1.0]}
    assert analysis.memory_parts(typed(flat)) == want  # as plan_to_dict writes them
    assert analysis.memory_parts(typed({"ranks": [dict(r, memory=m) for r, m in zip(plan["ranks"], mem)]})) == want
    assert analysis.peak_bytes(typed(flat).ranks[1], "hbm") == 81
    assert analysis.peak_bytes(typed(plan).ranks[1], "hbm") == 70
    assert analysis.headroom(typed(flat), "hbm") == analysis.Headroom(rank=1, free_bytes=19, cap_bytes=100)
