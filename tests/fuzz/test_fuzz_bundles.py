"""Hostile bundles through the real `python -m db import` process: each is imported or refused with one `error:`
line naming the field; never a traceback or a hang, and a refusal leaves the SQLite file as it was.

The corpus is committed under tests/data/fuzz/bundles/ (made by tests/fuzz/bundle_corpus.py; bad-* must be
refused, ok-* must import, any-* may do either but never as a new plan). Hypothesis adds random mutations in
process.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from db.bundle import read_bundle_text
from db.checks import is_token
from db.store import Store, StoreError
from tests.db.storetest import cli_env, counts
from tests.factories import ROOT
from tests.fuzz.bundle_corpus import CORPUS, NOTES, drop_at, encode, leaves, set_at

MIN_CASES = 300
BATCH = 150  # files per `python -m db import` process
PROCESS_LIMIT_S = 120
NAMES_A_FIELD = re.compile(r"^(bundle[.:]|FILE '[^']*' (is not|nests)|FILE: cannot read)")

# ---- through the CLI -----------------------------------------------------------------------------------------


def _import(url: str, files: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "db", "import", *map(str, files)], cwd=ROOT, env=cli_env(url),
                          capture_output=True, text=True, errors="replace", timeout=PROCESS_LIMIT_S, check=False)


def _outcomes(files: list[Path], p: subprocess.CompletedProcess) -> dict[Path, tuple[str, str]]:
    """file -> ("token", TOKEN) or ("error", message) from one process that imported several files."""
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    by_name = {str(f): f for f in files}
    out: dict[Path, tuple[str, str]] = {}
    for line in p.stdout.splitlines():
        token, _, name = line.partition(" ")
        if name in by_name:
            out[by_name[name]] = ("token", token)
    for line in p.stderr.splitlines():
        name = next((n for n in by_name if line.startswith(f"error: {n}: ")), None)
        assert name is not None and by_name[name] not in out, f"a stray or second line: {line[:300]!r}"
        out[by_name[name]] = ("error", line[len(f"error: {name}: "):])
    assert p.returncode == (2 if any(kind == "error" for kind, _ in out.values()) else 0), p.stderr[-2000:]
    return out


def _sqlite_counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as c:
        return {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608 - our table names
                for t in ("configs", "plans", "plan_ranks", "runs", "metrics")}


def _check(files: list[Path], outcomes: dict[Path, tuple[str, str]], base_token: str) -> list[str]:
    notes = json.loads(NOTES.read_text())
    problems = []
    for f in files:
        kind, text = outcomes.get(f, ("missing", "no line at all"))
        expect, where = f.name.split("-")[0], f"{f.name} ({notes.get(f.name, '?')})"
        if kind == "missing" or (expect == "bad" and kind != "error") or (expect == "ok" and kind != "token"):
            problems.append(f"{where}: expected {expect}, got {kind}: {text[:200]}")
        elif kind == "error" and not NAMES_A_FIELD.search(text):
            problems.append(f"{where}: the error names no field: {text[:200]}")
        elif kind == "token" and expect == "any" and text != base_token:
            problems.append(f"{where}: imported as a new plan {text}")
    return problems


def test_hostile_corpus_through_the_cli(tmp_path: Path) -> None:
    files = sorted(p for p in CORPUS.glob("*.json") if not p.name.startswith("_"))
    assert len(files) >= MIN_CASES, "the corpus is missing: python -m tests.fuzz.bundle_corpus"
    db = tmp_path / "fuzz.db"
    url = f"sqlite:///{db}"
    base = CORPUS / "ok-0000.json"
    files.remove(base)
    first = _import(url, [base])
    assert first.returncode == 0, (f"the base bundle no longer imports ({first.stderr.strip()}); if the estimator "
                                   "changed, rewrite the corpus: python -m tests.fuzz.bundle_corpus")
    token = first.stdout.strip()
    before = _sqlite_counts(db)

    hostile = [f for f in files if not f.name.startswith("ok-")]
    batches = [hostile[i:i + BATCH] for i in range(0, len(hostile), BATCH)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda b: _outcomes(b, _import(url, b)), batches))
    problems = [p for batch, out in zip(batches, results) for p in _check(batch, out, token)]
    assert not problems, f"{len(problems)} of {len(hostile)} cases misbehaved:\n" + "\n".join(problems[:30])
    assert _sqlite_counts(db) == before  # imports only add rows: unchanged at the end means unchanged after each

    for f in hostile[:: max(1, len(hostile) // 8)]:  # a few alone: exit 2, one line, nothing written
        p = _import(url, [f])
        lines = p.stderr.splitlines()
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (f.name, p.stderr)
        assert "Traceback" not in p.stderr and _sqlite_counts(db) == before, f.name

    good = [f for f in files if f.name.startswith("ok-")]
    assert not _check(good, _outcomes(good, _import(url, good)), token)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


# ---- random mutations in process (hypothesis) ----------------------------------------------------------------

SPECIAL = [2**63, -2**63 - 1, 10**30, math.nan, math.inf, "\ud800", "a\x00b", "9999-12-31T23:59:59-05:00",
           "", "x" * 3000, {"k": {"k": {"k": []}}}, [None] * 3]
ANY_VALUE = st.one_of(st.sampled_from(SPECIAL), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=30),
                      st.none(), st.booleans(), st.lists(st.integers(), max_size=3),
                      st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict]]:
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}")
    store.upgrade()
    base = json.loads((CORPUS / "ok-0000.json").read_text())
    store.import_bundle(base)
    yield store, base
    store.close()


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_mutations_import_as_the_same_plan_or_are_refused(fuzz_store: tuple[Store, dict], data) -> None:
    store, base = fuzz_store
    paths = list(leaves(base))
    bundle = base
    for _ in range(data.draw(st.integers(1, 3))):
        path, value = data.draw(st.sampled_from(paths)), data.draw(ANY_VALUE)
        assume(not is_token(value))  # a new token would be a new plan: not what this test is about
        try:
            bundle = set_at(bundle, path, value) if data.draw(st.booleans()) else drop_at(bundle, path)
        except (KeyError, IndexError, TypeError):
            continue  # the path went with an earlier change
    before = counts(store)
    try:
        token = store.import_bundle(bundle)
    except StoreError as e:
        assert "\n" not in str(e) and NAMES_A_FIELD.search(str(e)), str(e)
    else:
        assert token == base["token"]
    assert counts(store) == before


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_bytes_in_the_text_are_read_or_refused(fuzz_store: tuple[Store, dict], data) -> None:
    store, base = fuzz_store
    text = encode(base)
    at = data.draw(st.integers(0, len(text)))
    text = text[:at] + data.draw(st.binary(max_size=8)) + text[at + data.draw(st.integers(0, 8)):]
    before = counts(store)
    try:
        store.import_bundle(read_bundle_text(text, "FILE 'x.json'"))
    except StoreError as e:
        assert "\n" not in str(e) and NAMES_A_FIELD.search(str(e)), str(e)
        assert counts(store) == before


