"""engine.report: the one place a table's placement is written as text and compared (the dashboard's
comparisons and the store's use it)."""

from engine.report import has_moved, placement, placement_text, placement_words, ranks_list_text
from engine.types import ComputeKernel, ShardingType, TablePlan


def tp(st: ShardingType, ranks: list[int], kernel: ComputeKernel = ComputeKernel.FUSED) -> TablePlan:
    return TablePlan(sharding_type=st, compute_kernel=kernel, ranks=tuple(ranks), shards=None)


def test_ranks_are_listed_and_long_runs_shortened() -> None:
    assert ranks_list_text([0, 2, 5]) == "0, 2, 5"
    assert ranks_list_text(list(range(6))) == "0, 1, 2, 3, 4, 5"
    assert ranks_list_text(list(range(2, 18))) == "2-17"
    assert ranks_list_text([0, 1, 2, 3, 4, 5, 7]) == "0, 1, 2, 3, 4, 5, 7"
    assert ranks_list_text(["a", "b", "c", "d", "e", "f", "g"]) == "a, b, c, d, e, f, g"  # a stored plan's words


def test_placement_text_and_moves() -> None:
    a = tp(ShardingType.TABLE_WISE, [1])
    assert placement_text(a) == "table_wise fused [1]" == placement_words("table_wise", "fused", (1,))
    assert placement(a) == (ShardingType.TABLE_WISE, ComputeKernel.FUSED, (1,))
    assert not has_moved(a, tp(ShardingType.TABLE_WISE, [1]))
    assert has_moved(a, tp(ShardingType.TABLE_WISE, [0]))
    assert has_moved(a, tp(ShardingType.ROW_WISE, [1]))
    assert has_moved(a, tp(ShardingType.TABLE_WISE, [1], ComputeKernel.DENSE))
