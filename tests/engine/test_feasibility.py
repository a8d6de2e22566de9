"""Where memory is tight, the planner still finds a plan: wherever TorchRec's planner finds one, and
where it gives up."""

import pytest

from bench.suite import criteo_1tb, tight
from engine import PlanningError, parse_config, plan
from engine.torchrec_compat import torchrec_plan
from tests.factories import within_memory


@pytest.mark.parametrize("hbm_share", [0.3, 0.15])
def test_tight_criteo_plans_where_torchrec_does(hbm_share):
    cfg = parse_config(tight(criteo_1tb(8), hbm_share))
    theirs = torchrec_plan(cfg)
    ours = plan(cfg)
    assert within_memory(cfg, ours) and within_memory(cfg, theirs)
    assert any("fused_uvm" in tp.compute_kernel.value for tp in ours.tables.values())
    assert any("HBM demand exceeded" in n for n in ours.notes)


def test_hbm_too_small_for_the_buffers_is_refused_with_the_numbers():
    cfg = parse_config(tight(criteo_1tb(8), 0.0001))
    with pytest.raises(PlanningError) as e:
        plan(cfg)
    assert "does not fit" in str(e.value) and "HBM" in str(e.value)


def test_tables_larger_than_all_memory_are_refused_before_any_option_is_priced():
    from bench.suite import synthetic
    from engine.enumerate import _priced

    cfg = synthetic(3_000, 64, seed=2)
    cfg["topology"].update(hbm_cap=2**30, ddr_cap=2**30)
    before = _priced.cache_info().misses
    with pytest.raises(PlanningError) as e:
        plan(parse_config(cfg))
    assert _priced.cache_info().misses == before  # one pass over the tables, nothing priced
    text = str(e.value)
    assert "The tables do not fit: together they need at least" in text and "weights and optimizer state" in text
    assert "64 ranks have 54.40 GiB HBM + 64.00 GiB DDR usable" in text and "add ranks" in text


def test_a_config_that_cannot_be_packed_is_refused_within_the_effort():
    # three tables of 60% of a rank each on two ranks, table-wise only: the totals fit (180% of 200%) and each
    # piece fits, but no two share a rank; refused once the effort is spent, saying how to try more
    rows = 2**20
    tables = [{"name": f"t{i}", "num_embeddings": rows, "embedding_dim": 64, "feature_names": [f"f{i}"]}
              for i in range(3)]
    cfg = {"tables": tables, "constraints": {f"t{i}": {"sharding_types": ["table_wise"]} for i in range(3)},
           "topology": {"world_size": 2, "compute_device": "cpu", "ddr_cap": int(rows * 64 * 4 / 0.6 / 0.9),
                        "batch_size": 8}}
    with pytest.raises(PlanningError) as e:
        plan(parse_config(cfg), __import__("engine").PlannerSettings(effort=2))
    assert "does not fit" in str(e.value)
    assert "ways to choose the options were tried before the effort ran out" in str(e.value)
    assert "a larger --effort" in str(e.value)
