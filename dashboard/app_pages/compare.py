"""Compare: saved plans (and TorchRec's plan for the same config, or the unsaved current plan) side by
side: which constants priced each, per-rank memory and cost, the tables that moved, and measured over estimated
per rank (time and memory, each plan's latest run, priced for the device it measured) with flags.
"""

import streamlit as st

import engine
from dashboard import analysis, charts, measured, services, state, views
from dashboard import calibration as calib
from dashboard.text import md
from db.store import StoreError

CURRENT = "current"
ADVICE = {"time": "Time outside 0.8x-1.25x: calibrate the bandwidths from the validation runs on that device, "
                  "then replan.",
          "memory": "Memory outside it: keep that headroom (the run on the Runs page says more).",
          "shards": "Shards that differ: the run's error on the Runs page names the first difference."}
PICK = "compare_pick"


def options(saved, current) -> dict[str, str]:
    """Option id -> label (plain text: the picker shows it as is; markdown elements take md(label)): the
    unsaved current plan, saved plans (by token), TorchRec baselines."""
    out = {}
    if current is not None and not current.token:
        out[CURRENT] = "Current plan (unsaved)"
    for p in saved:
        out[f"saved:{p.token}"] = (f"{p.label or p.token[:8]} ({services.planner_short(p.planner)}, "
                                   f"{p.created_at:%m-%d %H:%M})")
    for label in state.extra_plans():
        out[f"extra:{label}"] = label
    return out


def load(option: str, store) -> tuple[dict, dict, dict]:
    """(plan, config, settings) of one option."""
    if option == CURRENT:
        cur = state.plan()
        return cur.plan, cur.config, cur.settings
    kind, _, rest = option.partition(":")
    if kind == "extra":
        extra = state.extra_plans()[rest]
        return extra["plan"], extra["config"], extra.get("settings") or {}
    rec = store.get_plan(rest)
    return rec.plan, rec.config, rec.settings


def add_torchrec(option: str, label: str) -> None:
    """TorchRec's plan for the config of `option`, added to the picked plans on the next run."""
    _, config, settings = load(option, services.store())
    with st.spinner(f"Running TorchRec's planner on the config of '{md(label)}'"):
        try:
            result = services.plan_config(state.config_key(config), services.TORCHREC)
        except (engine.EngineError, services.PlannerUnavailable) as e:
            st.error(f"TorchRec's planner gave no plan: {md(e)}", icon=":material/error:")
            return
    name = f"TorchRec for {label.split(' (')[0]}"
    cal = calib.of_settings(settings)  # the same config, so the same (calibrated or not) bandwidths
    state.add_extra_plan(name, result.plan, result.config, {"planner": services.TORCHREC, "calibration": cal}
                         if cal else {"planner": services.TORCHREC})
    picked = list(state.widget(PICK, []))
    state.set_pending(PICK, picked + [f"extra:{name}"] if f"extra:{name}" not in picked else picked)
    st.rerun()


def default_pick(opts: dict[str, str]) -> list[str]:
    token = state.saved_token()
    if token and f"saved:{token}" in opts:
        return [f"saved:{token}"]
    return list(opts)[:2]


def moved(plans: dict[str, dict]) -> None:
    labels = list(plans)
    base = labels[0]
    st.subheader("Tables that moved", divider="gray")
    for other in labels[1:]:
        diff = analysis.moved_tables(plans[base], plans[other])
        with st.expander(f"{md(other)} vs {md(base)}: {len(diff)} of {len(plans[base]['plan'])} tables placed "
                         "differently",
                         expanded=len(labels) == 2):
            st.dataframe(diff.rename(columns={"before": f"in {base}", "after": f"in {other}"}), hide_index=True,
                         height=min(38 + 35 * max(len(diff), 1), 320))


def plan_runs(store, picked: list[str], opts: dict[str, str], plans: dict) -> list[tuple[str, object, object]]:
    """(label, latest run, its per-rank frame) of each picked saved plan that a run measured."""
    out = []
    for option in picked:
        if not option.startswith("saved:"):
            continue
        run = measured.latest_run(store.runs_for_plan(option.split(":", 1)[1]))
        if run is None:
            continue
        plan, config, _ = plans[opts[option]]
        device = str((run.device_info or {}).get("estimated_device") or run.device)
        same = str(config.get("topology", {}).get("compute_device") or "cuda") == device
        frame = measured.run_frame(plan, store.metrics(run.id), str(run.kind), same)
        out.append((opts[option], run, frame))
    return out


def measured_section(store, picked: list[str], opts: dict[str, str], plans: dict) -> None:
    st.subheader("Measured / estimated", divider="gray")
    found = plan_runs(store, picked, opts, plans)
    if not found:
        st.caption("No run has measured these plans yet: start a dry-run or validation run on the Runs page.")
        return
    to_calibrate, advice = [], set()
    for label, run, frame in found:
        device = str((run.device_info or {}).get("estimated_device") or run.device)
        flags = measured.flags(frame, str(run.kind), device)
        text = (f"**{md(label)}**: run {run.id} ({md(run.kind)} on {md(device)}, {md(run.status)}) · "
                f"{md(measured.summary_line(frame))}")
        show = st.error if any(f.what == "shards" for f in flags) else st.warning if flags else st.success
        show(text, icon=":material/warning:" if flags else ":material/verified:")
        advice |= {f.what for f in flags}
        if any(f.calibrate for f in flags) and device not in to_calibrate:
            to_calibrate.append(device)
    if advice:
        st.caption(" ".join(ADVICE[w] for w in ("time", "memory", "shards") if w in advice))
    for device in to_calibrate:
        views.calibrate_action(device, f"compare_calibrate_{device}")
    long, table = measured.combined({label: frame for label, _, frame in found})
    st.plotly_chart(charts.ratio_bars(long), key="compare_ratios")
    st.dataframe(table, hide_index=True, key="compare_measured",
                 column_config={c: st.column_config.NumberColumn(format="%.4g") for c in ("measured ms", "estimated ms")})


st.title("Compare")
views.show_flash()
store = services.store()
opts = options(store.list_plans(), state.plan())
if not opts:
    st.info("Nothing to compare yet: make a plan, save it, then come back.", icon=":material/info:")
    st.stop()
state.apply_pending(PICK)
picked = st.multiselect("Plans to compare", list(opts), default=default_pick(opts) if PICK not in st.session_state
                        else None, format_func=opts.get, key=PICK)
if picked and st.button("Add TorchRec's plan for the same config", key="compare_add_torchrec", icon=":material/add:",
                        help=f"runs TorchRec's EmbeddingShardingPlanner on the config of '{md(opts[picked[0]])}'"):
    add_torchrec(picked[0], opts[picked[0]])
if not picked:
    st.info("Pick one or more plans.", icon=":material/info:")
    st.stop()
try:
    plans = {opts[o]: load(o, store) for o in picked}
except (StoreError, KeyError) as e:
    st.error(f"Cannot load a picked plan: {md(e)}")
    st.stop()
plan_dicts = {label: p for label, (p, _, _) in plans.items()}
priced_by = {label: measured.profile(config, settings) for label, (_, config, settings) in plans.items()}
st.dataframe(analysis.summary_frame(plan_dicts, priced_by), hide_index=True, key="compare_summary", placeholder="n/a",
             column_config={"slowest rank ms": st.column_config.NumberColumn(format="%.4g"),
                            "imbalance (max/mean)": st.column_config.NumberColumn(format="%.3f"),
                            "vs lower bound": st.column_config.NumberColumn(format="%.3f")})
frame = analysis.compare_frame(plan_dicts)
left, right = st.columns(2)
left.plotly_chart(charts.compare_ranks(frame, "cost_ms", "Estimated cost per rank"), key="compare_cost")
right.plotly_chart(charts.compare_ranks(frame, "hbm_bytes", "HBM per rank"), key="compare_hbm")
if len(plan_dicts) > 1:
    moved(plan_dicts)
measured_section(store, picked, opts, plans)
