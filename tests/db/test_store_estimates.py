"""The store never trusts a figure it can compute: per-rank estimates are recomputed on save and import, edited
ones refused by name (or replaced on request), and every way the project makes a plan still saves."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import engine
from db import runsink
from db.store import Store, StoreError
from engine.calibrate import apply_calibration
from tests.db.storetest import (
    EXAMPLES,
    IMPOSSIBLE,
    counts,
    impossible_plan,
    load_example,
    measured_plan,
    run_cli,
    sample,
)

COST = r"0\.00\d+"
TAMPERED: dict[str, tuple[Callable[[dict], object], str]] = {
    "every cost 0": (lambda p: [r.update(cost_ms=0) for r in p["ranks"]],
                     rf"ranks\[0\]\.cost_ms: 0 in HOLDER but {COST} recomputed from its config and plan; "),
    "one of two ranks removed": (lambda p: p["ranks"].pop(),
                                 r"ranks: lists 1 ranks but its config has world_size 2 \(rank 1 is missing\)"),
    "a rank added": (lambda p: p["ranks"].append(dict(p["ranks"][1], rank=2)),
                     r"ranks\[2\]: an entry beyond its config's world_size 2"),
    "ranks reordered": (lambda p: p["ranks"].reverse(), r"ranks\[0\]\.rank: is 1; HOLDER must list one entry per "
                        r"rank, in order 0 to 1"),
    "bytes off by one": (lambda p: p["ranks"][1].update(hbm_bytes=p["ranks"][1]["hbm_bytes"] + 1),
                         r"ranks\[1\]\.hbm_bytes: \d+ in HOLDER but \d+ recomputed"),
    "bytes as a float": (lambda p: p["ranks"][0].update(ddr_bytes=0.0),
                         r"ranks\[0\]\.ddr_bytes: 0\.0 in HOLDER but 0 "),
    "bytes past int64": (lambda p: p["ranks"][0].update(hbm_bytes=2**63),
                         r"ranks\[0\]\.hbm_bytes: 9223372036854775808 in HOLDER"),
    "a component edited": (lambda p: p["ranks"][1].update(fwd_comms_ms=p["ranks"][1]["fwd_comms_ms"] * 1.001),
                           r"ranks\[1\]\.fwd_comms_ms: "),
    "a field missing": (lambda p: p["ranks"][1].pop("num_shards"), r"ranks\[1\]\.num_shards: is missing"),
    "an unknown field": (lambda p: p["ranks"][0].update(speedup=2), r"ranks\[0\]\.speedup: unknown field"),
    "max cost edited": (lambda p: p.update(max_rank_cost_ms=0.001), rf"max_rank_cost_ms: 0\.001 in HOLDER but {COST}"),
    "bottleneck off the world": (lambda p: p.update(bottleneck_rank=7), r"bottleneck_rank: 7 in HOLDER but 0"),
    "ranks not a list": (lambda p: p.update(ranks={"0": 1}), r"ranks: must be a list of per-rank estimates"),
}


def _changed(plan: dict, case: str) -> dict:
    out = copy.deepcopy(plan)
    TAMPERED[case][0](out)
    return out


def _message(case: str, field: str, holder: str) -> str:
    return re.escape(field) + "." + TAMPERED[case][1].replace("HOLDER", holder)


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_edited_estimates_are_refused_on_save(store: Store, case: str) -> None:
    cfg, plan = sample()
    store.save_plan(cfg, plan)
    before = counts(store)
    with pytest.raises(StoreError, match=_message(case, "plan", "the plan")) as err:
        store.save_plan(cfg, _changed(plan, case))
    assert "\n" not in str(err.value) and str(err.value).endswith(
        "nothing was saved (save with --recompute to store the recomputed ones)")
    assert counts(store) == before


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_edited_estimates_are_refused_on_import(store: Store, case: str) -> None:
    bundle = store.export_bundle(measured_plan(store))
    bundle["plan"] = _changed(bundle["plan"], case)
    before = counts(store)
    with pytest.raises(StoreError, match=_message(case, "bundle.plan", "the bundle")) as err:
        store.import_bundle(bundle)
    assert "\n" not in str(err.value) and "nothing was imported (import with --recompute" in str(err.value)
    assert counts(store) == before


def test_recompute_stores_the_recomputed_figures(store: Store, new_db_url: Callable[[str], str]) -> None:
    source = Store(new_db_url("sqlite"))
    source.upgrade()
    token = measured_plan(source)
    bundle = source.export_bundle(token)
    bundle["plan"] = _changed(bundle["plan"], "every cost 0")
    bundle["plan"]["ranks"].pop()
    assert store.import_bundle(bundle, recompute=True) == token
    rec = store.get_plan(token)
    assert rec is not None and rec.plan == source.get_plan(token).plan  # the figures the engine computes
    assert rec.max_rank_cost_ms == sample()[1]["max_rank_cost_ms"] > 0
    assert store.export_bundle(token) == source.export_bundle(token)
    assert store.import_bundle(bundle, recompute=True) == token  # again: the same plan, nothing added
    cfg, plan = sample()
    saved = store.save_plan(cfg, _changed(plan, "ranks reordered"), recompute=True)
    assert store.get_plan(saved).plan == plan


def test_figures_within_rounding_are_kept_as_given(store: Store) -> None:
    cfg, plan = sample()
    plan["ranks"][0]["cost_ms"] *= 1 + 1e-12  # summed in another order, as TorchRec's plans list their tables
    plan["bottleneck_rank"] = 1  # the two ranks tie: either is the bottleneck
    rec = store.get_plan(store.save_plan(cfg, plan))
    assert rec is not None and rec.plan == plan  # kept bit for bit: a bundle of it imports back unchanged


def test_a_plan_with_a_cache_load_factor_chosen_from_the_curve_saves(store: Store) -> None:
    """The chosen size travels in the plan file (cache_load_factor): the store's recomputation prices the same
    cache, so the figures agree and the plan comes back as saved."""
    rows = 200_000
    curve = [{"cache_rows": r, "lru_miss_rate": m} for r, m in ((200, 0.6), (12_000, 0.3), (rows, 0.3))]
    cfg = {"tables": [{"name": "big", "num_embeddings": rows, "embedding_dim": 64, "feature_names": ["f0"]}],
           "constraints": {"big": {"workload": {"from": {"file": "ids.parquet", "rows": 1, "modified": "d"},
                                                "miss_ratio_curve": curve}}},
           "topology": {"world_size": 1, "compute_device": "cuda", "hbm_cap": 8_000_000}}
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    assert plan["plan"]["big"]["cache_load_factor"] == 12_000 / rows
    rec = store.get_plan(store.save_plan(cfg, plan))
    assert rec is not None and rec.plan == plan


def test_a_plan_from_before_the_memory_parts_saves_and_gets_them(store: Store) -> None:
    cfg, plan = sample()
    older = copy.deepcopy(plan)
    for r in older["ranks"]:
        for key in [k for k in r if k.startswith("memory_")]:
            del r[key]
    assert any(k.startswith("memory_") for k in plan["ranks"][0])  # what today's plan files carry
    rec = store.get_plan(store.save_plan(cfg, older))
    assert rec is not None and rec.plan["ranks"] == plan["ranks"]  # filled in from the recomputation


def _calibrated(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    cfg["topology"]["compute_device"] = "cuda"
    return apply_calibration(cfg, {"hbm_mem_bw": 1234567.891, "intra_host_bw": 98765.4321, "inter_host_bw": 3333.3})


def _torchrec(cfg: engine.Config) -> engine.Plan:
    compat = pytest.importorskip("engine.torchrec_compat", exc_type=ImportError)
    return compat.torchrec_plan(cfg)


MAKERS: dict[str, Callable[[engine.Config], engine.Plan]] = {
    "searched": lambda c: engine.plan(c, engine.PlannerSettings(effort=2_000)),
    "greedy": lambda c: engine.plan(c, engine.PlannerSettings(search=False)),
    "torchrec baseline": _torchrec,
    "scored placement": lambda c: engine.evaluate(c, engine.plan(c).tables, planner="file"),
}


@pytest.mark.parametrize("maker", sorted(MAKERS))
@pytest.mark.parametrize("config", ["tutorial", "tutorial_row_wise", "calibrated tutorial_table_row_wise",
                                    "calibrated tutorial_column_wise"])
def test_every_way_of_making_a_plan_saves(store: Store, new_db_url: Callable[[str], str], maker: str,
                                          config: str) -> None:
    """What the dashboard saves: the config it planned (engine.config_to_dict) and the plan it got."""
    raw = load_example(config.split()[-1])
    raw = _calibrated(raw) if config.startswith("calibrated") else raw
    cfg = engine.parse_config(raw)
    plan = engine.plan_to_dict(MAKERS[maker](cfg))
    for given in (engine.config_to_dict(cfg), raw):
        token = store.save_plan(given, plan, settings={"calibration": config})
        assert store.get_plan(token).plan == plan
    other = Store(new_db_url("sqlite"))
    other.upgrade()
    assert other.import_bundle(store.export_bundle(token)) == token


def test_a_validation_run_stores_its_plan(store: Store) -> None:
    cfg = engine.parse_config(load_example())
    placed = engine.plan(cfg)
    token = runsink.store_plan(store, cfg, placed.tables, placed, None, "tutorial")
    assert store.get_plan(token).plan == engine.plan_to_dict(placed)


# ---- the command line ------------------------------------------------------------------------------------


def _one_line(r, code: int = 2) -> str:
    assert r.returncode == code, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_cli_refuses_edited_estimates_and_recomputes_on_request(db_url: str, tmp_path: Path) -> None:
    cfg, plan = sample()
    zeroed = tmp_path / "zeroed.plan.json"
    zeroed.write_text(json.dumps(_changed(plan, "every cost 0")))
    config = str(EXAMPLES / "tutorial.json")
    line = _one_line(run_cli(db_url, "save", "--config", config, "--plan", str(zeroed)))
    assert re.match(rf"error: plan\.ranks\[0\]\.cost_ms: 0 in the plan but {COST} recomputed .*; nothing was saved",
                    line)
    r = run_cli(db_url, "save", "--config", config, "--plan", str(zeroed), "--recompute")
    assert r.returncode == 0, r.stderr
    assert "note: stored the estimates recomputed from the config and plan" in r.stdout
    token = r.stdout.splitlines()[-1]
    assert f"max cost     {plan['max_rank_cost_ms']:.4f} ms" in run_cli(db_url, "show", token).stdout

    bundle = Store(db_url).export_bundle(token)
    bundle["plan"] = _changed(bundle["plan"], "one of two ranks removed")
    tampered = tmp_path / "tampered.bundle.json"
    tampered.write_text(json.dumps(bundle))
    before = counts(Store(db_url))
    assert "error: bundle.plan.ranks: lists 1 ranks" in _one_line(run_cli(db_url, "import", str(tampered)))
    assert counts(Store(db_url)) == before
    r = run_cli(db_url, "import", str(tampered), "--recompute")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == token, r.stderr
    assert "note: stored the estimates recomputed" in r.stdout and "bundle.plan.ranks: lists 1 ranks" in r.stdout
    assert counts(Store(db_url)) == before  # the same plan as the one saved: nothing added


@pytest.mark.parametrize("case", IMPOSSIBLE)
def test_cli_refuses_plans_that_cannot_be(db_url: str, tmp_path: Path, case: str) -> None:
    """engine.parse_plan's check, used by save and import alike: one line, nothing written."""
    store = Store(db_url)
    store.upgrade()
    bundle = store.export_bundle(measured_plan(store))
    bundle["plan"] = impossible_plan(case)
    plan_file, bundle_file = tmp_path / "plan.json", tmp_path / "bundle.json"
    plan_file.write_text(json.dumps(bundle["plan"]))
    bundle_file.write_text(json.dumps(bundle))
    before = counts(store)
    saved = _one_line(run_cli(db_url, "save", "--config", str(EXAMPLES / "tutorial.json"), "--plan", str(plan_file)))
    imported = _one_line(run_cli(db_url, "import", str(bundle_file)))
    assert saved.startswith("error: the plan does not match its config: plan.large_table_0."), saved
    assert imported.startswith("error: bundle.plan.plan.large_table_0."), imported
    assert counts(store) == before
