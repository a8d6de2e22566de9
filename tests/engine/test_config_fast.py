"""The config parser's fast path (plain tables and constraints built at C speed) accepts only what the checking
path accepts, and builds exactly what it builds; everything else falls through to the checking path."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from engine import limits as L
from engine.config import _constraint, _table
from engine.config_fast import constraint_fast, table_fast
from engine.errors import ConfigError
from engine.types import TableConfig

NAMES = st.one_of(st.text(max_size=6), st.just(" "), st.just("a\nb"), st.just("x" * (L.MAX_NAME_CHARS + 1)),
                  st.just("emb_0"), st.integers(), st.none())
INTS = st.one_of(st.integers(-2, 70_000), st.just(L.MAX_NUM_EMBEDDINGS + 1), st.just(2**40), st.floats(-1, 300),
                 st.booleans(), st.just("12"), st.none())
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**7), st.booleans(),
                    st.just("1"), st.just(L.MAX_POOLING_FACTOR), st.just(1e300))


def _slow(f, *args):
    try:
        return f(*args)
    except ConfigError:
        return "refused"


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "num_embeddings", "embedding_dim", "feature_names", "pooling",
                                       "data_type", "other"]),
                       st.one_of(NAMES, INTS, st.lists(NAMES, max_size=3), st.sampled_from(
                           ["sum", "mean", "none", "SUM", "fp16", "fp32", "int8", " sum"])), max_size=7))
def test_tables(raw):
    fast = table_fast(raw)
    if fast is not None:
        assert fast == _slow(_table, raw, "tables[0]")


TABLE = TableConfig(name="t", num_embeddings=100, embedding_dim=8, feature_names=("a", "b"))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["pooling_factors", "num_poolings", "batch_sizes", "is_weighted",
                                       "cache_load_factor", "min_partition", "sharding_types", "other"]),
                       st.one_of(NUMBERS, INTS, st.lists(st.one_of(NUMBERS, INTS), max_size=3),
                                 st.sampled_from(["row_wise", ["table_wise"]])), max_size=5))
def test_constraints(raw):
    fast = constraint_fast(raw, TABLE)
    if fast is not None:
        assert fast == _slow(_constraint, raw, "constraints.t", TABLE)


def test_the_plain_case_takes_the_fast_path():
    raw = {"name": "t", "num_embeddings": 100, "embedding_dim": 8, "feature_names": ["a", "b"]}
    assert table_fast(raw) == TABLE == _table(raw, "tables[0]")
    c = {"pooling_factors": [2.5], "batch_sizes": [64, 32], "is_weighted": True, "cache_load_factor": 0.5}
    assert constraint_fast(c, TABLE) == _constraint(c, "constraints.t", TABLE)
    assert constraint_fast(c, TABLE).pooling_factors == (2.5, 2.5)


EDGES = [None, True, False, 0, 1, -1, 1.0, 1.5, 2**40, L.MAX_NUM_EMBEDDINGS + 1, L.MAX_EMBEDDING_DIM,
         L.MAX_EMBEDDING_DIM + 1, float("nan"), float("inf"), 1e300, "", " ", "a", "a\tb", "sum", "SUM", "mean",
         "fp16", "x" * (L.MAX_NAME_CHARS + 1), [], ["a"], ["a", "b"], ["a", ""], [1.0], [1, 2], [True], [0.0],
         [L.MAX_POOLING_FACTOR + 1], [2**25], {}, "row_wise"]


def test_every_field_at_every_edge():
    base_t = {"name": "t", "num_embeddings": 100, "embedding_dim": 8, "feature_names": ["a", "b"], "pooling": "sum",
              "data_type": "fp32"}
    base_c = {"pooling_factors": [2.5], "num_poolings": [1.0, 2.0], "batch_sizes": [64], "is_weighted": False,
              "cache_load_factor": 0.5, "min_partition": 4}
    fast_t = fast_c = 0
    for base, fast_f, slow_f, args in ((base_t, table_fast, _table, ("tables[0]",)),
                                       (base_c, constraint_fast, _constraint, ("constraints.t", TABLE))):
        for key in list(base) + ["extra"]:
            for value in EDGES + ["__missing__"]:
                raw = {k: v for k, v in base.items() if k != key}
                if value != "__missing__":
                    raw[key] = value
                got = fast_f(raw, *args[1:]) if fast_f is constraint_fast else fast_f(raw)
                if got is not None:
                    assert got == _slow(slow_f, raw, *args), (key, value)
                    fast_t += fast_f is table_fast
                    fast_c += fast_f is constraint_fast
    assert fast_t > 10 and fast_c > 10  # the sweep reaches the fast path, not only its refusals
