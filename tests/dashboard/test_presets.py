"""Presets: the tutorial, DLRM on Criteo 1TB, the seeded synthetic generator, topology presets."""

from __future__ import annotations

import pytest

import engine
from dashboard.tables import presets
from tests.factories import tutorial


def test_tutorial_preset_is_the_examples_file():
    assert engine.parse_config(presets.tutorial()) == engine.parse_config(tutorial())


def test_dlrm_criteo_1tb_has_the_26_mlperf_tables():
    cfg = presets.dlrm_criteo_1tb()
    parsed = engine.parse_config(cfg)
    assert len(parsed.tables) == 26 and {t.embedding_dim for t in parsed.tables} == {128}
    rows = [t.num_embeddings for t in parsed.tables]
    assert rows.count(40_000_000) == 5 and rows[5] == 3 and rows[10] == 3_067_956
    assert sum(rows) == 204_184_588  # sum of MLPerf's --num_embeddings_per_feature
    assert parsed.constraint("t_cat_20").pooling_factors == (100.0,)
    assert parsed.topology.world_size == 8


def test_synthetic_is_seeded_valid_and_in_range():
    spec = presets.SyntheticSpec(count=200, min_rows=100, max_rows=5000, seed=7)
    a, b = presets.synthetic(spec), presets.synthetic(spec)
    assert a == b
    assert presets.synthetic(presets.SyntheticSpec(count=200, min_rows=100, max_rows=5000, seed=8)) != a
    parsed = engine.parse_config(a)
    assert len(parsed.tables) == 200
    assert all(100 <= t.num_embeddings <= 5000 for t in parsed.tables)
    assert presets.synthetic(spec, {"world_size": 3})["topology"] == {"world_size": 3}
    with pytest.raises(ValueError, match="min rows"):
        presets.synthetic(presets.SyntheticSpec(min_rows=10, max_rows=5))


@pytest.mark.parametrize("key", list(presets.CLUSTERS))
def test_every_cluster_preset_is_a_valid_topology(key):
    topo = presets.cluster_topology(key, {"world_size": 1, "batch_size": 1024})
    t = engine.parse_config({"tables": [{"name": "t", "num_embeddings": 1, "embedding_dim": 1}],
                             "topology": topo}).topology
    c = presets.CLUSTERS[key]
    assert (t.world_size, t.local_world_size, t.batch_size) == (c.world_size, c.local_world_size, 1024)


def test_gpu_preset_sets_memory_and_bandwidth_only():
    topo = presets.gpu_topology("h100_80gb", {"world_size": 16, "local_world_size": 8})
    assert topo["world_size"] == 16 and topo["hbm_cap"] == 80 * presets.GIB
    assert topo["hbm_mem_bw"] == pytest.approx(3350 * presets.GIB / 1000)


def test_topology_form_round_trip_in_display_units():
    form = presets.topology_form({"world_size": 2})
    assert form["hbm_cap"] == 32.0 and form["hbm_mem_bw"] == pytest.approx(897.0)
    assert form["storage_reservation"] == pytest.approx(15.0)
    back = presets.form_topology(form)
    assert engine.parse_config({"tables": [{"name": "t", "num_embeddings": 1, "embedding_dim": 1}],
                                "topology": back}).topology.hbm_cap == 32 * presets.GIB
    broken = presets.topology_form({"world_size": 4, "local_world_size": 3, "ddr_cap": 2**30, "batch_size": 0})
    assert (broken["world_size"], broken["local_world_size"], broken["hosts"]) == (4, 4, 1)  # the fields that fit
    assert broken["ddr_cap"] == 1.0 and broken["batch_size"] == 512  # kept, or the default


def test_presets_in_use_and_ranks_over_hosts():
    assert presets.cluster_in_use(presets.TUTORIAL_TOPOLOGY) == "tutorial"
    for key in presets.CLUSTERS:
        topo = presets.cluster_topology(key, {"batch_size": 64, "optimizer": "adam"})
        assert presets.cluster_in_use(presets.form_topology(presets.topology_form(topo))) == key
    assert presets.cluster_in_use({**presets.TUTORIAL_TOPOLOGY, "world_size": 4, "local_world_size": 4}) is None
    assert presets.gpu_in_use(presets.cluster_topology("dgx_a100_2", {})) == "a100_80gb"
    assert presets.gpu_in_use({"world_size": 2, "hbm_cap": 3 * presets.GIB}) is None
    assert presets.topology_form(presets.cluster_topology("dgx_h100_4", {}))["hosts"] == 4
    assert [presets.split_ranks(w, h) for w, h in ((4, 1), (4, 2), (4, 3), (2, 4))] == [4, 2, None, None]
