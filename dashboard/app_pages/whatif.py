"""What-if: plan the workspace config over accelerators and world sizes (capacity sweep, in the background), and
re-plan it from a saved plan moving few bytes. The numbers come from the engine (engine.sweep, engine.replan);
the figures from dashboard.plans.whatif.
"""

import json
import re
import tempfile
from pathlib import Path

import streamlit as st

import engine
from dashboard.plans import table_text, whatif
from dashboard.serve import jobs
from dashboard.tables import grid
from dashboard.ui import services, state, views, workspace
from dashboard.ui.state import CurrentPlan
from dashboard.text import count_text, md, ms_text

POLL_S = 1.0
SIZE_CHOICES = [2**k for k in range(13)]  # 1 to 4,096 GPUs
DEFAULT_DEVICES = ["a100_40gb", "a100_80gb", "h100_80gb", "h200_141gb"]


def start_sweep(config: dict, devices: list[str], sizes: list[int], batches: list[int], effort: int,
                groups: list[int] | None = None) -> jobs.Job:
    """`python -m engine sweep` on the config (a file of the job's own folder) in another process, once a slot of
    the server's heavy jobs (jobs.HEAVY) is free. groups: 2D group sizes planned besides one group."""
    workdir = Path(tempfile.mkdtemp(prefix="planner-sweep-"))
    engine.write_json_file(workdir / "config.json", config, indent=None)
    args = ["-m", "engine", "sweep", str(workdir / "config.json"), "--devices", ",".join(devices),
            "--world-sizes", ",".join(map(str, sizes)), "--batch-sizes", ",".join(map(str, batches)),
            "--effort", str(effort), "--json", *(["--group-sizes", ",".join(map(str, groups))] if groups else [])]
    return services.heavy_job(args, workdir, "capacity sweep")


def parse_batches(text: str, hi: int = 2**24, empty_ok: bool = False) -> list[int] | None:
    """Whole numbers from 1 to `hi` separated by spaces or commas; None when the text is not that (or is empty,
    unless `empty_ok`)."""
    try:
        values = [int(t) for t in re.split(r"[,\s]+", text.strip()) if t]
    except ValueError:
        return None
    return values if (values or empty_ok) and all(1 <= v <= hi for v in values) else None


def picked_index(point: dict, n: int) -> int | None:
    """The sweep point a chart selection names (the figure's customdata: its index), if any."""
    value = point.get("customdata")
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < n else None


@st.fragment(run_every=POLL_S)
def sweep_progress() -> None:
    job = state.page_value(state.SWEEP_JOB)
    if job is None:
        return
    if not job["job"].live:
        st.rerun()
    line = workspace.job_line(job["job"], f"Sweeping {job['points']} points", f"The sweep of {job['points']} points")
    if workspace.job_box("whatif_sweep_running", "whatif_sweep_cancel",
                         f"{line}. The rest of the app stays usable."):
        job["job"].close()
        state.set_page_value(state.SWEEP_JOB, None)
        st.rerun()


def collect_sweep() -> None:
    """A finished sweep's points become the result (or its one-line error is shown)."""
    job = state.page_value(state.SWEEP_JOB)
    if job is None or job["job"].live:
        return
    state.set_page_value(state.SWEEP_JOB, None)
    j = job["job"]
    try:
        if j.state is not jobs.JobState.DONE:
            raise ValueError(j.error_line())
        points = json.loads(j.text(jobs.STDOUT))["points"]
    except (ValueError, KeyError) as e:
        state.set_page_value(state.SWEEP_RESULT, {"error": str(e) or "the sweep wrote no points", "key": job["key"]})
    else:
        state.set_page_value(state.SWEEP_RESULT, {"points": points, "key": job["key"]})
    finally:
        j.close()


def sweep_tab(config: dict) -> None:
    st.caption("Plans this config on every accelerator, world size and batch size below (8 GPUs per host). "
               "Memory, bandwidths and fixed costs are published figures, not measurements: calibrate from "
               "validation runs on the machines you get. Same as `python -m engine sweep`.")
    c1, c2, c3, c5, c4 = st.columns([3, 3, 1.4, 1.4, 1.2], vertical_alignment="bottom")
    devices = c1.multiselect("Accelerators", list(engine.ACCELERATORS), DEFAULT_DEVICES, key="whatif_devices",
                             format_func=lambda k: engine.ACCELERATORS[k].label)
    sizes = c2.multiselect("World sizes", SIZE_CHOICES, list(engine.WORLD_SIZES), key="whatif_sizes")
    batch_text = c3.text_input("Batch per rank", str((config.get("topology") or {}).get("batch_size", 512)),
                               key="whatif_batches", help="per-rank batch sizes, separated by spaces or commas")
    group_text = c5.text_input("2D groups", "", key="whatif_groups", placeholder="e.g. 8 16",
                               help="ranks per sharding group to plan besides one group (TorchRec's DMPCollection); "
                                    "a size that does not divide a world size is listed as such")
    effort = c4.number_input("Effort", 0, 1_000_000, 10_000, 5_000, key="whatif_effort",
                             help="search effort per point (the CLI's --effort)")
    mixes, mix_problem = whatif.parse_mixes(st.text_input(
        "Mixed fleets (optional)", key="whatif_mixes",
        placeholder="8 h100_80gb + 8 a100_80gb; 16 h100_80gb + 16 a100_40gb",
        help="hosts of several GPUs, each planned at its own world size: GPUs and accelerator per group, groups joined "
             "by +, fleets separated by ;. Each rank is priced with its own GPU's published figures"))
    if mix_problem:
        st.error(md(mix_problem), icon=":material/error:")
    batches = parse_batches(batch_text)
    if batches is None:
        st.error("Batch per rank: give whole numbers from 1 to 16,777,216 separated by spaces (e.g. `512 2048`).",
                 icon=":material/error:")
    groups = parse_batches(group_text, engine.MAX_WORLD_SIZE, empty_ok=True)
    if groups is None:
        st.error("2D groups: give ranks per group as whole numbers separated by spaces (e.g. `8 16`), or nothing for "
                 "one group.", icon=":material/error:")
    per_group = 1 + len(set(groups)) if groups else 1  # one group, and each 2D size
    points = 0 if groups is None else (len(devices) * len(sizes) + len(mixes)) * len(batches or []) * per_group
    collect_sweep()  # a sweep that finished since the last run: its points, and the button enabled again
    running = state.page_value(state.SWEEP_JOB) is not None
    if st.button(f"Sweep {points} points", type="primary", key="whatif_sweep_run", icon=":material/scatter_plot:",
                 disabled=running or not points or mix_problem is not None):
        try:
            engine.parse_config(config)
        except engine.ConfigError as e:
            st.error(f"The config has a problem: {md(e)}. Fix it on Tables & constraints or Topology.",
                     icon=":material/error:")
        else:
            job = start_sweep(config, devices + mixes, sorted(sizes) or [8], batches, int(effort),
                              sorted(set(groups or [])))
            state.set_page_value(state.SWEEP_JOB, {"job": job, "points": points, "key": state.config_key(config)})
            state.set_page_value(state.SWEEP_RESULT, None)
            st.rerun()
    if state.page_value(state.SWEEP_JOB) is not None:  # polls only while a sweep runs (workspace.job_box)
        sweep_progress()
    result = state.page_value(state.SWEEP_RESULT)
    if result is None:
        return
    if result["key"] != state.config_key(config):
        st.warning("The config changed since this sweep: its points are for the earlier config.",
                   icon=":material/update:")
    if "error" in result:
        st.error(f"The sweep failed: {md(result['error'])}", icon=":material/error:")
        return
    pts = result["points"]
    fits = [i for i, p in enumerate(pts) if p["fits"]]
    st.markdown(f"**{len(fits)} of {len(pts)} points fit**; the Pareto front (no point with as few GPUs is "
                "faster): " + ", ".join(md(f"{p['device_label']} x {p['world_size']}") for p in pts if p["pareto"]))
    event = st.plotly_chart(whatif.sweep_figure(pts), key="whatif_chart", on_select="rerun",
                            selection_mode="points", config={"displaylogo": False})
    picked = [picked_index(p, len(pts)) for p in (event.selection.points if event and event.selection else [])]
    picked = [i for i in picked if i is not None and pts[i]["fits"]]
    if fits:
        if picked and picked[0] != state.widget("whatif_picked"):  # a new click on the chart picks it
            state.set_widget("whatif_picked", picked[0])
            state.set_widget("whatif_point", picked[0])
        if state.widget("whatif_point") not in fits:
            state.forget_widgets(["whatif_point"])
        c1, c2 = st.columns([4, 1.6], vertical_alignment="bottom")
        choice = c1.selectbox("Point", fits, key="whatif_point",
                              format_func=lambda i: f"{whatif.point_label(pts[i])}: {ms_text(pts[i]['step_ms'])}")
        if c2.button("Open as the workspace config", key="whatif_open", icon=":material/open_in_new:",
                     width="stretch"):
            p = pts[choice]
            state.set_config(engine.point_config(engine.parse_config(config), p["device"], p["world_size"],
                                                 p["batch_size"], p.get("group_size")),
                             edit=f"open the sweep point {whatif.point_label(p)}")
            state.flash(f"The workspace config is now {md(whatif.point_label(p))}.")
            st.rerun()
    frame = whatif.points_frame(pts)
    st.dataframe(frame, hide_index=True, key="whatif_points",  # (a point with no plan: the grid's grey None,
                 height=min(POINTS_HEIGHT_PX, grid.grid_height(len(frame), False)),  # streamlit#7360)
                 column_config={**{c: st.column_config.NumberColumn(format=f) for c, f in whatif.POINT_FORMATS.items()},
                                "why not": st.column_config.TextColumn(width=table_text.column_px(frame, "why not"),
                                                                       help="the reason's first clause: the whole "
                                                                            "reason is listed under the table")})
    refused = whatif.refusals(pts)
    if refused:  # a reason is a paragraph: in the table's last column it was cut at 1280 px (issue 28)
        refusals(refused, len(pts) - len(fits))


POINTS_HEIGHT_PX = 320  # at most: fewer points get a table as tall as their rows (grid.grid_height)
MAX_REASONS, MAX_LABELS = 20, 4  # reasons listed under the sweep table, and points named with each


def refusals(refused: list[tuple[str, list[str]]], n: int) -> None:
    """Why the points that do not fit do not, each reason whole and once, with the points it refused."""
    lines = []
    for reason, labels in refused[:MAX_REASONS]:
        more = f" and {len(labels) - MAX_LABELS:,} more" if len(labels) > MAX_LABELS else ""
        lines.append(f"- **{'; '.join(md(x) for x in labels[:MAX_LABELS])}{more}**: {md(reason)}")
    if len(refused) > MAX_REASONS:
        lines.append(f"- and {len(refused) - MAX_REASONS:,} more reasons (`python -m engine sweep` lists each point's)")
    with st.container(border=True, key="whatif_refusals"):
        st.markdown(f"**Why {count_text(n, 'point')} {'does' if n == 1 else 'do'} not fit**\n" + "\n".join(lines))


def replan_tab(config: dict) -> None:
    st.caption("Re-plans this config from a saved plan: tables stay on their ranks where they can, and shards "
               "move only while the bytes moved (weights and optimizer state) stay within the limit. Same as "
               "`python -m engine replan CONFIG --from PLAN --max-move-bytes N`.")
    try:
        saved = services.store().list_plans(limit=200)
    except Exception as e:  # noqa: BLE001 - the database's own message, one line
        st.error(f"Cannot read the saved plans: {md(e)}", icon=":material/database:")
        return
    if not saved:
        st.info("No saved plans yet: save one on Save & share, change the config, then re-plan from it here.",
                icon=":material/info:")
        return
    c1, c2, c3 = st.columns([4, 1.6, 1.4], vertical_alignment="bottom")
    token = c1.selectbox("Saved plan", [s.token for s in saved], key="whatif_from",
                         format_func=lambda t: next(f"{s.label or s.token[:8]} ({s.num_tables} tables, "
                                                    f"{s.world_size} ranks, {ms_text(s.max_rank_cost_ms)})"
                                                    for s in saved if s.token == t))
    limit_gib = c2.number_input("Most GiB to move (0: no limit)", 0.0, 1e9, 0.0, 1.0, key="whatif_limit")
    go = c3.button("Re-plan", type="primary", key="whatif_replan", icon=":material/alt_route:", width="stretch")
    if go:
        record = services.store().get_plan(token)
        if record is None:
            st.error("That saved plan is gone from the database; pick another.", icon=":material/error:")
            return
        limit = int(limit_gib * 2**30) if limit_gib > 0 else None
        r = services.replan_outcome(config, record.plan, token, limit)
        if r.summary is None:
            st.error(f"The config has a problem: {md(r.problem)}" if r.config_error else f"No re-plan: {md(r.problem)}",
                     icon=":material/error:")
            return
        state.set_page_value(state.REPLAN_RESULT, {
            "summary": r.summary, "plan": r.plan, "config": r.config, "from": token,
            "label": record.label or token[:8], "limit": limit, "key": state.config_key(config)})
    res = state.page_value(state.REPLAN_RESULT)
    if res is None:
        return
    if res["key"] != state.config_key(config):
        st.warning("The config changed since this re-plan: it is for the earlier config.", icon=":material/update:")
    s = res["summary"]
    m = st.columns(3)
    vs_scratch = whatif.vs_scratch_text(s["step_ms"], s["scratch_step_ms"])
    same = vs_scratch.startswith("same")  # a tie, and the two lines below, are facts, not gains: no arrow
    m[0].metric("Slowest rank", ms_text(s["step_ms"]), vs_scratch, delta_color="off" if same else "inverse",
                delta_arrow="off" if same else "auto")
    m[1].metric("Bytes moved", engine.human_bytes(s["moved_bytes"]),
                f"{s['moved_bytes'] / s['scratch_moved_bytes']:.0%} of from scratch" if s["scratch_moved_bytes"]
                else "from scratch moves nothing", delta_color="off", delta_arrow="off")
    m[2].metric("Tables that move", f"{len(s['moved_tables'])}", f"{len(s['new_tables'])} new", delta_color="off",
                delta_arrow="off")
    st.dataframe(whatif.replan_rows(s), hide_index=True)
    if s["checkpoint_breaks"]:
        st.warning("These tables' checkpoints do not load as they are: " + "; ".join(
            f"{md(c['table'])} ({md(c['why'])})" for c in s["checkpoint_breaks"][:10]), icon=":material/warning:")
    if s["moved_by_pair"]:
        st.caption("Bytes moved per rank pair (largest first)")
        st.dataframe(whatif.pairs_frame(s), hide_index=True, height=240)
    if st.button("Make the re-plan the current plan", key="whatif_use", icon=":material/check:",
                 disabled=res["key"] != state.config_key(config)):
        state.set_plan(CurrentPlan(plan=res["plan"], config=res["config"], planner=services.OURS,
                                   settings={"planner": services.OURS, "replan_from": res["from"],
                                             "max_move_bytes": res["limit"]}, source_key=res["key"]))
        state.flash(f"The re-plan from '{md(res['label'])}' is the current plan: see it on Plan.")
        st.rerun()


st.title("What-if")
views.show_flash()
st.caption("Which GPUs, and how many? And how to change a plan without moving everything.")
workspace_config = state.config()
tab_sweep, tab_replan = st.tabs(["Capacity sweep", "Re-plan from a saved plan"])
with tab_sweep:
    sweep_tab(workspace_config)
with tab_replan:
    replan_tab(workspace_config)
