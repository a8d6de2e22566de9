"""Our plans priced with CPU terms fitted on this machine's stored runs, each config left out of its own fit
(bench.measured_fit, `python -m bench.measured --fit-from`): runs of another machine are refused, a config's own
ranks never enter its fit, and the quick bench end to end plans and dry-runs with the fitted terms."""

import json
import platform
import sys
from pathlib import Path

import pytest

from bench.measured_fit import fit_sources, fitted_config, this_machine
from bench.measured_cases import cases, quick_cases
import engine
from tests import processes
from tests.factories import ROOT

STORED = [ROOT / "bench" / "results" / "measured_later.json", ROOT / "bench" / "results" / "measured_bench_rerun.json"]


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
