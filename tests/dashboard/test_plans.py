"""One shape for a plan above the engine: a plan dict read back as engine.Plan with its own figures, the typed
results shared (never copied) by the caches, the table-by-rank matrix read-only."""

from __future__ import annotations

import json

import numpy as np
import pytest

import engine
from dashboard.plans import table_matrix
from dashboard.ui import services
from tests.factories import tutorial


def test_a_plan_file_reads_back_as_the_same_plan():
    cfg = engine.parse_config(tutorial())
    plan = engine.plan(cfg)
    data = json.loads(json.dumps(engine.plan_to_dict(plan)))
    again = engine.read_plan_file(data, cfg)
    assert again == plan and engine.plan_to_dict(again) == data
    old = dict(data, ranks=[{k: v for k, v in r.items() if not k.startswith("memory_")} for r in data["ranks"]])
    assert all(r.memory is None for r in engine.read_plan_file(old, cfg).ranks)  # files made before the parts
    with pytest.raises(engine.ConfigError):
        engine.read_plan_file({**data, "plan": {}}, cfg)


def test_plan_results_are_shared_not_copied():
    key = json.dumps(tutorial(), sort_keys=True, separators=(",", ":"))
    first = services.plan_config(key, services.OURS, 0)
    assert services.plan_config(key, services.OURS, 0) is first
    assert isinstance(first.plan, engine.Plan) and isinstance(first.config, engine.Config)
    assert first.plan_dict is first.plan_dict and first.plan_dict == engine.plan_to_dict(first.plan)
    assert first.config_dict == engine.config_to_dict(first.config)


def test_the_matrix_is_kept_per_plan_object_and_read_only():
    cfg = engine.parse_config(tutorial())
    plan = engine.plan(cfg)
    m = services.table_rank_matrix(plan, cfg)
    assert services.table_rank_matrix(plan, cfg) is m
    with pytest.raises(ValueError):
        m.values["cost_ms"][0, 0] = 1.0
    twin = engine.read_plan_file(engine.plan_to_dict(plan), cfg)  # equal, another object: computed for it
    other = services.table_rank_matrix(twin, cfg)
    assert other is not m and np.array_equal(other.values["cost_ms"], m.values["cost_ms"])
    assert table_matrix.table_rank_matrix(plan, cfg).tables == m.tables


def test_the_identity_cache_is_bounded():
    cache = services._ByIdentity(2)
    objs = [object() for _ in range(3)]
    calls = []
    for o in objs + objs[-1:]:
        cache.get((o,), lambda o=o: calls.append(o) or len(calls))
    assert calls == objs and len(cache._lru) == 2
    cache.get((objs[0],), lambda: calls.append("again"))
    assert calls[-1] == "again"  # the oldest was dropped
