"""What-if page: a capacity sweep run in the background (a real `python -m engine sweep` process) drawn as a Pareto
chart, a point opened as the workspace config; a re-plan from a saved plan made the current plan; bad input named."""

from __future__ import annotations

import time

import engine
from dashboard.plans import whatif
from streamlit.proto.Metric_pb2 import Metric
from engine.sweep import ACCELERATORS, point_config, sweep
from tests.dashboard.helpers import goto, plotly_specs, shown, workspace
from tests.db.storetest import sample
from tests.factories import ROOT

SWEEP_WAIT_S = 240


def run_sweep(at, devices, sizes, batches="512"):
    at.multiselect(key="whatif_devices").set_value(devices)
    at.multiselect(key="whatif_sizes").set_value(sizes)
    at.text_input(key="whatif_batches").set_value(batches)
    at.number_input(key="whatif_effort").set_value(1000)
    at.run()
    at.button(key="whatif_sweep_run").click().run()
    assert not at.exception, at.exception
    deadline = time.monotonic() + SWEEP_WAIT_S
    while "whatif_sweep_result" not in at.session_state and time.monotonic() < deadline:
        time.sleep(1.0)
        at.run()  # the page collects the finished job on its next run (a browser's fragment polls)
        assert not at.exception, at.exception
    return at.session_state["whatif_sweep_result"]


def test_sweep_runs_in_the_background_and_opens_a_point(app, polls) -> None:
    at = goto(app, "whatif")
    assert polls == []  # no sweep, no polling (tests/dashboard/conftest.py: polls)
    result = run_sweep(at, ["h100_80gb", "a100_40gb"], [2, 8, 16], "512 1024")
    assert polls  # its elapsed time while it ran
    points = result["points"]
    assert len(points) == 2 * 3 * 2 and all(p["fits"] for p in points)
    cfg = engine.load_config(ROOT / "examples" / "tutorial.json")
    direct = sweep(cfg, ["h100_80gb", "a100_40gb"], [2, 8, 16], [512, 1024],
                                engine.PlannerSettings(effort=1000))
    assert [p["step_ms"] for p in points] == [d.step_ms for d in direct]  # the CLI's points, not new figures
    specs = plotly_specs(at)
    assert any(tr.get("name") == "Pareto front" for s in specs for tr in s["data"])
    assert any("points fit" in m for m in shown(at, "markdown"))
    pick = next(i for i, p in enumerate(points) if p["world_size"] == 8 and p["device"] == "a100_40gb"
                and p["batch_size"] == 1024)
    at.selectbox(key="whatif_point").set_value(pick).run()
    at.button(key="whatif_open").click().run()
    assert not at.exception, at.exception
    topo = workspace(at)["topology"]
    assert (topo["world_size"], topo["local_world_size"], topo["batch_size"], topo["profile"]) == (8, 8, 1024,
                                                                                                  "published")
    assert topo["hbm_cap"] == int(ACCELERATORS["a100_40gb"].hbm_gib * 2**30)
    assert workspace(at) == point_config(cfg, "a100_40gb", 8, 1024)


def test_bad_batch_sizes_are_named_and_nothing_runs(app) -> None:
    at = goto(app, "whatif")
    at.text_input(key="whatif_batches").set_value("512 lots").run()
    assert any("Batch per rank: give whole numbers" in e for e in shown(at, "error"))
    assert at.button(key="whatif_sweep_run").disabled


def test_replan_from_a_saved_plan_becomes_the_current_plan(app, store) -> None:
    cfg, plan = sample()
    token = store.save_plan(cfg, plan, label="before the change")
    at = goto(app, "whatif")
    at.selectbox(key="whatif_from").set_value(token)
    at.button(key="whatif_replan").click().run()
    assert not at.exception, at.exception
    res = at.session_state["whatif_replan_result"]
    assert res["from"] == token and res["summary"]["moved_bytes"] == 0  # the same config: nothing moves
    assert [m.label for m in at.metric] == ["Slowest rank", "Bytes moved", "Tables that move"]
    # 'same as from scratch', 'from scratch moves nothing', '0 new': facts drawn without an up arrow (walked at 1280)
    assert at.metric[0].proto.delta == "same as from scratch"
    assert [m.proto.direction for m in at.metric] == [Metric.MetricDirection.NONE] * 3
    at.button(key="whatif_use").click().run()
    current = at.session_state["ws_plan"]
    assert current.settings["replan_from"] == token and current.plan.tables == res["plan"].tables
    assert any("is the current plan" in t for t in shown(at, "toast"))


def test_sweep_figure_marks_every_kind_of_point() -> None:
    base = {"device": "h100_80gb", "device_label": "H100 <b>", "hosts": 1, "batch_size": 512, "lower_bound_ms": 1.0}
    pts = [dict(base, world_size=8, planned=True, fits=True, step_ms=2.0, peak_hbm_fraction=0.5,
                samples_per_s=1e6, pareto=True, reason=""),
           dict(base, world_size=16, planned=True, fits=False, step_ms=3.0, peak_hbm_fraction=1.3,
                samples_per_s=1e6, pareto=False, reason="out of memory at the step's peak ..."),
           dict(base, world_size=32, planned=False, fits=False, step_ms=None, peak_hbm_fraction=None,
                samples_per_s=None, pareto=False, reason="The tables do not fit: <script>")]
    fig = whatif.sweep_figure(pts)
    names = [t.name for t in fig.data]
    assert names == ["H100 &lt;b&gt;", "H100 &lt;b&gt;: step outgrows HBM", "H100 &lt;b&gt;: does not fit",
                     "Pareto front"]
    assert list(fig.data[2].customdata) == [2] and "&lt;script&gt;" in fig.data[2].text[0]
    # a fitting point's hover: three lines broken by plotly's <br> (not shown as "&lt;br&gt;"), the label escaped
    assert fig.data[0].text[0] == ("H100 &lt;b&gt;: 8 GPUs, batch 512<br>step 2.00 ms, peak HBM 50.0% of usable<br>"
                                   "1,000,000 samples/s")
    frame = whatif.points_frame(pts)
    assert list(frame["fits"]) == ["yes", "no", "no"] and frame["Pareto"].tolist() == ["yes", "", ""]
    # numbers stay numbers (sortable), each column a format with its unit: 3 significant digits, rates separated
    assert frame["peak HBM, % of usable"].tolist()[:2] == [50.0, 130.0] and frame["step ms"].tolist()[:2] == [2, 3]
    assert set(whatif.POINT_FORMATS) <= set(frame.columns)
    assert whatif.POINT_FORMATS == {"step ms": "%.3g ms", "peak HBM, % of usable": "%.3g%%", "samples/s": "localized"}
    # a refusal is a paragraph: the column has its first clause, the whole of it is listed under the table
    assert frame["why not"].tolist() == ["", "out of memory at the step's peak ...", "The tables do not fit"]
    assert whatif.refusals(pts) == [
        ("out of memory at the step's peak ...", ["H100 <b>, 16 GPUs (1 hosts), batch 512 per rank"]),
        ("The tables do not fit: <script>", ["H100 <b>, 32 GPUs (1 hosts), batch 512 per rank"])]


def test_the_sweep_axis_labels_each_tick_in_full() -> None:
    """Walked at 1280x720: plotly's log axis labelled 0.5 ms and 0.05 ms as a bare '5', read as 5 ms. Every tick
    is now a 1-2-5 value written in full, from below the lowest point to above the highest."""
    base = {"device": "h100_80gb", "device_label": "H100", "hosts": 1, "batch_size": 512, "planned": True,
            "fits": True, "peak_hbm_fraction": 0.1, "samples_per_s": 1e6, "pareto": False, "reason": ""}
    pts = [dict(base, world_size=w, step_ms=ms) for w, ms in ((8, 0.0626), (64, 1.22), (1024, 10.5))]
    axis = whatif.sweep_figure(pts).layout.yaxis
    assert list(axis.ticktext) == ["0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10", "20"]
    assert list(axis.tickvals) == [float(t) for t in axis.ticktext]
    assert whatif.log_ticks(300.0, 2000.0)[-2:] == [2000.0, 5000.0] and "1,000" in f"{1000.0:,g}"


def test_a_replan_as_fast_as_from_scratch_reads_the_same_not_plus_zero() -> None:
    assert whatif.vs_scratch_text(2.0001, 2.0) == "same as from scratch"  # 2 ms and 2 ms, as the metric shows them
    assert whatif.vs_scratch_text(2.1, 2.0) == "+5.0% vs from scratch"
    assert whatif.vs_scratch_text(1.9, 2.0) == "-5.0% vs from scratch"
    assert whatif.vs_scratch_text(2.0008, 2.0) == "same as from scratch"  # both read 2.00 ms (3 significant digits)
    assert whatif.vs_scratch_text(9.9951, 9.9949) == "+0.002% vs from scratch"  # shown apart (10.0 / 9.99), not 0.0%


def test_mixed_fleets_parse_to_sweep_candidates_and_a_bad_one_is_named() -> None:
    assert whatif.parse_mixes("8 h100_80gb + 8 a100_80gb; 16x h100_80gb+16 a100_40gb;") == (
        ["8 h100_80gb + 8 a100_80gb", "16 h100_80gb + 16 a100_40gb"], None)
    assert whatif.parse_mixes("") == ([], None)
    assert whatif.parse_mixes("8 h100_80gb + 8 a10") == ([], "Mixed fleets: unknown accelerator 'a10' in "
                                                            "'8 h100_80gb + 8 a10'; choose from a100_40gb, a100_80gb, "
                                                            "h100_80gb, h200_141gb, b200_192gb")
    assert "is one accelerator" in whatif.parse_mixes("16 h100_80gb")[1]


def test_a_sweep_mixes_accelerators_in_the_background(app) -> None:
    at = goto(app, "whatif")
    at.text_input(key="whatif_mixes").set_value("8 h100_80gb + 8 a100_40gb")
    result = run_sweep(at, ["h100_80gb"], [8])
    points = result["points"]
    assert [(p["device"], p["world_size"]) for p in points] == [("h100_80gb", 8), ("8 h100_80gb + 8 a100_40gb", 16)]
    assert points[1]["planned"] and points[1]["device_label"] == "8 x NVIDIA H100 80GB SXM + 8 x NVIDIA A100 40GB SXM"
    assert any("8 x NVIDIA H100 80GB SXM + 8 x NVIDIA A100 40GB SXM" in tr.get("name", "")
               for s in plotly_specs(at) for tr in s["data"])
    at.text_input(key="whatif_mixes").set_value("8 h100_80gb + 4 a10").run()
    assert any(e.startswith("Mixed fleets: unknown accelerator 'a10'") for e in shown(at, "error"))
    assert at.button(key="whatif_sweep_run").disabled
