"""Importers: JSON configs and table lists, CSV sheets, and TorchRec snippets read with ast (never run)."""

from __future__ import annotations

import json
import time

import pytest

import engine
from dashboard.tables import importers
from tests.factories import tutorial

TUTORIAL_SNIPPET = '''
import torchrec
large_table_cnt = 2
small_table_cnt = 2
large_tables=[
  torchrec.EmbeddingBagConfig(
    name="large_table_" + str(i),
    embedding_dim=64,
    num_embeddings=4096,
    feature_names=["large_table_feature_" + str(i)],
    pooling=torchrec.PoolingType.SUM,
  ) for i in range(large_table_cnt)
]
small_tables=[
  torchrec.EmbeddingBagConfig(
    name="small_table_" + str(i),
    embedding_dim=64,
    num_embeddings=1024,
    feature_names=["small_table_feature_" + str(i)],
    pooling=torchrec.PoolingType.SUM,
  ) for i in range(small_table_cnt)
]
'''


def test_torchrec_snippet_of_the_tutorial_gives_its_four_tables():
    got = importers.from_torchrec_snippet(TUTORIAL_SNIPPET)
    cfg = tutorial()
    imported = engine.parse_config({"tables": got.tables, "topology": cfg["topology"]})
    assert imported == engine.parse_config(cfg)


def test_a_virtual_table_in_a_snippet_stays_virtual():
    got = importers.from_torchrec_snippet('EmbeddingBagConfig(name="t", num_embeddings=10, embedding_dim=8, '
                                          'feature_names=["f"], use_virtual_table=True, total_num_buckets=10)')
    cfg = engine.parse_config({"tables": got.tables, "topology": tutorial()["topology"]})
    assert cfg.table("t").use_virtual_table and cfg.table("t").total_num_buckets == 10


def test_a_snippets_eviction_policy_is_read_as_the_fields_block_and_written_back_the_same():
    """TorchRec's policy call, read into {"type": ..., field: value}; the export gives back the same class and
    keywords. Anything but a keyword call of a policy class is refused in one line."""
    text = ('from torchrec.modules.embedding_configs import CountBasedEvictionPolicy\n'
            'EmbeddingBagConfig(name="t", num_embeddings=64, embedding_dim=8, feature_names=["f"], '
            'use_virtual_table=True, total_num_buckets=8, virtual_table_eviction_policy=CountBasedEvictionPolicy('
            'eviction_threshold=3, decay_rate=0.5))')
    got = importers.from_torchrec_snippet(text)
    assert got.tables[0]["virtual_table_eviction_policy"] == {"type": "count_based", "eviction_threshold": 3,
                                                              "decay_rate": 0.5} and not got.notes
    cfg = engine.parse_config({"tables": got.tables, "topology": tutorial()["topology"]})
    assert engine.virtual_table_keywords(cfg.table("t"))["virtual_table_eviction_policy"] == (
        "CountBasedEvictionPolicy", {"eviction_threshold": 3, "decay_rate": 0.5})  # the class and keywords exported
    for bad in ("NoEvictionPolicy", "NoEvictionPolicy(1)", "print('x')"):
        with pytest.raises(importers.ImportFormatError, match="virtual_table_eviction_policy|arguments must be given"):
            importers.from_torchrec_snippet(text.replace(
                "CountBasedEvictionPolicy(eviction_threshold=3, decay_rate=0.5)", bad))


def test_snippet_with_fstrings_enumerate_and_literal_calls():
    text = '''
from torchrec import EmbeddingBagConfig, DataType, PoolingType
rows = [10, 20, 30]
names = ["a", "b", "c"]
tables = [EmbeddingBagConfig(name=f"t_{n}", num_embeddings=rows[i], embedding_dim=8 * 2,
                             feature_names=[f"f_{n}"], data_type=DataType.FP16) for i, n in enumerate(names)]
extra = EmbeddingBagConfig(name="solo", num_embeddings=1_000, embedding_dim=4, feature_names=["s"],
                           pooling=PoolingType.MEAN, weight_init_max=0.1)
'''
    got = importers.from_torchrec_snippet(text)
    assert [t["name"] for t in got.tables] == ["t_a", "t_b", "t_c", "solo"]
    assert [t["num_embeddings"] for t in got.tables] == [10, 20, 30, 1000]
    assert got.tables[0]["embedding_dim"] == 16 and got.tables[0]["data_type"] == "fp16"
    assert got.tables[3]["pooling"] == "mean"
    assert got.notes == ["ignored arguments: weight_init_max"]
    engine.parse_config({"tables": got.tables, "topology": {"world_size": 2}})


@pytest.mark.parametrize("text, message", [
    ("EmbeddingBagConfig(name=open('/etc/passwd').read(), num_embeddings=1, embedding_dim=1)", "line 1"),
    ("n = __import__('os').system('true')\nEmbeddingBagConfig(name='t', num_embeddings=n, embedding_dim=1)",
     "'n' is not bound to a literal"),
    ("[EmbeddingBagConfig(name=str(i), num_embeddings=1, embedding_dim=1) for i in range(10**9)]", "at most"),
    ("x = 1\n", "no EmbeddingBagConfig"),
    ("EmbeddingBagConfig(name='t',", "not valid Python"),
    ("EmbeddingBagConfig('t', 1, 1)", "by keyword"),
])
def test_snippet_refuses_what_would_need_running_code(text, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(importers.ImportFormatError) as e:
        importers.from_torchrec_snippet(text)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_json_whole_config_and_bare_list():
    cfg = tutorial()
    got = importers.from_json(json.dumps(cfg))
    assert got.tables == cfg["tables"] and got.topology == cfg["topology"]
    bare = importers.from_json(json.dumps(cfg["tables"][:2]))
    assert len(bare.tables) == 2 and bare.topology is None
    with pytest.raises(importers.ImportFormatError, match="line 1, column"):
        importers.from_json("{nope")
    with pytest.raises(importers.ImportFormatError, match='"tables" list'):
        importers.from_json('{"topology": {}}')


def test_csv_with_aliases_lists_and_constraints():
    text = ("name,rows,dim,features,pooling factor,sharding_types,min_partition\n"
            "a,100,16,fa;fb,2.5,row_wise|table_wise,8\n"
            "b,200,32,,,,\n")
    got = importers.from_csv(text)
    assert got.tables == [
        {"name": "a", "num_embeddings": 100, "embedding_dim": 16, "feature_names": ["fa", "fb"]},
        {"name": "b", "num_embeddings": 200, "embedding_dim": 32},
    ]
    assert got.constraints == {"a": {"pooling_factors": [2.5], "sharding_types": ["row_wise", "table_wise"],
                                     "min_partition": 8}}
    engine.parse_config({"tables": got.tables, "constraints": got.constraints, "topology": {"world_size": 2}})


@pytest.mark.parametrize("text, message", [
    ("name,rows,dim\na,lots,4\n", "line 2, column rows: 'lots' is not a number"),
    ("name,rows,colour\na,1,red\n", "unknown CSV column 'colour'"),
    ("name,rows,dim\n", "no tables"),
    ("", "empty"),
    ("name,rows,dim\na,1.5,4\n", "not a whole number"),
])
def test_csv_errors_name_line_and_column(text, message):
    with pytest.raises(importers.ImportFormatError) as e:
        importers.from_csv(text)
    assert message in str(e.value)


# ---- bounds: every hostile input is one line, quickly -------------------------------------------

TABLE = "EmbeddingBagConfig(name='t', num_embeddings={}, embedding_dim=1)"


def _refused(read, text) -> str:
    start = time.perf_counter()
    with pytest.raises(importers.ImportFormatError) as e:
        read(text)
    assert time.perf_counter() - start < 5, "took too long"
    message = str(e.value)
    assert message and message.isprintable(), message
    return message


@pytest.mark.parametrize("number, message", [
    ("2**64", "63 bits"), ("10**19", "63 bits"), ("(10**9)**(10**9)", "63 bits"), ("9**9**9**9**9", "63 bits"),
    ("((10**18)**64)**64", "63 bits"), ("2**62 + 2**62", "63 bits"), ("10**18 * 10", "63 bits"),
    ("99999999999999999999", "63 bits"), ("9" * 5000, "not valid Python"), ("2.0**10000", "not a finite"),
    ("1e308 * 10", "not finite"), ("1e999", "not finite"), ("(-8)**0.5", "not a finite"), ("0**-1", "not a finite"),
    ("1 // 0", "division by zero"), ("1j", "cannot read the expression 1j"),
    ("-True", "cannot read the expression -True"),
])
def test_snippet_numbers_are_bounded(number, message):
    assert message in _refused(importers.from_torchrec_snippet, TABLE.format(number))


def test_snippet_bounds_are_inclusive_of_ordinary_values():
    got = importers.from_torchrec_snippet(TABLE.format("2**40 - 1 + 10**3 * 2 // 4 - -1"))
    assert got.tables[0]["num_embeddings"] == 2**40 - 1 + 500 + 1
    nested = "[[EmbeddingBagConfig(name=f't_{i}_{j:02d}', num_embeddings=1, embedding_dim=1) for j in range(2)] " \
             "for i in range(3)]"
    assert [t["name"] for t in importers.from_torchrec_snippet(nested).tables] == [
        f"t_{i}_{j:02d}" for i in range(3) for j in range(2)]


@pytest.mark.parametrize("text, message", [
    ("x = " + "(" * 10_000 + "1" + ")" * 10_000, "nested parentheses"),
    ("x = " + "1+" * 50_000 + "1", "too deeply"), ("x = " + "-" * 100_000 + "1", "too deeply"),
    ("x = a" + ".b" * 90_000, "too deeply"), ("x = f" + "()" * 60_000, "too deeply"),
    ("x = [" + "0," * 300_000 + "]", "tokens"), ("#" * 1_000_001, "characters"),
    ("x = 1\x00", "null bytes"), ("x = 1\n" * 2 + "def f(:\n", "line 3: not valid Python"),
    ("x = '" + "a" * 20_000 + "'\n" + TABLE.format(1).replace("'t'", "x"), "20,000 characters"),
    ("\n".join("[EmbeddingBagConfig(name=str(i), num_embeddings=1, embedding_dim=1) for i in range(10000) "
               "for j in []]" for _ in range(200)), "steps"),
    ("\n".join(f"[EmbeddingBagConfig(name=f'{k}_{{i}}', num_embeddings=1, embedding_dim=1) for i in range(9000)]"
               for k in range(2)), "more than 10,000 tables"),
    ("[EmbeddingBagConfig(name=f'{i:>1000000000}', num_embeddings=1, embedding_dim=1) for i in range(2)]",
     "f-string format"),
    ("[EmbeddingBagConfig(name=str(i), num_embeddings=1, embedding_dim=1) for i in range(-2**62, 2**62)]", "at most"),
    ("[EmbeddingBagConfig(name=str(i), num_embeddings=1, embedding_dim=1) for i in range(0, 9, 0)]", "step of 0"),
    ("a = [1] + [2]\nb = [a, a]\n" + TABLE.format("str(b)"), "cannot read the call str(b)"),
])
def test_snippet_size_nesting_and_work_are_bounded(text, message):
    assert message in _refused(importers.from_torchrec_snippet, text)


@pytest.mark.parametrize("text, message", [
    ("[" * 10_000 + "]" * 10_000, "more than 32 deep"), ('[{"name": "t", "num_embeddings": ' + "9" * 400 + "}]",
                                                         "characters"),
    ('[{"name": "t", "num_embeddings": 1e999}]', "finite"), ('[{"name": "t", "num_embeddings": NaN}]', "NaN"),
    ('{"tables": [], "plan": {}}', "unknown top-level field 'plan'"), ('{"tables": {}}', '"tables" list'),
    ('{"tables": [], "constraints": []}', '"constraints" must be an object'),
    ('{"tables": [], "topology": 8}', '"topology" must be an object'),
    (json.dumps([{"name": "t"}] * 10_001), "at most 10,000"),
])
def test_json_is_read_with_bounds(text, message):
    assert message in _refused(importers.from_json, text)


@pytest.mark.parametrize("text, message", [
    ("name,rows,dim\na,1e999,4\n", "line 2, column rows: '1e999' is not a finite number"),
    ("name,rows,dim\na,99999999999999999999999,4\n", "line 2, column rows: '99999999999999999999999' is too large"),
    ("name,rows,dim,cache_load_factor\na,1,4,nan\n", "line 2, column cache_load_factor: 'nan' is not a finite"),
    ("name,rows,dim\n\n\na,inf,4\n", "line 4, column rows: 'inf' is not a finite number"),
    ("name,rows,dim,pooling_factor\na,1,4,1;-inf\n", "line 2, column pooling_factor: '-inf'"),
    ("name,rows,dim\na,1" + "0" * 50 + ",4\n", "too long to be a number"),
    ("name,rows,dim\na,1,4\n" + "b," + "x" * 200_000 + ",1\n", "line 3: not readable as CSV (a value longer than"),
    ("name," * 1_000_000 + "\n", "line 1: column 'name' is given twice"),
    ("name,rows,table\na,1,b\n", "column 'name' is given twice (or with an alias)"),
    ("name,rows,dim\na,1,4,5\n", "line 2: more values than columns (3)"),
    ("\n\n", "the CSV is empty"),
    ("name,rows,dim\n" + "a,1,1\n" * 10_001, "line 10002: more than 10,000 tables"),
])
def test_csv_numbers_and_shape_are_bounded(text, message):
    assert message in _refused(importers.from_csv, text)


def test_csv_reads_bom_trailing_empty_cells_and_quoted_names():
    got = importers.read("csv", "\ufeffname,rows,dim,,\n\"a, b\",1,4,,\n".encode("utf-8"))
    assert got.tables == [{"name": "a, b", "num_embeddings": 1, "embedding_dim": 4}]


@pytest.mark.parametrize("data, message", [
    (b"\xff\xfe\x00n\x00a", "not UTF-8 text (byte 0)"), (b"[1, 2]\x80", "not UTF-8 text (byte 6)"),
    (b" " * (importers.MAX_INPUT_BYTES + 1), "larger than 20 MB"), ("é" * (importers.MAX_INPUT_BYTES // 2 + 1),
                                                                   "larger than 20 MB"),
    ("[\ud800]", "unpaired surrogate"), ("  \n\t", "nothing to import"), (b"\xef\xbb\xbf", "nothing to import"),
])
def test_read_refuses_binary_huge_and_empty_input(data, message):
    assert message in _refused(lambda d: importers.read("json", d), data)


def test_read_names_an_unknown_format():
    assert "unknown format 'yaml'" in _refused(lambda d: importers.read("yaml", d), "a: 1")


def test_a_csv_with_several_bad_cells_names_every_one():
    """Issue 12: mistakes one at a time. Every unreadable cell is listed, not only the first."""
    with pytest.raises(importers.ImportFormatError) as e:
        importers.read("csv", "name,rows,dim\na,abc,4\nb,10,1.5\nc,10,4,extra\nd,10,8\n")
    assert e.value.problems == ("line 2, column rows: 'abc' is not a number",
                                "line 3, column dim: '1.5' is not a whole number",
                                "line 4: more values than columns (3)")
