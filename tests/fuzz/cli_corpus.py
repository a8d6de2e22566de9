"""The hostile configs and plans the CLI fuzz test feeds to `python -m engine`: every field of the tutorial's
config and plans set to every hostile value, broken structure, JSON the decoder chokes on.

`python -m tests.fuzz.cli_corpus` rewrites the committed corpus under tests/data/fuzz/cli/ (deterministic).
"""

from __future__ import annotations

import copy
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.factories import ROOT, SHARDING_TYPES, tutorial
from tests.fuzz.mutate import Raw, leaves, set_at, splice

CORPUS = ROOT / "tests" / "data" / "fuzz" / "cli"
HOSTILE_TEXT = ["", " ", "x" * 5000, "a\nb", "a\x00b", "**x** [l](http://example.com)",
                "<img src=x onerror=alert(1)>", "$(touch PWNED)", "`touch PWNED`", "\ud800", "\u2028", "é" * 300]
HOSTILE_NUMBERS = [-1, 0, 0.5, 1.5, -0.0, 2**31, 2**62, 2**63, 2**64, 10**30, 1e15, 1e308, -1e308, 1e-300,
                   5e-324, 4096.0000001]
HOSTILE_VALUES: list[Any] = HOSTILE_NUMBERS + [True, False, None, "1", "", [], [1], {}, {"a": 1}, [[[]]]]
# Raw JSON text for values Python's json cannot write: the decoder must refuse each with one line.
RAW_VALUES = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1" * 5000, "[" * 1000 + "]" * 1000,
              "0x10", "01", "1_000", "+1", ".5", '"\\ud800"', "undefined"]


def case(command: str, config: Any, plan: Any = None, note: str = "") -> dict:
    return {"command": command, "config": config, "plan": plan, "note": note}


def tutorial_plan(sharding_type: str) -> dict:
    from engine import parse_config, plan, plan_to_dict

    # the placement only: figures in a plan file are never read, and leaving them out keeps the corpus stable
    return {"plan": plan_to_dict(plan(parse_config(tutorial(sharding_type))))["plan"]}


def config_cases(rng: random.Random) -> Iterator[dict]:
    base = tutorial("column_wise")
    extra = {("constraints", "large_table_0", k): v for k, v in
             {"pooling_factors": [1.0], "num_poolings": [1.0], "batch_sizes": [512], "is_weighted": False,
              "cache_load_factor": 0.2, "compute_kernels": ["fused"]}.items()}
    for path, value in extra.items():
        base = set_at(base, path, value)
    for k, v in {"local_world_size": 2, "compute_device": "cuda", "hbm_cap": 2**34, "ddr_cap": 2**37,
                 "hbm_mem_bw": 9.6e8, "ddr_mem_bw": 5.5e7, "hbm_to_ddr_mem_bw": 3.4e7, "intra_host_bw": 6.4e8,
                 "inter_host_bw": 1.3e7, "batch_size": 512, "storage_reservation": 0.15,
                 "optimizer": "adam"}.items():
        base["topology"][k] = v
    paths = list(leaves(base))
    for path in paths:
        for value in rng.sample(HOSTILE_VALUES, 3):
            yield case("plan", set_at(base, path, value), note=f"{path} = {value!r}"[:120])
        yield case("plan", set_at(base, path, rng.choice(HOSTILE_TEXT)), note=f"{path} = text")
        yield case("plan", set_at(base, path, Raw(rng.choice(RAW_VALUES))), note=f"{path} = raw")
    for key in ("tables", "constraints", "topology"):
        yield case("plan", {k: v for k, v in base.items() if k != key}, note=f"no {key}")


def structure_cases() -> Iterator[dict]:
    t = tutorial()
    big_table = {"name": "t", "num_embeddings": 2**40, "embedding_dim": 2**16}
    for raw in ["", "null", "[]", "{}", "[1,2]", '"text"', "{" * 40 + "}" * 40, '{"tables": ' + "[" * 900,
                "\x00\x01", '{"tables": [], "topology": {"world_size": 1}}', "\ufeff{}"]:
        yield case("plan", Raw(raw), note=f"raw {raw[:20]!r}")
    yield case("plan", set_at(t, ("tables",), [big_table]), note="1 PiB table")
    yield case("plan", set_at(t, ("tables",), [dict(big_table, name=f"t{i}", embedding_dim=2**14) for i in range(70)]),
               note="70 tables of 2**54 bytes")
    yield case("plan", set_at(t, ("topology", "world_size"), 10**9), note="world 1e9")
    yield case("plan", set_at(t, ("topology", "world_size"), 16_384), note="largest world, 4 tables")
    yield case("plan", set_at(set_at(t, ("topology", "world_size"), 4096), ("topology", "local_world_size"), 8),
               note="4096 ranks on 512 hosts")
    many = [{"name": f"t{i}", "num_embeddings": 1000, "embedding_dim": 8} for i in range(5000)]
    yield case("plan", {"tables": many, "topology": {"world_size": 8192}}, note="too many table-rank pairs")
    yield case("plan", set_at(t, ("tables", 0, "feature_names"), [f"f{i}" for i in range(2000)]),
               note="2000 features")
    hot = set_at(t, ("constraints", "large_table_0"), {"pooling_factors": [1e6], "batch_sizes": [2**24]})
    yield case("plan", set_at(hot, ("topology", "batch_size"), 2**24), note="largest batch and pooling")
    slow = copy.deepcopy(t)
    for k in ("hbm_mem_bw", "ddr_mem_bw", "hbm_to_ddr_mem_bw", "intra_host_bw", "inter_host_bw"):
        slow["topology"][k] = 1e3
    yield case("plan", slow, note="slowest bandwidths")
    yield case("plan", set_at(t, ("topology", "hbm_cap"), 0), note="no HBM")
    yield from edge_cases()


def edge_cases() -> Iterator[dict]:
    """At the documented limits: planned with finite, non-negative figures (or refused as not fitting)."""
    huge = [{"name": f"t{i}", "num_embeddings": 2**40, "embedding_dim": 2**8} for i in range(64)]
    yield case("plan", {"tables": huge, "topology": {"world_size": 128, "local_world_size": 8, "hbm_cap": 2**50,
                                                     "ddr_cap": 2**50, "optimizer": "adam"}},
               note="64 tables of 1 PiB on 128 ranks of 1 PiB")
    hot = [{"name": f"h{i}", "num_embeddings": 2**20, "embedding_dim": 64} for i in range(32)]
    cons = {f"h{i}": {"pooling_factors": [2.0**16], "batch_sizes": [2**20]} for i in range(32)}
    yield case("plan", {"tables": hot, "constraints": cons, "topology": {"world_size": 8, "batch_size": 2**20,
                                                                         "hbm_cap": 2**50, "ddr_cap": 2**50}},
               note="ids per step near the total limit")
    wide = [{"name": f"w{i}", "num_embeddings": 2**16, "embedding_dim": 2**16,
             "feature_names": [f"w{i}f{j}" for j in range(1024)]} for i in range(2)]
    yield case("plan", {"tables": wide, "topology": {"world_size": 2, "batch_size": 2**12}},
               note="widest tables with the most features")


def plan_cases(rng: random.Random) -> Iterator[dict]:
    for st in SHARDING_TYPES:
        cfg, good = tutorial(st), tutorial_plan(st)
        yield case("estimate", cfg, good, note=f"valid {st}")
        placements = good["plan"]
        for path in rng.sample(list(leaves(placements)), 18):
            full = ("plan",) + path
            for value in rng.sample(HOSTILE_VALUES, 2):
                yield case("estimate", cfg, set_at(good, full, value), note=f"{st} {path} = {value!r}"[:120])
            if rng.random() < 0.3:
                yield case("estimate", cfg, set_at(good, full, Raw(rng.choice(RAW_VALUES))), note=f"{st} raw")
        for name in list(placements)[:2]:
            dropped = copy.deepcopy(good)
            del dropped["plan"][name]
            yield case("estimate", cfg, dropped, note=f"{st} without {name}")
            if placements[name]["shards"]:
                doubled = copy.deepcopy(good)
                doubled["plan"][name]["shards"].append(doubled["plan"][name]["shards"][0])
                yield case("estimate", cfg, doubled, note=f"{st} shard twice")
        yield case("estimate", cfg, set_at(good, ("plan", "nosuch"), placements[next(iter(placements))]),
                   note=f"{st} unknown table")
        yield case("estimate", cfg, set_at(good, ("ranks",), [{"rank": 0, "cost_ms": -1}]),
                   note=f"{st} forged stats are ignored")
        yield from impossible_plans(st, cfg, good)


def impossible_plans(st: str, cfg: dict, good: dict) -> Iterator[dict]:
    """Plans with the right total area that still cannot be: overlaps with gaps, repeated copies, empty shards."""
    name = "large_table_0"
    overlap = [{"offsets": [0, col], "sizes": [4096, 16], "rank": rank}
               for col, rank in ((0, 0), (16, 1), (16, 0), (48, 1))]
    yield case("estimate", cfg, set_at(good, ("plan", name), {"sharding_type": "column_wise", "compute_kernel": "fused",
                                                            "ranks": [0, 1, 0, 1], "shards": overlap}),
               note=f"{st} overlap and gap of equal area")
    rows = [{"offsets": [0, 0], "sizes": [3000, 64], "rank": 0}, {"offsets": [1904, 0], "sizes": [2192, 64], "rank": 1}]
    yield case("estimate", cfg, set_at(good, ("plan", name), {"sharding_type": "row_wise", "compute_kernel": "fused",
                                                            "ranks": [0, 1], "shards": rows}),
               note=f"{st} rows overlapping")
    for ranks in ([0, 0], [0] * 1000, [1, 0, 1]):
        yield case("estimate", cfg, set_at(good, ("plan", name), {"sharding_type": "data_parallel", "compute_kernel":
                                                                "dense", "ranks": ranks, "shards": None}),
                   note=f"{st} data_parallel ranks {ranks[:3]}")
    empty = [{"offsets": [0, 0], "sizes": [4096, 64], "rank": 0}, {"offsets": [0, 64], "sizes": [4096, 0], "rank": 1}]
    yield case("estimate", cfg, set_at(good, ("plan", name), {"sharding_type": "column_wise", "compute_kernel": "fused",
                                                            "ranks": [0, 1], "shards": empty}),
               note=f"{st} empty shard")


def all_cases() -> list[dict]:
    rng = random.Random(20261123)
    return [*config_cases(rng), *structure_cases(), *plan_cases(rng)]


def write_corpus(where: Path = CORPUS) -> int:
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    cases = all_cases()
    for i, c in enumerate(cases):
        plan = None if c["plan"] is None else splice(c["plan"], ensure_ascii=False)
        c = dict(c, config=splice(c["config"], ensure_ascii=False), plan=plan)
        (where / f"{i:04d}.json").write_text(json.dumps(c, ensure_ascii=True) + "\n", encoding="utf-8")
    return len(cases)


if __name__ == "__main__":
    print(f"wrote {write_corpus()} cases to {CORPUS}")
