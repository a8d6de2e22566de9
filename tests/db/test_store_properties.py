"""Properties over generated values: any text and any finite number survive a bundle round trip exactly."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.store import Store
from tests.db.storetest import sample

TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)
METRIC = st.tuples(st.integers(0, 1), TEXT.filter(str.strip), st.floats(allow_nan=False, allow_infinity=False),
                   TEXT)


@pytest.fixture
def other_store(backend: str, new_db_url: Callable[[str], str]) -> Iterator[Store]:
    """A second database on the other backend: bundles cross from SQLite to PostgreSQL and back."""
    s = Store(new_db_url("postgresql" if backend == "sqlite" else "sqlite"))
    s.upgrade()
    yield s
    s.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(label=TEXT, author=TEXT, log=TEXT, metrics=st.lists(METRIC, max_size=6))
def test_bundle_round_trip_keeps_every_value(store: Store, other_store: Store, label: str, author: str,
                                             log: str, metrics: list) -> None:
    token = store.save_plan(*sample(), label=label, author=author)
    run = store.create_run(token, "dryrun", "fbgemm", "cpu")
    store.update_run(run, log_append=log, device_info={"note": label})
    store.add_metrics(run, metrics)
    assert [(m.rank, m.name, m.value, m.unit) for m in store.metrics(run)] == metrics
    bundle = store.export_bundle(token)
    assert other_store.import_bundle(bundle) == token
    assert other_store.export_bundle(token) == bundle
    assert store.get_run(run).log == log
