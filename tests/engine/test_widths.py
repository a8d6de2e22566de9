"""Column widths: a dim fbgemm's fused kernels cannot run plans data_parallel (dense) with a note saying why;
column splits follow TorchRec 1.8's block rule; a column split the user asked for that gave one piece says why."""

from __future__ import annotations

import pytest

from engine import (ComputeKernel, EngineError, PlanningError, Shard, ShardingType, TablePlan, evaluate,
                    parse_config, plan)
from engine.enumerate import all_table_options
from engine.validate.command import check_runnable
from engine.validate.types import Backend
from engine.widths import cw_block, dim_note, runs_fused
from tests.factories import tutorial


def _with_dim(dim: int, constraints: dict | None = None) -> dict:
    cfg = tutorial()
    cfg["tables"][2]["embedding_dim"] = dim
    cfg["constraints"] = constraints or {}
    return cfg


def test_a_dim_30_table_plans_data_parallel_dense_with_a_note_and_passes_the_validation_check():
    cfg = parse_config(_with_dim(30))
    p = plan(cfg)
    tp = p.tables["small_table_0"]
    assert (tp.sharding_type, tp.compute_kernel) == (ShardingType.DATA_PARALLEL, ComputeKernel.DENSE)
    assert any("small_table_0 (dim 30)" in n and "multiple of 4" in n and "dense kernel" in n for n in p.notes)
    check_runnable(cfg, p.tables, Backend.GLOO)  # what validation checks before launching: accepted
    options = all_table_options(cfg)[2]
    assert {(o.sharding_type, o.kernel) for o in options} == {(ShardingType.DATA_PARALLEL, ComputeKernel.DENSE)}
    assert not any("dim" in n for n in plan(parse_config(tutorial())).notes)  # dims of 64: no such note


def test_a_fused_plan_of_a_dim_30_table_is_noted_and_refused_before_a_run():
    cfg = parse_config(_with_dim(30))
    tables = dict(plan(parse_config(tutorial("table_wise"))).tables)
    # TorchRec 1.8's planner gives the dim 30 table table_wise/fused, one [1024, 30] shard
    tables["small_table_0"] = TablePlan(ShardingType.TABLE_WISE, ComputeKernel.FUSED, (0,),
                                        (Shard((0, 0), (1024, 30), 0),))
    fused = evaluate(cfg, tables, planner="torchrec")
    assert any(n.startswith("will not run") and "small_table_0 (30 columns)" in n for n in fused.notes)
    with pytest.raises(EngineError, match=r"plan\.small_table_0\.compute_kernel: fused needs piece widths that "
                                          r"are multiples of 4 \(fbgemm\), and table 'small_table_0' has a 30-column"):
        check_runnable(cfg, tables, Backend.GLOO)


def test_a_dim_30_table_whose_constraints_rule_out_data_parallel_is_refused_naming_the_fix():
    with pytest.raises(PlanningError) as e:
        plan(parse_config(_with_dim(30, {"small_table_0": {"sharding_types": ["table_wise"]}})))
    text = str(e.value)
    assert text.startswith("Table 'small_table_0': dim 30 is not a multiple of 4")
    assert "add 'data_parallel' to constraints.small_table_0.sharding_types" in text
    assert "tables[2].embedding_dim to a multiple of 4" in text


def test_dim_1_still_plans():  # the fuzz corpora hold dim 1 tables: planned, never a config error
    p = plan(parse_config(_with_dim(1)))
    assert p.tables["small_table_0"].sharding_type is ShardingType.DATA_PARALLEL


@pytest.mark.parametrize("dim,min_partition,block", [
    (64, 32, 32), (64, None, 64), (256, None, 128), (64, 2, 4), (96, 40, 48), (30, 10, 30), (60, 40, 60)])
def test_column_block_is_torchrecs(dim, min_partition, block):
    from torchrec.distributed.sharding_plan import _get_block_size_for_cw_shard

    assert cw_block(dim, min_partition) == block == _get_block_size_for_cw_shard(dim, min_partition)
    assert runs_fused(block) or block == dim


def test_dim_note_names_the_dims_that_shard():
    assert dim_note(64) is None and dim_note(0) is None
    assert dim_note(30).endswith("a dim of 28 or 32 can be sharded")
    assert dim_note(2).endswith("a dim of 4 can be sharded")


def test_a_forced_column_split_that_gave_one_piece_says_why_and_how_to_get_two():
    cfg = tutorial()
    cfg["constraints"] = {t["name"]: {"sharding_types": ["column_wise"]} for t in cfg["tables"]}
    p = plan(parse_config(cfg))
    assert [len(p.tables[t["name"]].shards) for t in cfg["tables"]] == [1, 1, 1, 1]
    note = next(n for n in p.notes if n.startswith("column_wise on large_table_0"))
    assert note.startswith("column_wise on large_table_0 gave one piece because min_partition 128 (the default) "
                           ">= dim 64")
    assert note.endswith("set constraints.large_table_0.min_partition to 32 for 2 pieces")
    cfg["constraints"]["large_table_0"]["min_partition"] = 32
    p = plan(parse_config(cfg))
    assert [s.sizes for s in p.tables["large_table_0"].shards] == [(4096, 32), (4096, 32)]
    assert not any(n.startswith("column_wise on large_table_0") for n in p.notes)


def test_min_partition_help_shows_the_default_and_its_meaning():
    from engine import FIELDS

    f = FIELDS["min_partition"]
    assert "empty: 128 (TorchRec's MIN_CW_DIM)" in f.help and "32 cuts dim 64 into 2 x 32" in f.help
    assert f.default_text.startswith("128")
