"""Importers: JSON configs and table lists, CSV sheets, and TorchRec snippets read with ast (never run)."""

from __future__ import annotations

import json

import pytest

import engine
from dashboard import importers
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
