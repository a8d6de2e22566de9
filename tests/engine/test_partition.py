"""The partitioner alone: costs and memory set by hand, expected ranks asserted."""

import numpy as np
import pytest

from engine.partition import Placement, improve, move_or_swap
from engine.types import ShardingType, Topology
from tests.factories import hand_option

option = hand_option


def topo(world=2, hbm_cap=10**9):
    return Topology(world_size=world, local_world_size=world, hbm_cap=hbm_cap, storage_reservation=0.0)


def greedy(pl, opts):
    for o in sorted(opts, key=lambda o: -o.max_shard_cost_ms):
        pl.add(o, pl.find_ranks(o))


def test_greedy_puts_each_piece_on_the_least_loaded_rank():
    pl = Placement(topo(2))
    greedy(pl, [option(i, [c]) for i, c in enumerate([5, 4, 3, 3, 3])])
    assert {t: int(r[0]) for t, r in pl.ranks.items()} == {0: 0, 1: 1, 2: 1, 3: 0, 4: 1}
    assert pl.load.tolist() == [8, 10]


def test_local_search_swaps_to_the_optimum():
    pl = Placement(topo(2))
    opts = [option(i, [c]) for i, c in enumerate([5, 4, 3, 3, 3])]
    greedy(pl, opts)
    improve(pl, [[o] for o in opts])
    assert sorted(pl.load.tolist()) == [9, 9]


def test_moves_and_swaps_never_overfill_memory():
    pl = Placement(topo(2, hbm_cap=100))
    a, c, b = option(0, [6], hbm=70), option(1, [1], hbm=25), option(2, [1], hbm=80)
    pl.add(a, np.array([0]))
    pl.add(c, np.array([0]))
    pl.add(b, np.array([1]))
    # rank 0 is slowest (7 vs 1), but every move or swap would put more than 100 bytes on a rank
    assert not move_or_swap(pl)
    assert pl.load.tolist() == [7, 1] and pl.hbm.tolist() == [95, 80]


def test_a_swap_that_fits_is_taken():
    pl = Placement(topo(2, hbm_cap=100))
    a, c, b = option(0, [6], hbm=60), option(1, [1], hbm=30), option(2, [1], hbm=60)
    pl.add(a, np.array([0]))
    pl.add(c, np.array([0]))
    pl.add(b, np.array([1]))
    improve(pl, [[a], [c], [b]])
    assert pl.load.max() == 6 and (pl.hbm <= 100).all()


def test_column_pieces_of_one_table_spread_over_ranks():
    pl = Placement(topo(4))
    o = option(0, [1, 1, 1, 1], st=ShardingType.COLUMN_WISE)
    assert sorted(pl.find_ranks(o).tolist()) == [0, 1, 2, 3]


def test_no_rank_with_room_means_no_placement():
    pl = Placement(topo(2, hbm_cap=50))
    assert pl.find_ranks(option(0, [1], hbm=60)) is None


def test_table_row_wise_goes_to_the_lighter_host():
    t = Topology(world_size=4, local_world_size=2, storage_reservation=0.0)
    pl = Placement(t)
    pl.add(option(0, [5]), np.array([0]))
    ranks = pl.find_ranks(option(1, [1, 1], st=ShardingType.TABLE_ROW_WISE))
    assert ranks.tolist() == [2, 3]


@pytest.mark.parametrize("world", [2, 3, 8])
def test_search_is_never_worse_than_greedy(world):
    rng = np.random.default_rng(world)
    costs = rng.lognormal(0, 1, 40)
    opts = [option(i, [c]) for i, c in enumerate(costs)]
    pl = Placement(topo(world))
    greedy(pl, opts)
    before = pl.load.max()
    improve(pl, [[o] for o in opts])
    assert pl.load.max() <= before + 1e-12
    assert pl.load.sum() == pytest.approx(costs.sum())
