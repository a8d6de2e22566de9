"""Topology: ranks, hosts, device, memory and bandwidths per rank, batch size; presets for common GPUs
and clusters; bandwidths calibrated from the stored validation runs; tables measured alone on the device
(`python -m engine measure-tables`'s file, run here on the server's CPU in the background or uploaded, applied as
`plan --table-costs` applies it). Memory is entered in
GiB, bandwidth in GiB/s (TorchRec's "GB/s" count 2**30 bytes too).
"""

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

import engine
from dashboard.plans import calibration as calib
from dashboard.plans import table_costs as tcosts
from dashboard.serve import jobs
from dashboard.tables import host_groups, presets, row_checks
from dashboard.ui import services, state, views, workspace
from dashboard.text import count_text, md


CUSTOM = "custom"
HOSTS_KEY = state.TOPOLOGY_HOSTS
CLUSTER_KEY = "topology_cluster"
MIXED_KEY = "topology_mixed"
GROUPS_KEY = "topology_host_groups"
GROUPS_BASE = "topology_host_groups_base"  # (the per-rank lists the editor's rows were made from, the rows)
GPU_KEY = "topology_gpu"
POLL_S = 1.0


def set_topology(topo: dict) -> None:
    """The workspace topology and every input of this page, hosts included, from the next run on."""
    state.set_topology(topo)
    state.set_pending(HOSTS_KEY, presets.topology_form(topo)["hosts"])


def _apply_cluster() -> None:
    key = state.widget(CLUSTER_KEY)
    if key in presets.CLUSTERS:
        set_topology(presets.cluster_topology(key, state.topology()))
        state.flash(f"Topology set to {md(presets.CLUSTERS[key].label)}.")


def _apply_gpu() -> None:
    key = state.widget(GPU_KEY)
    if key in presets.GPUS:
        set_topology(presets.gpu_topology(key, state.topology()))
        state.flash(f"Every rank is now a {md(presets.GPUS[key].label)}.")


def preset_row(topology: dict) -> None:
    """The presets the topology is (or "custom"); choosing one applies it."""
    c1, c2 = st.columns(2)
    state.set_widget(CLUSTER_KEY, presets.cluster_in_use(topology) or CUSTOM)
    state.set_widget(GPU_KEY, presets.gpu_in_use(topology) or CUSTOM)
    c1.selectbox("Cluster preset", [CUSTOM, *presets.CLUSTERS], key=CLUSTER_KEY, on_change=_apply_cluster,
                 format_func=lambda k: presets.CLUSTERS[k].label if k in presets.CLUSTERS else "Custom",
                 help="the preset this topology is, or Custom; choose one to apply it (ranks, hosts, memory, "
                      "bandwidths; batch size and optimizer are kept)")
    c2.selectbox("GPU preset (memory and bandwidths only)", [CUSTOM, *presets.GPUS], key=GPU_KEY,
                 on_change=_apply_gpu,
                 format_func=lambda k: presets.GPUS[k].label if k in presets.GPUS else "Custom",
                 help="the GPU whose memory and bandwidths every rank has, or Custom; choose one to apply it")


def _num(col, label: str, field: str, form: dict, fmt: str = "%.2f", help: str | None = None) -> float:
    return col.number_input(label, min_value=0.0, value=float(form[field]), format=fmt, key=f"topology_{field}",
                            help=help)


def _int(col, label: str, field: str, form: dict, help: str | None = None) -> int:
    return int(col.number_input(label, min_value=1, value=int(form[field]), step=1, key=f"topology_{field}",
                                help=help))


def ranks_per_host(col, world_size: int, hosts: int, form: dict) -> int | None:
    """The ranks per host the two inputs make, said under them; None (and why, plainly) when they do not split."""
    per_host = presets.split_ranks(world_size, hosts)
    if per_host is None:
        col.error(f"{presets.uneven_text(world_size, hosts)}. Until then the topology keeps {form['world_size']} "
                  f"ranks on {_count(form['hosts'], 'host')}.", icon=":material/error:")
    else:
        col.caption(f"{_count(per_host, 'rank')} per host")
    return per_host


GROUP_OFF = 0  # the group size input's "one group" (no 2D)
KEEP = "keep"  # an input that does not fit: the topology in use stays until it does


def group_size(col, world_size: int, form: dict) -> int | str | None:
    """2D sharding's ranks per group (topology.sharding_group_size), said under the input: None for one group, KEEP
    (and why, with the fix) when it does not divide the world."""
    size = int(col.number_input("Sharding group (ranks, 2D)", min_value=GROUP_OFF, max_value=engine.MAX_WORLD_SIZE,
                                value=int(form.get("sharding_group_size") or GROUP_OFF), step=1,
                                key="topology_sharding_group_size",
                                help="TorchRec's DMPCollection: tables sharded over groups of this many ranks, each "
                                     "group a replica synced by an all-reduce after each step; 0: one group (DMP)"))
    if size == GROUP_OFF or size == world_size:
        col.caption("one group: every table sharded over all ranks (DMP)")
        return None if size == GROUP_OFF else size
    if size > world_size or world_size % size:
        divisors = [str(d) for d in range(1, world_size) if world_size % d == 0]
        some = ", ".join(divisors[:8]) + ("..." if len(divisors) > 8 else "")
        col.error(f"sharding_group_size {size} does not divide world_size {world_size}: give a divisor of "
                  f"{world_size} ({some}) or 0 for one group. Until then the topology "
                  f"keeps {form['world_size']} ranks in {_groups_text(form)}.", icon=":material/error:")
        return KEEP
    col.caption(f"{_count(world_size // size, 'replica')} of {_count(size, 'rank')}, synced across groups")
    return size


def _groups_text(form: dict) -> str:
    size = form.get("sharding_group_size")
    return f"groups of {size}" if size else "one group"


def topology_form(form: dict) -> dict:
    ranks, memory, bandwidth = st.columns(3)
    with ranks:
        st.subheader("Ranks", divider="gray")
        out = {"world_size": _int(ranks, "World size (ranks)", "world_size", form,
                                  help="ranks in all; changing it keeps the number of hosts"),
               "hosts": _int(ranks, "Hosts", "hosts", form, help="machines the ranks are spread over, evenly; "
                             "ranks on different hosts talk at the (slower) bandwidth across hosts")}
        out["local_world_size"] = ranks_per_host(ranks, out["world_size"], out["hosts"], form)
        out["sharding_group_size"] = group_size(ranks, out["world_size"], form)
        devices, optimizers = [d.value for d in engine.Device], [o.value for o in engine.Optimizer]
        out["compute_device"] = ranks.radio("Device", devices, horizontal=True, key="topology_compute_device",
                                            index=devices.index(form["compute_device"]))
        out["batch_size"] = _int(ranks, "Batch size per rank", "batch_size", form)
        out["optimizer"] = ranks.selectbox("Optimizer", optimizers, index=optimizers.index(form["optimizer"]),
                                           key="topology_optimizer", help="sizes the optimizer state")
    with memory:
        st.subheader("Memory per rank", divider="gray")
        out["hbm_cap"] = _num(memory, "HBM (GiB)", "hbm_cap", form)
        out["ddr_cap"] = _num(memory, "DDR (GiB)", "ddr_cap", form)
        out["ssd_cap"] = _num(memory, "SSD (GiB)", "ssd_cap", form, "%.3f",
                              help="the key_value kernel's backing store per rank (TorchRec's ssd_cap, 2 TiB by "
                                   "default); 0: no SSD, and key_value is not planned")
        out["storage_reservation"] = _num(memory, "HBM reserved for the rest of the model (%)",
                                          "storage_reservation", form, "%.1f")
    with bandwidth:
        st.subheader("Bandwidth (GiB/s)", divider="gray")
        out["hbm_mem_bw"] = _num(bandwidth, "HBM", "hbm_mem_bw", form, "%.1f")
        out["ddr_mem_bw"] = _num(bandwidth, "DDR", "ddr_mem_bw", form, "%.1f")
        out["hbm_to_ddr_mem_bw"] = _num(bandwidth, "HBM to DDR (PCIe)", "hbm_to_ddr_mem_bw", form, "%.1f")
        out["intra_host_bw"] = _num(bandwidth, "Within a host, per rank (NVLink)", "intra_host_bw", form, "%.1f")
        out["inter_host_bw"] = _num(bandwidth, "Across hosts, per rank (network)", "inter_host_bw", form, "%.1f")
        out["ssd_mem_bw"] = _num(bandwidth, "SSD (key_value lookups)", "ssd_mem_bw", form, "%.3f",
                                 help="TorchRec's SSD_MEM_BW, 100 MiB/s (0.098 GiB/s) by default")
    return out


def _group_rows(topology: dict) -> list[dict]:
    """The rows the host-group editor starts from: kept while the topology's lists are the ones they were made
    from (the editor holds the user's edits on top of them); made again, and the editor's edits dropped, when the
    lists changed elsewhere (a preset, an import, an undo) or an edit was taken into the topology."""
    lists = (topology.get(host_groups.FIELD), topology.get(host_groups.DEVICES_FIELD), topology.get("world_size"),
             topology.get("local_world_size"))
    base = state.kept(GROUPS_BASE)
    if base is None or base[0] != lists:
        base = (lists, host_groups.groups(topology))
        state.remember(GROUPS_BASE, base)
        state.forget_widgets([GROUPS_KEY])
    return base[1]


def _toggle_mixed() -> None:
    """Turned on: one group of every host with the memory above (edit it, add groups); off: one memory for all."""
    try:
        topo = engine.complete_topology(state.topology())
    except engine.ConfigError as e:
        state.flash(f"Fix the topology first: {md(row_checks.outside_text(e))}", "error")
        return
    if state.widget(MIXED_KEY):
        topo, _ = host_groups.with_groups(topo, host_groups.groups(topo) or [])
    state.set_topology(topo if state.widget(MIXED_KEY) else host_groups.without_groups(topo), reset_widgets=False)


def mixed_fleet(topology: dict) -> dict:
    """Per-host memory and device for a mixed fleet (topology.custom_topology_data, topology.rank_devices): groups of
    hosts, each with its HBM, DDR, SSD and (optionally) accelerator; hosts in no group keep the memory above. Returns
    the topology with them, or without when turned off."""
    state.set_widget(MIXED_KEY, host_groups.FIELD in topology or host_groups.DEVICES_FIELD in topology)
    on = st.toggle("Hosts differ in memory or device (a mixed fleet)", key=MIXED_KEY, on_change=_toggle_mixed,
                   help="give groups of hosts their own HBM, DDR and SSD, e.g. hosts 0-1 with 80 GiB and hosts 2-3 "
                        "with 40 GiB (TorchRec's CustomTopologyData), and their own GPU: each rank is then priced "
                        "with its device's published bandwidths and a slower rank gets less work; the planner keeps "
                        "every rank within its own memory")
    if not on:
        return host_groups.without_groups(topology)
    rows = _group_rows(topology)
    if rows is None:  # a config whose ranks differ within a host: shown, kept, not editable here
        st.info(f"Memory per rank as the config gives it: {md(host_groups.summary(topology))}.",
                icon=":material/info:")
        return topology
    number = st.column_config.NumberColumn(min_value=0.0, format="%.2f")
    edited = st.data_editor(
        pd.DataFrame([{host_groups.DEVICE: "", **r} for r in rows], columns=list(host_groups.COLUMNS)),
        key=GROUPS_KEY, num_rows="dynamic",
        hide_index=True, width="stretch", column_config={
            host_groups.HOSTS: st.column_config.TextColumn(help="hosts, e.g. 0-1 or 2, 3"),
            host_groups.HBM: number, host_groups.DDR: number,
            host_groups.SSD: st.column_config.NumberColumn(min_value=0.0, format="%.1f",
                                                           help="blank: the SSD above (key_value's backing store)"),
            host_groups.DEVICE: st.column_config.TextColumn(
                help=f"the hosts' GPU, one of {', '.join(engine.ACCELERATORS)} (published figures); blank: the "
                     "bandwidths above. Once one group names a device, every host needs one")})
    new, problem = host_groups.with_groups(topology, edited.to_dict("records"))
    if problem:
        st.error(md(problem), icon=":material/error:")
    else:
        st.caption(md(host_groups.summary(new)))
    return new


def check(topo: dict) -> None:
    probe = {"tables": [presets.PROBE_TABLE], "topology": topo}
    try:
        t = engine.parse_config(probe).topology
    except engine.ConfigError as e:
        st.error(md(row_checks.outside_text(e)), icon=":material/error:")
        return
    usable = (f"usable per rank: {engine.human_bytes(t.usable_hbm_bytes)} HBM, "
              f"{engine.human_bytes(t.usable_ddr_bytes)} DDR" if t.custom_topology_data is None
              and t.rank_devices is None else f"memory by host group, {100 * t.storage_reservation:g}% of HBM reserved"
              + ("; each rank priced with its device's published figures" if t.rank_devices is not None else ""))
    st.success(f"{_count(t.num_hosts, 'host')} x {_count(t.local_world_size, 'rank')} = {_count(t.world_size, 'rank')}"
               f", {t.compute_device.value}; {usable}.", icon=":material/check_circle:")


def refused(topo: dict) -> None:
    """A stored topology the engine refuses (an old session, a hand-made config) is said plainly: the inputs show
    the fields that fit and defaults for the others."""
    probe = {"tables": [presets.PROBE_TABLE], "topology": topo}
    try:
        engine.parse_config(probe)
    except engine.ConfigError as e:
        st.warning(f"The workspace's topology was refused ({md(row_checks.outside_text(e))}); the inputs below show "
                   "a default in its place: check them.", icon=":material/warning:")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def use_calibration(topology: dict, cal: engine.Calibration) -> None:
    try:
        calibrated = calib.calibrated_topology(topology, cal)
    except engine.ConfigError as e:
        st.error(f"Cannot use this calibration: {md(e)}", icon=":material/error:")
        return
    state.set_topology(calibrated)
    state.set_calibration(cal)
    state.flash(f"{md(calib.note(cal))}.")
    st.rerun()


def fitted(topology: dict, cal: engine.Calibration, in_use: engine.Calibration | None) -> None:
    """The fit beside the current bandwidths, and the button that puts it in the topology."""
    n, ids = cal.n_runs, cal.run_ids
    more = " ..." if len(ids) > 10 else ""
    st.markdown(f"Fitted to **{n} succeeded validation run{'' if n == 1 else 's'}** on "
                f"{md(calib.device_text(cal))}: **{md(calib.r2_text(cal))}** (runs {md(', '.join(map(str, ids[:10])))}"
                f"{more}).")
    fixed = calib.profile_text(cal)
    if fixed:
        st.markdown(f"{md(fixed)}.")
    for note in cal.notes:
        st.caption(f"Note: {md(note)}")
    if not cal.patch and not fixed:
        st.warning("These runs determine no bandwidth: nothing to use.", icon=":material/warning:")
        return
    if cal.patch:
        gbps = st.column_config.NumberColumn(format="%.3g")  # 3 significant digits, as every figure
        st.dataframe(pd.DataFrame(calib.fitted_rows(topology, cal)), hide_index=True,
                     key="topology_calibration_table", column_config={
                         "current GiB/s": gbps, "fitted GiB/s": gbps,
                         "fitted bytes/ms": st.column_config.NumberColumn(format="%.6g")})
    if st.button("Use this calibration", key="topology_calibration_use", type="primary", icon=":material/tune:",
                 disabled=in_use is not None and in_use.as_dict() == cal.as_dict(),
                 help="puts the fitted bandwidths and fixed costs in this topology; plans made with it say their "
                 "estimates are calibrated"):
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


def table_costs_section(config: dict) -> None:
    """Measure the tables here or upload a measure-tables file: the tables priced as measured alone, and their
    pressure on each other; or stop using one."""
    st.subheader("Tables measured on the device", divider="gray")
    if tcosts.in_use(config):
        st.success(md(tcosts.in_use_text(config)), icon=":material/speed:")
        if st.button("Stop using the measured costs", key="topology_costs_off", icon=":material/undo:",
                     help="every table back to the estimate's compute; a profile you calibrated keeps its figures"):
            state.set_config(engine.without_table_costs(config), edit="stop using measured table costs")
            state.flash("Measured table costs no longer in use: every table is priced by the estimate.")
            st.rerun()
    measure_here(config)
    st.caption("Or, on the machine the plan is for, download the config (Plan page, Take it away) and run "
               f"`{tcosts.COMMAND}`: every table is dry-run alone, then the tables dealt into probe ranks (seconds "
               "for tens of tables). Upload the file here: each table's compute, the step's fixed time and what the "
               "tables cost each other on a rank are then as measured. Its figures are checked against this config "
               "and recomputed from the measured times.")
    c1, c2 = st.columns([4, 1.4], vertical_alignment="bottom")
    up = c1.file_uploader("Table costs (the JSON measure-tables wrote)", type=["json"], key="topology_costs_file",
                          max_upload_size=tcosts.MAX_BYTES // 2**20)
    if c2.button("Use these costs", key="topology_costs_use", type="primary", icon=":material/speed:",
                 disabled=up is None, width="stretch"):
        res = tcosts.apply(config, up.getvalue(), up.name)
        if res.problem:
            st.error(f"Cannot use {md(up.name)}: {md(res.problem)}", icon=":material/error:")
            return
        state.set_config(res.config, edit="measured table costs")
        said = " ".join(f"{md(note[:1].upper() + note[1:])}." for note in res.notes)
        state.flash(f"Measured table costs in use. {said}")
        st.rerun()


def start_measure(config: dict, reps: int) -> jobs.Job:
    """`python -m engine measure-tables` of the config (without the costs in use) on this server's CPU, in another
    process once a slot of the server's heavy jobs (jobs.HEAVY) is free; it writes costs.json in its folder."""
    workdir = Path(tempfile.mkdtemp(prefix="planner-measure-"))
    engine.write_json_file(workdir / "config.json", engine.without_table_costs(config), indent=None)
    return services.heavy_job(tcosts.measure_args(workdir / "config.json", workdir / "costs.json", reps), workdir,
                              "measure-tables")


@st.fragment(run_every=POLL_S)
def measure_progress() -> None:
    job = state.page_value(state.MEASURE_JOB)
    if job is None:
        return
    if not job["job"].live:
        st.rerun()
    done, last = tcosts.progress(job["job"].text(jobs.STDERR))
    total = job["dry_runs"]
    line = workspace.job_line(job["job"], f"Measuring {count_text(job['tables'], 'table')}", "The measurement")
    if job["job"].running:
        line += f". {min(done, total):,} of {total:,} dry-runs done" + (
            f" (the newest: {md(last)})" if last else "") + ("; now a collective round" if done >= total else "")
    if workspace.job_box("topology_measure_running", "topology_measure_cancel",
                         f"{line}. The figures are this server's CPU's: other work on it while they are taken "
                         "slows them."):
        job["job"].close()
        state.set_page_value(state.MEASURE_JOB, None)
        st.rerun()


def collect_measure(config: dict) -> None:
    """A measurement that ended since the last run: its file is applied to the workspace config as an uploaded one
    is (checked against it, its figures recomputed), and kept for download; or its one-line error is shown."""
    job = state.page_value(state.MEASURE_JOB)
    if job is None or job["job"].live:
        return
    state.set_page_value(state.MEASURE_JOB, None)
    j = job["job"]
    try:
        if j.state is not jobs.JobState.DONE:
            state.set_page_value(state.MEASURE_RESULT, {"error": j.error_line(), "flags": True})
            return
        try:
            data = j.path("costs.json").read_bytes()
        except OSError:
            state.set_page_value(state.MEASURE_RESULT, {"error": "measure-tables ended without writing its file"})
            return
    finally:
        j.close()
    name = "measured-table-costs.json"
    state.set_page_value(state.MEASURE_RESULT, {"file": data, "name": name})
    res = tcosts.apply(config, data, name)
    if res.problem:
        state.set_page_value(state.MEASURE_RESULT, {"file": data, "name": name, "error": res.problem})
        return
    changed = state.config_key(config) != job["key"]
    state.set_config(res.config, edit="measured table costs")
    said = " ".join(f"{md(note[:1].upper() + note[1:])}." for note in res.notes)
    state.flash(f"Measured {count_text(job['tables'], 'table')} on this server's CPU; the costs are in use."
                + (" The config changed while they were measured: the file was checked against it as it is now."
                   if changed else "") + f" {said}")
    st.rerun()


def measure_here(config: dict) -> None:
    """Measure the tables on this server's CPU (a CPU config only), in the background, and use the file."""
    collect_measure(config)
    topo = config.get("topology") or {}
    n = len(config.get("tables") or [])
    result = state.page_value(state.MEASURE_RESULT)
    if result is not None and "error" in result:
        st.error(f"The measurement was not used: {md(result['error'])}" + (
            ". Here it runs with measure-tables' defaults; for its other flags, run the command below on the machine "
            "the plan is for and upload the file" if result.get("flags") else ""), icon=":material/error:")
    if str(topo.get("compute_device") or "cuda") != "cpu":
        st.caption("The config computes on GPUs: measure its tables on one of them (`"
                   f"{tcosts.COMMAND} --device cuda`, where fbgemm-gpu runs) and upload the file below.")
    else:
        running = state.page_value(state.MEASURE_JOB) is not None
        ws = int(topo.get("world_size") or 1)
        c1, c2, c3 = st.columns([1.2, 1.6, 3], vertical_alignment="bottom")
        reps = c1.number_input("Rounds", tcosts.REPS[0], tcosts.REPS[1], 3, 1, key="topology_measure_reps",
                               help="rounds over the tables, each in a shuffled order; a table's figure is the median "
                                    "of its rounds (measure-tables' --reps)")
        halves = tcosts.column_copies(config)
        runs = tcosts.dry_runs(n, ws, int(reps), halves)
        if c2.button("Measure them here", key="topology_measure_run", icon=":material/timer:", width="stretch",
                     disabled=running or n == 0,
                     help=f"{runs:,} dry-runs of the tables on this server's CPU, in the background"):
            try:
                engine.parse_config(engine.without_table_costs(config))
            except engine.ConfigError as e:
                st.error(f"The config has a problem: {md(e)}. Fix it on Tables & constraints or Topology.",
                         icon=":material/error:")
            else:
                job = start_measure(config, int(reps))
                state.set_page_value(state.MEASURE_JOB, {"job": job, "dry_runs": runs, "tables": n,
                                                         "key": state.config_key(config)})
                state.set_page_value(state.MEASURE_RESULT, None)
                st.rerun()
        copies = f", {halves:,} of them also at half width (what a column piece costs)," if halves else ""
        c3.caption(f"On this server's CPU: {runs:,} dry-runs of the {count_text(n, 'table')} alone{copies} and in "
                   "probe ranks, then a collective round; the file is used as an uploaded one is.")
        if running:
            measure_progress()
    if result is not None and "file" in result:
        st.download_button("Download the measured costs", result["file"], result["name"], "application/json",
                           key="topology_measure_download", icon=":material/download:",
                           help="the file measure-tables wrote: keep it, or plan with it from the command line")


st.title("Topology")
views.workspace_headline()
views.show_flash()
preset_slot = st.container()  # filled once this run's inputs are in: it shows the preset they make
state.apply_topology_pending()
state.apply_pending(HOSTS_KEY)
refused(state.topology())
in_use = presets.topology_form(state.topology())
values = topology_form(in_use)
if values["local_world_size"] is None or values["sharding_group_size"] == KEEP:  # the ranks in use stay until the
    values.update(world_size=in_use["world_size"], local_world_size=in_use["local_world_size"],  # inputs fit
                  sharding_group_size=in_use.get("sharding_group_size"))
if values["sharding_group_size"] is None:  # one group: the field left out, as a config without 2D has it
    del values["sharding_group_size"]
topology = calib.keep_profile(state.topology(), presets.form_topology(values))
topology = mixed_fleet(host_groups.keep_groups(state.topology(), topology))
state.set_topology(topology, reset_widgets=False)
with preset_slot:
    preset_row(topology)
check(topology)
calibration_section(topology)
table_costs_section(state.config())
