"""Plan bundles: export, import into another database (across backends), idempotence, bad bundles."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest

from db.bundle import BUNDLE_VERSION, read_bundle_text
from db.store import Store, StoreError
from tests.db.storetest import counts, measured_plan, sample


@pytest.mark.parametrize("target_kind", ["sqlite", "postgresql"])
def test_round_trip_between_databases_is_lossless(store: Store, target_kind: str,
                                                   new_db_url: Callable[[str], str]) -> None:
    token = measured_plan(store)
    bundle = store.export_bundle(token)
    assert bundle["bundle_version"] == BUNDLE_VERSION and bundle["token"] == token
    assert len(bundle["runs"]) == 2 and len(bundle["runs"][0]["metrics"]) == 3
    text = json.dumps(bundle)  # what goes in the file

    target = Store(new_db_url(target_kind))
    target.upgrade()
    assert target.import_bundle(json.loads(text)) == token
    assert target.export_bundle(token) == bundle  # equal dicts: nothing lost, not even a float's last bit
    a, b = store.get_plan(token), target.get_plan(token)
    assert a is not None and b is not None
    assert (a.plan, a.config, a.created_at, a.label, a.settings) == (b.plan, b.config, b.created_at, b.label,
                                                                     b.settings)
    def measured(s: Store) -> list:
        return [(r.uid, r.kind, r.status, [(m.rank, m.name, m.value, m.unit) for m in s.metrics(r.id)])
                for r in s.runs_for_plan(token)]

    assert measured(store) == measured(target) and len(measured(target)) == 2
    target.close()


def test_importing_twice_adds_nothing(store: Store, new_db_url: Callable[[str], str]) -> None:
    token = measured_plan(store)
    bundle = store.export_bundle(token)
    assert store.import_bundle(copy.deepcopy(bundle)) == token  # into the database it came from
    before = counts(store)
    assert store.import_bundle(copy.deepcopy(bundle)) == token
    assert counts(store) == before
    assert len(store.list_plans()) == 1


def test_reimport_adds_only_the_runs_measured_since(store: Store, new_db_url: Callable[[str], str]) -> None:
    token = measured_plan(store)
    target = Store(new_db_url("sqlite"))
    target.upgrade()
    target.import_bundle(store.export_bundle(token))
    later = store.create_run(token, "validation", "nccl", "cuda")
    store.add_metrics(later, [(0, "step_ms", 0.5, "ms")])
    assert target.import_bundle(store.export_bundle(token)) == token
    assert [r.backend for r in target.runs_for_plan(token)] == ["gloo", "fbgemm", "nccl"]
    assert target.export_bundle(token) == store.export_bundle(token)


def test_token_naming_different_content_is_refused(store: Store) -> None:
    token = measured_plan(store)
    bundle = store.export_bundle(token)
    bundle["settings"]["search"] = False  # other content under the same token: never overwritten
    before = counts(store)
    with pytest.raises(StoreError, match="bundle.token: .* already names a different plan"):
        store.import_bundle(bundle)
    assert counts(store) == before


def _broken(change: Callable[[dict], object]) -> Callable[[dict], dict]:
    def apply(b: dict) -> dict:
        b = copy.deepcopy(b)
        change(b)
        return b
    return apply


BAD_BUNDLES = {
    "future version": (_broken(lambda b: b.update(bundle_version=BUNDLE_VERSION + 1)), "newer than this planner"),
    "version missing": (_broken(lambda b: b.pop("bundle_version")), "bundle.bundle_version"),
    "not an object": (lambda b: [b], "bundle: must be a JSON object"),
    "runs not a list": (_broken(lambda b: b.update(runs={"0": 1})), "bundle.runs: must be a list"),
    "label a number": (_broken(lambda b: b.update(label=7)), "label: must be a string"),
    "token too short": (_broken(lambda b: b.update(token="abc")), "bundle.token"),
    "plan missing": (_broken(lambda b: b.pop("plan")), "bundle.plan: is missing"),
    "unknown field": (_broken(lambda b: b.update(extra=1)), "bundle.extra: unknown field"),
    "bad time": (_broken(lambda b: b.update(created_at="yesterday")), "bundle.created_at"),
    "bad metric": (_broken(lambda b: b["runs"][0]["metrics"][0].update(value="fast")),
                   r"bundle.runs\[0\].metrics\[0\].value"),
    "bad run kind": (_broken(lambda b: b["runs"][1].update(kind="benchmark")), r"bundle.runs\[1\].kind"),
    "bad config": (_broken(lambda b: b["config"]["topology"].update(world_size="two")), "world_size"),
    "plan off its config": (_broken(lambda b: b["plan"]["plan"].pop("large_table_0")), "plan.large_table_0"),
}


@pytest.mark.parametrize("case", sorted(BAD_BUNDLES))
def test_bad_bundle_is_refused_with_one_line_and_nothing_changes(store: Store, case: str,
                                                                  new_db_url: Callable[[str], str]) -> None:
    source = Store(new_db_url("sqlite"))
    source.upgrade()
    good = source.export_bundle(measured_plan(source))
    make_bad, message = BAD_BUNDLES[case]
    store.save_plan(*sample())  # the target holds something that must survive
    before = counts(store)
    with pytest.raises(StoreError, match=message) as err:
        store.import_bundle(make_bad(good))
    assert "\n" not in str(err.value)
    assert counts(store) == before


def test_truncated_or_corrupt_bundle_text(store: Store) -> None:
    text = json.dumps(store.export_bundle(measured_plan(store)))
    for broken in (text[: len(text) // 2], text.replace(":", "=", 1), "", "\x00\x01"):
        with pytest.raises(StoreError, match="is not valid JSON") as err:
            read_bundle_text(broken, "plan.bundle.json")
        assert "\n" not in str(err.value)
