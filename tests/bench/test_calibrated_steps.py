"""bench.calibrated_steps: validation runs of a config's plans recorded in a database of its own, a profile
calibrated from them, and the config and a held-out one planned with it and their tables measured (real torchrun
and DMP processes, gloo on CPU)."""

import json

import pytest

import engine
from bench import calibrated_steps as cs
from bench.measured import same_sharding
from tests.factories import tutorial, write


def test_variants_hold_every_table_to_their_sharding_types():
    raw = tutorial("table_wise")
    mix = cs.held_config(raw, "mix")
    types = [mix["constraints"][t["name"]]["sharding_types"] for t in raw["tables"]]
    assert types == [["table_wise"], ["column_wise"], ["table_wise"], ["column_wise"]]
    assert mix["constraints"]["large_table_1"]["min_partition"] == 32  # 64 wide: two pieces
    assert "min_partition" not in mix["constraints"]["large_table_0"] and "constraints" in raw
    cfg = engine.parse_config(cs.held_config(raw, "cw"))
    assert {tp.sharding_type for tp in engine.plan(cfg).tables.values()} == {engine.ShardingType.COLUMN_WISE}


def test_the_tutorial_is_calibrated_measured_and_planned(tmp_path, capsys):
    raw = tutorial("table_wise")
    raw["topology"]["compute_device"] = "cpu"
    raw["constraints"] = {}  # our planner free to choose
    cfg = engine.parse_config(raw)
    config = write(tmp_path, engine.config_to_dict(cfg))
    base = write(tmp_path, engine.plan_to_dict(engine.plan(cfg)), "base.json")
    other = dict(raw, topology=dict(raw["topology"], batch_size=256))
    other_cfg = engine.parse_config(other)
    other_path = write(tmp_path, engine.config_to_dict(other_cfg), "other.json")
    other_base = write(tmp_path, engine.plan_to_dict(engine.plan(other_cfg)), "other_base.json")
    out = tmp_path / "report.md"
    assert cs.main([str(config), str(base), "--held-out", str(other_path), str(other_base), "--runs", "1",
                    "--variants", "tw,cw", "--rounds", "1", "--iters", "2", "--workdir", str(tmp_path / "w"),
                    "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Calibrated from 4 validation runs of ") and out.read_text().startswith(text[:200])
    r = json.loads(out.with_suffix(".json").read_text())
    assert [x["plan"] for x in r["runs"]] == ["torchrec", "ours", "tw", "cw"]
    assert all(x["step_ms"] > 0 and len(x["embedding_ms"]) == 2 for x in r["runs"])
    assert r["runs"][3]["pieces"] > r["runs"][2]["pieces"]  # column_wise split the tables
    assert [x["held_out"] for x in r["results"]] == [False, True]
    for x in r["results"]:
        gain = 1 - x["estimated_ours_ms"] / x["estimated_torchrec_ms"]
        assert x["kept"] or gain > r["min_gain"]  # ours only where estimated faster by more than the guard
        assert ("steps" in x) == (not x["kept"])  # a different plan is judged in real steps
    assert "| config.json | no |" in text and "| other.json | yes |" in text


def test_bad_arguments_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cs.main([])
    assert e.value.code == 2 and "give CONFIG.json and TORCHREC.json, or --cases" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cs.main(["--cases", "no-such-config", "--workdir", str(tmp_path)])
    assert "--cases: no config 'no-such-config' in bench.measured (m0-2r-sgd-uniform, " in str(e.value.code)
    with pytest.raises(SystemExit) as e:
        cs.main(["--cases", "m", "--workdir", str(tmp_path)])  # a prefix of none, or of several
    with pytest.raises(SystemExit) as e:
        cs.main(["a.json", "b.json", "--variants", "tw,diagonal"])
    assert e.value.code == 2 and "--variants: 'diagonal' is not one of tw, cw, twcw, mix" in capsys.readouterr().err


def test_plans_are_the_same_when_every_table_is_placed_alike():
    cfg = engine.parse_config(tutorial("table_wise"))
    a = engine.plan_to_dict(engine.plan(cfg))
    assert same_sharding(a, json.loads(json.dumps(a)))
    moved = json.loads(json.dumps(a))
    t = next(iter(moved["plan"].values()))
    t["ranks"], t["shards"][0]["rank"] = [1 - t["ranks"][0]], 1 - t["shards"][0]["rank"]
    assert not same_sharding(a, moved)
    dp = json.loads(json.dumps(a))
    for t in dp["plan"].values():  # data_parallel: a replica on every rank, no shards
        t.update(sharding_type="data_parallel", ranks=[0, 1], shards=None)
    assert same_sharding(dp, json.loads(json.dumps(dp))) and not same_sharding(a, dp)
