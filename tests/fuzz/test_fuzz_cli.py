"""Hostile configs and plans through the CLI (`python -m engine plan|estimate`): every one is planned with
finite, non-negative figures or refused with one `error:` line that names the field; never a traceback, never a
hang. Every case runs through `engine.cli.main` in a batch process (tests/fuzz/cli_batch.py: one interpreter for
many cases, its output encoded as a real process encodes it), and every REAL_PROCESS_EVERY-th case also as its own
`python -m engine` process. The corpus is committed (tests/data/fuzz/cli, made by tests/fuzz/cli_corpus.py);
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
from tests import processes, waits
from tests.factories import ROOT
from tests.fuzz.cli_corpus import CORPUS, HOSTILE_VALUES, write_corpus

PROCESS_LIMIT_S = 120  # a safety stop only: planning itself runs on a small work budget (--effort)
REAL_PROCESS_EVERY = 8  # this share of the corpus also runs as real processes (the interpreter's own start, exit)
BATCHES = 2  # batch processes side by side
BATCH_LIMIT_S = 600  # a whole batch's safety stop (it takes about a minute on 2 cores)
NAMES_A_FIELD = re.compile(r"^error: (config|tables|topology|constraints|plan)\b|"
                           r"^error: '[^']*' is not (valid JSON|UTF-8)|^error: '[^']*' nests|"
                           r"^error: cannot read (config|plan) file|^error: Table |"
                           r"^error: The tables |^error: \d+ tables")
ENV = {**os.environ, "PYTHONIOENCODING": "utf-8"}


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


def prepare(path: Path, tmp: Path) -> tuple[dict, list[str]]:
    """The case and its arguments after `python -m engine`, its files written to `tmp`."""
    c = json.loads(path.read_text(encoding="utf-8"))
    cfg = tmp / f"{path.stem}.config.json"
    cfg.write_text(c["config"], encoding="utf-8", errors="surrogatepass")
    args = [c["command"], str(cfg), "--json"]
    if c["command"] == "plan":
        args += ["--effort", "2000"]
    else:
        plan_file = tmp / f"{path.stem}.plan.json"
        plan_file.write_text(c["plan"], encoding="utf-8", errors="surrogatepass")
        args += ["--plan", str(plan_file)]
    return c, args


def judge(where: str, code: int, stdout: str, stderr: str) -> str | None:
    """None when the CLI behaved, else what went wrong."""
    if "Traceback" in stderr or code not in (0, 2):
        return f"{where}: exit {code}: {stderr[-600:]}"
    if code == 2:
        lines = stderr.splitlines()
        if len(lines) != 1 or not NAMES_A_FIELD.search(lines[0]):
            return f"{where}: refusal is not one line naming the field: {stderr[:600]!r}"
        return None
    figures = list(_numbers(json.loads(stdout)))
    bad = [v for v in figures if not math.isfinite(v) or v < 0]
    return f"{where}: figures {bad[:5]} in the plan" if bad else None


def run_case(path: Path, tmp: Path) -> str | None:
    """One case as its own `python -m engine` process; None when it behaved."""
    c, args = prepare(path, tmp)
    start = time.monotonic()
    try:
        p = processes.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          errors="replace", timeout=PROCESS_LIMIT_S, env=ENV)
    except subprocess.TimeoutExpired:
        return f"{path.name} ({c['note']}): still running after {PROCESS_LIMIT_S} s"
    return judge(f"{path.name} ({c['note']}, {time.monotonic() - start:.1f} s)", p.returncode, p.stdout, p.stderr)


def run_batch(paths: list[Path], tmp: Path) -> list[str]:
    """The cases through one batch process (tests/fuzz/cli_batch.py); what went wrong, case by case."""
    prepared = [prepare(path, tmp) for path in paths]
    lines = "".join(json.dumps(args) + "\n" for _, args in prepared)
    argv = [sys.executable, "-m", "tests.fuzz.cli_batch", "--limit-s", str(PROCESS_LIMIT_S)]
    try:
        p = processes.run(argv, cwd=ROOT, input=lines, capture_output=True, text=True, errors="replace",
                          timeout=waits.budget_s(BATCH_LIMIT_S), env=ENV)
        out, code, err = p.stdout, p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        out, code, err = e.stdout or "", None, e.stderr or ""
    results = [json.loads(line) for line in out.splitlines()]
    problems = []
    for (c, _), path, r in zip(prepared, paths, results):
        where = f"{path.name} ({c['note']})"
        problems.append(f"{where}: still running after {PROCESS_LIMIT_S} s" if r.get("hang") else
                        judge(where, r["code"], r["stdout"], r["stderr"]))
    if len(results) < len(paths):
        stuck = paths[len(results)]
        problems.append(f"the batch stopped (exit {code}) at {stuck.name} ({prepare(stuck, tmp)[0]['note']}), "
                        f"{len(paths) - len(results)} cases not run: {err[-600:]}")
    return [p for p in problems if p]


def test_corpus_is_committed_and_matches_its_generator(tmp_path):
    write_corpus(tmp_path)
    made = {p.name: p.read_bytes() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_bytes() for p in CORPUS.glob("*.json")}
    assert made == committed, "the committed corpus is stale: python -m tests.fuzz.cli_corpus"


def test_hostile_corpus_through_the_cli(tmp_path):
    cases = sorted(CORPUS.glob("*.json"))
    assert len(cases) >= 700, "the corpus is missing: python -m tests.fuzz.cli_corpus"
    real = cases[::REAL_PROCESS_EVERY]
    with ThreadPoolExecutor(max_workers=BATCHES + 2) as pool:
        batches = [pool.submit(run_batch, cases[i::BATCHES], tmp_path) for i in range(BATCHES)]
        problems = [p for p in pool.map(lambda c: run_case(c, tmp_path), real) if p]
        problems += [p for b in batches for p in b.result()]
    assert not problems, f"{len(problems)} of {len(cases)} cases misbehaved:\n" + "\n".join(problems[:20])


def _batch(lines: list[list[str]], limit_s: float) -> list[dict]:
    p = processes.run([sys.executable, "-m", "tests.fuzz.cli_batch", "--limit-s", str(limit_s)], cwd=ROOT, env=ENV,
                      input="".join(json.dumps(a) + "\n" for a in lines), capture_output=True, text=True,
                      timeout=waits.budget_s(120))
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_the_batch_reports_what_a_real_process_would(tmp_path):
    """The batch tells a refusal, a bad flag and a hang apart, and writes stderr as a real process would (run as a
    process of its own: its alarm would clobber pytest-timeout's here)."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tables": "x", "topology": {"world_size": 2}}))
    refused, bad_flag, no_config, surrogate = _batch(
        [["plan", str(bad), "--json"], ["--no-such-flag"], ["plan"], ["\ud800"]], 60)
    assert refused["code"] == 2 and refused["stderr"].startswith("error: tables"), refused
    assert judge("refused", refused["code"], refused["stdout"], refused["stderr"]) is None
    assert bad_flag["code"] == 2 and judge("flag", bad_flag["code"], "", bad_flag["stderr"]) is not None
    assert no_config["code"] == 2 and "CONFIG.json" in no_config["stderr"]
    assert surrogate["code"] == 2 and "\\udced" not in surrogate["stderr"] and "\\ud800" in surrogate["stderr"]
    assert _batch([["plan", str(ROOT / "examples" / "tutorial.json"), "--json"]], 1e-3) == [{"hang": True}]


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
