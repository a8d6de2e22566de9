"""Hostile inputs through the real importers and the real import (import_apply.run, as the Tables page calls it;
a sample through the page in AppTest): no exception, no hang, one-line refusals that leave the workspace as it
was, accepted configs the engine accepts. Corpus: tests/data/fuzz/importers; hypothesis adds random inputs."""

from __future__ import annotations

import copy
import json
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

import engine
from dashboard.tables import import_apply, importers
from dashboard.ui.table_tools import refusal_markdown
from tests.dashboard.conftest import APP, RUN_TIMEOUT_S
from tests.dashboard.helpers import plain, shown
from tests.factories import tutorial
from tests.fuzz.importer_corpus import CORPUS, EXTENSIONS, HOSTILE_NAMES, cases, large_cases

TIME_BUDGET_S = 10.0  # per input; the slowest committed one takes well under a second
FORMATS = {ext: fmt for fmt, ext in EXTENSIONS.items()}
APPTEST_SAMPLE = 20


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` in the code under test can swallow it."""


@contextmanager
def deadline(seconds: float):
    def alarm(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(text: str) -> bool:
    return bool(text) and text.isprintable()


def check(fmt: str, data: str | bytes, mode: str = "replace", workspace: dict | None = None):
    """Both the importer and the whole import on `data`; the outcome, after asserting what always holds."""
    ws = workspace if workspace is not None else tutorial()
    before = copy.deepcopy(ws)
    start = time.perf_counter()
    with deadline(TIME_BUDGET_S):
        try:
            importers.read(fmt, data)
            read_error = None
        except importers.ImportFormatError as e:
            read_error = str(e)
        out = import_apply.run(fmt, data, ws, mode)
    took = time.perf_counter() - start
    assert took < TIME_BUDGET_S, f"took {took:.1f} s"
    assert ws == before, "the workspace changed"
    assert _one_line(out.message) and import_apply.UNEXPECTED not in out.message, out.message
    if read_error is not None:
        assert _one_line(read_error), repr(read_error)
        # the import lists every problem it finds, the reader's among them, in one order (a CSV's: by file line)
        assert out.config is None and importers.one_line(read_error) in out.problems, out.problems
        if fmt == "csv":
            assert out.problems == tuple(sorted(out.problems, key=import_apply._row_of)), out.problems
    if out.config is None:
        assert out.problems and all(_one_line(p) for p in out.problems), out.problems
    else:
        assert not out.problems
        engine.parse_config(out.config)
    return out


def _corpus() -> list[Path]:
    return sorted(p for p in CORPUS.rglob("*") if p.is_file())


def _expect(path: Path) -> str:
    return path.stem.rsplit("-", 1)[1]


# ---- the committed corpus -----------------------------------------------------------------------


def test_corpus_is_committed_and_matches_its_generator():
    made = {name: data for _, name, data in cases()}
    on_disk = {p.relative_to(CORPUS).as_posix(): p.read_bytes() for p in _corpus()}
    assert len(on_disk) >= 350, "the corpus is missing: python -m tests.fuzz.importer_corpus"
    assert {n for n in made if on_disk.get(n) != made[n]} == set(), "stale corpus: python -m tests.fuzz.importer_corpus"
    assert {_expect(p) for p in _corpus()} == {"ok", "refused", "any"}


def test_every_corpus_input_through_the_importers_and_the_import():
    failures = []
    for path in _corpus():
        fmt, data = FORMATS[path.suffix[1:]], path.read_bytes()
        for mode in ("replace", "append"):
            try:
                out = check(fmt, data, mode)
            except (Exception, Hang) as e:  # noqa: BLE001 - every misbehaving input is listed, not just the first
                failures.append(f"{path.relative_to(CORPUS)} ({mode}): {type(e).__name__}: {str(e)[:300]}")
                continue
            expect = _expect(path) if mode == "replace" else "any"
            if expect != "any" and (out.config is not None) != (expect == "ok"):
                failures.append(f"{path.relative_to(CORPUS)}: expected {expect}, got {out.message[:300]}")
    assert not failures, f"{len(failures)} misbehaved:\n" + "\n".join(failures[:30])


@pytest.mark.parametrize("fmt, name, data", large_cases(), ids=[n for _, n, _ in large_cases()])
def test_inputs_too_large_to_commit(fmt, name, data):
    out = check(fmt, data)
    assert (out.config is not None) == name.endswith("-ok." + EXTENSIONS[fmt]), out.message


# ---- the page itself: a sample of the corpus through the Tables page's Import tool ---------------


@pytest.fixture
def app(tmp_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'planner.db'}")
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    at.run()
    assert not at.exception, at.exception
    return at


def _page_sample() -> list[tuple[str, str, str]]:
    """(format, text, mode) of an even spread of the corpus files that a text area can hold."""
    texts = []
    for path in _corpus():
        try:
            text = path.read_bytes().decode("utf-8-sig")
            text.encode("utf-8")
        except UnicodeError:
            continue
        texts.append((FORMATS[path.suffix[1:]], text))
    step = len(texts) // APPTEST_SAMPLE
    return [(fmt, text, "append" if i % 4 == 3 else "replace") for i, (fmt, text) in enumerate(texts[::step])]


def test_a_sample_through_the_tables_page(app):
    sample = _page_sample()
    assert len(sample) >= APPTEST_SAMPLE
    for fmt, text, mode in sample:
        before = copy.deepcopy(app.session_state["ws_config"])
        expected = import_apply.run(fmt, text, before, mode)
        app.radio(key="tables_import_format").set_value(fmt).run()
        app.text_area(key="tables_import_text").set_value(text)
        app.radio(key="tables_import_mode").set_value(mode)
        with deadline(RUN_TIMEOUT_S):
            app.button(key="tables_import_run").click().run()
        assert not app.exception, (text[:200], app.exception)
        if expected.config is None:
            assert app.session_state["ws_config"] == before, text[:200]
            assert shown(app, "error") == [plain(refusal_markdown(expected))], text[:200]
        else:
            assert app.session_state["ws_config"] == expected.config, text[:200]
            assert not shown(app, "error") and plain(expected.message) in shown(app, "toast")


# ---- random inputs ------------------------------------------------------------------------------

TEXT = st.one_of(st.text(max_size=12), st.sampled_from(HOSTILE_NAMES))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), TEXT)
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=20)
KEYS = st.sampled_from(["name", "num_embeddings", "embedding_dim", "feature_names", "pooling", "data_type",
                        "world_size", "sharding_types", "cache_load_factor", "min_partition", "x"])


@st.composite
def configs(draw) -> str:
    """Config-shaped JSON with random values in random places (NaN and Infinity included, as Python writes)."""
    tables = [{"name": f"t{i}", "num_embeddings": 10, "embedding_dim": 8} for i in range(draw(st.integers(0, 4)))]
    doc = {"tables": tables, "constraints": {}, "topology": {"world_size": 2}}
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(["table", "constraint", "topology", "top"]))
        key, value = draw(KEYS), draw(JSON_VALUES)
        if where == "table" and tables:
            draw(st.sampled_from(tables))[key] = value
        elif where == "constraint":
            doc["constraints"].setdefault(draw(st.sampled_from(["t0", "t1", "nope"])), {})[key] = value
        else:
            (doc["topology"] if where == "topology" else doc)[key] = value
    return json.dumps(doc if draw(st.booleans()) else doc["tables"])


CELLS = st.one_of(st.sampled_from(["1", "16", "0", "-1", "1e999", "nan", "inf", "99999999999999999999999", "1.5",
                                   "row_wise", "fused", "sum", "fp16", "", " ", '"', "a;b", "1;2"]), TEXT)
HEADERS = st.lists(st.sampled_from(["name", "rows", "dim", "features", "pooling", "dtype", "pooling_factor",
                                    "sharding_types", "kernels", "min_partition", "cache_load_factor", "colour"]),
                   min_size=1, max_size=6)


@st.composite
def sheets(draw) -> str:
    header = draw(HEADERS)
    rows = draw(st.lists(st.lists(CELLS, max_size=len(header) + 1), max_size=5))
    sep = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return sep.join(",".join(r) for r in [header, *rows]) + sep


EXPR = st.recursive(
    st.one_of(st.integers(-10**20, 10**20).map(str), st.sampled_from(["1e308", "0.5", "'a'", "x", "True", "None",
                                                                        "[1, 2]", "i", "2**64"])),
    lambda e: st.one_of(
        st.tuples(e, st.sampled_from(["+", "-", "*", "//", "**", "/", "%"]), e).map(" ".join).map(lambda s: f"({s})"),
        e.map(lambda s: f"-{s}"), e.map(lambda s: f"str({s})"), e.map(lambda s: f"[{s}, {s}]"),
        e.map(lambda s: f"f'{{{s}}}'"), e.map(lambda s: f"{s}[0]"), e.map(lambda s: f"{s}**{s}**{s}")),
    max_leaves=12)


@st.composite
def snippets(draw) -> str:
    x, rows, name, n = draw(EXPR), draw(EXPR), draw(EXPR), draw(EXPR)
    call = f"EmbeddingBagConfig(name={name}, num_embeddings={rows}, embedding_dim=8)"
    body = draw(st.sampled_from([call, f"[{call} for i in range({n})]", f"[{call} for i in {n}]"]))
    return f"x = {x}\n{body}\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.sampled_from(["replace", "append"]))
def test_random_configs(text, mode):
    check("json", text, mode)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sheets(), st.sampled_from(["replace", "append"]))
def test_random_sheets(text, mode):
    check("csv", text, mode)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snippets())
def test_random_snippets(text):
    check("torchrec", text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(list(EXTENSIONS)), st.one_of(st.binary(max_size=300), st.text(max_size=300)))
def test_random_bytes_and_text(fmt, data):
    check(fmt, data)
