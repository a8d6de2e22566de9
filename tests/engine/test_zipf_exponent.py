"""zipf_exponent, the first per-table constraint declared in engine.fields alone: read, checked, written back,
and used by CPU estimates only (the distinct rows a step touches)."""

from __future__ import annotations

import pytest

import engine
from engine.config import config_to_dict, parse_config
from engine.estimate import table_load
from tests.factories import tutorial


def _with(constraint: dict, table: str = "large_table_0") -> dict:
    raw = tutorial()
    raw.setdefault("constraints", {}).setdefault(table, {}).update(constraint)
    return raw


@pytest.mark.parametrize("extra", [{}, {"ranks": [0, 1]}], ids=["fast path", "checking path"])
def test_parsed_on_both_paths(extra):
    cfg = parse_config(_with({"zipf_exponent": 1.25, **extra}))
    assert cfg.constraint("large_table_0").zipf_exponent == 1.25
    assert cfg.constraint("large_table_1").zipf_exponent == 0.0  # the default: uniform ids
    assert parse_config(_with({"zipf_exponent": 3, **extra})).constraint("large_table_0").zipf_exponent == 3.0


@pytest.mark.parametrize("extra", [{}, {"ranks": [0, 1]}], ids=["fast path", "checking path"])
@pytest.mark.parametrize("value,message", [
    (7, "must be from 0 to 5, got 7"),
    (-0.5, "must be from 0 to 5, got -0.5"),
    ("1.1", "must be a number, got a string"),
    (True, "must be a number, got a boolean"),
])
def test_a_bad_value_is_one_line_naming_the_field_and_its_range(extra, value, message):
    with pytest.raises(engine.ConfigError) as e:
        parse_config(_with({"zipf_exponent": value, **extra}))
    assert str(e.value) == f"constraints.large_table_0.zipf_exponent: {message}"
    assert "\n" not in str(e.value)


def test_round_trips_through_config_to_dict():
    cfg = parse_config(_with({"zipf_exponent": 0.8}))
    out = config_to_dict(cfg)
    assert out["constraints"]["large_table_0"]["zipf_exponent"] == 0.8
    assert parse_config(out) == cfg
    # the default is left out, so configs without the field are written as before
    plain = parse_config(_with({"zipf_exponent": 0}))
    assert "zipf_exponent" not in config_to_dict(plain)["constraints"]["large_table_0"]
    assert config_to_dict(plain) == config_to_dict(parse_config(_with({})))


def test_gpu_estimates_do_not_use_it():
    """TorchRec's GPU formulas have no skew term, and no GPU measurement says what it costs there."""
    skewed, uniform = parse_config(_with({"zipf_exponent": 2.0})), parse_config(tutorial())
    a = engine.plan_to_dict(engine.plan(skewed))
    b = engine.plan_to_dict(engine.plan(uniform))
    a.pop("planning_seconds", None)
    b.pop("planning_seconds", None)
    assert a == b


def test_cpu_estimates_price_the_fewer_rows_skewed_ids_touch():
    def cpu(raw):
        raw["topology"].update(compute_device="cpu", optimizer="adagrad")  # updates each touched row
        return parse_config(raw)

    skewed, uniform = cpu(_with({"zipf_exponent": 2.0})), cpu(tutorial())
    t = skewed.table("large_table_0")
    assert table_load(t, skewed.constraint(t.name), skewed.topology).zipf == 2.0
    from engine.evaluate import evaluate

    plan = engine.plan(uniform).tables
    fast, slow = evaluate(skewed, plan), evaluate(uniform, plan)
    holder = plan["large_table_0"].ranks[0]
    assert fast.ranks[holder].perf.bwd_compute < slow.ranks[holder].perf.bwd_compute
    assert fast.ranks[holder].perf.fwd_compute == pytest.approx(slow.ranks[holder].perf.fwd_compute, rel=1e-9)
