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
