"""The estimator's numbers for the tutorial's large table, worked out by hand from TorchRec's formulas."""

import numpy as np
import pytest

from engine import constants as C
from engine import parse_config
from engine.estimate import estimate_shards
from engine.types import ComputeKernel as K
from engine.types import ShardingType as S
from tests.factories import tutorial, with_changes

WEIGHTS = 4096 * 64 * 4  # fp32 large table
INPUT = 512 * 1 * 2 * 8  # batch x pooling factor x world size x int64 ids
OUTPUT = 512 * 2 * 64 * 4  # pooled rows of the global batch, fp32


def est(st=S.TABLE_WISE, kernel=K.FUSED, rows=(4096,), cols=(64,), **topology):
    cfg = parse_config(with_changes(tutorial(), **topology))
    return estimate_shards(cfg.tables[0], cfg.constraint("large_table_0"), cfg.topology, st, kernel,
                           np.array(rows), np.array(cols))


def test_table_wise_memory_is_weights_plus_io_buffers():
    e = est()
    assert e.hbm_bytes.tolist() == [WEIGHTS + INPUT + OUTPUT]
    assert e.ddr_bytes.tolist() == [0]
    assert (e.input_bytes.tolist(), e.output_bytes.tolist()) == ([INPUT], [OUTPUT])


def test_table_wise_cost_follows_torchrecs_formula():
    e = est()
    lookup = 512 * 2 * 64 * 4
    fwd = (INPUT + lookup + OUTPUT) * C.HALF_BLOCK_PENALTY / C.HBM_MEM_BW
    comms = OUTPUT / C.INTRA_NODE_BW
    assert e.perf_ms[0].tolist() == pytest.approx([fwd, comms, 2 * fwd, comms, INPUT / C.INTRA_NODE_BW, 0])


@pytest.mark.parametrize("optimizer,extra", [("sgd", 0), ("adagrad", WEIGHTS), ("adam", 2 * WEIGHTS),
                                             ("rowwise_adagrad", 4096 * 4)])
def test_optimizer_state_is_counted(optimizer, extra):
    assert est(optimizer=optimizer).hbm_bytes[0] == WEIGHTS + extra + INPUT + OUTPUT


def test_uvm_caching_keeps_weights_in_ddr_and_a_cache_in_hbm():
    e = est(kernel=K.FUSED_UVM_CACHING)
    cache = round(WEIGHTS * 0.2) + int(np.ceil(4096 * (4 + 0.2 * 16)))
    assert e.ddr_bytes.tolist() == [WEIGHTS]
    assert e.hbm_bytes.tolist() == [cache + INPUT + OUTPUT]
    uvm = est(kernel=K.FUSED_UVM)
    assert uvm.hbm_bytes.tolist() == [INPUT + OUTPUT] and uvm.ddr_bytes.tolist() == [WEIGHTS]
    assert uvm.cost_ms[0] > e.cost_ms[0] > est().cost_ms[0]  # DDR-backed lookups are slower


def test_row_wise_splits_weights_and_lookups():
    e = est(S.ROW_WISE, rows=(2048, 2048), cols=(64, 64))
    # each piece reduce-scatters partial sums for the whole global batch: the full output buffer
    assert e.hbm_bytes.tolist() == [WEIGHTS // 2 + INPUT // 2 + OUTPUT] * 2
    assert e.ddr_bytes.tolist() == [0, 0]
    assert e.cost_ms[0] == pytest.approx(e.cost_ms[1])
    assert e.input_bytes.tolist() == [512 * 8, 512 * 8]  # half the global batch's ids each
    empty = est(S.ROW_WISE, rows=(4096, 0), cols=(64, 64))
    assert empty.cost_ms[1] == 0 and empty.input_bytes[1] == 0


def test_column_wise_pieces_each_read_every_id():
    e = est(S.COLUMN_WISE, rows=(4096, 4096), cols=(32, 32))
    assert e.input_bytes.tolist() == [INPUT, INPUT]
    assert e.output_bytes.tolist() == [OUTPUT // 2, OUTPUT // 2]
    assert e.hbm_bytes.tolist() == [WEIGHTS // 2 + INPUT + OUTPUT // 2] * 2


def test_data_parallel_keeps_a_full_copy_and_pays_an_all_reduce():
    e = est(S.DATA_PARALLEL, K.DENSE, rows=(4096, 4096), cols=(64, 64))
    assert e.hbm_bytes.tolist() == [WEIGHTS + 512 * 8 + 512 * 64 * 4] * 2
    assert e.perf_ms[0][1] == 0 and e.perf_ms[0][3] == pytest.approx(WEIGHTS * 2 * 1 / 2 / C.INTRA_NODE_BW)


def test_cpu_puts_everything_in_ddr_and_reads_at_ddr_speed():
    e = est(compute_device="cpu")
    assert e.hbm_bytes.tolist() == [0] and e.ddr_bytes.tolist() == [WEIGHTS + INPUT + OUTPUT]
    assert e.cost_ms[0] > est().cost_ms[0]


def test_cross_host_comms_use_the_slower_network():
    one_host = est(world_size=2, local_world_size=2)
    two_hosts = est(world_size=2, local_world_size=1)
    assert two_hosts.perf_ms[0][1] == pytest.approx(one_host.perf_ms[0][1] * C.INTRA_NODE_BW / C.CROSS_NODE_BW)
