"""Topology: ranks, hosts, device, memory and bandwidths per rank, batch size; presets for common GPUs
and clusters. Memory is entered in GiB, bandwidth in GiB/s (TorchRec's "GB/s" count 2**30 bytes too).
"""

import streamlit as st

import engine
from dashboard import presets, state, views
from engine.errors import human_bytes
from engine.types import Device, Optimizer


def preset_row() -> None:
    c1, c2, c3, c4 = st.columns([3, 1, 3, 1], vertical_alignment="bottom")
    cluster = c1.selectbox("Cluster preset", list(presets.CLUSTERS), key="topology_cluster",
                           format_func=lambda k: presets.CLUSTERS[k].label)
    if c2.button("Apply", key="topology_apply_cluster", width="stretch"):
        state.set_topology(presets.cluster_topology(cluster, state.topology()))
        state.flash(f"Topology set to {presets.CLUSTERS[cluster].label}.")
        st.rerun()
    gpu = c3.selectbox("GPU preset (memory and bandwidths only)", list(presets.GPUS), key="topology_gpu",
                       format_func=lambda k: presets.GPUS[k].label)
    if c4.button("Apply", key="topology_apply_gpu", width="stretch"):
        state.set_topology(presets.gpu_topology(gpu, state.topology()))
        state.flash(f"Every rank is now a {presets.GPUS[gpu].label}.")
        st.rerun()


def _num(col, label: str, field: str, form: dict, fmt: str = "%.2f", help: str | None = None) -> float:
    return col.number_input(label, min_value=0.0, value=float(form[field]), format=fmt, key=f"topology_{field}",
                            help=help)


def _int(col, label: str, field: str, form: dict, help: str | None = None) -> int:
    return int(col.number_input(label, min_value=1, value=int(form[field]), step=1, key=f"topology_{field}",
                                help=help))


def topology_form(form: dict) -> dict:
    ranks, memory, bandwidth = st.columns(3)
    with ranks:
        st.subheader("Ranks", divider="gray")
        out = {"world_size": _int(ranks, "World size (ranks)", "world_size", form),
               "local_world_size": _int(ranks, "GPUs per host", "local_world_size", form,
                                        help="ranks per host: must divide the world size"),
               "compute_device": ranks.radio("Device", [d.value for d in Device], horizontal=True,
                                             index=[d.value for d in Device].index(form["compute_device"]),
                                             key="topology_compute_device"),
               "batch_size": _int(ranks, "Batch size per rank", "batch_size", form),
               "optimizer": ranks.selectbox("Optimizer", [o.value for o in Optimizer],
                                            index=[o.value for o in Optimizer].index(form["optimizer"]),
                                            key="topology_optimizer", help="sizes the optimizer state")}
    with memory:
        st.subheader("Memory per rank", divider="gray")
        out["hbm_cap"] = _num(memory, "HBM (GiB)", "hbm_cap", form)
        out["ddr_cap"] = _num(memory, "DDR (GiB)", "ddr_cap", form)
        out["storage_reservation"] = _num(memory, "HBM reserved for the rest of the model (%)",
                                          "storage_reservation", form, "%.1f")
    with bandwidth:
        st.subheader("Bandwidth (GiB/s)", divider="gray")
        out["hbm_mem_bw"] = _num(bandwidth, "HBM", "hbm_mem_bw", form, "%.1f")
        out["ddr_mem_bw"] = _num(bandwidth, "DDR", "ddr_mem_bw", form, "%.1f")
        out["hbm_to_ddr_mem_bw"] = _num(bandwidth, "HBM to DDR (PCIe)", "hbm_to_ddr_mem_bw", form, "%.1f")
        out["intra_host_bw"] = _num(bandwidth, "Within a host, per rank (NVLink)", "intra_host_bw", form, "%.1f")
        out["inter_host_bw"] = _num(bandwidth, "Across hosts, per rank (network)", "inter_host_bw", form, "%.1f")
    return out


def check(topo: dict) -> None:
    probe = {"tables": [{"name": "t", "num_embeddings": 1, "embedding_dim": 1}], "topology": topo}
    try:
        t = engine.parse_config(probe).topology
    except engine.ConfigError as e:
        st.error(str(e), icon=":material/error:")
        return
    st.success(f"{t.num_hosts} host(s) x {t.local_world_size} rank(s), {t.compute_device.value}; usable per rank: "
               f"{human_bytes(t.usable_hbm_bytes)} HBM, {human_bytes(t.usable_ddr_bytes)} DDR.",
               icon=":material/check_circle:")


st.title("Topology")
views.show_flash()
preset_row()
values = topology_form(presets.topology_form(state.topology()))
topology = presets.form_topology(values)
state.set_topology(topology, reset_widgets=False)
check(topology)
