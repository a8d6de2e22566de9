"""The cache load factor chosen from a measured miss curve, end to end: a seeded sample, `stats --apply`, a plan.

The topology holds a quarter of the table's weights in HBM at most: the table does not fit, a cache of 20% of its
rows (the default load factor) does not either, but a Zipf(1.05) table's hot rows do."""

from __future__ import annotations

import copy
import json

import pytest

from engine.cachecurve import curve_clfs, miss_rate
from engine.cli import main
from engine.config import load_config, parse_config
from engine.enumerate import table_options
from engine.estimate import table_load
from engine.evaluate import evaluate
from engine.planfile import plan_to_dict, read_plan_file
from engine.planner import plan
from engine.stats.generate import to_bytes
from engine.types import ComputeKernel, TablePlan

ROWS, DIM = 200_000, 64
CONFIG = {"tables": [{"name": "big", "num_embeddings": ROWS, "embedding_dim": DIM, "feature_names": ["f0"]}],
          "topology": {"world_size": 1, "compute_device": "cuda", "hbm_cap": 8_000_000, "batch_size": 512}}
CACHING = ComputeKernel.FUSED_UVM_CACHING


def measured(tmp_path_factory, zipf: float) -> dict:
    """The config as `python -m engine stats --apply` writes it for a seeded sample drawn Zipf(zipf)."""
    d = tmp_path_factory.mktemp(f"zipf{zipf}")
    (d / "config.json").write_text(json.dumps(CONFIG))
    cfg = load_config(d / "config.json")
    (d / "ids.parquet").write_bytes(to_bytes(cfg, 40_000, 3, "parquet", zipf=zipf))
    assert main(["stats", str(d / "config.json"), str(d / "ids.parquet"), "--apply", str(d / "applied.json")]) == 0
    return json.loads((d / "applied.json").read_text())


@pytest.fixture(scope="module")
def zipf(tmp_path_factory):
    return measured(tmp_path_factory, 1.05)


@pytest.fixture(scope="module")
def uniform(tmp_path_factory):
    return measured(tmp_path_factory, 0.0)


def planned(data: dict, **constraints):
    data = copy.deepcopy(data)
    data["constraints"]["big"].update(constraints)
    cfg = parse_config(data)
    return cfg, plan(cfg)


def test_the_table_does_not_fit_nor_does_the_default_cache(zipf):
    cfg = parse_config(zipf)
    usable = cfg.topology.usable_hbm_bytes
    assert cfg.tables[0].weight_bytes > usable
    fixed = parse_config({**zipf, "constraints": {"big": {**zipf["constraints"]["big"], "cache_load_factor": 0.2}}})
    caching = [o for o in table_options(fixed, 0) if o.kernel is CACHING]
    assert caching and all(o.total_hbm_bytes > usable for o in caching)


def test_a_zipf_sample_gets_a_cache_from_the_curve_that_beats_the_fixed_default(capsys, zipf):
    cfg, chosen = planned(zipf)
    tp = chosen.tables["big"]
    w = cfg.constraint("big").workload
    assert tp.compute_kernel is CACHING
    assert any(tp.cache_load_factor == pytest.approx(x) for x in curve_clfs(w, ROWS))  # a point of the curve
    assert tp.cache_load_factor < 0.2
    assert "holds the hot rows" in tp.cache_note and "from sample ids.parquet (40,000 rows" in tp.cache_note
    # the same config with the fixed default: priced by the same estimator, from the same curve
    _, fixed = planned(zipf, cache_load_factor=0.2)
    assert chosen.max_rank_cost_ms < fixed.max_rank_cost_ms
    assert fixed.tables["big"].cache_load_factor is None  # typed: kept, nothing chosen
    print(f"chosen clf {tp.cache_load_factor:.4g}: {chosen.max_rank_cost_ms:.4f} ms; fixed 0.2: "
          f"{fixed.tables['big'].compute_kernel.value} {fixed.max_rank_cost_ms:.4f} ms")


def test_the_curve_prices_the_misses_and_says_so(zipf):
    cfg = parse_config(zipf)
    c = cfg.constraint("big")
    load = table_load(cfg.tables[0], c, cfg.topology, 0.05)
    assert load.hit_rate == pytest.approx(1 - miss_rate(c.workload, ROWS, 0.05))
    bare = parse_config(CONFIG)  # no block: the load factor is the hit rate, as TorchRec prices it
    assert table_load(bare.tables[0], bare.constraint("big"), bare.topology, 0.05).hit_rate == 0.05
    _, p = planned({**CONFIG, "constraints": {"big": {"cache_load_factor": 0.05}}})
    assert p.tables["big"].compute_kernel is CACHING and "no measured workload" in p.tables["big"].cache_note


def test_a_uniform_sample_gets_no_small_cache(zipf, uniform):
    """Uniform ids have no hot rows: the curve falls only as fast as the cache grows, so the planner takes the
    largest cache the HBM holds, not the small one the Zipf table's knee gives."""
    cfg, p = planned(uniform)
    tp = p.tables["big"]
    w = cfg.constraint("big").workload
    assert miss_rate(w, ROWS, 0.1) > 0.85  # the curve says a cache of 10% of the rows misses nearly every lookup
    _, z = planned(zipf)
    assert tp.compute_kernel is CACHING  # any hit beats fused_uvm's none
    assert tp.cache_load_factor > z.tables["big"].cache_load_factor
    assert "holds the hot rows" not in tp.cache_note
    bigger = [o for o in table_options(cfg, 0) if o.kernel is CACHING and o.clf > tp.cache_load_factor]
    assert bigger and all(o.total_hbm_bytes > cfg.topology.usable_hbm_bytes for o in bigger)  # the largest that fits


def test_a_typed_cache_load_factor_is_kept(zipf):
    cfg, p = planned(zipf, cache_load_factor=0.05)
    tp = p.tables["big"]
    assert tp.compute_kernel is CACHING and tp.cache_load_factor is None
    assert "(typed, kept)" in tp.cache_note
    assert {o.clf for o in table_options(cfg, 0)} == {None}  # no other size tried


def test_the_plan_file_carries_the_choice_and_reads_back_to_the_same_figures(zipf):
    cfg, p = planned(zipf)
    data = json.loads(json.dumps(plan_to_dict(p)))
    assert data["plan"]["big"]["cache_load_factor"] == p.tables["big"].cache_load_factor
    again = read_plan_file(data, cfg)
    assert again.tables == p.tables
    assert evaluate(cfg, again.tables).ranks == p.ranks  # what db checks a saved plan against
    forced = {"big": TablePlan(p.tables["big"].sharding_type, CACHING, p.tables["big"].ranks,
                               p.tables["big"].shards, 0.2)}
    assert evaluate(cfg, forced).ranks[0].hbm_bytes > p.ranks[0].hbm_bytes  # the chosen size is what is priced


def test_the_cli_summary_says_why(zipf, tmp_path, capsys):
    path = tmp_path / "applied.json"
    path.write_text(json.dumps(zipf))
    assert main(["plan", str(path)]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("Cache of big: ")]
    assert len(line) == 1 and "holds the hot rows" in line[0] and "from sample ids.parquet" in line[0]


def test_the_same_input_gives_a_byte_identical_plan(zipf):
    def text() -> str:
        d = plan_to_dict(planned(zipf)[1])
        d.pop("planning_seconds")
        return json.dumps(d, sort_keys=True)

    assert text() == text()


def test_two_tables_sharing_the_hbm_get_the_best_pair_of_sizes(zipf, uniform):
    """A Zipf table and a uniform one on one rank: the sizes placement picks are the cheapest pair of candidates
    that fits (every pair tried by hand, priced by the same evaluate)."""
    from dataclasses import replace

    from engine.clf import candidates

    data = copy.deepcopy(zipf)
    data["tables"].append(dict(data["tables"][0], name="flat", feature_names=["g0"]))
    data["constraints"]["flat"] = copy.deepcopy(uniform["constraints"]["big"])
    data["topology"]["hbm_cap"] = 16_000_000
    cfg = parse_config(data)
    p = plan(cfg)
    assert all(tp.compute_kernel is CACHING and tp.cache_load_factor is not None for tp in p.tables.values())
    costs = {}
    for a in candidates(cfg.table("big"), cfg.constraint("big")):
        for b in candidates(cfg.table("flat"), cfg.constraint("flat")):
            e = evaluate(cfg, {"big": replace(p.tables["big"], cache_load_factor=a),
                               "flat": replace(p.tables["flat"], cache_load_factor=b)})
            if all(r.hbm_bytes <= r.hbm_cap_bytes for r in e.ranks):
                costs[(a, b)] = e.max_rank_cost_ms
    assert len(costs) > 3 and p.max_rank_cost_ms == pytest.approx(min(costs.values()))
    # the Zipf table's hot rows need less than the uniform table's share: it gets the smaller cache
    assert p.tables["big"].cache_load_factor < p.tables["flat"].cache_load_factor


def test_the_sizes_of_one_geometry_hold_the_same_shards(zipf):
    data = copy.deepcopy(zipf)
    data["topology"]["world_size"] = 2
    opts = table_options(parse_config(data), 0)
    tw = [o for o in opts if o.sharding_type.value == "table_wise"]
    rw = [o for o in opts if o.sharding_type.value == "row_wise"]
    assert len([o for o in tw if o.clf is not None]) > 2 and rw
    assert all(o.same_shards(tw[0]) for o in tw)  # so HBM demotions may shrink a cache, as they pick a kernel
    assert not any(o.same_shards(tw[0]) for o in rw)
