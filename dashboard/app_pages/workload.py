"""Workload: measure a sample of real ids (Parquet, CSV, NPZ; up to 64 MiB, computed on the page: a file of that
size takes seconds) and see per feature its pooling histogram and rank-frequency plot, per table its LRU miss-ratio
curve with the chosen cache marked; "Apply to tables" writes the measured figures into the workspace config."""

import streamlit as st

import engine
from dashboard.plans import workload
from dashboard.text import md
from dashboard.ui import state, views

UPLOAD_KEY = "workload_upload"
EXAMPLE_ROWS = 4000
EXAMPLE_SEED = 1


def measure_bytes(data: bytes, suffix: str, name: str) -> None:
    """Measure the sample's bytes; a bad sample: one line, and nothing kept."""
    try:
        cfg = engine.parse_config(state.config())
    except engine.EngineError as exc:
        st.error(f"The workspace config does not read: {md(engine.one_line(str(exc)))}")
        return
    measured, error = workload.measure_upload(cfg, data, suffix, name)
    if error is not None:
        st.error(md(error))
        return
    state.set_workload((state.config_key(state.config()), name, measured))
    state.set_workload_changes(None)


def upload_section() -> None:
    up = st.file_uploader(f"A sample of ids (.parquet, .csv, .npz; up to "
                          f"{engine.human_bytes(workload.MAX_UPLOAD_BYTES)}): one column per feature, a list of "
                          "ids per cell", type=list(workload.SUFFIXES), key=UPLOAD_KEY)
    if up is not None and st.button("Measure the uploaded sample", key="workload_measure"):
        measure_bytes(up.getvalue(), up.name.rsplit(".", 1)[-1].lower(), up.name)
    if st.button(f"Use a generated example sample ({EXAMPLE_ROWS:,} rows, seeded)", key="workload_example"):
        try:
            cfg = engine.parse_config(state.config())
        except engine.EngineError as exc:
            st.error(f"The workspace config does not read: {md(engine.one_line(str(exc)))}")
            return
        measure_bytes(engine.generated_sample_bytes(cfg, EXAMPLE_ROWS, EXAMPLE_SEED, "parquet"), "parquet",
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


def figures(measured: dict) -> None:
    stats, shapes = measured["stats"], measured["shapes"]
    cfg = state.config()
    st.subheader("Per table")
    st.dataframe(workload.table_summary(stats), hide_index=True, width="stretch")
    sizes = {t["name"]: t["num_embeddings"] for t in cfg.get("tables", [])}
    on_screen = state.current_plan()  # the plan of the config as it is: its chosen cache sizes are marked
    for name, t in stats["tables"].items():
        if name in sizes:
            st.plotly_chart(workload.miss_curve(name, t["miss_ratio_curve"], sizes[name],
                                                workload.table_clf(cfg, name, on_screen.plan if on_screen else None)),
                            width="stretch", key=f"workload_miss_{name}")
    st.subheader("Per feature")
    st.dataframe(workload.feature_summary(stats), hide_index=True, width="stretch")
    for f, shape in shapes.items():
        left, right = st.columns(2)
        left.plotly_chart(workload.pooling_histogram(f, shape["pooling"]), width="stretch",
                          key=f"workload_pool_{f}")
        right.plotly_chart(workload.rank_frequency(f, shape["counts"]), width="stretch",
                           key=f"workload_rank_{f}")


st.title("Workload")
views.workspace_headline()
views.show_flash()
upload_section()
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
