"""bench.replan's growth cases: the largest tables grown, a case run end to end and its row in the report."""

from bench import replan as bench_replan
from bench.suite import criteo_1tb, synthetic


def test_grow_largest_grows_the_three_largest_tables_only():
    raw = criteo_1tb(8)
    grown = bench_replan.grow_largest(raw)
    before = {t["name"]: t["num_embeddings"] for t in raw["tables"]}
    changed = {t["name"] for t in grown["tables"] if t["num_embeddings"] != before[t["name"]]}
    assert changed == {"cat_0", "cat_9", "cat_19"}  # the first three of the five 40M-row tables
    assert all(t["num_embeddings"] == 2 * before[t["name"]] for t in grown["tables"] if t["name"] in changed)
    assert raw["tables"][0]["num_embeddings"] == before["cat_0"]  # the input is left as it was


def test_a_growth_case_runs_and_is_reported(tmp_path):
    c = bench_replan.run_case("synthetic-24x4", synthetic(24, 4, seed=1), "largest")
    assert c["grown"] == "the 3 largest tables" and c["tables"] == 24 and c["ranks"] == 4
    assert c["scratch_moved_bytes"] > 0 and 0 <= c["move_ratio"] <= 1 and c["step_ratio"] > 0
    md = bench_replan.markdown({"command": "python -m bench.replan", "date": "today", "cases": [c]})
    assert "| synthetic-24x4 | the 3 largest tables | 24 x 4 |" in md
    assert ("RUNS" in dir(bench_replan) and ("criteo-1tb-8", "largest") in bench_replan.RUNS
            and ("synthetic-200x8", "largest") in bench_replan.RUNS)


def test_criteo_grown_is_held_by_its_floor():
    """Criteo on 8 ranks with its three largest tables grown 2x: ranks full of them must send bytes away; the
    floor (what any plan with HBM kernels moves) is above zero and no more than the re-plan moves."""
    c = bench_replan.run_case("criteo-1tb-8", criteo_1tb(8), "largest")
    assert 0 < c["floor_bytes"] <= c["moved_bytes"] <= c["scratch_moved_bytes"]
    assert c["step_ratio"] <= bench_replan.STEP_TARGET
