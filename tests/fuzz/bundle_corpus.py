"""The hostile bundles the bundle fuzz test feeds to `python -m db import`: mutations of a real exported bundle
(tampered estimates, removed ranks, odd tokens, bad times, huge numbers, NUL, broken structure, plans that do not
tile, JSON the decoder chokes on), each named for what must happen to it: bad-* refused, ok-* imported, any-*
(a hostile value where one may be accepted) imported as the same plan or refused.

`python -m tests.fuzz.bundle_corpus` rewrites the committed corpus under tests/data/fuzz/bundles/ (deterministic).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import engine
from db.store import Store
from tests.db.storetest import IMPOSSIBLE
from tests.factories import ROOT, tutorial
from tests.fuzz.mutate import Raw, drop_at, leaves, set_at, splice

CORPUS = ROOT / "tests" / "data" / "fuzz" / "bundles"
NOTES = CORPUS / "_notes.json"  # file name -> what was done to the base bundle

HOSTILE_NUMBERS = [-1, 0, 0.5, -0.0, 2**31, 2**53, 2**63, 2**64, 10**30, 1e308, -1e308, 5e-324]
HOSTILE_TEXT = ["", " ", "x" * 5000, "a\x00b", "\ud800", "\u2028", "é" * 300, "<script>", "'; DROP TABLE plans; --"]
HOSTILE_VALUES: list[Any] = HOSTILE_NUMBERS + HOSTILE_TEXT + [True, None, [], [1], {}, {"a": 1}, [[[]]]]
RAW_VALUES = ["NaN", "Infinity", "-Infinity", "1e999", "1" * 5000, "[" * 1000 + "]" * 1000, "01", "0x10", "+1",
              ".5", "undefined", '"\\ud800"']
BAD_TIMES = ["9999-12-31T23:59:59-05:00", "9999-12-31T23:59:59+05:00", "9999-01-01T00:00:00", "1969-12-31T23:59:59Z",
             "0001-01-01T00:00:00+01:00", "yesterday", "", "2026-13-01T00:00:00", 1700000000, None, "x" * 5000]


def fixed_token(seed: str) -> str:
    """A token in the server's format, the same for the same seed."""
    n = 0
    while True:
        raw = hashlib.sha256(f"{seed} {n}".encode()).digest()[:16]
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not token.startswith("-"):
            return token
        n += 1


# ---- the corpus ----------------------------------------------------------------------------------------------


def base_bundle() -> dict:
    """A real export: the tutorial planned, saved and measured in a throwaway SQLite store; tokens and times
    then fixed so the corpus is the same every time it is written."""
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{d}/base.db")
        store.upgrade()
        plan = engine.plan_to_dict(engine.plan(engine.parse_config(tutorial()), engine.PlannerSettings(search=False)))
        plan["planning_seconds"] = 0.25
        token = store.save_plan(tutorial(), plan, label="fuzz base", author="fuzz", config_name="tutorial",
                                settings={"search": False})
        run = store.create_run(token, "validation", "gloo", "cpu")
        store.update_run(run, status="running", log_append="two ranks up\n", device_info={"cpus": 2})
        store.add_metrics(run, [(0, "step_ms", 1.5, "ms"), (1, "step_ms", 1.25, "ms"), (0, "estimated_ms", 0.5, "ms")])
        store.update_run(run, status="succeeded")
        store.update_run(store.create_run(token, "dryrun", "fbgemm", "cpu"), status="failed", error="no kernel")
        bundle = store.export_bundle(token)
        store.close()
    bundle.update(token=fixed_token("plan"), created_at="2026-01-31T12:00:00+00:00")
    for i, r in enumerate(bundle["runs"]):
        r.update(uid=fixed_token(f"run {i}"), created_at=f"2026-01-31T12:0{i}:00+00:00",
                 started_at=f"2026-01-31T12:0{i}:01+00:00", ended_at=f"2026-01-31T12:0{i}:09+00:00")
    return bundle


def encode(doc: Any) -> bytes:
    """JSON bytes; Raw values go in as raw text, lone surrogates as their escapes."""
    return splice(doc, indent=1).encode("utf-8")


def _figure_cases(base: dict) -> Iterator[tuple[str, str, Any]]:
    plan = base["plan"]
    yield "bad", "every cost 0", set_at(base, ("plan", "ranks"), [dict(r, cost_ms=0) for r in plan["ranks"]])
    for i in range(len(plan["ranks"])):
        yield "bad", f"rank {i} removed", drop_at(base, ("plan", "ranks", i))
        for key, value in plan["ranks"][i].items():
            changed = value + 1 if isinstance(value, int) else value * 1.01 + 1e-6
            yield "bad", f"ranks[{i}].{key} edited", set_at(base, ("plan", "ranks", i, key), changed)
            kept = "ok" if key.startswith("memory_") else "bad"  # parts a plan from before them lacks: filled in
            yield kept, f"ranks[{i}].{key} removed", drop_at(base, ("plan", "ranks", i, key))
    yield "bad", "a rank added", set_at(base, ("plan", "ranks"), plan["ranks"] + [dict(plan["ranks"][1], rank=2)])
    yield "bad", "ranks reordered", set_at(base, ("plan", "ranks"), plan["ranks"][::-1])
    yield "bad", "ranks empty", set_at(base, ("plan", "ranks"), [])
    yield "bad", "a rank field added", set_at(base, ("plan", "ranks", 0, "speedup"), 2.0)
    yield "bad", "hbm_bytes 2**63", set_at(base, ("plan", "ranks", 0, "hbm_bytes"), 2**63)
    yield "bad", "cost NaN", set_at(base, ("plan", "ranks", 0, "cost_ms"), Raw("NaN"))
    yield "bad", "cost 1e999", set_at(base, ("plan", "ranks", 1, "cost_ms"), Raw("1e999"))
    for key, value in (("max_rank_cost_ms", 0), ("max_rank_cost_ms", None), ("bottleneck_rank", 2),
                       ("bottleneck_rank", -1), ("bottleneck_rank", True), ("format_version", 99),
                       ("planning_seconds", -1), ("lower_bound_ms", -1), ("notes", [1]), ("extra", 1)):
        yield "bad", f"plan.{key} = {value!r}", set_at(base, ("plan", key), value)
    yield "any", "rounding in a cost", set_at(base, ("plan", "ranks", 0, "cost_ms"),
                                            plan["ranks"][0]["cost_ms"] * (1 + 1e-13))


def _identity_cases(base: dict) -> Iterator[tuple[str, str, Any]]:
    tokens = ["abc", "A" * 21, "A" * 23, "A" * 64, "Z" * 22, "-" + "A" * 21, "A" * 21 + "=", "A" * 20 + "+/",
              "A" * 21 + "\x00", "é" * 22, 12345, None, [], fixed_token("x")[:-1] + "B"]
    for t in tokens:
        yield "bad", f"token {t!r}"[:60], set_at(base, ("token",), t)
        yield "bad", f"runs[0].uid {t!r}"[:60], set_at(base, ("runs", 0, "uid"), t)
    yield "bad", "a run listed twice", set_at(base, ("runs", 1, "uid"), base["runs"][0]["uid"])
    yield "bad", "the token of other content", set_at(base, ("settings",), {"search": True})
    yield "bad", "the token of another config", set_at(base, ("config", "topology", "batch_size"), 256)
    copied = set_at(base, ("token",), fixed_token("new plan"))
    for i, run in enumerate(copied["runs"]):
        run["uid"] = fixed_token(f"new plan run {i}")
    yield "ok", "a new token (and new run uids)", copied
    yield "ok", "a new run", set_at(base, ("runs", 1, "uid"), fixed_token("new run"))
    for field in ("label", "author", "config_name", "created_at"):
        value = {"created_at": "2030-06-01T00:00:00-07:00"}.get(field, "another " + field)
        yield "ok", f"another {field}", set_at(base, (field,), value)


def _time_cases(base: dict) -> Iterator[tuple[str, str, Any]]:
    fields = [("created_at",)] + [("runs", i, k) for i in range(2) for k in ("created_at", "started_at", "ended_at")]
    for path in fields:
        for t in BAD_TIMES:
            if t is None and path[-1] in ("started_at", "ended_at"):
                continue  # a run not started or not ended
            yield "bad", f"{'.'.join(map(str, path))} = {t!r}"[:60], set_at(base, path, t)


def _run_cases(base: dict) -> Iterator[tuple[str, str, Any]]:
    run, metric = ("runs", 0), ("runs", 0, "metrics", 0)
    bad = {"rank": [-1, 1.5, "0", 2**63, 10**30, 2**31, None, True, Raw("1" * 50)],
           "name": ["", 5, None, "x" * 201, "a\x00b", "\ud800"], "value": ["fast", None, Raw("NaN"), Raw("1e999"),
                                                                         Raw("Infinity"), True, [1]],
           "unit": [None, 1, "x" * 101, "\x00"]}
    for key, values in bad.items():
        for v in values:
            yield "bad", f"metric {key} = {v!r}"[:60], set_at(base, metric + (key,), v)
    for key, values in {"kind": ["benchmark", None, 1], "status": ["done", "", None], "backend": [None, "x" * 101],
                        "device": [1, "a\x00"], "log": [None, 7, "a\x00b", "ok \udc80"], "error": [5, "\x00"],
                        "device_info": [[], "cpu", None, {"n": Raw("1" * 5000)}, {"gpu": "\ud800"},
                                        {"x": Raw("NaN")}, Raw('{"k": ' * 40 + "1" + "}" * 40)],
                        "metrics": [{}, "none", None, [[0, "step_ms", 1.0, "ms"]], [None]]}.items():
        for v in values:
            yield "bad", f"run {key} = {v!r}"[:60], set_at(base, run + (key,), v)
    for key in base["runs"][0]:
        yield "bad", f"run without {key}", drop_at(base, run + (key,))
    for key in base["runs"][0]["metrics"][0]:
        yield "bad", f"metric without {key}", drop_at(base, metric + (key,))
    yield "bad", "a run field added", set_at(base, run + ("extra",), 1)
    yield "bad", "a metric field added", set_at(base, metric + ("extra",), 1)
    yield "any", "device_info of every hostile value", set_at(base, run + ("device_info",),
                                                            {str(i): v for i, v in enumerate(HOSTILE_NUMBERS)})


def _structure_cases(base: dict) -> Iterator[tuple[str, str, Any]]:
    for key in base:
        yield "bad", f"without {key}", drop_at(base, (key,))
    yield "bad", "a field added", set_at(base, ("extra",), 1)
    for v in (0, 2, 99, "1", True, 1.0, None, Raw("1" * 45)):
        yield "bad", f"bundle_version {v!r}", set_at(base, ("bundle_version",), v)
    for key, values in {"runs": [{}, None, "x", [None], [[]]], "settings": [[], None, "x", {"x": Raw("NaN")},
                                                                           Raw('{"k": ' * 40 + "1" + "}" * 40)],
                        "config": [None, [], "x", {}], "plan": [None, [], "x", {}, {"plan": {}}],
                        "planner": ["", None, 5, "x" * 101], "label": [None, 7, "x" * 501, "a\x00b", "\ud800"],
                        "author": [[], "x" * 201], "config_name": ["", " ", None, "x" * 201]}.items():
        for v in values:
            yield "bad", f"{key} = {v!r}"[:60], set_at(base, (key,), v)
    text = encode(base).decode("utf-8")
    for cut in (0, 1, 2, 50, len(text) // 3, len(text) // 2, len(text) - 2, len(text) - 1):
        yield "bad", f"truncated at {cut}", Raw(text[:cut])
    for raw in ("null", "[]", "1", '"bundle"', "[" * 1000 + "]" * 1000, "{" * 40 + "}" * 40, "\x00\x01",
                "\ufeff" + text, text + "\n{}", text.replace(":", "=", 1)):
        yield "bad", f"raw {raw[:12]!r}", Raw(raw)
    yield "bad", "not UTF-8", b'{"bundle_version": 1, "label": "\xff\xfe"}'


def _config_and_placement_cases(base: dict, rng: random.Random) -> Iterator[tuple[str, str, Any]]:
    for case in IMPOSSIBLE:
        yield "bad", case, set_at(base, ("plan", "plan", "large_table_0"), IMPOSSIBLE[case])
    placement = ("plan", "plan", "large_table_0")
    for key, v in (("sharding_type", "diagonal"), ("compute_kernel", "magic"), ("ranks", [2]), ("ranks", [-1]),
                   ("shards", []), ("shards", None)):
        yield "bad", f"placement {key} = {v!r}", set_at(base, placement + (key,), v)
    for key, v in (("rank", 2), ("rank", -1), ("sizes", [2**63, 64]), ("offsets", [-1, 0]), ("sizes", [4096])):
        yield "bad", f"shard {key} = {v!r}", set_at(base, placement + ("shards", 0, key), v)
    yield "bad", "a table not placed", drop_at(base, placement)
    yield "bad", "an unknown table placed", set_at(base, ("plan", "plan", "nosuch"),
                                                   base["plan"]["plan"][placement[-1]])
    topology = ("config", "topology")
    for key, v in (("world_size", 2**63), ("world_size", 0), ("world_size", 10**30), ("batch_size", -1),
                   ("hbm_cap", 2**64), ("hbm_mem_bw", 0), ("hbm_mem_bw", Raw("1e999"))):
        yield "bad", f"topology {key} = {v!r}", set_at(base, topology + (key,), v)
    for key, v in (("num_embeddings", 10**30), ("embedding_dim", 0), ("name", "a\x00b"), ("name", "")):
        yield "bad", f"table {key} = {v!r}", set_at(base, ("config", "tables", 0, key), v)
    free = [p for p in leaves(base) if p[0] in ("config", "plan", "settings") or p[-1] == "device_info"]
    for path in rng.sample(free, 60):
        value = rng.choice(HOSTILE_VALUES)
        yield "any", f"{'.'.join(map(str, path))} = {value!r}"[:60], set_at(base, path, value)
        yield "any", f"{'.'.join(map(str, path))} = raw"[:60], set_at(base, path, Raw(rng.choice(RAW_VALUES)))


def corpus_cases() -> Iterator[tuple[str, str, bytes]]:
    """(expectation, note, file bytes) for every case, base first."""
    base = base_bundle()
    rng = random.Random(9)
    yield "ok", "the base bundle as exported", encode(base)
    for family in (_figure_cases(base), _identity_cases(base), _time_cases(base), _run_cases(base),
                   _structure_cases(base), _config_and_placement_cases(base, rng)):
        for expect, note, doc in family:
            yield expect, note, doc if isinstance(doc, bytes) else encode(doc)


def write_corpus() -> int:
    shutil.rmtree(CORPUS, ignore_errors=True)
    CORPUS.mkdir(parents=True)
    notes = {}
    for i, (expect, note, data) in enumerate(corpus_cases()):
        name = f"{expect}-{i:04d}.json"
        (CORPUS / name).write_bytes(data)
        notes[name] = note
    NOTES.write_text(json.dumps(notes, indent=1, ensure_ascii=True) + "\n")
    return len(notes)


if __name__ == "__main__":
    print(f"wrote {write_corpus()} bundles to {CORPUS.relative_to(ROOT)}")
