"""The benchmark runs end to end: both planners as processes, one table with both plans scored alike, by our
estimator and by TorchRec's."""

import sys

from bench.suite import cases, criteo_1tb, synthetic, tight
from engine import parse_config
from tests import processes
from tests.factories import ROOT


def test_bench_writes_a_table_with_both_planners(tmp_path):
    out = tmp_path / "table.md"
    proc = processes.run([sys.executable, "-m", "bench", "--cases", "tutorial", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines[0].startswith("Made by `python -m bench --cases tutorial`")
    assert "scored twice" in out.read_text() and "EmbeddingPerfEstimator" in out.read_text()
    head = [c.strip() for c in lines[-3].strip("|").split("|")]
    row = dict(zip(head, (c.strip() for c in lines[-1].strip("|").split("|"))))
    assert len(row) == len(head) == 17
    assert [row["case"], row["tables"], row["ranks"]] == ["tutorial", "4", "2"]
    assert row["ours / TorchRec"] == "1.000"  # same max-rank cost as TorchRec's plan under the same estimator
    assert row["ours / TorchRec (TorchRec est.)"] == "1.000"  # and under TorchRec's
    # TorchRec's estimator leaves out the input distribution: lower than ours, never above
    assert 0 < float(row["ours max ms (TorchRec est.)"]) <= float(row["ours max ms"])
    assert float(row["TorchRec max ms (TorchRec est.)"]) > 0
    assert row["ours / bound"] == "1.000" and row["notes"] == ""  # at the lower bound, nobody failed


def test_unknown_case_is_a_one_line_error():
    proc = processes.run([sys.executable, "-m", "bench", "--cases", "nope"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: no case matches --cases"


def test_suite_configs_are_valid_and_seeded():
    for case in cases():
        parse_config(case.config)
    assert synthetic(50, 8, seed=3) == synthetic(50, 8, seed=3) != synthetic(50, 8, seed=4)
    cfg = criteo_1tb(16)
    assert len(cfg["tables"]) == 26 and {t["embedding_dim"] for t in cfg["tables"]} == {128}
    assert tight(cfg, 0.5)["topology"]["hbm_cap"] < 32 * 2**30
