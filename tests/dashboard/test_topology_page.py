"""Topology page: inputs in GiB and GB/s land in the config in bytes and bytes/ms; presets; errors."""

from __future__ import annotations

import pytest

from dashboard.tables import presets
from tests.dashboard.helpers import goto, shown, workspace

GIB = 1024**3


def test_inputs_change_the_config_in_config_units(app):
    goto(app, "topology")
    app.number_input(key="topology_world_size").set_value(16)
    app.number_input(key="topology_hosts").set_value(2)
    app.number_input(key="topology_hbm_cap").set_value(80.0)
    app.number_input(key="topology_inter_host_bw").set_value(25.0)
    app.radio(key="topology_compute_device").set_value("cuda")
    app.selectbox(key="topology_optimizer").set_value("rowwise_adagrad")
    app.run()
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"], topo["optimizer"]) == (16, 8, "rowwise_adagrad")
    assert topo["hbm_cap"] == 80 * GIB
    assert topo["inter_host_bw"] == pytest.approx(25 * GIB / 1000)
    assert shown(app, "success") == ["2 hosts x 8 ranks = 16 ranks, cuda; usable per rank: 68.00 GiB HBM, 128.00 GiB "
                                     "DDR."]


def test_the_ssd_tier_is_edited_in_gib_and_gib_per_s(app):
    """ssd_cap (TorchRec's 2 TiB by default) and ssd_mem_bw (100 MiB/s) in the page's units; 0 GiB: no SSD."""
    goto(app, "topology")
    assert app.number_input(key="topology_ssd_cap").value == 2048.0
    assert app.number_input(key="topology_ssd_mem_bw").value == pytest.approx(100 / 1024)
    app.number_input(key="topology_ssd_cap").set_value(0.0)
    app.number_input(key="topology_ssd_mem_bw").set_value(2.0)
    app.run()
    topo = workspace(app)["topology"]
    assert topo["ssd_cap"] == 0 and topo["ssd_mem_bw"] == pytest.approx(2 * GIB / 1000)


def test_world_size_keeps_the_hosts_the_user_set(app):
    """Issue 12: world size 2 -> 4 made 2 hosts x 2 ranks (cross-host bandwidth) without a word. The hosts stay
    as set; the ranks per host follow, and the page says so."""
    goto(app, "topology")
    assert app.number_input(key="topology_hosts").value == 1
    app.number_input(key="topology_world_size").set_value(4).run()
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (4, 4)
    assert "4 ranks per host" in shown(app, "caption")
    assert shown(app, "success")[0].startswith("1 host x 4 ranks = 4 ranks")
    app.number_input(key="topology_hosts").set_value(2).run()  # now the user asks for two hosts
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (4, 2)
    app.number_input(key="topology_world_size").set_value(8).run()
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (8, 4)
    assert app.number_input(key="topology_hosts").value == 2


def test_a_world_size_that_does_not_split_over_the_hosts_says_so_and_keeps_the_inputs(app):
    goto(app, "topology")
    app.number_input(key="topology_hosts").set_value(2).run()
    app.number_input(key="topology_world_size").set_value(5).run()
    assert shown(app, "error") == ["5 ranks do not split evenly over 2 hosts: set the world size to a multiple of 2 "
                                   "(2, 4, 6...), or the hosts to one of 1, 5. Until then the topology keeps 2 ranks "
                                   "on 2 hosts."]
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (2, 1)  # the last topology that fits
    assert app.number_input(key="topology_world_size").value == 5  # what the user typed stays
    app.number_input(key="topology_world_size").set_value(6).run()
    assert not shown(app, "error")
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (6, 3)


def test_a_refused_stored_topology_is_named_on_both_pages_never_a_traceback(app):
    """A topology the engine refuses in the workspace (a hand-made config): the Tables page names the field as the
    Topology page labels it; the Topology page says so and shows a default in its place."""
    app.session_state["ws_config"]["topology"] = {"world_size": 4, "local_world_size": 2, "batch_size": 0}
    goto(app, "tables")
    assert shown(app, "warning") == ["Topology, batch size per rank: must be from 1 to 16,777,216, got 0 (fix it on "
                                     "the Topology page)"]
    goto(app, "topology")
    assert shown(app, "warning") == ["The workspace's topology was refused (Topology, batch size per rank: must be "
                                     "from 1 to 16,777,216, got 0); the inputs below show a default in its place: "
                                     "check them."]
    assert app.number_input(key="topology_batch_size").value == 512
    assert (app.number_input(key="topology_world_size").value, app.number_input(key="topology_hosts").value) == (4, 2)


def test_preset_selectors_show_the_preset_in_use_or_custom(app):
    goto(app, "topology")
    assert app.selectbox(key="topology_cluster").value == "tutorial"  # the tutorial's topology is that preset
    assert app.selectbox(key="topology_gpu").value == "torchrec_default"
    app.number_input(key="topology_world_size").set_value(4).run()
    assert app.selectbox(key="topology_cluster").value == "custom"  # 1 host x 4 is no preset
    assert app.selectbox(key="topology_gpu").value == "torchrec_default"  # memory and bandwidths still are
    app.number_input(key="topology_hbm_cap").set_value(40.0).run()
    assert app.selectbox(key="topology_gpu").value == "custom"


def test_cluster_and_gpu_presets_fill_the_inputs(app):
    goto(app, "topology")
    app.selectbox(key="topology_cluster").set_value("dgx_h100_4").run()
    topo = workspace(app)["topology"]
    assert (topo["world_size"], topo["local_world_size"]) == (32, 8)
    assert app.number_input(key="topology_world_size").value == 32
    assert app.number_input(key="topology_hosts").value == 4
    assert app.number_input(key="topology_hbm_cap").value == pytest.approx(80.0)
    assert app.selectbox(key="topology_cluster").value == "dgx_h100_4"
    assert any("4 x DGX H100" in t for t in shown(app, "toast"))
    app.selectbox(key="topology_gpu").set_value("h200_141gb").run()
    topo = workspace(app)["topology"]
    assert topo["world_size"] == 32 and topo["hbm_cap"] == int(presets.GPUS["h200_141gb"].hbm_gib * GIB)
    assert app.number_input(key="topology_hbm_mem_bw").value == pytest.approx(4800.0)
    assert app.selectbox(key="topology_gpu").value == "h200_141gb"
    assert app.selectbox(key="topology_cluster").value == "custom"  # H200s in a DGX H100 layout: no preset
    assert app.number_input(key="topology_hosts").value == 4


def test_topology_survives_a_trip_to_another_page(app):
    goto(app, "topology")
    app.number_input(key="topology_batch_size").set_value(4096).run()
    goto(app, "plan")
    goto(app, "topology")
    assert app.number_input(key="topology_batch_size").value == 4096
    assert workspace(app)["topology"]["batch_size"] == 4096


def test_opening_topology_leaves_a_loaded_preset_and_its_plan_as_they_were(app):
    """Issue 14: a loaded config's topology is kept with its defaults written out, as the Topology page's inputs
    write them, so opening that page changes neither the config nor its plan. It used to change the config's key:
    every user's first visit there planned the same config again."""
    app.selectbox(key="tables_preset").set_value("synthetic").run()
    app.number_input(key="tables_syn_count").set_value(30).run()
    app.button(key="tables_load_preset").click().run()
    assert not app.exception, app.exception
    before, plan = workspace(app), app.session_state["ws_plan"]
    assert plan.matches(before) and len(before["tables"]) == 30
    goto(app, "topology")
    assert not app.exception, app.exception
    assert workspace(app) == before
    assert app.session_state["ws_plan"] is plan
