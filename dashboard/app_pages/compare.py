"""Compare: saved plans (and TorchRec's plan for the same config, or the unsaved current plan) side by
side: which constants priced each, per-rank cost (measured beside it where a run measured the plan) and device
memory (HBM, DDR for CPU plans), every plan against the config's lower bound; then each plan against the first:
headline and per-rank differences with the better plan marked, the tables that move once ranks are renumbered
and the bytes that would move; and measured over estimated per rank (each plan's latest run: each rank's own
embedding work, the slowest rank's error, which ids it used) with flags. Numbers as text with their units.
"""

import streamlit as st

import engine
from dashboard.plans import analysis, charts, measured, plan_deltas, plan_diff, run_ids, table_text
from dashboard.ui import services, state, views, workspace
from dashboard.plans import calibration as calib
from dashboard.text import md
from db.store import StoreError

CURRENT = "current"
ADVICE = {"time": "Time outside 0.8x-1.25x: calibrate the bandwidths from the validation runs on that device, "
                  "then replan.",
          "memory": "Memory outside it: keep that headroom (the run on the Runs page says more).",
          "shards": "Shards that differ: the run's error on the Runs page names the first difference."}
PICK = "compare_pick"
JOB_POLL_S = 1.0


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


def load(option: str, store) -> tuple[engine.Plan, engine.Config, dict]:
    """(plan, config, settings) of one option: the engine's typed objects (a saved plan parsed once)."""
    if option == CURRENT:
        cur = state.plan()
        return cur.plan, cur.config, cur.settings
    kind, _, rest = option.partition(":")
    if kind == "extra":
        extra = state.extra_plans()[rest]
        return extra["plan"], extra["config"], extra.get("settings") or {}
    rec = store.get_plan(rest)
    typed = services.saved_result(rec)
    return typed.plan, typed.config, rec.settings


def add_torchrec(option: str, label: str) -> None:
    """Start TorchRec's planner on the config of `option` in the background (it can take minutes on 1,000
    tables); its plan joins the picked plans when it finishes (collect_torchrec)."""
    _, config, settings = load(option, services.store())
    old = state.page_value(state.TORCHREC_JOB)
    if old is not None:
        old["job"].close()
    state.set_page_value(state.TORCHREC_JOB, {
        "job": services.start_torchrec_plan(config), "config": config, "settings": settings,
        "name": f"TorchRec for {label.split(' (')[0]}", "label": label})
    st.rerun()


def collect_torchrec() -> None:
    """A finished baseline joins the picked plans (or its one-line error is shown)."""
    pending = state.page_value(state.TORCHREC_JOB)
    if pending is None or pending["job"].live:
        return
    state.set_page_value(state.TORCHREC_JOB, None)
    job = pending["job"]
    try:
        if job.cancelled:
            return
        result = services.torchrec_result(job, pending["config"])
    except (engine.EngineError, services.PlannerUnavailable) as e:
        st.error(f"TorchRec's planner gave no plan: {md(e)}", icon=":material/error:")
        return
    finally:
        job.close()
    name = pending["name"]
    cal = calib.of_settings(pending["settings"])  # the same config, so the same (calibrated or not) bandwidths
    state.add_extra_plan(name, result.plan, result.config, {"planner": services.TORCHREC, "calibration": cal.as_dict()}
                         if cal else {"planner": services.TORCHREC})
    picked = list(state.widget(PICK, []))
    state.set_pending(PICK, picked + [f"extra:{name}"] if f"extra:{name}" not in picked else picked)


@st.fragment(run_every=JOB_POLL_S)
def torchrec_progress() -> None:
    """The running baseline's elapsed time and Cancel, redrawn on their own; its end reruns the page."""
    pending = state.page_value(state.TORCHREC_JOB)
    if pending is None:
        return
    if not pending["job"].live:
        st.rerun()
    label = md(pending["label"])
    line = workspace.job_line(pending["job"], f"TorchRec's planner on the config of '{label}'",
                              f"TorchRec's planner for '{label}'")
    if workspace.job_box("compare_torchrec_job", "compare_torchrec_cancel",
                         f"{line}. The rest of the app stays usable; its plan joins the comparison when it "
                         "finishes."):
        pending["job"].close()
        state.set_page_value(state.TORCHREC_JOB, None)
        st.rerun()


def default_pick(opts: dict[str, str]) -> list[str]:
    """The plan on screen (saved or not) and the newest other plan: a comparison needs two (walked at 1280x720:
    after saving TorchRec's plan beside ours, the page opened on the plan just saved alone)."""
    token = state.saved_token()
    mine = f"saved:{token}" if token and f"saved:{token}" in opts else None
    if mine is None:
        return list(opts)[:2]
    return [mine, *[o for o in opts if o != mine][:1]]


def first_pick(opts: dict[str, str]) -> list[str]:
    """The picks the page opens with: those of the last visit that are still offered (none if none were picked),
    else default_pick."""
    before = state.kept(PICK)
    if before is None:
        return default_pick(opts)
    still = [o for o in before if o in opts]
    return still if still or not before else default_pick(opts)


def bounds(plans: dict[str, tuple[engine.Plan, engine.Config, dict]]) -> dict[str, float | None]:
    """The lower bound of each plan's config: the plan's own, another picked plan's of the same config, or our
    planner's for that config (TorchRec's plans carry none; the bound depends on the config only)."""
    known: list[tuple[engine.Config, float | None]] = [(c, p.lower_bound_ms) for p, c, _ in plans.values()
                                                       if p.lower_bound_ms]
    out = {}
    for label, (plan, config, _) in plans.items():
        if plan.lower_bound_ms:
            out[label] = plan.lower_bound_ms
            continue
        same = next((b for c, b in known if c is config or c == config), _UNKNOWN)
        if same is _UNKNOWN:
            key = state.config_key(engine.config_to_dict(config))
            try:
                same = services.plan_config(key, services.OURS, 0).plan.lower_bound_ms
            except (engine.EngineError, services.PlannerUnavailable):
                same = None
            known.append((config, same))
        out[label] = same
    return out


_UNKNOWN = object()


def better_cells(frame):
    """The headline table with the better plan's value shaded (a Styler: UI only)."""
    def shade(row):
        return ["background-color: #dff0d8" if c == row["better"] else "" for c in row.index]
    return frame.style.apply(shade, axis=1)


PCT = st.column_config.NumberColumn(format="%+.1f%%")


def differences(base: str, other: str, plans: dict, found: dict, devices: dict) -> None:
    """`other` (B) against `base` (A): headlines, the tables that move and the bytes, rank by rank."""
    (plan_a, config_a, _), (plan_b, config_b, _) = plans[base], plans[other]
    st.markdown(f"**A** = {md(base)} · **B** = {md(other)}")
    head = plan_deltas.headline_frame(plan_a, plan_b, found.get(base), found.get(other),
                                      (devices.get(base, ""), devices.get(other, "")))
    st.dataframe(better_cells(head), hide_index=True, key=f"compare_headlines_{other}", placeholder="",
                 column_config={"B - A %": PCT})
    st.caption(plan_deltas.verdict(head) + " Measured rows come from each plan's latest run (Runs page).")
    d = plan_diff.diff(plan_a, config_a, plan_b, config_b)
    st.markdown(f"**Tables:** {md(plan_diff.moved_sentence(d))}  \n{md(plan_diff.bytes_sentence(d))}")
    changed = d.tables[d.tables["change"] != plan_diff.SAME].copy()
    if len(changed):
        changed["MiB to move"] = changed.pop("bytes to move") / plan_deltas.MIB
        changed = changed.sort_values(["change", "MiB to move"], ascending=[True, False], kind="stable")
        st.dataframe(table_text.readable(changed), hide_index=True, key=f"compare_moved_{other}",
                     height=min(38 + 35 * len(changed), 320))
    ranks = plan_deltas.rank_frame(plan_a, plan_b, found.get(base), found.get(other), d.sigma)
    paired = " (each A rank against the B rank it became)" if d.renumbered else ""
    if ranks[["B - A ms", "B - A MiB"]].fillna(1.0).eq(0).all(axis=None):
        st.caption(f"Rank by rank{paired}, B's estimated time and peak memory are A's.")
    else:
        st.plotly_chart(charts.rank_deltas(ranks, f"B - A per rank{paired}"), key=f"compare_deltas_{other}")
    if found.get(base) is not None or found.get(other) is not None:
        st.caption("Measured columns: each plan's latest run; measured / est. divides by the run's own estimate, "
                   "priced for the device it measured.")
    st.dataframe(table_text.readable(ranks), hide_index=True, key=f"compare_ranks_{other}",
                 height=min(38 + 35 * len(ranks), 320), placeholder="")


def differences_section(plans: dict, found: dict, devices: dict) -> None:
    labels = list(plans)
    st.subheader("Differences", divider="gray")
    for other in labels[1:]:
        with st.expander(f"{md(other)} (B) against {md(labels[0])} (A)", expanded=len(labels) == 2):
            differences(labels[0], other, plans, found, devices)


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
        frame = measured.run_frame(plan, store.metrics(run.id), str(run.kind), measured.same_device(config, run))
        out.append((opts[option], run, frame))
    return out


def measured_section(found: list[tuple[str, object, object]]) -> None:
    st.subheader("Measured / estimated", divider="gray")
    if not found:
        st.caption("No run has measured these plans yet: start a dry-run or validation run on the Runs page.")
        return
    to_calibrate, advice = [], set()
    for label, run, frame in found:
        device = measured.run_device(run)
        flags = measured.flags(frame, str(run.kind), device)
        text = (f"**{md(label)}**: run {run.id} ({md(run.kind)} on {md(device)}, {md(run.status)}) · "
                f"{md(measured.summary_line(frame))}  \n{md(measured.slowest_line(frame, str(run.kind), device))}"
                f"  \nIds: {md(run_ids.ids_text(run.device_info))}")
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
    st.dataframe(table, hide_index=True, key="compare_measured")


st.title("Compare")
views.show_flash()
store = services.store()
collect_torchrec()  # a baseline that finished since the last run joins the picked plans
opts = options(store.list_plans(), state.plan())
if not opts:
    st.info("Nothing to compare yet: make a plan, save it, then come back.", icon=":material/info:")
    st.stop()
state.apply_pending(PICK)
picked = st.multiselect("Plans to compare", list(opts), default=first_pick(opts) if not state.has_widget(PICK)
                        else None, format_func=opts.get, key=PICK)
state.remember(PICK, picked)  # the picks come back after a visit to another page
if picked and st.button("Add TorchRec's plan for the same config", key="compare_add_torchrec", icon=":material/add:",
                        disabled=state.page_value(state.TORCHREC_JOB) is not None,
                        help=f"runs TorchRec's EmbeddingShardingPlanner on the config of '{md(opts[picked[0]])}' "
                             "in the background"):
    add_torchrec(picked[0], opts[picked[0]])
if state.page_value(state.TORCHREC_JOB) is not None:  # polls only while a baseline runs (workspace.job_box)
    torchrec_progress()
if not picked:
    st.info("Pick one or more plans.", icon=":material/info:")
    st.stop()
try:
    plans = {opts[o]: load(o, store) for o in picked}
except (StoreError, KeyError) as e:
    st.error(f"Cannot load a picked plan: {md(e)}")
    st.stop()
given = [label for label, (p, _, _) in plans.items() if not p.lower_bound_ms]
plans = {label: (plan_deltas.with_bound(p, bound), c, s)
         for (label, (p, c, s)), bound in zip(plans.items(), bounds(plans).values())}
typed_plans = {label: p for label, (p, _, _) in plans.items()}
found = plan_runs(store, picked, opts, plans)
frames = {label: frame for label, _, frame in found}
devices = {label: measured.run_device(run) for label, run, _ in found}
drawn = {label: frame for label, run, frame in found if measured.same_device(plans[label][1], run)}  # same device
priced_by = {label: measured.profile(config, settings) for label, (_, config, settings) in plans.items()}
st.dataframe(table_text.readable(analysis.summary_frame(typed_plans, priced_by),
                                 ratios=("imbalance (max/mean)", "vs lower bound")),
             hide_index=True, key="compare_summary", placeholder="n/a")
if given:
    bounded = [label for label in given if typed_plans[label].lower_bound_ms]
    if bounded:
        st.caption(f"{md(', '.join(bounded))}: no lower bound of {'its' if len(bounded) == 1 else 'their'} own "
                   "(TorchRec's planner gives none), so vs lower bound uses the config's, from our planner: the bound "
                   "depends on the config only, and no plan of that config, whoever made it, has a faster slowest "
                   "rank.")
    if len(bounded) < len(given):
        st.caption(f"No lower bound for {md(', '.join(g for g in given if g not in bounded))}: our planner found "
                   "no plan of its config.")
memory = plan_deltas.memory_kind(typed_plans)
left, right = st.columns(2)
left.plotly_chart(charts.compare_ranks(analysis.compare_frame(typed_plans), "cost_ms", "Estimated cost per rank"
                                       + (" (diamonds: measured)" if drawn else ""),
                                       plan_deltas.measured_long(drawn) if drawn else None), key="compare_cost")
right.plotly_chart(charts.compare_ranks(plan_deltas.memory_frame(typed_plans), "memory_bytes",
                                        f"{memory if memory != 'device memory' else 'Device memory (HBM; DDR on CPU)'}"
                                        " per rank (step's peak)"), key="compare_memory")
if len(drawn) < len(frames):
    left.caption(f"Not drawn here: {md(', '.join(label for label in frames if label not in drawn))}, measured on "
                 "another device than its estimates were priced for (Measured / estimated, below, compares it with "
                 "estimates for the device it ran on).")
if len(typed_plans) > 1:
    differences_section(plans, frames, devices)
measured_section(found)
