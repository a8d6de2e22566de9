"""Hostile JSON, CSV and TorchRec-snippet inputs for tests/fuzz/test_fuzz_importers.py, named
`<format>/<n>-<ok|refused|any>.<ext>` (ok: imported over the tutorial's workspace). `python -m
tests.fuzz.importer_corpus` rewrites tests/data/fuzz/importers (deterministic); `large_cases` are made at test time."""

from __future__ import annotations

import copy
import csv
import io
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.dashboard.test_importers import TUTORIAL_SNIPPET
from tests.factories import ROOT, tutorial
from tests.fuzz.mutate import set_at

CORPUS = ROOT / "tests" / "data" / "fuzz" / "importers"
EXTENSIONS = {"json": "json", "csv": "csv", "torchrec": "py"}
# Printable names the engine accepts: they must come through exactly, shown literally, never run.
HOSTILE_NAMES = ["a'b", 'a"b', 'x"""y', "x'''y", "a\\b", "$(touch PWNED)", "`touch PWNED`", "**bold** _it_",
                 "[link](http://example.com)", "<img src=x onerror=alert(1)>", ":material/home: :smile:",
                 "$x^2$", "名前", "\U0001f600", "a,b;c|d", "{0}{x}%s", "-- table", "x" * 256]
# Not printable text: control, separator and format characters (a right-to-left override disguises a name).
BAD_NAMES: list[Any] = ["", " ", None, 1, [], {}, True, "a\nb", "a\rb", "a\x00b", "a\u2028b", "a\x0cb", "x" * 257,
                        "\u202eevil"]
BAD_NUMBERS: list[Any] = [0, -1, 1.5, "1", None, True, [], {}, 2**40 + 1, 2**63, 10**30, 1e308, -0.0]
TABLE_BAD: dict[str, list] = {
    "num_embeddings": BAD_NUMBERS, "embedding_dim": [*BAD_NUMBERS[:8], 65_537],
    "name": BAD_NAMES, "feature_names": [[], "f", [1], [""], ["a\nb"], ["f", "f"], [f"f{i}" for i in range(1025)]],
    "pooling": ["max", 1, None, ""], "data_type": ["fp64", "FP 16", 0, None],
}
CONSTRAINT_BAD: dict[str, list] = {
    "sharding_types": [["diagonal"], [], "row_wise", [1]], "compute_kernels": [["gpu"], [], [None]],
    "min_partition": [0, 65_537, 1.5, "8"], "pooling_factors": [[-1], [1e7], [1, 2, 3], "x", []],
    "num_poolings": [[-1], [2e6]], "batch_sizes": [[0], [2**25], [1.5]], "is_weighted": ["yes", 1, None],
    "cache_load_factor": [0, 1.5, -1, "0.2", None],
}
TOPOLOGY_BAD: dict[str, list] = {
    "world_size": [0, 16_385, "2", None, 2.5], "local_world_size": [3, 0, 4], "compute_device": ["tpu", 1],
    "hbm_cap": [-1, 2**51], "ddr_cap": [-1, "big"], "hbm_mem_bw": [0, 1e13, -5], "intra_host_bw": [1, None],
    "batch_size": [0, 2**25], "storage_reservation": [1, -0.1, 2], "optimizer": ["lion", None], "colour": ["red"],
}
RAW_JSON = ["", " ", "null", "1", '"text"', "{}", "[]", '{"tables": {}}', '{"tables": null}', "[1, 2, 3]",
            '[{"name": "t", "num_embeddings": 1e999, "embedding_dim": 4}]',
            '[{"name": "t", "num_embeddings": NaN, "embedding_dim": 4}]',
            '[{"name": "t", "num_embeddings": Infinity, "embedding_dim": 4}]',
            '[{"name": "t", "num_embeddings": -Infinity, "embedding_dim": 4}]',
            '[{"name": "t", "num_embeddings": ' + "9" * 60 + ', "embedding_dim": 4}]',
            '[{"name": "t", "num_embeddings": 0x10, "embedding_dim": 4}]',
            '[{"name": "t", "num_embeddings": 1, "embedding_dim": 4},]', "[{'name': 't'}]",
            '[{"name": "t" /* c */}]', '[{"name": "t", "num_embeddings": 1', "[" * 5000 + "]" * 5000,
            '{"a":' * 100 + "1" + "}" * 100, '[{"name": "\\ud800", "num_embeddings": 1, "embedding_dim": 1}]',
            '[{"name": "t", "name": "u", "num_embeddings": 1, "embedding_dim": 1}]', '{"tables": [], "plan": {}}',
            '{"tables": [{"name": "t", "num_embeddings": 1, "embedding_dim": 1}], "constraints": []}',
            '{"tables": [{"name": "t", "num_embeddings": 1, "embedding_dim": 1}], "topology": 8}', "\x00", "\ufeff[]"]
BINARY = [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"\xff\xd8\xff\xe0", b"PK\x03\x04\x14\x00", b"\xff\xfe[\x00]\x00",
          "[{\"name\": \"caf\u00e9\"}]".encode("latin-1"), bytes(range(256)), b"\xef\xbb\xbf\xef\xbb\xbf[]",
          '[{"name": "t", "num_embeddings": 1, "embedding_dim": 1}]'.encode("utf-16")]


def _renamed(name: str) -> dict:
    cfg = tutorial()
    old = [t["name"] for t in cfg["tables"]]
    for i, t in enumerate(cfg["tables"]):
        t["name"] = f"{name[:250]}_{i}"
        t["feature_names"] = [f"f{i}_{name[:240]}"]
    cfg["constraints"] = {cfg["tables"][1]["name"]: {"compute_kernels": ["fused_uvm_caching"],
                                                     "cache_load_factor": 0.3}}
    assert len(old) == 4
    return cfg


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def json_cases(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    base = tutorial()
    yield "ok", _json(base)
    yield "ok", _json(base["tables"])
    yield "ok", _json({"tables": base["tables"], "constraints": {"large_table_0": {"pooling_factors": [2.0]}}})
    yield "ok", b"\xef\xbb\xbf" + _json(base)
    yield "ok", json.dumps(base, indent=2).replace("\n", "\r\n").encode()
    for name in HOSTILE_NAMES:
        yield ("refused" if "," in name else "ok"), _json(_renamed(name))  # the grid splits features at commas
    for field, values in TABLE_BAD.items():
        for v in values:
            yield "refused", _json(set_at(base, ("tables", rng.randrange(4), field), v))
    for field, values in CONSTRAINT_BAD.items():
        for v in values:
            yield "refused", _json(set_at(base, ("constraints",), {"large_table_0": {field: v}}))
    for field, values in TOPOLOGY_BAD.items():
        for v in values:
            yield "refused", _json(set_at(base, ("topology", field), v))
    yield "refused", _json(set_at(base, ("constraints",), {"nosuch": {}}))
    yield "refused", _json(set_at(base, ("constraints",), {"large_table_0": 5}))
    yield "refused", _json(set_at(base, ("tables", 0, "colour"), "red"))
    yield "refused", _json(set_at(base, ("tables", 1, "name"), "large_table_0"))
    yield "refused", _json(set_at(base, ("tables", 3), "small_table_1"))
    many_bad = copy.deepcopy(base)
    for t in many_bad["tables"]:
        t.update(embedding_dim="64", num_embeddings=-1, pooling="max", extra=1)
    yield "refused", _json(many_bad)
    for raw in RAW_JSON:
        yield ("ok" if '"name": "u"' in raw else "refused"), raw.encode("utf-8", "surrogatepass")  # last key wins
    for blob in BINARY:
        yield "refused", blob
    leaves = [("tables", i, k) for i in range(4) for k in base["tables"][i]] + [
        ("topology", k) for k in base["topology"]]
    pool = [*BAD_NUMBERS, *BAD_NAMES, *HOSTILE_NAMES, 64, 2, "sum", "fp16", [["x"]], {"a": {"b": []}}]
    for _ in range(40):
        yield "any", _json(set_at(base, rng.choice(leaves), rng.choice(pool)))


CSV_HEAD = ("name,rows,dim,features,pooling,data_type,pooling_factor,sharding_types,kernels,min_partition,"
            "cache_load_factor")
CSV_ROW = ["t0", "1000", "16", "f0", "sum", "fp32", "2.5", "row_wise|table_wise", "fused", "4", "0.5"]
CSV_BAD_NUMBERS = ["1e999", "-1e999", "nan", "NaN", "inf", "-inf", "Infinity", "99999999999999999999999", "1e30",
                   "0x10", "abc", "--1", "1 2", "1" + "0" * 45, "-0", "0", "9223372036854775808"]


def _sheet(rows: list[list[str]], head: str = CSV_HEAD, newline: str = "\n") -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator=newline).writerows([head.split(","), *rows])
    return out.getvalue().encode("utf-8", "surrogatepass")


def csv_cases(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    yield "ok", _sheet([CSV_ROW, ["t1", "10", "8"] + [""] * 8])
    yield "ok", b"name,rows,dim\r\na,1,1\r\nb,2,2\r\n"
    yield "ok", b"\xef\xbb\xbfTable,Num_Embeddings,Embedding Dim\n\n\na,1,1,,\n"
    yield "ok", b"name,rows,dim,features\n\"a, quoted\",1,1,\"x;y|z\"\n"
    yield "ok", b"name,rows,dim\na,1e3,8.0\nb,1_000,+8\n"
    for name in HOSTILE_NAMES:
        if "," not in name:
            yield "ok", _sheet([[f"{name[:250]}_{i}", "100", "8", f"f{i}"] + [""] * 7 for i in range(3)])
    for col in (1, 2, 9, 10, 6):
        for raw in CSV_BAD_NUMBERS:
            expect = "any" if col in (6, 10) and raw in ("-0", "0", "1e30") else "refused"
            expect = "ok" if col == 6 and raw in ("0", "-0") else expect
            yield expect, _sheet([CSV_ROW[:col] + [raw] + CSV_ROW[col + 1:]])
    for col, raw in [(4, "max"), (5, "fp64"), (7, "diagonal"), (8, "gpu"), (0, "a\nb"), (0, "x" * 300),
                     (10, "1.5"), (6, "1;nan"), (6, "1;2;3;4"), (3, "f;f")]:
        yield "refused", _sheet([CSV_ROW[:col] + [raw] + CSV_ROW[col + 1:]])
    structural = [b"", b"\n\n\n", b"name,rows,dim\n", b"name,rows,colour\na,1,red\n", b"name,name,dim\na,b,1\n",
                  b"name,rows,table\na,1,b\n", b"name,rows,dim\na,1,1,9\n", b"name,rows,dim\na\x00,1,1\n",
                  b"na\x00me,rows,dim\na,1,1\n", b"name,rows,dim\na,1,1\na,2,2\n", b"name,rows,dim\n\"a,1,1\n",
                  b"name,rows,dim\na,\"1\"x,1\n", b"rows,dim\n1,1\n", b"name,rows,dim\n,1,1\n",
                  b"name,rows,dim\r\ra,1,1\r", b"name;rows;dim\na;1;1\n", b"\xff\xfen\x00a\x00m\x00e\x00",
                  b"name,rows,dim\ncaf\xe9,1,1\n", b"name,rows,dim\na,1,1\n" + b"b," * 2000 + b"\n",
                  ("name,rows,dim\n" + "".join(f"t{i},1,1\n" for i in range(3000))).encode(),
                  ("," * 5000 + "\n").encode(), ("name," * 3000 + "\n").encode(),
                  b"\t\t\n name , rows , dim \n a,1,1\n"]
    for blob in structural:
        yield "any", blob
    for _ in range(30):
        row = list(CSV_ROW)
        row[rng.randrange(len(row))] = rng.choice([*CSV_BAD_NUMBERS, *HOSTILE_NAMES, "", " ", "\"", "\x00", "\r"])
        yield "any", _sheet([row, CSV_ROW[:0] + ["t9", "5", "4"] + [""] * 8])


def _table(name: str = "'t'", rows: str = "1", dim: str = "1") -> str:
    return f"EmbeddingBagConfig(name={name}, num_embeddings={rows}, embedding_dim={dim})"


SNIPPET_BAD = [
    _table(rows="10**10**10"), _table(rows="(9**9)**9**9"), _table(rows="2**2**2**2**2**2"), _table(rows="2**64"),
    _table(rows="(10**18)**64**64"), _table(rows="99999999999999999999"), _table(rows="1e999"), _table(rows="1e308*10"),
    _table(rows="(-8)**0.5"), _table(rows="0**-1"), _table(rows="1//0"), _table(rows="1j"), _table(rows="None"),
    _table(rows="True"), _table(rows="'1'"), _table(rows="[1]"), _table(rows="-'x'"), _table(rows="10**18*10"),
    _table(rows="x := 5"), _table(name="open('/etc/passwd').read()"), _table(name="__import__('os').getcwd()"),
    _table(name="exec('import os')"), _table(name="eval('1')"), _table(name="(lambda: 't')()"),
    _table(name="getattr(str, 'upper')('t')"), _table(name="().__class__.__name__"), _table(name="'t'.upper()"),
    _table(name="'%s' % 't'"), _table(name="'t' * 3"), _table(name="None"), _table(name="1"), _table(name="''"),
    _table(name="'a\\nb'"), _table(name="'a\\x00b'"), _table(name="'" + "x" * 12_000 + "'"), _table(name="str([1])"),
    _table(name="f'{[1, 2]}'"), _table(name="f'{1:>999999999}'"), _table(name="f'{1:{9}}'"), _table(name="b't'"),
    "EmbeddingBagConfig('t', 1, 1)", "EmbeddingBagConfig(num_embeddings=1, embedding_dim=1)",
    "EmbeddingBagConfig(**{'name': 't', 'num_embeddings': 1, 'embedding_dim': 1})",
    "args = dict(name='t')\nEmbeddingBagConfig(**args, num_embeddings=1, embedding_dim=1)",
    "import os\nos.system('touch PWNED')\n", "x = 1\n", "", "def f(:\n", "x = 1\x00\n" + _table(),
    "x = " + "(" * 10_000 + "1" + ")" * 10_000, "x = " + "1+" * 3_000 + "1\n" + _table(rows="x"),
    "x = " + "-" * 10_000 + "1", "x = a" + ".b" * 5_000, "x = f" + "()" * 5_000, "x = " + "[" * 150 + "]" * 150,
    "x = " + "[" * 100 + "1" + "]" * 100 + "\n" + _table(rows="x"),
    "\n".join(f"[{_table(name='str(i)')} for i in range(10000) for j in []]" for _ in range(200)),
    f"[{_table(name='str(i)')} for i in range(10001)]", f"[{_table(name='str(i)')} for i in range(10**9)]",
    f"[{_table(name='str(i)')} for i in range(-2**62, 2**62)]", f"[{_table(name='str(i)')} for i in range(0, 9, 0)]",
    f"[{_table(name='str(i)')} for i in range(5) if i]", f"[{_table(name='str(i)')} for i, j in range(5)]",
    f"[{_table(name='str(i)')} for i in 'abc']", f"[{_table(name='str(i)')} for i in range(2**64)]",
    f"[[{_table(name='str(i)')} for i in range(200)] for j in range(200)]",
    f"{{{_table()}: 1 for i in range(3)}}", f"async def f():\n    return [{_table()} async for i in g()]",
    "if True:\n\tx = 1\n        y = 2\n", "x = '''unterminated", "x = 1 +\n", "\ufeff\ufeffx = 1",
    _table(name="'\\ud800'"), "with open('x') as f:\n    " + _table(name="f.read()"),
]
SNIPPET_OK = [
    TUTORIAL_SNIPPET, TUTORIAL_SNIPPET.replace("\n", "\r\n"), "\ufeff" + TUTORIAL_SNIPPET,
    ("from torchrec import EmbeddingBagConfig, DataType, PoolingType\n"
     "rows: int = 10**6\nnames = ['a', 'b']\n"
     "tables = [EmbeddingBagConfig(name=f't_{n}_{i:03d}', num_embeddings=rows // (i + 1), embedding_dim=8 * 2,\n"
     "                             feature_names=[f'f_{n}'], data_type=DataType.FP16, pooling=PoolingType.MEAN,\n"
     "                             weight_init_max=0.1) for i, n in enumerate(names)]\n"),
    "[[" + _table(name="f't_{i}_{j}'") + " for j in range(3)] for i in range(4)]",
    "\n".join(_table(name=repr(f"{n[:240]}_{i}"), rows="2**20", dim="64") for i, n in enumerate(HOSTILE_NAMES)
              if "," not in n),
    "class A:\n    " + _table() + "\n" * 2 + "x = A()",
    "\x0c# a form feed\n" + _table(), "tables = (" + _table() + ",)  # a tuple\n",
    f"[{_table(name='str(i)', rows='1 + i')} for i in range(10000)]",
]


def snippet_cases(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    for text in SNIPPET_OK:
        yield "ok", text.encode("utf-8")
    for text in SNIPPET_BAD:
        yield "refused", text.encode("utf-8", "surrogatepass")
    yield "refused", b"x = '\xff'\n" + _table().encode()
    yield "refused", "# caf\u00e9\n".encode("latin-1") + _table().encode()
    tokens = ["**", "(", ")", "[", "]", "0", "10**100", "'", '"', "\\", "\n", "\x00", "lambda", "import", ",",
              "=", "for", "in", "range(10**9)", "\u2028", "\t", "-", "1e999", "f'{", "}'", "str(", "x",
              "EmbeddingBagConfig("]
    for _ in range(40):
        text = list(TUTORIAL_SNIPPET)
        for _ in range(rng.randint(1, 4)):
            text.insert(rng.randrange(len(text)), rng.choice(tokens))
        yield "any", "".join(text).encode("utf-8")


def cases() -> list[tuple[str, str, bytes]]:
    """(format, file name, content) of every committed case."""
    rng = random.Random(20261123)
    out = []
    for fmt, make in (("json", json_cases), ("csv", csv_cases), ("torchrec", snippet_cases)):
        for i, (expect, data) in enumerate(make(rng)):
            out.append((fmt, f"{fmt}/{i:04d}-{expect}.{EXTENSIONS[fmt]}", data))
    return out


def large_cases() -> list[tuple[str, str, bytes]]:
    """Inputs too large to commit, made when the test runs: past the size cap, the CSV field limit, the
    table count, the snippet's size and token caps."""
    big_tables = [{"name": f"t{i}", "num_embeddings": 1, "embedding_dim": 1} for i in range(10_001)]
    return [
        ("json", "json/large-size-refused.json", b"[" + b" " * (20 * 2**20) + b"]"),
        ("json", "json/large-10001-tables-refused.json", _json(big_tables)),
        ("json", "json/large-10000-tables-ok.json", _json(big_tables[:10_000])),
        ("csv", "csv/large-million-columns-refused.csv", b"name," * 1_000_000 + b"\n"),
        ("csv", "csv/large-field-refused.csv", b"name,rows,dim\n" + b"x" * 200_000 + b",1,1\n"),
        ("csv", "csv/large-10001-rows-refused.csv", b"name,rows,dim\n" + b"".join(
            f"t{i},1,1\n".encode() for i in range(10_001))),
        ("torchrec", "torchrec/large-chars-refused.py", b"#" * 1_000_001),
        ("torchrec", "torchrec/large-tokens-refused.py", b"x = [" + b"0," * 300_000 + b"]"),
        ("torchrec", "torchrec/large-longhand-ok.py", "\n".join(
            _table(name=f"'t{i}'", rows=str(i + 1), dim="8") for i in range(4_000)).encode()),
    ]


def write_corpus(where: Path = CORPUS) -> int:
    shutil.rmtree(where, ignore_errors=True)
    made = cases()
    for _, name, data in made:
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return len(made)


if __name__ == "__main__":
    print(f"wrote {write_corpus()} cases to {CORPUS}")
