"""bench.calibrate_terms end to end on three tiny seeded configs (one per optimizer fbgemm runs on CPU): real
fbgemm dry-runs recorded in a temporary SQLite store, then calibrate --terms, written as a Markdown report."""

from __future__ import annotations

from bench.calibrate_terms import FBGEMM_CPU_OPTIMIZERS, main, random_configs


def test_the_bench_records_dryruns_and_reports_the_fit(tmp_path, capsys):
    out = tmp_path / "report.md"
    assert main(["--per-optimizer", "1", "--iters", "2", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Per-term calibration\n\nMade by `python -m bench.calibrate_terms --per-optimizer 1 "
                           "--iters 2 --seed 0`")
    assert "CPU terms of " in text and "from 3 runs (6 ranks, fbgemm backend)" in text
    assert "Leave one run out" in text and "1-minute load average" in text
    assert capsys.readouterr().out.strip() in text


def test_the_configs_are_seeded_and_cover_the_optimizers():
    a = random_configs(0, 2, FBGEMM_CPU_OPTIMIZERS)
    assert a == random_configs(0, 2, FBGEMM_CPU_OPTIMIZERS) and a != random_configs(1, 2, FBGEMM_CPU_OPTIMIZERS)
    assert [c["topology"]["optimizer"] for c in a] == ["sgd", "sgd", "adagrad", "adagrad", "rowwise_adagrad",
                                                       "rowwise_adagrad"]


def test_measured_elsewhere_then_recorded_and_fitted_here(tmp_path, capsys):
    measured, out = tmp_path / "measured.json", tmp_path / "report.md"
    assert main(["--measure-only", str(measured), "--backend", "torch", "--per-optimizer", "1", "--iters", "2"]) == 0
    assert main(["--from", str(measured), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Per-term calibration\n\nMeasured by `python -m bench.calibrate_terms --measure-only "
                           "FILE --backend torch --per-optimizer N --iters 2` on ")
    assert "from 4 runs (8 ranks, torch backend)" in text and "median of 2 steps" in text  # adam too on torch
