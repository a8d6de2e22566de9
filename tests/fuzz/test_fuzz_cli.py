"""Hostile configs and plans through the real CLI processes (`python -m engine plan|estimate`): every one is
planned with finite, non-negative figures or refused with one `error:` line that names the field; never a
traceback, never a hang. The corpus is committed (tests/data/fuzz/cli, made by tests/fuzz/cli_corpus.py);
hypothesis adds random configs in process."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import ConfigError, PlanningError, parse_config, plan
from tests.factories import ROOT
from tests.fuzz.cli_corpus import CORPUS, HOSTILE_VALUES, write_corpus

PROCESS_LIMIT_S = 120  # a safety stop only: planning itself runs on a small work budget (--effort)
NAMES_A_FIELD = re.compile(r"^error: (config|tables|topology|constraints|plan)\b|"
                           r"^error: '[^']*' is not (valid JSON|UTF-8)|^error: '[^']*' nests|"
                           r"^error: cannot read (config|plan) file|^error: Table |"
                           r"^error: The tables |^error: \d+ tables")


def _numbers(data):
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield v


def run_case(path: Path, tmp: Path) -> str | None:
    """None when the CLI behaved, else what went wrong."""
    c = json.loads(path.read_text(encoding="utf-8"))
    cfg = tmp / f"{path.stem}.config.json"
    cfg.write_text(c["config"], encoding="utf-8", errors="surrogatepass")
    argv = [sys.executable, "-m", "engine", c["command"], str(cfg), "--json"]
    if c["command"] == "plan":
        argv += ["--effort", "2000"]
    else:
        plan_file = tmp / f"{path.stem}.plan.json"
        plan_file.write_text(c["plan"], encoding="utf-8", errors="surrogatepass")
        argv += ["--plan", str(plan_file)]
    start = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, errors="replace", check=False,
                           timeout=PROCESS_LIMIT_S, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    except subprocess.TimeoutExpired:
        return f"{path.name} ({c['note']}): still running after {PROCESS_LIMIT_S} s"
    took = time.monotonic() - start
    where = f"{path.name} ({c['note']}, {took:.1f} s)"
    if "Traceback" in p.stderr or p.returncode not in (0, 2):
        return f"{where}: exit {p.returncode}: {p.stderr[-600:]}"
    if p.returncode == 2:
        lines = p.stderr.splitlines()
        if len(lines) != 1 or not NAMES_A_FIELD.search(lines[0]):
            return f"{where}: refusal is not one line naming the field: {p.stderr[:600]!r}"
        return None
    figures = list(_numbers(json.loads(p.stdout)))
    bad = [v for v in figures if not math.isfinite(v) or v < 0]
    return f"{where}: figures {bad[:5]} in the plan" if bad else None


def test_corpus_is_committed_and_matches_its_generator(tmp_path):
    write_corpus(tmp_path)
    made = {p.name: p.read_bytes() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_bytes() for p in CORPUS.glob("*.json")}
    assert made == committed, "the committed corpus is stale: python -m tests.fuzz.cli_corpus"


def test_hostile_corpus_through_the_cli(tmp_path):
    cases = sorted(CORPUS.glob("*.json"))
    assert len(cases) >= 700, "the corpus is missing: python -m tests.fuzz.cli_corpus"
    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 2) * 2)) as pool:
        problems = [p for p in pool.map(lambda c: run_case(c, tmp_path), cases) if p]
    assert not problems, f"{len(problems)} of {len(cases)} cases misbehaved:\n" + "\n".join(problems[:20])


# ---- random configs in process: parse_config and plan either succeed with sane figures or raise ours ----

FIELDS = {"num_embeddings", "embedding_dim", "world_size", "local_world_size", "batch_size", "hbm_cap", "ddr_cap",
          "hbm_mem_bw", "ddr_mem_bw", "inter_host_bw", "storage_reservation"}
ANY_VALUE = st.one_of(st.sampled_from(HOSTILE_VALUES), st.integers(-2**70, 2**70),
                      st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))


@st.composite
def configs(draw):
    n = draw(st.integers(1, 6))
    tables = [{"name": draw(st.text(min_size=1, max_size=12)) + str(i),
               "num_embeddings": draw(st.integers(1, 10**6)), "embedding_dim": draw(st.sampled_from([4, 8, 64, 96]))}
              for i in range(n)]
    topology = {"world_size": draw(st.sampled_from([1, 2, 4, 8])), "batch_size": 64}
    cfg = {"tables": tables, "topology": topology}
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(FIELDS)))
        target = topology if key not in ("num_embeddings", "embedding_dim") else draw(st.sampled_from(tables))
        target[key] = draw(ANY_VALUE)
    return cfg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_random_configs_plan_or_refuse_with_our_error(raw):
    try:
        cfg = parse_config(raw)
    except ConfigError as e:
        assert "\n" not in str(e) and e.field
        return
    try:
        p = plan(cfg)
    except PlanningError as e:
        assert "\n" not in str(e)
        return
    for r in p.ranks:
        for v in (r.hbm_bytes, r.ddr_bytes, r.cost_ms, *r.perf.as_dict().values()):
            assert math.isfinite(v) and v >= 0
