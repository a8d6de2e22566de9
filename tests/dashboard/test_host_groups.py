"""A mixed fleet's memory on the Topology page: groups of hosts (dashboard.tables.host_groups), not a row per rank;
the page's editor writes topology.custom_topology_data; a plan's memory bars draw each rank's own capacity."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

import engine
from dashboard.plans import charts
from dashboard.tables import host_groups as hg
from dashboard.tables import presets
from tests.dashboard.helpers import edit, goto, shown, workspace
from tests.factories import tutorial

GIB = 2**30


def topo(**custom) -> dict:
    """4 hosts of 2 ranks, every default written out; custom: the per-rank lists."""
    raw = {"world_size": 8, "local_world_size": 2, "hbm_cap": 80 * GIB, "ddr_cap": 512 * GIB}
    if custom:
        raw["custom_topology_data"] = custom
    return engine.complete_topology(raw)


def test_per_rank_lists_show_as_groups_of_hosts_and_come_back_the_same():
    t = topo(hbm_cap=[80 * GIB] * 4 + [40 * GIB] * 4)
    rows = hg.groups(t)
    assert rows == [{hg.HOSTS: "0-1", hg.HBM: 80.0, hg.DDR: 512.0, hg.SSD: 2048.0},
                    {hg.HOSTS: "2-3", hg.HBM: 40.0, hg.DDR: 512.0, hg.SSD: 2048.0}]
    again, problem = hg.with_groups(t, rows)
    assert problem is None
    assert again["custom_topology_data"] == {"hbm_cap": [80 * GIB] * 4 + [40 * GIB] * 4, "ddr_cap": [512 * GIB] * 8}
    assert engine.parse_config({"tables": [presets.PROBE_TABLE], "topology": again}).topology.custom_topology_data
    assert hg.summary(t) == "hosts 0-1: 80.00 GiB HBM, 512.00 GiB DDR; hosts 2-3: 40.00 GiB HBM, 512.00 GiB DDR"
    assert hg.groups(topo()) == [{hg.HOSTS: "0-3", hg.HBM: 80.0, hg.DDR: 512.0, hg.SSD: 2048.0}]  # every host alike


def test_a_group_may_give_its_hosts_their_own_ssd_and_a_blank_keeps_the_topologys():
    """SSD per group (key_value's backing store): hosts 2-3 without SSD; a blank cell (NaN in the editor) or an older
    row without the column keeps the topology's ssd_cap, and then no ssd_cap list is written."""
    t = topo()
    again, problem = hg.with_groups(t, [{hg.HOSTS: "0-1", hg.HBM: 80.0, hg.DDR: 512.0, hg.SSD: float("nan")},
                                        {hg.HOSTS: "2-3", hg.HBM: 80.0, hg.DDR: 512.0, hg.SSD: 0.0}])
    assert problem is None
    assert again["custom_topology_data"]["ssd_cap"] == [2048 * GIB] * 4 + [0] * 4
    assert hg.summary(again).endswith("hosts 2-3: 80.00 GiB HBM, 512.00 GiB DDR, 0 B SSD")
    assert hg.groups(again)[1] == {hg.HOSTS: "2-3", hg.HBM: 80.0, hg.DDR: 512.0, hg.SSD: 0.0}
    plain, _ = hg.with_groups(t, [{hg.HOSTS: "0-1", hg.HBM: 40.0, hg.DDR: 512.0}])
    assert "ssd_cap" not in plain["custom_topology_data"]
    _, problem = hg.with_groups(t, [{hg.HOSTS: "0-1", hg.HBM: 40.0, hg.DDR: 512.0, hg.SSD: -1.0}])
    assert problem == "Group 1: SSD (GiB) must be a number of GiB, 0 or more."


def test_hosts_in_no_group_keep_the_topologys_memory_and_ranks_that_differ_within_a_host_are_not_grouped():
    t, problem = hg.with_groups(topo(), [{hg.HOSTS: "1, 3", hg.HBM: 24.0, hg.DDR: 64.0}])
    assert problem is None
    assert t["custom_topology_data"]["hbm_cap"] == [80 * GIB] * 2 + [24 * GIB] * 2 + [80 * GIB] * 2 + [24 * GIB] * 2
    assert hg.hosts_text([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert hg.groups(topo(hbm_cap=[80 * GIB, 40 * GIB] * 4)) is None


def test_bad_groups_are_one_line_naming_the_group_and_leave_the_topology_as_it_was():
    t = topo()
    cases = [
        ([{hg.HOSTS: "0-4", hg.HBM: 1.0, hg.DDR: 1.0}], "Group 1: host 4 does not exist: the topology has hosts 0-3."),
        ([{hg.HOSTS: "", hg.HBM: 1.0, hg.DDR: 1.0}], "Group 1: name its hosts, e.g. 0-1 or 2, 3."),
        ([{hg.HOSTS: "a-b", hg.HBM: 1.0, hg.DDR: 1.0}],
         "Group 1: 'a-b' is not a host or a range of hosts such as 0-1."),
        ([{hg.HOSTS: "3-1", hg.HBM: 1.0, hg.DDR: 1.0}], "Group 1: the range 3-1 runs backwards."),
        ([{hg.HOSTS: "0", hg.HBM: -1.0, hg.DDR: 1.0}], "Group 1: HBM (GiB) must be a number of GiB, 0 or more."),
        ([{hg.HOSTS: "0", hg.HBM: None, hg.DDR: 1.0}], "Group 1: HBM (GiB) must be a number of GiB, 0 or more."),
        ([{hg.HOSTS: "0-1", hg.HBM: 1.0, hg.DDR: 1.0}, {hg.HOSTS: "1-2", hg.HBM: 1.0, hg.DDR: 1.0}],
         "Group 2: host 1 is in group 1 too: give each host one group."),
    ]
    for rows, message in cases:
        assert hg.with_groups(t, rows) == (t, message)


def test_the_forms_other_inputs_keep_the_lists_and_a_preset_gives_every_rank_the_same():
    t = topo(hbm_cap=[80 * GIB] * 4 + [40 * GIB] * 4)
    form = {k: v for k, v in t.items() if k != "custom_topology_data"}
    assert hg.keep_groups(t, {**form, "batch_size": 1024})["custom_topology_data"] == t["custom_topology_data"]
    assert "custom_topology_data" not in hg.keep_groups(t, {**form, "world_size": 16, "local_world_size": 2})
    assert "custom_topology_data" not in presets.gpu_topology("h100_80gb", t)
    assert "custom_topology_data" not in presets.cluster_topology("dgx_h100_4", t)


def test_memory_bars_draw_each_ranks_own_capacity():
    raw = tutorial()
    raw["topology"]["custom_topology_data"] = {"hbm_cap": [8 * GIB, 2 * GIB]}
    plan = engine.plan(engine.parse_config(raw))
    cap = next(t for t in charts.memory_bars(plan).data if t.name == "usable capacity")
    assert list(cap.y) == pytest.approx([8 * 0.85, 2 * 0.85])


def test_topology_page_edits_memory_by_host_group(app):
    goto(app, "topology")
    app.number_input(key="topology_world_size").set_value(8)
    app.number_input(key="topology_hosts").set_value(4)
    app.run()
    assert "custom_topology_data" not in workspace(app)["topology"]
    app.toggle(key="topology_mixed").set_value(True).run()
    assert not app.exception, app.exception
    hbm = workspace(app)["topology"]["hbm_cap"]
    assert workspace(app)["topology"]["custom_topology_data"]["hbm_cap"] == [hbm] * 8  # one group: every host
    edit(app, "topology_host_groups", edited={0: {hg.HOSTS: "0-1"}},
         added=[{hg.HOSTS: "2-3", hg.HBM: 8.0, hg.DDR: 64.0}])
    custom = workspace(app)["topology"]["custom_topology_data"]
    assert custom["hbm_cap"] == [hbm] * 4 + [8 * GIB] * 4 and custom["ddr_cap"][4:] == [64 * GIB] * 4
    assert any("hosts 2-3: 8.00 GiB HBM, 64.00 GiB DDR" in c for c in shown(app, "caption"))
    assert shown(app, "success")[0].endswith("memory by host group, 15% of HBM reserved.")
    app.number_input(key="topology_batch_size").set_value(1024).run()  # another input keeps the groups
    assert workspace(app)["topology"]["custom_topology_data"] == custom
    edit(app, "topology_host_groups", edited={1: {hg.HOSTS: "2-9"}})
    assert shown(app, "error") == ["Group 2: host 9 does not exist: the topology has hosts 0-3."]
    assert workspace(app)["topology"]["custom_topology_data"] == custom  # kept until the groups are right
    app.toggle(key="topology_mixed").set_value(False).run()
    assert "custom_topology_data" not in workspace(app)["topology"]


# ---- each group's device (topology.rank_devices) -----------------------------------------------------------------


def test_a_groups_device_becomes_rank_devices_with_its_hbm_and_comes_back_the_same():
    rows = [{hg.HOSTS: "0-1", hg.HBM: None, hg.DDR: 512.0, hg.DEVICE: "h100_80gb"},
            {hg.HOSTS: "2-3", hg.HBM: 40.0, hg.DDR: 512.0, hg.DEVICE: "a100_40gb"}]
    t, problem = hg.with_groups(topo(), rows)
    assert problem is None
    assert t["rank_devices"] == [{"ranks": 4, "device": "h100_80gb"}, {"ranks": 4, "device": "a100_40gb"}]
    assert t["custom_topology_data"]["hbm_cap"] == [80 * GIB] * 4 + [40 * GIB] * 4  # blank HBM: the device's
    cfg = engine.parse_config({"tables": [presets.PROBE_TABLE], "topology": t})
    assert cfg.topology.rank_devices == ((4, "h100_80gb"), (4, "a100_40gb"))
    back = hg.groups(engine.complete_topology(t))
    assert back == [{hg.HOSTS: "0-1", hg.HBM: 80.0, hg.DDR: 512.0, hg.SSD: 2048.0, hg.DEVICE: "h100_80gb"},
                    {hg.HOSTS: "2-3", hg.HBM: 40.0, hg.DDR: 512.0, hg.SSD: 2048.0, hg.DEVICE: "a100_40gb"}]
    assert hg.summary(t).endswith("hosts 2-3: 40.00 GiB HBM, 512.00 GiB DDR, a100_40gb")
    assert "rank_devices" not in hg.without_groups(t) and "rank_devices" not in presets.gpu_topology("h100_80gb", t)
    form = {k: v for k, v in t.items() if k not in ("custom_topology_data", "rank_devices")}
    assert hg.keep_groups(t, form)["rank_devices"] == t["rank_devices"]


def test_a_bad_device_or_a_host_without_one_is_one_line_and_leaves_the_topology_as_it_was():
    t = topo()
    bad = [{hg.HOSTS: "0-3", hg.HBM: 80.0, hg.DDR: 512.0, hg.DEVICE: "a10"}]
    assert hg.with_groups(t, bad) == (t, "Group 1: unknown device 'a10'; known devices: a100_40gb, a100_80gb, "
                                         "h100_80gb, h200_141gb, b200_192gb.")
    half = [{hg.HOSTS: "0-1", hg.HBM: 80.0, hg.DDR: 512.0, hg.DEVICE: "h100_80gb"},
            {hg.HOSTS: "2-3", hg.HBM: 40.0, hg.DDR: 512.0, hg.DEVICE: float("nan")}]
    assert hg.with_groups(t, half) == (t, "Host 2 (group 2) has no device: once one group names a device, every "
                                          "host needs one (or clear the device column).")


def test_plan_charts_label_each_rank_with_its_device():
    raw = tutorial()
    raw["topology"]["rank_devices"] = [{"ranks": 1, "device": "h100_80gb"}, {"ranks": 1, "device": "a100_40gb"}]
    cfg = engine.parse_config(raw)
    plan = engine.plan(cfg)
    devices = engine.rank_device_names(cfg.topology)
    for fig in (charts.memory_bars(plan, devices), charts.cost_stacked(plan, devices)):
        spec = json.loads(fig.to_json())
        assert json.loads(go.Figure(spec).to_json()) == spec  # plotly's validation changes nothing (test_charts)
        axis = fig.layout.xaxis
        assert axis.title.text == "rank (0 h100_80gb, 1 a100_40gb)"
        assert list(axis.ticktext) == ["0<br>h100", "1<br>a100"]
    assert charts.cost_stacked(plan).layout.xaxis.title.text == "rank"
    many = ["h100_80gb"] * 512 + ["a100_80gb"] * 512
    assert charts.device_groups_text(many) == "0-511 h100_80gb, 512-1023 a100_80gb"


def test_topology_page_gives_host_groups_a_device(app):
    goto(app, "topology")
    app.number_input(key="topology_world_size").set_value(8)
    app.number_input(key="topology_hosts").set_value(4)
    app.run()
    app.toggle(key="topology_mixed").set_value(True).run()
    edit(app, "topology_host_groups", edited={0: {hg.HOSTS: "0-1", hg.DEVICE: "h100_80gb"}},
         added=[{hg.HOSTS: "2-3", hg.HBM: 40.0, hg.DDR: 64.0, hg.DEVICE: "a10"}])
    assert shown(app, "error") == ["Group 2: unknown device 'a10'; known devices: a100_40gb, a100_80gb, h100_80gb, "
                                   "h200_141gb, b200_192gb."]
    assert "rank_devices" not in workspace(app)["topology"]  # kept as it was until the groups are right
    edit(app, "topology_host_groups", edited={0: {hg.HOSTS: "0-1", hg.DEVICE: "h100_80gb"}},
         added=[{hg.HOSTS: "2-3", hg.HBM: 40.0, hg.DDR: 64.0, hg.DEVICE: "a100_40gb"}])
    assert not shown(app, "error")
    assert workspace(app)["topology"]["rank_devices"] == [{"ranks": 4, "device": "h100_80gb"},
                                                          {"ranks": 4, "device": "a100_40gb"}]
    assert shown(app, "success")[0].endswith("each rank priced with its device's published figures.")
