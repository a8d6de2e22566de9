"""Our plans priced with CPU terms fitted on this machine's stored runs, each config left out of its own fit
(bench.measured_fit, `python -m bench.measured --fit-from`): runs of another machine are refused, a config's own
ranks never enter its fit, and the quick bench end to end plans and dry-runs with the fitted terms. One-rank cases
timed here join the fit (--fit-cases; cases timed elsewhere are refused), and --min-gain plans ours against
TorchRec's plan, kept unless ours is estimably faster (auto: the held-out error on two plans' ratio)."""

import json
import platform
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.measured_fit import fit_cases, fit_sources, fitted_config, pair_margin, this_machine
from bench.measured_cases import cases, quick_cases
import engine
from tests import processes
from tests.factories import ROOT

STORED = [ROOT / "bench" / "results" / "measured_later.json", ROOT / "bench" / "results" / "measured_bench_rerun.json"]
CASES = ROOT / "bench" / "results" / "cost_terms_v657.jsonl"


def _cases_as_here(tmp_path: Path, here: dict, rows: list | None = None) -> Path:
    """The stored one-rank cases (or `rows`), each saying it was timed on `here`."""
    rows = rows if rows is not None else [json.loads(line) for line in CASES.read_text().splitlines()]
    out = tmp_path / "cases.jsonl"
    out.write_text("".join(json.dumps({**r, "machine": here}) + "\n" for r in rows))
    return out


def _as_here(tmp_path: Path, source: Path, here: dict[str, str]) -> Path:
    """A copy of a stored run that says it was measured on `here` (the test's stand-in for runs of this machine)."""
    data = json.loads(source.read_text())
    data["meta"].update(here)
    out = tmp_path / source.name
    out.write_text(json.dumps(data))
    return out


def test_runs_of_another_machine_are_refused_naming_both(tmp_path):
    stored = json.loads(STORED[0].read_text())["meta"]
    elsewhere = {"machine": "Linux-other-vm", "cpu": "Some CPU"}
    with pytest.raises(SystemExit) as e:
        fit_sources([STORED[0]], elsewhere)
    said = str(e.value)
    assert str(STORED[0]) in said and f"its machine {stored['machine']!r}, here 'Linux-other-vm'" in said
    assert "terms are fitted per machine" in said
    # what a run recorded must match: its CPU, caches, libraries; one recorded before runs named them is judged by
    # its platform alone
    same = {"machine": stored["machine"], "cpu": "AMD", "caches": {"L2": 2**20}, "libraries": {"torch": "2.13.0"}}
    recorded = _as_here(tmp_path, STORED[0], same)
    assert fit_sources([recorded], same)
    for key, other in (("cpu", "Intel"), ("caches", {"L2": 2**21}), ("libraries", {"torch": "2.12.0"})):
        with pytest.raises(SystemExit, match=f"its {key} "):
            fit_sources([recorded], {**same, key: other})
    assert fit_sources([STORED[0]], {**same, "cpu": "anything"})
    with pytest.raises(SystemExit, match="no 'configs' list"):
        bad = tmp_path / "bad.json"
        bad.write_text("{}")
        fit_sources([bad])


def test_a_configs_own_ranks_never_enter_its_fit():
    here = {"machine": json.loads(STORED[0].read_text())["meta"]["machine"], "cpu": "x"}
    plans = fit_sources(STORED, here)
    case = next(c for c in cases() if c.name == "later-3")
    assert any(p.config == case.name for p in plans)
    cfg, info = fitted_config(case.name, case.config, plans)
    assert case.name not in info["configs"] and len(info["configs"]) == 11  # 14, less itself and two adam (torch)
    assert info["plans"] == sum(p.config != case.name and p.backend == "fbgemm" for p in plans)
    # the same fit as from the other configs' plans alone: the config's own were dropped, nothing else
    _, alone = fitted_config(case.name, case.config, [p for p in plans if p.config != case.name])
    assert alone["values"] == info["values"]
    prof = cfg["topology"]["profile"]
    assert prof["device_name"] == engine.cpu_name() and prof["cpu_id_work"] == pytest.approx(
        info["values"]["cpu_id_work"] * cfg["topology"].get("ddr_mem_bw", engine.FIELDS["ddr_mem_bw"].default)
        / engine.FIELDS["ddr_mem_bw"].default)
    assert engine.parse_config(cfg).topology.profile is not None
    with pytest.raises(engine.EngineError, match="at least"):  # nothing else to fit on
        fitted_config(case.name, case.config, [p for p in plans if p.config == case.name])


def test_quick_bench_plans_ours_with_fitted_terms_end_to_end(tmp_path):
    here = this_machine()
    sources = [_as_here(tmp_path, s, here) for s in STORED]
    out = tmp_path / "measured.md"
    proc = processes.run([sys.executable, "-m", "bench.measured", "--quick", "--pairs", "1", "--out", str(out),
                          "--fit-from", *map(str, sources)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    fbgemm = sum(p.backend == "fbgemm" for p in fit_sources(sources, here))  # the adam configs ran torch's fallback
    assert "**Ours is planned with fitted terms**" in text and f"{fbgemm}-{fbgemm} plans of the other configs" in text
    [rec] = json.loads(out.with_suffix(".json").read_text())["configs"]
    assert "error" not in rec, rec.get("error")
    assert rec["fit"]["plans"] == fbgemm and quick_cases()[0].name not in rec["fit"]["configs"]
    prof = rec["fitted_config"]["topology"]["profile"]
    assert prof["device_name"] == engine.cpu_name()
    # the dry-runs priced the ranks with the fitted terms: the estimate is the fitted one, not the defaults'
    fitted = engine.parse_config(rec["fitted_config"])
    tables = engine.parse_plan(rec["ours_plan"], fitted)
    want = [r.perf.fwd_compute + r.perf.bwd_compute for r in engine.evaluate(fitted, tables, planner="file").ranks]
    got = [r["estimated_compute_ms"] for r in rec["series"]["ours"][0]["ranks"]]
    assert got == pytest.approx(want, rel=1e-6)
    default = engine.parse_config(rec["config"])
    before = [r.perf.fwd_compute + r.perf.bwd_compute for r in engine.evaluate(default, engine.parse_plan(
        rec["ours_plan"], default), planner="file").ranks]
    assert got != pytest.approx(before, rel=0.05)
    assert platform.platform() in text
    # the offline report reads the fitted estimate the run recorded, beside the defaults' re-pricing
    report = processes.run([sys.executable, "-m", "bench.rank_error", "--json", str(out.with_suffix(".json"))],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr
    assert "**The estimate the run recorded, where ours was planned with fitted terms**" in report.stdout


def test_ours_on_fitted_terms_against_ours_on_the_defaults(tmp_path):
    no_fit = processes.run([sys.executable, "-m", "bench.measured", "--quick", "--baseline", "defaults", "--out",
                            str(tmp_path / "x.md")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert no_fit.returncode == 2 and "give --fit-from RUN.json too" in no_fit.stderr
    sources = [_as_here(tmp_path, s, this_machine()) for s in STORED]
    out = tmp_path / "measured.md"
    proc = processes.run([sys.executable, "-m", "bench.measured", "--quick", "--pairs", "1", "--baseline", "defaults",
                          "--out", str(out), "--fit-from", *map(str, sources)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "**The baseline is ours on the default terms, not TorchRec's**" in text
    assert "| ours / defaults measured, median (IQR) |" in text and "ours / TorchRec measured" not in text
    [rec] = json.loads(out.with_suffix(".json").read_text())["configs"]
    assert rec["baseline"] == "defaults" and "error" not in rec, rec.get("error")
    (tmp_path / "c.json").write_text(json.dumps(rec["config"]))
    plain = processes.run([sys.executable, "-m", "engine", "plan", "--json", str(tmp_path / "c.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    baseline = rec.get("torchrec_plan") or rec["ours_plan"]  # identical plans: one series, A/A only
    assert json.loads(plain.stdout)["plan"] == baseline["plan"]  # the baseline is our plan on the defaults


def test_cases_timed_elsewhere_or_unrecorded_are_refused_naming_the_line(tmp_path):
    here = {"machine": "Linux-here", "cpu": "X"}
    rows = [json.loads(line) for line in CASES.read_text().splitlines()][:6]
    path = _cases_as_here(tmp_path, here, rows)
    got = fit_cases([path], here)
    assert [name for name, *_ in got] == sorted({r["case"] for r in rows})
    name, cfg, tables, ms = got[0]
    assert ms == pytest.approx(float(sorted(r["median_ms"] for r in rows if r["case"] == name)[
        len([r for r in rows if r["case"] == name]) // 2]))  # the median over its repetitions (1 or 3 here)
    assert cfg.topology.world_size == 1 and set(tables) == {t.name for t in cfg.tables}
    lines = path.read_text().splitlines()
    other = json.loads(lines[3])
    for machine, said in (({"machine": "Linux-other", "cpu": "X"}, "its machine 'Linux-other', here 'Linux-here'"),
                          (None, "its machine 'unrecorded', here 'Linux-here'"),
                          ({"machine": "Linux-here", "cpu": "Y"}, "its cpu 'Y', here 'X'")):
        changed = {k: v for k, v in other.items() if k != "machine"} | ({"machine": machine} if machine else {})
        path.write_text("\n".join(lines[:3] + [json.dumps(changed)] + lines[4:]) + "\n")
        with pytest.raises(SystemExit) as e:
            fit_cases([path], here)
        assert f"--fit-cases {path} line 4 was timed on another machine ({said})" in str(e.value)
    path.write_text("not json\n")
    with pytest.raises(SystemExit, match="line 1 is not a case `python -m bench.cost_terms measure` wrote"):
        fit_cases([path], here)


def test_cases_join_the_fit_and_the_margin_never_reads_the_config_itself(tmp_path):
    here = {"machine": json.loads(STORED[0].read_text())["meta"]["machine"], "cpu": "x"}
    plans = fit_sources(STORED, here)
    cases_here = fit_cases([_cases_as_here(tmp_path, here)], here)
    case = next(c for c in cases() if c.name == "later-3")
    _, without = fitted_config(case.name, case.config, plans)
    cfg, info = fitted_config(case.name, case.config, plans, cases_here)
    assert info["cases"] == len(cases_here) == 59 and info["ranks"] == without["ranks"] + 59
    assert info["values"] != without["values"]
    assert engine.parse_config(cfg).topology.profile is not None
    margin = pair_margin(case.name, plans, cases_here)
    others = [p for p in plans if p.config != case.name and p.backend == "fbgemm"]
    both = {(p.run, p.config) for p in others if p.who == "ours"} & {(p.run, p.config) for p in others
                                                                      if p.who == "torchrec"}
    assert margin["pairs"] == len(both) > 5 and 0 < margin["min_gain"] < margin["p75"] < 1
    # the config's own measurements never enter; another config's do
    own = [replace(p, measured=p.measured * 3.0) if p.config == case.name else p for p in plans]
    assert pair_margin(case.name, own, cases_here) == margin
    first = next(p for p in others if p.who == "ours")
    slower = first.measured.copy()
    slower[:, 0] *= 2.0  # its rank 0 measured twice as slow
    moved = [replace(p, measured=slower) if p is first else p for p in plans]
    assert pair_margin(case.name, moved, cases_here) != margin
    with pytest.raises(engine.EngineError, match="give --min-gain as a number"):
        pair_margin(case.name, [p for p in plans if p.who == "ours"], cases_here)


def test_cost_term_cases_record_this_machine_and_feed_the_fit(tmp_path):
    out = tmp_path / "cases.jsonl"
    proc = processes.run([sys.executable, "-m", "bench.cost_terms", "measure", "--only", "pool/1", "--iters", "2",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["case"] == "pool/1" and row["machine"] == this_machine()
    [(name, _, _, ms)] = fit_cases([out])
    assert name == "pool/1" and ms == row["median_ms"] > 0


def test_quick_bench_keeps_torchrecs_plan_unless_ours_beats_the_gain(tmp_path):
    for args, said in ((["--fit-cases", str(CASES)], "--fit-cases needs --fit-from RUN.json"),
                       (["--min-gain", "auto"], "--min-gain auto needs --fit-from or --table-costs"),
                       (["--min-gain", "2"], "--min-gain must be auto or a fraction from 0 to 0.9")):
        bad = processes.run([sys.executable, "-m", "bench.measured", "--quick", "--out", str(tmp_path / "x.md"),
                             *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert bad.returncode == 2 and said in bad.stderr, bad.stderr
    out = tmp_path / "measured.md"
    proc = processes.run([sys.executable, "-m", "bench.measured", "--quick", "--pairs", "1", "--min-gain", "0.89",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    [rec] = json.loads(out.with_suffix(".json").read_text())["configs"]
    assert rec["guard"] == {"min_gain": 0.89, "kept": "torchrec"} and "torchrec_plan" not in rec  # A/A only
    assert rec["notes"][0].startswith("TorchRec's plan kept: ours is not estimably faster")
    assert "not over the 89.0% --min-gain" in rec["notes"][0]
    text = out.read_text()
    assert "**Ours is planned against TorchRec's plan**" in text and "`--min-gain 0.89`" in text
    assert f"TorchRec's plan was kept for 1 of 1 configs ({quick_cases()[0].name})" in text


def test_quick_bench_with_cases_and_the_held_out_margin_end_to_end(tmp_path):
    here = this_machine()
    sources = [_as_here(tmp_path, s, here) for s in STORED]
    out = tmp_path / "measured.md"
    proc = processes.run([sys.executable, "-m", "bench.measured", "--quick", "--pairs", "1", "--out", str(out),
                          "--fit-from", *map(str, sources), "--fit-cases", str(_cases_as_here(tmp_path, here)),
                          "--min-gain", "auto"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    [rec] = json.loads(out.with_suffix(".json").read_text())["configs"]
    assert "error" not in rec, rec.get("error")
    assert rec["fit"]["cases"] == 59
    guard = rec["guard"]
    assert 0 < guard["min_gain"] < guard["p75"] and guard["pairs"] > 5
    plans = fit_sources(sources, here)
    assert guard == {**pair_margin(quick_cases()[0].name, plans, fit_cases([tmp_path / "cases.jsonl"], here)),
                     "kept": guard["kept"]}
    said = [n for n in rec["notes"] if "--min-gain" in n]
    assert said and said[0].startswith("ours replaces TorchRec's plan" if guard["kept"] == "ours"
                                       else "TorchRec's plan kept")
    assert "the one-rank cost-term cases of" in out.read_text()


def test_quick_bench_plans_ours_with_every_table_measured_alone(tmp_path):
    out = tmp_path / "measured.md"
    proc = processes.run([sys.executable, "-m", "bench.measured", "--quick", "--pairs", "1", "--iters", "3",
                          "--table-costs", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    [rec] = json.loads(out.with_suffix(".json").read_text())["configs"]
    assert "error" not in rec, rec.get("error")
    names = {t["name"] for t in rec["config"]["tables"]}
    costs = rec["table_costs"]
    assert set(costs["tables"]) == set(costs["scales"]) == names and costs["reps"] == 3
    # the file measure-tables wrote is kept whole, every round and probe: a stored run can be read again offline
    assert {n: t["ms"] for n, t in costs["file"]["tables"].items()} == costs["tables"]
    assert all(len(t["reps_ms"]) == 3 for t in costs["file"]["tables"].values()) and costs["file"]["probes"]
    # the fixed step is the median of its rounds (timings are not ordered here: under CI's load a small table alone
    # measured 0.174 ms against the one-row table's 0.189, one run each)
    fixed_reps = costs["file"]["fixed_reps_ms"]
    assert len(fixed_reps) == 3 and costs["fixed_ms"] == costs["file"]["fixed_ms"]
    assert costs["fixed_ms"] == pytest.approx(statistics.median(fixed_reps))
    assert costs["fixed_ms"] > 0
    # the config the rounds read carries the scales the engine makes of those measurements
    measured = rec["measured_config"]["constraints"]
    assert {n: measured[n]["compute_scale"] for n in names} == pytest.approx(costs["scales"])
    assert costs["notes"][0] == f"fixed step {costs['fixed_ms']:.3g} ms per rank, as measured"
    assert costs["notes"][1].startswith(f"compute of {len(names)} of {len(names)} tables as measured alone on ")
    assert "**Every table measured alone first**" in out.read_text()
