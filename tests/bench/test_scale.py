"""The scaling benchmark end to end on one small cell (planned, refused when it cannot fit, the same plan with
every core busy), its outputs (offline HTML, one line per rank count), and its seeded configs."""

import json
import re
import sys

import pytest

from bench.scale import GRID_RANKS, GRID_TABLES, scale_config
from bench.scale_figures import figures, markdown
from engine import limits, parse_config
from tests import processes
from tests.factories import ROOT


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale")
    proc = processes.run([sys.executable, "-m", "bench.scale", "--tables", "100", "--ranks", "8", "--infeasible",
                          "--determinism", "--out-dir", str(out)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "scale.json").read_text())


def test_the_cell_plans_and_the_infeasible_variant_is_refused(results):
    _, data = results
    assert data["command"].startswith("python -m bench.scale --tables 100 --ranks 8")
    assert data["machine"]["cpu_count"] >= 1 and len(data["load_before"]) == 3
    [cell] = data["cells"]
    assert (cell["tables"], cell["ranks"], cell["pairs"]) == (100, 8, 800)
    assert cell["status"] == "planned" and cell["exit_code"] == 0 and cell["error"] == ""
    assert cell["wall_s"] > 0 and cell["peak_rss_bytes"] > 0 and len(cell["load_after"]) == 3
    assert cell["max_rank_cost_ms"] >= cell["lower_bound_ms"] > 0 and cell["ratio"] >= 1
    refused = cell["infeasible"]
    assert refused["status"] == "refused" and refused["exit_code"] == 2
    assert refused["error"].startswith("error:") and "do not fit" in refused["error"]
    det = cell["determinism"]
    assert det["identical"] and det["loaded_run"]["plan_sha256"] == cell["plan_sha256"]


def test_the_report_and_the_offline_page_are_written(results):
    out, data = results
    md = (out / "scale.md").read_text()
    assert md == markdown(data) and "`python -m bench.scale --tables 100 --ranks 8" in md
    row = next(line for line in md.splitlines() if line.startswith("| 100 |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[:4] == ["100", "8", "800", "planned"] and cols[9] == "yes"
    page = (out / "scale.html").read_text()
    assert "Plotly" in page and page.count("plotly-graph-div") >= 2
    assert not re.search(r"<script[^>]*src=[\"']?(https?:)?//", page, re.IGNORECASE)  # opens offline


def test_figures_draw_one_line_per_rank_count(results):
    _, data = results
    wide = {**data, "cells": data["cells"] + [{**data["cells"][0], "ranks": 64, "pairs": 6_400}]}
    figs = figures(wide)
    assert len(figs) == 2
    for fig in figs:
        lines = [t for t in fig.data if t.name != "targets"]
        assert [t.name for t in lines] == ["8 ranks", "64 ranks"]
        assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"
        assert len([t for t in fig.data if t.name == "targets"]) == 1
    assert list(figs[0].data[0].x) == [800] and list(figs[1].data[1].x) == [6_400]


def test_configs_are_seeded_and_parse():
    assert scale_config(200, 8, seed=3) == scale_config(200, 8, seed=3) != scale_config(200, 8, seed=4)
    for n, w in [(100, 8), (1_000, 1_024), (10_000, 1_024)]:
        cfg = parse_config(scale_config(n, w))
        assert len(cfg.tables) == n and cfg.topology.world_size == w
        assert cfg.topology.local_world_size == min(8, w) and cfg.topology.hbm_cap >= 2 * 2**30
    cfg = scale_config(1_000, 8)
    assert {t["embedding_dim"] for t in cfg["tables"]} <= {16, 32, 64, 128, 256}
    assert all(1e3 <= t["num_embeddings"] <= 1e8 for t in cfg["tables"])
    assert all(1 <= c["pooling_factors"][0] <= 50 for c in cfg["constraints"].values())
    largest = scale_config(max(GRID_TABLES), min(GRID_RANKS))  # the largest per-rank HBM of the grid
    assert largest["topology"]["hbm_cap"] < limits.MAX_CAP_BYTES


def test_bad_options_are_one_error_line(tmp_path):
    for args in (["--tables", "0"], ["--repeat", "x"], ["--out-dir", str(tmp_path / "f" / "x")]):
        (tmp_path / "f").write_text("")
        proc = processes.run([sys.executable, "-m", "bench.scale", *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith("error:") and proc.stderr.count("\n") == 1
