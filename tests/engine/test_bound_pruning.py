"""The lower bound leaves dominated options out of its duals (at 100,000 tables it took 38 s with them): the bound
is the same, and a dominated option is one another option of its table beats on cost, piece and memory."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from bench.suite import criteo_1tb, synthetic, tight
from engine.enumerate import all_table_options
from engine.planner import Placement, _placeable
from engine.strategy import dominated, relaxed_bound_ms

CASES = {
    "synthetic-100x16": synthetic(100, 16, seed=0),
    "tight-100x16": tight(synthetic(100, 16, seed=0), 0.6),
    "tight-criteo-8": tight(criteo_1tb(8), 0.3),
    "cpu": synthetic(24, 4, seed=0, max_rows=2e5, batch_size=256, device="cpu"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pruned_bound_equals_the_full_one(name):
    cfg = engine.parse_config(CASES[name])
    _, arr = _placeable(cfg, all_table_options(cfg))
    w = cfg.topology.world_size
    probe = Placement(cfg.topology)
    args = (arr, w, probe.hbm_cap * w, probe.ddr_cap * w)
    assert relaxed_bound_ms(*args) == relaxed_bound_ms(*args, prune=False)


def test_dominated_means_beaten_on_every_count():
    cfg = engine.parse_config(CASES["tight-100x16"])
    _, arr = _placeable(cfg, all_table_options(cfg))
    d = dominated(arr)
    assert 0 < d.sum() < len(d)
    x = np.stack([arr.cost_ms, arr.piece_ms, arr.hbm_bytes, arr.ddr_bytes], axis=1)
    for i in np.flatnonzero(d)[:200]:
        same = np.flatnonzero(arr.table == arr.table[i])
        assert any((x[j] <= x[i]).all() and ((x[j] < x[i]).any() or j < i) for j in same if j != i)
    for t in range(arr.num_tables):  # every table keeps an option
        assert (~d[arr.table == t]).any()
