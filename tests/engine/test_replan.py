"""Re-plan from an earlier plan (`python -m engine replan CONFIG --from PLAN`): bytes moved counted region by
region, tables kept where they were, the byte limit honoured, checkpoint breaks flagged, bad input in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from bench.replan import grow
from bench.suite import criteo_1tb, synthetic
from engine.replan import checkpoint_breaks, moved_bytes, read_old_plan, replan
from engine.types import ComputeKernel, Shard, ShardingType, TablePlan

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "examples" / "tutorial.json"
TW, CW, DP, RW = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.DATA_PARALLEL,
                  ShardingType.ROW_WISE)
FUSED = ComputeKernel.FUSED


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def one_table(rows: int = 1000, dim: int = 64, world: int = 2, optimizer: str = "sgd") -> engine.Config:
    return engine.parse_config({"tables": [{"name": "t", "num_embeddings": rows, "embedding_dim": dim}],
                                "topology": {"world_size": world, "optimizer": optimizer}})


def old_of(tp: TablePlan) -> dict:
    return read_old_plan({"plan": {"t": {"sharding_type": tp.sharding_type.value,
                                         "compute_kernel": tp.compute_kernel.value, "ranks": list(tp.ranks),
                                         "shards": None if tp.shards is None else [
                                             {"offsets": list(s.offsets), "sizes": list(s.sizes), "rank": s.rank}
                                             for s in tp.shards]}}})


def tw(rank: int, rows: int = 1000, dim: int = 64) -> TablePlan:
    return TablePlan(TW, FUSED, (rank,), (Shard((0, 0), (rows, dim), rank),))


def test_bytes_moved_region_by_region() -> None:
    cfg = one_table()
    assert moved_bytes(cfg, old_of(tw(0)), {"t": tw(0)}).total_bytes == 0
    m = moved_bytes(cfg, old_of(tw(0)), {"t": tw(1)})  # the whole table, weights only under sgd
    assert m.total_bytes == 1000 * 64 * 4 and m.by_pair == {(0, 1): 1000 * 64 * 4} and m.by_table == {"t": 256000}
    adam = one_table(optimizer="adam")  # two moments per weight travel with it
    assert moved_bytes(adam, old_of(tw(0)), {"t": tw(1)}).total_bytes == 3 * 1000 * 64 * 4
    grown = one_table(rows=2000)  # new rows are new: a grown table that stays moves nothing
    assert moved_bytes(grown, old_of(tw(0)), {"t": tw(0, rows=2000)}).total_bytes == 0
    assert moved_bytes(grown, old_of(tw(0)), {"t": tw(1, rows=2000)}).total_bytes == 1000 * 64 * 4
    cw = TablePlan(CW, FUSED, (0, 1), (Shard((0, 0), (1000, 32), 0), Shard((0, 32), (1000, 32), 1)))
    assert moved_bytes(cfg, old_of(tw(0)), {"t": cw}).by_pair == {(0, 1): 1000 * 32 * 4}  # half stays
    dp = TablePlan(DP, FUSED, (0, 1), None)
    assert moved_bytes(cfg, old_of(dp), {"t": cw}).total_bytes == 0  # every rank had all of it
    assert moved_bytes(cfg, old_of(cw), {"t": dp}).by_pair == {(0, 1): 1000 * 32 * 4, (1, 0): 1000 * 32 * 4}
    rw = TablePlan(RW, FUSED, (0, 1), (Shard((0, 0), (500, 64), 0), Shard((500, 0), (500, 64), 1)))
    rw_swapped = TablePlan(RW, FUSED, (1, 0), (Shard((0, 0), (500, 64), 1), Shard((500, 0), (500, 64), 0)))
    assert moved_bytes(cfg, old_of(rw), {"t": rw_swapped}).total_bytes == 1000 * 64 * 4


def test_checkpoint_breaks_are_named() -> None:
    cfg = one_table()
    cw = TablePlan(CW, FUSED, (0, 1), (Shard((0, 0), (1000, 32), 0), Shard((0, 32), (1000, 32), 1)))
    breaks = checkpoint_breaks(cfg, old_of(TablePlan(DP, FUSED, (0, 1), None)), {"t": cw})
    assert "data-parallel and sharded tables keep optimizer state differently" in breaks["t"]
    assert "sharding type table_wise -> column_wise" in checkpoint_breaks(cfg, old_of(tw(0)), {"t": cw})["t"]
    assert checkpoint_breaks(cfg, old_of(tw(0)), {"t": tw(1)}) == {}


def test_grown_tables_move_a_fraction_of_what_a_plan_from_scratch_moves() -> None:
    """Issue 13's target on a bench case: 10% of the tables grown 2x; the re-plan moves at most 20% of the bytes
    a plan from scratch moves, at a slowest rank within 5% of it."""
    raw = engine.config_to_dict(engine.parse_config(synthetic(200, 8, seed=0)))
    old = read_old_plan(engine.plan_to_dict(engine.plan(engine.parse_config(raw))))
    r = replan(engine.parse_config(grow(raw)), old)
    assert 0 < r.moves.total_bytes <= 0.2 * r.scratch_moves.total_bytes
    assert r.plan.max_rank_cost_ms <= 1.05 * r.scratch.max_rank_cost_ms
    assert r.kept is not None and r.plan.max_rank_cost_ms <= r.kept.max_rank_cost_ms
    assert len(r.kept_tables) >= 150 and not r.new_tables
    assert r.plan.notes[0].startswith("re-planned from the earlier plan")


def test_a_grown_table_re_splits_around_its_old_shards_instead_of_pushing_others_off() -> None:
    """criteo-1tb on 8 ranks, cat_0 (40M rows, column-wise on two ranks) grown 2x: kept where it was it crowds out
    the column-wise shards beside it (35% of the bytes a plan from scratch moves, before the second attempt);
    re-split into four column shards, two stay home and only its other half moves."""
    raw = engine.config_to_dict(engine.parse_config(criteo_1tb(8)))
    old = read_old_plan(engine.plan_to_dict(engine.plan(engine.parse_config(raw))))
    r = replan(engine.parse_config(grow(raw)), old)
    assert 0 < r.moves.total_bytes <= 0.2 * r.scratch_moves.total_bytes
    assert r.plan.max_rank_cost_ms <= 1.05 * r.scratch.max_rank_cost_ms
    grown = r.plan.tables["cat_0"]
    old_ranks = {s[4] for s in old["cat_0"].shards}
    assert len(grown.shards) > len(old["cat_0"].shards)  # re-split
    assert old_ranks <= {s.rank for s in grown.shards}  # its old ranks keep part of it
    assert set(r.moves.by_table) - {"cat_0"} <= {t for t, b in r.moves.by_table.items() if b < 2**20}


def test_the_byte_limit_holds(tmp_path: Path) -> None:
    raw = engine.config_to_dict(engine.parse_config(synthetic(100, 16, seed=1)))
    cfg0 = engine.parse_config(raw)
    old_path = tmp_path / "old.json"
    old_path.write_text(json.dumps(engine.plan_to_dict(engine.plan(cfg0))))
    new_path = tmp_path / "new.json"
    new = grow(raw, 0.2)
    new["tables"].append({"name": "added", "num_embeddings": 50_000, "embedding_dim": 128,
                          "feature_names": ["added_f"]})
    new_path.write_text(json.dumps(new))
    free = json.loads(cli("replan", str(new_path), "--from", str(old_path), "--json").stdout)["replan"]
    assert free["new_tables"] == ["added"]
    assert free["kept_moved_bytes"] is not None  # the earlier placement leaves room for the changes
    limit = free["kept_moved_bytes"]  # what keeping the earlier layout moves: the least a re-plan may be allowed
    out = cli("replan", str(new_path), "--from", str(old_path), "--max-move-bytes", str(limit), "--json")
    assert out.returncode == 0, out.stderr
    bounded = json.loads(out.stdout)
    assert bounded["replan"]["moved_bytes"] <= limit and bounded["replan"]["max_move_bytes"] == limit
    assert sum(p["bytes"] for p in bounded["replan"]["moved_by_pair"]) == bounded["replan"]["moved_bytes"]
    if limit > 0:  # the refusal names the least limit that works (grown tables placed near home may need less)
        refused = cli("replan", str(new_path), "--from", str(old_path), "--max-move-bytes", "0")
        assert refused.returncode == 2 and "more than --max-move-bytes" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        least = int(re.search(r"allow at least ([\d,]+) bytes", refused.stderr).group(1).replace(",", ""))
        assert 0 < least <= limit
        assert cli("replan", str(new_path), "--from", str(old_path), "--max-move-bytes", str(least)).returncode == 0
        assert cli("replan", str(new_path), "--from", str(old_path), "--max-move-bytes",
                   str(least - 1)).returncode == 2


def test_replan_from_a_saved_plan_by_its_token(tmp_path: Path) -> None:
    """A plan saved in the store (real SQLite file, real `python -m db` processes) is re-planned from its token:
    `db export TOKEN --out FILE`, then `engine replan --from FILE`; the same figures as from the plan file."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'store.sqlite'}"}
    raw = engine.config_to_dict(engine.parse_config(synthetic(60, 8, seed=2)))
    (tmp_path / "old.json").write_text(json.dumps(raw))
    (tmp_path / "new.json").write_text(json.dumps(grow(raw)))
    assert cli("plan", str(tmp_path / "old.json"), "--out", str(tmp_path / "plan.json")).returncode == 0

    def db(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "db", *args], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=300)

    saved = db("save", "--config", str(tmp_path / "old.json"), "--plan", str(tmp_path / "plan.json"))
    assert saved.returncode == 0, saved.stderr
    token = saved.stdout.strip().splitlines()[-1]
    assert db("export", token, "--out", str(tmp_path / "bundle.json")).returncode == 0
    by_token = json.loads(cli("replan", str(tmp_path / "new.json"), "--from", str(tmp_path / "bundle.json"),
                              "--json").stdout)
    by_file = json.loads(cli("replan", str(tmp_path / "new.json"), "--from", str(tmp_path / "plan.json"),
                             "--json").stdout)
    assert by_token["replan"] == by_file["replan"] and by_token["replan"]["kept_tables"] > 0
    assert by_token["plan"]["plan"] == by_file["plan"]["plan"]  # (planning_seconds is the only other difference)


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text(TUTORIAL.read_text()), "--from: is a config, not a plan"),
    (lambda p: p.write_text("{\"plan\": {\"t\": 3}}"), "--from.plan.t: must be an object"),
    (lambda p: p.write_text("[1, 2"), "is not valid JSON"),
    (lambda p: None, "does not exist"),
])
def test_bad_earlier_plans_get_one_line(tmp_path: Path, make, message: str) -> None:
    path = tmp_path / "old.json"
    make(path)
    out = cli("replan", str(TUTORIAL), "--from", str(path))
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def _tutorial_plan_with(tmp_path: Path, change) -> Path:
    """The tutorial's own plan file with one table's entry changed by `change`, written to old.json."""
    data = json.loads(cli("plan", str(TUTORIAL), "--json").stdout)
    change(data["plan"]["large_table_0"])
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    return path


def _shard0(key: str, value):
    return lambda t: t["shards"][0].__setitem__(key, value)


@pytest.mark.parametrize("change, field", [
    (_shard0("rank", 2**62), "--from.plan.large_table_0.shards[0].rank: rank 4,611,686,018,427,387,904 is outside"),
    (_shard0("offsets", [2**63, 0]), "--from.plan.large_table_0.shards[0].offsets[0]: must be from 0 to"),
    (_shard0("sizes", [2**63, 64]), "--from.plan.large_table_0.shards[0].sizes[0]: must be from 0 to"),
    (lambda t: t.update(sharding_type="data_parallel", compute_kernel="dense", shards=None, ranks=[2**62]),
     "--from.plan.large_table_0.ranks[0]: must be from 0 to 16,383"),
])
def test_earlier_plans_with_numbers_out_of_bounds_get_one_line(tmp_path: Path, change, field: str) -> None:
    """Ranks >= 2**62 and offsets or sizes >= 2**63 crashed the re-plan (IndexError, OverflowError): the plan
    file reader bounds them as it bounds every plan's."""
    out = cli("replan", str(TUTORIAL), "--from", str(_tutorial_plan_with(tmp_path, change)))
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and f"error: {field}" in out.stderr, out.stderr


def test_a_shard_outside_the_world_is_placed_again_whatever_the_ranks_list_says(tmp_path: Path) -> None:
    """A shard's rank, not the file's `ranks` list, says where it was (as `estimate` reads plans): a shard on rank
    5 of a 2-rank world, listed as on rank 0, is placed again inside the world (it raised IndexError)."""
    def moved_out(t: dict) -> None:
        t["shards"][0]["rank"], t["ranks"] = 5, [0]

    out = cli("replan", str(TUTORIAL), "--from", str(_tutorial_plan_with(tmp_path, moved_out)), "--json")
    assert out.returncode == 0, out.stderr
    placed = json.loads(out.stdout)["plan"]["plan"]["large_table_0"]
    assert placed["shards"][0]["rank"] in (0, 1)


def test_a_plan_with_empty_row_split_shards_is_an_earlier_plan(tmp_path: Path) -> None:
    """The planner's own plan of a row split with more ranks than rows ends in empty shards ([0, cols]); --from
    refused it ("must be a whole number >= 1"), the plan file reader takes it as `estimate` does."""
    cfg = {"tables": [{"name": "tiny", "num_embeddings": 2, "embedding_dim": 8},
                      {"name": "big", "num_embeddings": 100_000, "embedding_dim": 64}],
           "constraints": {"tiny": {"sharding_types": ["row_wise"]}}, "topology": {"world_size": 4}}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    assert cli("plan", str(tmp_path / "cfg.json"), "--out", str(tmp_path / "plan.json")).returncode == 0
    assert [0, 8] in [s["sizes"] for s in json.loads((tmp_path / "plan.json").read_text())["plan"]["tiny"]["shards"]]
    out = cli("replan", str(tmp_path / "cfg.json"), "--from", str(tmp_path / "plan.json"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["replan"]["moved_bytes"] == 0


@pytest.mark.parametrize("value, shown", [("1" + "0" * 400, "'100000000000'... (401 characters)"), ("-1", "'-1'"),
                                          (str(2**63), repr(str(2**63)))])
def test_max_move_bytes_is_bounded(tmp_path: Path, value: str, shown: str) -> None:
    """--max-move-bytes 1 followed by 400 zeros raised OverflowError; it is bounded like every other number."""
    old = _tutorial_plan_with(tmp_path, lambda t: None)
    out = cli("replan", str(TUTORIAL), "--from", str(old), "--max-move-bytes", value)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--max-move-bytes: must be from 0 to 9,223,372,036,854,775,807 bytes, got " + shown in out.stderr


def test_replan_refuses_a_byte_limit_out_of_bounds() -> None:
    """The engine's own door (the What-if page calls it) bounds the limit too, naming it."""
    with pytest.raises(engine.ConfigError, match="max_move_bytes: must be from 0 to"):
        replan(one_table(), old_of(tw(0)), 10**400)


def test_a_replan_cut_by_the_safety_stop_says_so() -> None:
    """The wall-clock safety stop is honest in a re-plan too: its note says the search was cut and when."""
    raw = engine.config_to_dict(engine.parse_config(synthetic(200, 8, seed=0)))
    old = read_old_plan(engine.plan_to_dict(engine.plan(engine.parse_config(raw))))
    r = replan(engine.parse_config(grow(raw)), old, settings=engine.PlannerSettings(time_budget_s=1e-6))
    assert r.plan.notes[0].startswith("re-planned from the earlier plan")
    assert any(n.startswith("the re-plan's search stopped at the wall-clock safety stop (1e-06 s), found passed")
               for n in r.plan.notes), r.plan.notes
    unhurried = replan(engine.parse_config(grow(raw)), old)
    assert not any("safety stop" in n for n in unhurried.plan.notes)


def _no_seconds(p: engine.Plan) -> str:
    d = engine.plan_to_dict(p)
    d.pop("planning_seconds")
    return json.dumps(d, sort_keys=True)


def test_an_interactive_replan_after_a_small_edit_moves_nothing_and_plans_nothing_from_scratch() -> None:
    """The working view's re-plan (compare=False): no plan from scratch is made, an edit that made no rank slower
    keeps every table where it was, and the same config and earlier plan give the same plan."""
    raw = synthetic(60, 8, seed=3)
    first = engine.plan(engine.parse_config(raw))
    old = read_old_plan(engine.plan_to_dict(first))
    edited = json.loads(json.dumps(raw))
    edited["constraints"]["t5"]["pooling_factors"] = [0.5]  # lighter: no rank gets slower
    cfg = engine.parse_config(edited)
    runs = [replan(cfg, old, compare=False, earlier_step_ms=first.max_rank_cost_ms) for _ in range(2)]
    r = runs[0]
    assert r.scratch is None and r.scratch_moves is None and r.kept is None
    assert r.moves.total_bytes == 0 and r.moved_tables == () and len(r.kept_tables) == 60
    assert r.plan.max_rank_cost_ms <= first.max_rank_cost_ms * (1 + 1e-9)
    assert _no_seconds(runs[0].plan) == _no_seconds(runs[1].plan)
    s = r.summary()
    assert s["scratch_step_ms"] is None and s["scratch_moved_bytes"] is None and s["moved_bytes"] == 0


def test_an_interactive_replan_buys_back_a_slower_rank_with_few_moves() -> None:
    """An edit that makes the slowest rank much slower: the re-plan moves a few tables to bring it back near the
    earlier plan's slowest rank, far fewer than a plan from scratch moves, and the plan stays valid."""
    raw = synthetic(60, 8, seed=3)
    first = engine.plan(engine.parse_config(raw))
    old = read_old_plan(engine.plan_to_dict(first))
    slowest = first.bottleneck_rank
    on_it = sorted(n for n, tp in first.tables.items() if tp.ranks == (slowest,))
    edited = json.loads(json.dumps(raw))
    edited["constraints"][on_it[0]]["pooling_factors"] = [
        edited["constraints"][on_it[0]]["pooling_factors"][0] * 8]  # its table's load 8x: no move helps, a split does
    cfg = engine.parse_config(edited)
    kept = replan(cfg, old, compare=False, earlier_step_ms=float("inf"))  # no target: nothing bought back
    r = replan(cfg, old, compare=False, earlier_step_ms=first.max_rank_cost_ms)
    scratch = engine.plan(cfg)
    assert kept.moved_tables == ()
    assert r.plan.max_rank_cost_ms < kept.plan.max_rank_cost_ms
    assert 0 < len(r.moved_tables) < len(moved_bytes(cfg, old, scratch.tables).by_table)
    assert r.plan.max_rank_cost_ms <= scratch.max_rank_cost_ms * 1.05
    assert set(r.plan.tables) == {t.name for t in cfg.tables}
    assert r.plan.lower_bound_ms == scratch.lower_bound_ms  # the planner's bound, with no plan from scratch made
