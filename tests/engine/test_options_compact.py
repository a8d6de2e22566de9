"""Options are priced on their distinct shard shapes only (a row split on 1,024 ranks has at most three); what
placement reads from them is exactly what pricing every shard gives."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from bench.suite import synthetic
from engine.enumerate import table_options
from engine.geometry import geometry
from engine.estimate import estimate_shards

CONFIGS = {
    "cuda 2 hosts": synthetic(12, 16, seed=3),
    "cuda 1,024 ranks": synthetic(4, 1024, seed=4, max_rows=5e3),  # more ranks than rows: empty shards
    "cpu": synthetic(6, 4, seed=5, device="cpu", max_rows=1e5),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_compact_options_match_pricing_every_shard(name):
    cfg = engine.parse_config(CONFIGS[name])
    seen = 0
    for i, table in enumerate(cfg.tables):
        for o in table_options(cfg, i):
            offsets, sizes = geometry(table, o.sharding_type, cfg.topology, int(o.sizes[0][1]))
            assert np.array_equal(o.offsets, offsets) and np.array_equal(o.sizes, sizes)
            full = estimate_shards(table, cfg.constraint(table.name), cfg.topology, o.sharding_type, o.kernel,
                                   sizes[:, 0], sizes[:, 1])
            for field in ("perf_ms", "hbm_bytes", "ddr_bytes", "input_bytes", "output_bytes"):
                assert np.array_equal(getattr(o.est, field), getattr(full, field)), (o.label, field)
            assert o.num_shards == len(sizes)
            assert o.total_cost_ms == pytest.approx(full.cost_ms.sum(), rel=1e-12)
            assert o.max_shard_cost_ms == full.cost_ms.max()
            assert o.total_hbm_bytes == full.hbm_bytes.sum() and o.piece_hbm_bytes == full.hbm_bytes.max()
            assert o.total_ddr_bytes == full.ddr_bytes.sum() and o.piece_ddr_bytes == full.ddr_bytes.max()
            seen += 1
    assert seen > 3 * len(cfg.tables)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_table_priced_alone_or_with_all_others_gives_the_same_bits(device):
    # the dashboard re-prices one edited table alone; the command line prices all at once: same plan either way
    from engine.enumerate import _priced, all_table_options

    cfg = engine.parse_config(synthetic(60, 8, seed=7, device=device, max_rows=1e6))
    _priced.cache_clear()
    batch = all_table_options(cfg)
    for i in range(len(cfg.tables)):
        _priced.cache_clear()
        for a, b in zip(batch[i], table_options(cfg, i), strict=True):
            assert a.summary == b.summary
            for field in ("perf_ms", "hbm_bytes", "ddr_bytes", "input_bytes", "output_bytes"):
                assert np.array_equal(getattr(a.est, field), getattr(b.est, field))
