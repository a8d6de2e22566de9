"""Every kind of refused import, on a real SQLite file and a real PostgreSQL database: one line naming the field,
and the database exactly as it was (row counts, and SQLite's integrity check). JSON is read within bounds."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from db.bundle import read_bundle_text
from db.checks import is_token, new_token
from db.store import Store, StoreError
from tests.db.storetest import IMPOSSIBLE, counts, impossible_plan, integrity, measured_plan, run_cli

OTHER_TOKEN = "Q" * 22  # the server's format (16 bytes), but no plan has it


def _deep(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {"k": out}
    return out


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """Set bundle[a][b]... to value (or to what calling it returns), for a path such as "runs.0.metrics.0.rank"."""
    def apply(b: dict) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        node = b
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value() if callable(value) else copy.deepcopy(value)
    return apply


def _fresh_plan_with_run_of(other_uid: str) -> Callable[[dict], None]:
    """A new token (so the plan and its config are written) whose second run is a run of another plan: refused
    inside the write transaction, after rows were added, so the rollback is what keeps the database as it was."""
    def apply(b: dict) -> None:
        b.update(token=OTHER_TOKEN, config_name="never stored")
        b["runs"][0]["uid"] = new_token()
        b["runs"][1]["uid"] = other_uid
    return apply


REFUSALS: dict[str, tuple[Callable[[dict], object], str]] = {
    "every cost 0": (lambda b: [r.update(cost_ms=0) for r in b["plan"]["ranks"]], r"bundle\.plan\.ranks\[0\]\.cost_ms"),
    "one of two ranks removed": (lambda b: b["plan"]["ranks"].pop(), r"bundle\.plan\.ranks: lists 1 ranks"),
    "hbm_bytes 2**63": (_set("plan.ranks.0.hbm_bytes", 2**63), r"bundle\.plan\.ranks\[0\]\.hbm_bytes"),
    "a short token": (_set("token", "abc"), r"bundle\.token: 'abc' is not a share token"),
    "a token of 64 characters": (_set("token", "A" * 64), r"bundle\.token: 'A+\.\.\. is not a share token"),
    "a token that is not 16 bytes": (_set("token", "Z" * 22), r"bundle\.token: 'Z{22}' is not a share token"),
    "a token starting with a dash": (_set("token", "-" + "A" * 21), r"bundle\.token"),
    "a token with NUL": (_set("token", "A" * 21 + "\x00"), r"bundle\.token"),
    "a run uid not a token": (_set("runs.0.uid", "run-1"), r"bundle\.runs\[0\]\.uid"),
    "a run listed twice": (lambda b: b["runs"][1].update(uid=b["runs"][0]["uid"]),
                           r"bundle\.runs\[1\]\.uid: .* is listed twice"),
    "year 9999 with an offset": (_set("created_at", "9999-12-31T23:59:59-05:00"),
                                 r"bundle\.created_at: .* is outside the years 1970 to 9998 in UTC"),
    "year 9999 in UTC": (_set("runs.0.ended_at", "9999-06-01T00:00:00+00:00"), r"bundle\.runs\[0\]\.ended_at"),
    "year 1 with an offset": (_set("runs.0.started_at", "0001-01-01T00:00:00+01:00"),
                              r"bundle\.runs\[0\]\.started_at: .* outside the years"),
    "before 1970": (_set("runs.1.created_at", "1969-12-31T23:59:59Z"), r"bundle\.runs\[1\]\.created_at"),
    "metric rank 2**63": (_set("runs.0.metrics.0.rank", 2**63), r"bundle\.runs\[0\]\.metrics\[0\]\.rank"),
    "metric rank 10**30": (_set("runs.0.metrics.1.rank", 10**30), r"bundle\.runs\[0\]\.metrics\[1\]\.rank"),
    "metric value beyond any double": (_set("runs.0.metrics.0.value", 10**400),
                                       r"bundle\.runs\[0\]\.metrics\[0\]\.value: must be a finite number"),
    "metric value NaN": (_set("runs.0.metrics.0.value", math.nan), r"bundle\.runs\[0\]\.metrics\[0\]\.value"),
    "settings 1,000 deep": (_set("settings", lambda: _deep(1000)), r"bundle\.settings"),
    "device_info with a 5,000-digit integer": (_set("runs.0.device_info", {"n": 10**4999}),
                                               r"bundle\.runs\[0\]\.device_info: cannot be stored as JSON"),
    "device_info with a lone surrogate": (_set("runs.0.device_info", {"gpu": "\ud800"}),
                                          r"bundle\.runs\[0\]\.device_info: cannot be stored as JSON"),
    "NUL in the label": (_set("label", "a\x00b"), r"bundle\.label: must not contain NUL"),
    "a lone surrogate in a log": (_set("runs.0.log", "ok \udc80"), r"bundle\.runs\[0\]\.log: is not valid Unicode"),
    "an unknown plan field": (_set("plan.extra", 1), r"bundle\.plan\.extra: unknown field"),
    "a plan format from the future": (_set("plan.format_version", 99), r"bundle\.plan\.format_version"),
    "negative planning seconds": (_set("plan.planning_seconds", -1), r"bundle\.plan\.planning_seconds: must be >= 0"),
    "a world of 2**63 ranks": (_set("config.topology.world_size", 2**63), r"bundle\.config: topology\.world_size"),
    "the token of other content": (_set("settings", {"search": False}), r"bundle\.token: .* already names a different"),
    **{case: (_set("plan", impossible_plan(case)), r"bundle\.plan\.plan\.large_table_0")
       for case in IMPOSSIBLE},
}


@pytest.fixture
def holding(store: Store) -> tuple[Store, dict, str]:
    """(a store holding a measured plan and a second one, that plan's bundle, the second plan's run uid)."""
    bundle = store.export_bundle(measured_plan(store))
    second = store.export_bundle(measured_plan(store))
    return store, bundle, second["runs"][0]["uid"]


@pytest.mark.parametrize("case", [*sorted(REFUSALS), "a run of another plan"])
def test_refused_import_leaves_the_database_as_it_was(holding: tuple[Store, dict, str], case: str) -> None:
    store, bundle, other_uid = holding
    change, message = REFUSALS.get(case, (_fresh_plan_with_run_of(other_uid),
                                          r"bundle\.runs\[1\]\.uid: .* is a run of another plan"))
    bad = copy.deepcopy(bundle)
    change(bad)
    before = (counts(store), integrity(store))
    with pytest.raises(StoreError, match=message) as err:
        store.import_bundle(bad)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    assert (counts(store), integrity(store)) == before
    assert integrity(store) in ("ok", "n/a")
    assert store.import_bundle(bundle) == bundle["token"]  # the database still works, the original still imports


def test_token_format_is_the_servers() -> None:
    made = {new_token() for _ in range(2000)}
    assert all(is_token(t) and len(t) == 22 for t in made)
    assert is_token("A" * 22) and is_token("Q" * 22) and is_token("_" * 21 + "w")
    for other in ("Z" * 22, "A" * 21, "A" * 23, "A" * 64, "-" + "A" * 21, "A" * 21 + "=", "A" * 21 + ".", 22, None):
        assert not is_token(other), other


@pytest.mark.parametrize("text, message", [
    ("[" * 1000 + "]" * 1000, "nests objects or lists more than 32 deep"),
    ('{"bundle_version": ' + "1" * 5000 + "}", "a number of 5000 characters"),
    ('{"bundle_version": NaN}', "NaN is not a JSON number"),
    ('{"bundle_version": 1e999}', "too large to be a finite double"),
    (b'{"label": "\xff"}', "is not UTF-8 text"),
])
def test_json_is_read_within_bounds(text: str | bytes, message: str) -> None:
    with pytest.raises(StoreError, match=message) as err:
        read_bundle_text(text, "FILE 'x.json'")
    assert str(err.value).startswith("FILE 'x.json'") and "\n" not in str(err.value)


def test_cli_reads_json_within_bounds(tmp_path: Path) -> None:
    """import, save and import-results: one line, exit 2, and no database file made."""
    db = tmp_path / "never.db"
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 1000 + "]" * 1000)
    digits = tmp_path / "digits.json"
    digits.write_text('{"status": "succeeded", "ranks": [' + "9" * 5000 + "]}")
    for args in (["import", str(deep)], ["save", "--config", str(deep), "--plan", str(deep)],
                 ["import-results", str(digits), "--plan-token", "A" * 22]):
        r = run_cli(f"sqlite:///{db}", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    assert not db.exists()


def test_several_bundles_in_one_import(db_url: str, tmp_path: Path) -> None:
    """`import A B C`: each imported or refused on its own; `TOKEN FILE` per import, one error line per refusal."""
    store = Store(db_url)
    store.upgrade()
    good = store.export_bundle(measured_plan(store))
    zeroed = copy.deepcopy(good)
    zeroed["plan"]["ranks"][0]["cost_ms"] = 0
    files = []
    for name, bundle in (("good", good), ("zeroed", zeroed), ("bad-token", dict(good, token="abc")), ("again", good)):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(bundle))
    before = counts(store)
    r = run_cli(db_url, "import", *map(str, files))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stdout.splitlines() == [f"{good['token']} {files[0]}", f"{good['token']} {files[3]}"]
    errors = r.stderr.splitlines()
    assert [e.split(": ")[1] for e in errors] == [str(files[1]), str(files[2])]
    assert all(e.startswith(f"error: {f}: bundle.") for e, f in zip(errors, files[1:3]))
    assert counts(store) == before


def test_nul_inside_json_values_survives_every_backend(store: Store, new_db_url: Callable[[str], str]) -> None:
    """Columns refuse NUL (PostgreSQL text cannot hold it); JSON values keep it as the escape \\u0000."""
    token = measured_plan(store)
    run = store.runs_for_plan(token)[0].id
    store.update_run(run, device_info={"note": "a\x00b", "k\x00": 1})
    other = Store(new_db_url("sqlite"))
    other.upgrade()
    assert other.import_bundle(store.export_bundle(token)) == token
    assert other.runs_for_plan(token)[0].device_info == {"note": "a\x00b", "k\x00": 1}
