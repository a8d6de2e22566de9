"""Workload: measure a sample of real ids (Parquet, CSV, NPZ; up to 64 MiB) in one of the server's worker processes
while the page stays usable (the time so far and a Cancel shown; a new sample cancels the one in the works), then see
per table its LRU miss-ratio curve with the chosen cache marked, per feature its pooling histogram and rank-frequency
plot; "Apply to tables" writes the measured figures into the workspace config."""

import json

import streamlit as st

import engine
from dashboard.plans import workload
from dashboard.serve import planpool, workloadwork
from dashboard.text import md
from dashboard.ui import services, state, views, workspace

UPLOAD_KEY = "workload_upload"
EXAMPLE_SEED = 1
POLL_S = 1.0  # how often the page redraws the measuring's time so far
MAX_CHARTS = 8  # tables (features) whose charts are all drawn; past this, one picked at a time


def start_measure(data: bytes, suffix: str, name: str, file_id: str | None = None) -> None:
    """Measure the sample's bytes in a worker process; refused at once (one line, nothing kept) when the config
    does not read or the bytes are not read at all (too big, an unknown suffix, empty)."""
    config = state.config()
    try:
        engine.parse_config(config)
    except engine.EngineError as exc:
        st.error(f"The workspace config does not read: {md(engine.one_line(str(exc)))}")
        return
    refused = workloadwork.refusal(data, suffix, name)
    if refused is not None:
        st.error(md(refused))
        return
    task = services.start_workload(json.dumps(config, sort_keys=True), data, suffix, name)
    state.set_page_value(state.WORKLOAD_TASK, {"task": task, "name": name, "bytes": len(data), "file_id": file_id,
                                               "key": state.config_key(config)})


def collect() -> None:
    """The measuring that ended: its figures become the page's, or its one line is shown."""
    job = state.page_value(state.WORKLOAD_TASK)
    if job is None or job["task"].live:
        return
    state.set_page_value(state.WORKLOAD_TASK, None)
    try:
        measured, error = job["task"].result(0)
    except planpool.TaskCancelled:
        return
    except planpool.TaskFailed as exc:
        st.error(f"Measuring {md(job['name'])} failed: {md(engine.one_line(str(exc)))}")
        return
    if error is not None:
        st.error(md(error))
        return
    state.set_workload((job["key"], job["name"], measured))
    state.set_workload_changes(None)


def cancel(job: dict, why: str) -> None:
    services.cancel_task(job["task"])
    state.set_page_value(state.WORKLOAD_TASK, None)
    state.flash(f"Stopped measuring {md(job['name'])} after {job['task'].elapsed_s:.0f} s: {why}.", "info")


@st.fragment(run_every=POLL_S)
def progress() -> None:
    """The measuring's time so far and its Cancel, redrawn every second on their own (the rest of the page stays
    usable); when it ends, the whole app runs again and takes the figures."""
    job = state.page_value(state.WORKLOAD_TASK)
    if job is None:
        return
    task = job["task"]
    if not task.live:
        st.rerun()
    doing = ("waiting for a free worker" if task.state is planpool.TaskState.QUEUED
             else workloadwork.progress_text(task.progress) or "computing its statistics in the background")
    if workspace.job_box("workload_progress", "workload_cancel",
                         f"{md(job['name'])} ({engine.human_bytes(job['bytes'])}): {md(doing)}, "
                         f"{task.elapsed_s:.0f} s so far. The rest of the app stays usable."):
        cancel(job, "cancelled")
        st.rerun()


def upload_section() -> None:
    up = st.file_uploader(f"A sample of ids (.parquet, .csv, .npz; up to "
                          f"{engine.human_bytes(workloadwork.MAX_UPLOAD_BYTES)}): one column per feature, a list of "
                          "ids per cell", type=list(workloadwork.SUFFIXES), key=UPLOAD_KEY)
    job = state.page_value(state.WORKLOAD_TASK)
    if job is not None and job["file_id"] is not None and up is not None and up.file_id != job["file_id"] \
            and job["task"].live:
        cancel(job, "another file was chosen")
        views.show_flash()
    if up is not None and st.button("Measure the uploaded sample", key="workload_measure"):
        start_measure(up.getvalue(), up.name.rsplit(".", 1)[-1].lower(), up.name, up.file_id)
    try:
        cfg = engine.parse_config(state.config())
    except engine.EngineError as exc:
        st.error(f"The workspace config does not read: {md(engine.one_line(str(exc)))}")
        return
    rows = workload.example_rows(cfg)
    if st.button(f"Use a generated example sample ({rows:,} rows, seeded)", key="workload_example"):
        start_measure(engine.generated_sample_bytes(cfg, rows, EXAMPLE_SEED, "parquet"), "parquet",
                      "generated.parquet")


def apply_section(measured: dict) -> None:
    if st.button("Apply to tables", type="primary", key="workload_apply",
                 help="Write the measured pooling factors and each table's workload block (miss curve, distinct "
                      "rows per batch) into the workspace config; undo goes back."):
        cfg = engine.parse_config(state.config())
        old = state.config()
        new = workload.applied_config(measured["stats"], cfg)
        new["topology"] = old.get("topology", new.get("topology"))
        state.set_config(new, edit="apply a measured workload")
        state.set_workload((state.config_key(state.config()),) + state.workload()[1:])
        state.set_workload_changes(workload.changes(old, state.config()))
        st.rerun()
    changes = state.workload_changes()
    if changes is not None:
        st.markdown(f"**Applied:** {len(changes)} change(s); the headline above is the plan of the new config.")
        st.dataframe(changes, hide_index=True, width="stretch")


def picked(what: str, names: list[str], key: str) -> list[str]:
    """All `names` when there are few; else the one picked (most lookups first: the first is the default)."""
    if len(names) <= MAX_CHARTS:
        return names
    return [st.selectbox(f"{what} to draw ({len(names):,}, most lookups first; one at a time)", names, key=key)]


def figures(measured: dict) -> None:
    stats, shapes = measured["stats"], measured["shapes"]
    cfg = state.config()
    st.subheader("Per table")
    st.dataframe(workload.table_summary(stats), hide_index=True, width="stretch")
    sizes = {t["name"]: t["num_embeddings"] for t in cfg.get("tables", [])}
    on_screen = state.current_plan()  # the plan of the config as it is: its chosen cache sizes are marked
    tables = sorted((n for n in stats["tables"] if n in sizes), key=lambda n: -stats["tables"][n]["lookups"])
    for name in picked("Table", tables, "workload_pick_table"):
        t = stats["tables"][name]
        st.plotly_chart(workload.miss_curve(name, t["miss_ratio_curve"], sizes[name],
                                            workload.table_clf(cfg, name, on_screen.plan if on_screen else None)),
                        width="stretch", key=f"workload_miss_{name}")
    st.subheader("Per feature")
    st.dataframe(workload.feature_summary(stats), hide_index=True, width="stretch")
    features = sorted(shapes, key=lambda f: -stats["features"][f]["ids"])
    for f in picked("Feature", features, "workload_pick_feature"):
        shape = shapes[f]
        left, right = st.columns(2)
        left.plotly_chart(workload.pooling_histogram(f, shape["pooling"]), width="stretch",
                          key=f"workload_pool_{f}")
        right.plotly_chart(workload.rank_frequency(f, shape["ranks"], shape["lookups"]), width="stretch",
                           key=f"workload_rank_{f}")


st.title("Workload")
views.workspace_headline()
views.show_flash()
collect()
upload_section()
if state.page_value(state.WORKLOAD_TASK) is not None:
    progress()
kept = state.workload()
if kept is not None:
    key, name, measured = kept
    if key != state.config_key(state.config()):
        st.warning("The tables changed since this sample was measured; measure it again to apply it.")
    else:
        st.caption(f"Measured: {md(name)}, {measured['stats']['sample']['rows']:,} rows, batch size "
                   f"{measured['stats']['batch_size']:,}.")
        apply_section(measured)
        figures(measured)
