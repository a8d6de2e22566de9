"""Placement rules (issue 13): pin a table to ranks or hosts, co-locate tables, keep tables apart. The planner
(greedy pass, local search, ruin and recreate) keeps them; rules that cannot hold are refused before planning,
naming the table; a plan file that breaks one is refused in one line; tables without rules plan as before."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from bench.suite import synthetic
from engine.planfile import placement_problem
from engine.planner import PlannerSettings

ROOT = Path(__file__).resolve().parents[2]


def tables(n: int, rows: int = 200_000, dim: int = 64) -> list[dict]:
    return [{"name": f"t{i}", "num_embeddings": rows + 1000 * i, "embedding_dim": dim} for i in range(n)]


def config(constraints: dict, n: int = 12, world: int = 8, local: int = 4, **topo) -> dict:
    return {"tables": tables(n), "constraints": constraints,
            "topology": {"world_size": world, "local_world_size": local, **topo}}


def ranks_of(plan: engine.Plan, name: str) -> set[int]:
    return set(plan.tables[name].ranks)


def test_pins_colocation_and_apart_hold_through_the_search() -> None:
    rules = {"t0": {"ranks": [5]}, "t1": {"ranks": [2, 3], "sharding_types": ["column_wise"], "min_partition": 16},
             "t2": {"hosts": [1]}, "t3": {"colocate": ["t4", "t5"]}, "t6": {"apart": ["t7", "t8"]},
             "t7": {"apart": ["t8"]}}
    plan = engine.plan(engine.parse_config(config(rules)), PlannerSettings(effort=20_000))
    assert ranks_of(plan, "t0") == {5}
    assert ranks_of(plan, "t1") <= {2, 3} and plan.tables["t1"].sharding_type.value == "column_wise"
    assert ranks_of(plan, "t2") <= {4, 5, 6, 7}
    assert ranks_of(plan, "t3") == ranks_of(plan, "t4") == ranks_of(plan, "t5")
    assert not (ranks_of(plan, "t6") & ranks_of(plan, "t7") or ranks_of(plan, "t6") & ranks_of(plan, "t8")
                or ranks_of(plan, "t7") & ranks_of(plan, "t8"))
    assert placement_problem(engine.parse_config(config(rules)), plan.tables) is None


def test_random_rules_are_kept_or_refused_never_broken() -> None:
    """Seeded random rules on a bench case: every plan keeps them, or planning says which table it could not
    place; never a plan that breaks one."""
    raw = synthetic(60, 8, seed=3)
    names = [t["name"] for t in raw["tables"]]
    planned = refused = 0
    for seed in range(12):
        rnd = random.Random(seed)
        cfg = copy.deepcopy(raw)
        cons = cfg.setdefault("constraints", {})
        picks = rnd.sample(names, 9)
        cons.setdefault(picks[0], {})["ranks"] = sorted(rnd.sample(range(8), rnd.randint(1, 3)))
        cons.setdefault(picks[1], {})["hosts"] = [0]
        cons.setdefault(picks[2], {})["colocate"] = [picks[3]]
        cons.setdefault(picks[4], {})["apart"] = [picks[5], picks[6]]
        cons.setdefault(picks[7], {})["colocate"] = [picks[8]]
        cons[picks[7]]["ranks"] = [rnd.randrange(8)]
        cfg["topology"]["local_world_size"] = 4
        parsed = engine.parse_config(cfg)
        try:
            plan = engine.plan(parsed, PlannerSettings(effort=5_000, seed=seed))
        except engine.PlanningError as e:
            assert "placement rules" in str(e) or "keeps constraints." in str(e), str(e)
            refused += 1
            continue
        planned += 1
        assert placement_problem(parsed, plan.tables) is None, seed
    assert planned >= 8  # most random rule sets can be kept


@pytest.mark.parametrize("rules, message", [
    ({"t0": {"ranks": [8]}}, "constraints.t0.ranks: rank 8 is outside world_size 8"),
    ({"t0": {"hosts": [2]}}, "constraints.t0.hosts: host 2 does not exist: 2 host(s) of 4 ranks"),
    ({"t0": {"colocate": ["t0"]}}, "constraints.t0.colocate: names the table itself"),
    ({"t0": {"apart": ["nope"]}}, "constraints.t0.apart: no table named 'nope'"),
    ({"t0": {"colocate": ["t1"]}, "t2": {"colocate": ["t1"], "apart": ["t0"]}},
     "constraints.t2.apart: 't0' is also co-located with 't2'"),
    ({"t0": {"ranks": [0], "colocate": ["t1"]}, "t1": {"ranks": [1]}},
     "leaves no rank that its co-located tables may use too"),
    ({"t0": {"ranks": [0, 1], "sharding_types": ["row_wise", "data_parallel"]}},
     "constraints.t0.sharding_types: allows only sharding types that put a piece on every rank"),
])
def test_rules_that_cannot_hold_are_refused_before_planning(tmp_path: Path, rules: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(rules)))
    out = subprocess.run([sys.executable, "-m", "engine", "plan", str(path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_a_pin_without_room_names_the_table() -> None:
    pinned = {"ranks": [1], "sharding_types": ["table_wise"]}  # three 51 MB tables where two fit
    cfg = config({"t1": pinned, "t2": pinned, "t3": pinned}, n=4, world=2, local=2, hbm_cap=150_000_000,
                 ddr_cap=0)
    with pytest.raises(engine.PlanningError, match=r"'(t[123])' cannot be placed within the placement rules "
                                                   r"that bind it \(constraints\.\1\.ranks"):
        engine.plan(engine.parse_config(cfg))


@pytest.mark.parametrize("kind", ["data_parallel", "row_wise"])
def test_a_table_kept_apart_by_another_names_the_other_tables_rule(tmp_path: Path, kind: str) -> None:
    """t1 kept apart from t0 may only be data_parallel or row_wise (a piece on every rank): t0 has no rank left.
    The refusal named t0's own rules, which it has none of (`constraints.t0: , or ...`); it names t1's apart."""
    (tmp_path / "cfg.json").write_text(json.dumps(config({"t1": {"apart": ["t0"], "sharding_types": [kind]}},
                                                         n=2, world=2, local=2)))
    out = subprocess.run([sys.executable, "-m", "engine", "plan", str(tmp_path / "cfg.json")], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "'t0' cannot be placed within the placement rules that bind it (constraints.t1.apart, or" in out.stderr


def test_a_plan_file_that_breaks_a_rule_is_refused(tmp_path: Path) -> None:
    free = config({}, n=4, world=2, local=2)
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(free)))
    on = plan["plan"]["t0"]["ranks"][0]
    pinned = copy.deepcopy(free)
    pinned["constraints"] = {"t0": {"ranks": [1 - on]}}
    (tmp_path / "c.json").write_text(json.dumps(pinned))
    (tmp_path / "p.json").write_text(json.dumps(plan))
    out = subprocess.run([sys.executable, "-m", "engine", "estimate", str(tmp_path / "c.json"), "--plan",
                          str(tmp_path / "p.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"error: constraints.t0.ranks: table 't0' has a piece on rank {on}, which its "
                                  f"ranks do not allow (ranks {1 - on})")


def test_rules_survive_the_config_round_trip_and_leave_other_plans_alone() -> None:
    rules = {"t0": {"ranks": [3, 1, 1]}, "t1": {"colocate": ["t2"], "apart": ["t3"]}}
    parsed = engine.parse_config(config(rules))
    back = engine.config_to_dict(parsed)["constraints"]
    assert back == {"t0": {"ranks": [1, 3]}, "t1": {"colocate": ["t2"], "apart": ["t3"]}}
    assert engine.parse_config(engine.config_to_dict(parsed)) == parsed
    free = engine.parse_config(config({}))
    assert engine.plan_to_dict(engine.plan(free)) | {"planning_seconds": 0} == \
        engine.plan_to_dict(engine.plan(free)) | {"planning_seconds": 0}


def test_threads_planning_configs_with_different_rules_keep_their_own() -> None:
    """The dashboard's sessions plan in threads at once: each plan keeps its own config's rules."""
    from concurrent.futures import ThreadPoolExecutor

    a = engine.parse_config(config({"t0": {"ranks": [0]}, "t1": {"ranks": [1]}}, n=8, world=4, local=4))
    b = engine.parse_config(config({"t0": {"ranks": [3]}, "t1": {"ranks": [2]}}, n=8, world=4, local=4))

    def run(cfg):
        plan = engine.plan(cfg, PlannerSettings(effort=500))
        return placement_problem(cfg, plan.tables)

    with ThreadPoolExecutor(4) as pool:
        problems = list(pool.map(run, [a, b] * 10))
    assert problems == [None] * 20
