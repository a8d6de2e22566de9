"""Topology page: inputs in GiB and GB/s land in the config in bytes and bytes/ms; presets; errors."""

from __future__ import annotations

import pytest

from dashboard import presets
from tests.dashboard.helpers import goto, shown, workspace

GIB = 1024**3


def test_inputs_change_the_config_in_config_units(app):
    goto(app, "topology")
    app.number_input(key="topology_world_size").set_value(16)
    app.number_input(key="topology_local_world_size").set_value(8)
    app.number_input(key="topology_hbm_cap").set_value(80.0)
    app.number_input(key="topology_inter_host_bw").set_value(25.0)
    app.radio(key="topology_compute_device").set_value("cuda")
    app.selectbox(key="topology_optimizer").set_value("rowwise_adagrad")
    app.run()
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"], topo["optimizer"]) == (16, 8, "rowwise_adagrad")
    assert topo["hbm_cap"] == 80 * GIB
    assert topo["inter_host_bw"] == pytest.approx(25 * GIB / 1000)
    assert shown(app, "success") == ["2 host(s) x 8 rank(s), cuda; usable per rank: 68.00 GiB HBM, 128.00 GiB DDR."]


def test_a_topology_that_does_not_divide_says_so(app):
    goto(app, "topology")
    app.number_input(key="topology_world_size").set_value(4)
    app.number_input(key="topology_local_world_size").set_value(3).run()
    assert shown(app, "error") == ["topology.local_world_size: must divide world_size (4) evenly, got 3"]
    goto(app, "tables")  # the tables page points at the topology too
    assert any("fix it on the Topology page" in w for w in shown(app, "warning"))


def test_cluster_and_gpu_presets_fill_the_inputs(app):
    goto(app, "topology")
    app.selectbox(key="topology_cluster").set_value("dgx_h100_4").run()
    app.button(key="topology_apply_cluster").click().run()
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (32, 8)
    assert app.number_input(key="topology_world_size").value == 32
    assert app.number_input(key="topology_hbm_cap").value == pytest.approx(80.0)
    app.selectbox(key="topology_gpu").set_value("h200_141gb").run()
    app.button(key="topology_apply_gpu").click().run()
    topo = workspace(app)["topology"]
    assert topo["world_size"] == 32 and topo["hbm_cap"] == int(presets.GPUS["h200_141gb"].hbm_gib * GIB)
    assert app.number_input(key="topology_hbm_mem_bw").value == pytest.approx(4800.0)


def test_topology_survives_a_trip_to_another_page(app):
    goto(app, "topology")
    app.number_input(key="topology_batch_size").set_value(4096).run()
    goto(app, "plan")
    goto(app, "topology")
    assert app.number_input(key="topology_batch_size").value == 4096
    assert workspace(app)["topology"]["batch_size"] == 4096
