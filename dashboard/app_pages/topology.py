"""Topology: ranks, hosts, device, memory and bandwidths per rank, batch size; presets for common GPUs
and clusters; bandwidths calibrated from the stored validation runs. Memory is entered in GiB, bandwidth in
GiB/s (TorchRec's "GB/s" count 2**30 bytes too).
"""

import pandas as pd
import streamlit as st

import engine
from dashboard import calibration as calib
from dashboard import presets, services, state, views
from dashboard.text import md
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
        st.error(md(e), icon=":material/error:")
        return
    st.success(f"{t.num_hosts} host(s) x {t.local_world_size} rank(s), {t.compute_device.value}; usable per rank: "
               f"{human_bytes(t.usable_hbm_bytes)} HBM, {human_bytes(t.usable_ddr_bytes)} DDR.",
               icon=":material/check_circle:")


def use_calibration(topology: dict, cal: dict) -> None:
    try:
        calibrated = calib.calibrated_topology(topology, cal)
    except engine.ConfigError as e:
        st.error(f"Cannot use this calibration: {md(e)}", icon=":material/error:")
        return
    state.set_topology(calibrated)
    state.set_calibration(cal)
    state.flash(f"{md(calib.note(cal))}.")
    st.rerun()


def fitted(topology: dict, cal: dict, in_use: dict | None) -> None:
    """The fit beside the current bandwidths, and the button that puts it in the topology."""
    n, ids = cal["n_runs"], cal.get("run_ids") or []
    more = " ..." if len(ids) > 10 else ""
    st.markdown(f"Fitted to **{n} succeeded validation run{'' if n == 1 else 's'}** on "
                f"{md(calib.device_text(cal))}: **{md(calib.r2_text(cal))}** (runs {md(', '.join(map(str, ids[:10])))}"
                f"{more}).")
    fixed = calib.profile_text(cal)
    if fixed:
        st.markdown(f"{md(fixed)}.")
    for note in cal.get("notes") or []:
        st.caption(f"Note: {md(note)}")
    if not cal["patch"] and not fixed:
        st.warning("These runs determine no bandwidth: nothing to use.", icon=":material/warning:")
        return
    if cal["patch"]:
        gbps = st.column_config.NumberColumn(format="%.4g")
        st.dataframe(pd.DataFrame(calib.fitted_rows(topology, cal)), hide_index=True,
                     key="topology_calibration_table", column_config={
                         "current GiB/s": gbps, "fitted GiB/s": gbps,
                         "fitted bytes/ms": st.column_config.NumberColumn(format="%.6g")})
    if st.button("Use this calibration", key="topology_calibration_use", type="primary", icon=":material/tune:",
                 disabled=in_use == cal, help="puts the fitted bandwidths and fixed costs in this topology; plans made "
                 "with it say their estimates are calibrated"):
        use_calibration(topology, cal)


def no_runs(device: str, device_name: str) -> None:
    which = f" whose device name contains '{md(device_name)}'" if device_name else ""
    st.info(f"No succeeded validation run on {md(device)}{which} is recorded in this database, so there is nothing to "
            "fit yet. Record some: start a validation run of a saved plan on the Runs page, or run "
            "`python -m db validate CONFIG.json --plan PLAN.json` with DATABASE_URL pointing at this database.",
            icon=":material/info:")
    st.page_link("app_pages/runs.py", label="Go to Runs", icon=":material/play_circle:")


def calibration_section(topology: dict) -> None:
    """The bandwidths fitted to the stored runs on this device kind; use them, or go back to the defaults."""
    st.subheader("Calibration", divider="gray")
    device = str(topology.get("compute_device") or "cuda")
    in_use = state.calibration()
    if in_use is not None:
        st.success(f"In use: {md(calib.note(in_use))}.", icon=":material/tune:")
    c1, c2, c3 = st.columns([3, 1, 1.4], vertical_alignment="bottom")
    device_name = c1.text_input("Only runs whose device name contains (optional)",
                                key="topology_calibration_device_name", placeholder="e.g. H100", max_chars=100)
    if c2.button("Fit again", key="topology_calibration_refit", icon=":material/refresh:", width="stretch",
                 help="read the stored runs again (they are re-read every few seconds anyway)"):
        services.clear_calibration()
    if c3.button("Use TorchRec's defaults", key="topology_calibration_defaults", width="stretch",
                 disabled=calib.has_default_bandwidths(topology),
                 help="all five bandwidths back to TorchRec's constants; the estimates are no longer calibrated"):
        state.set_topology(calib.with_default_bandwidths(topology))
        state.set_calibration(None)
        state.flash("Bandwidths set to TorchRec's defaults.")
        st.rerun()
    result = services.calibration(device, device_name)
    if result.problem:
        st.error(f"No calibration: {md(result.problem)}", icon=":material/error:")
    elif result.no_runs:
        no_runs(device, device_name.strip())
    else:
        fitted(topology, result.calibration, in_use)


st.title("Topology")
views.show_flash()
preset_row()
state.apply_topology_pending()
values = topology_form(presets.topology_form(state.topology()))
topology = calib.keep_profile(state.topology(), presets.form_topology(values))
state.set_topology(topology, reset_widgets=False)
check(topology)
calibration_section(topology)
