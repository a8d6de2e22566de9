"""The pieces engine.memory's step replay is built of: the byte sizes of what a step holds, the parts a rank's memory
is counted in, one sharding type's share of a step (Group), the running total per rank and part (Timeline), and the
per-table and per-optimizer sizes (bags and ids of a table's features, fbgemm's optimizer state, a UVM cache's
HBM, the dense optimizer step's temporaries).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine import constants as C
from engine import fields as F
from engine.types import Config, Optimizer, ShardingType, TablePlan

ID_BYTES = C.INDEX_BYTES  # ids, lengths and offsets are int64 in the KJT and in fbgemm's kernels
OUTPUT_BYTES = 4  # pooled outputs and their gradients: fp32 (TorchRec's default output_dtype)
STATE_BYTES = 4  # fbgemm keeps optimizer state (momentum1/momentum2) in fp32 whatever the weights' type
STEP_BYTES = 4  # torch optimizers keep one float32 `step` tensor per parameter

WEIGHTS, OPTIMIZER, CACHE, GRAD = "weights_bytes", "optimizer_bytes", "cache_bytes", "grad_bytes"
INPUT, OUTPUT, OUTPUT_GRAD, A2A = "input_bytes", "output_bytes", "output_grad_bytes", "a2a_bytes"
PARTS = (WEIGHTS, OPTIMIZER, CACHE, GRAD, INPUT, OUTPUT, OUTPUT_GRAD, A2A)

ALL_TO_ALL = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE)


@dataclass
class Group:
    """One sharding type's share of a step, per rank: what TorchRec's sharding object of that type handles."""

    st: ShardingType
    first_table: int
    ids_in: np.ndarray  # ids each rank's kernel looks up (after the input all-to-all)
    bags_in: np.ndarray  # lengths each rank receives (one per bag of every feature it serves)
    cols: np.ndarray  # output columns each rank's kernel computes per bag (shard width x features)
    out_cols: float = 0.0  # output columns of the whole group per sample (what each rank gets back)
    local_ids: float = 0.0  # ids of the group's features in one rank's batch (features once per piece)
    entries: int = 0  # the group's feature list, duplicates included (column splits repeat a feature)
    order: list = field(default_factory=list)  # (rank or host, table, shard, first feature, features)

    @property
    def kind(self) -> str:
        if self.st is ShardingType.DATA_PARALLEL:
            return "dp"
        return "a2a" if self.st in ALL_TO_ALL else "rs"


class Timeline:
    """Running bytes per part on every rank, and the parts at each rank's largest total."""

    def __init__(self, w: int):
        self.live = {p: np.zeros(w) for p in PARTS}
        self.total = np.zeros(w)
        self.peak = np.zeros(w)
        self.at_peak = {p: np.zeros(w) for p in PARTS}

    def alloc(self, part: str, nbytes) -> None:
        self.live[part] = self.live[part] + nbytes
        self.total = self.total + nbytes
        higher = self.total > self.peak
        if higher.any():
            self.peak = np.where(higher, self.total, self.peak)
            for p in PARTS:
                self.at_peak[p] = np.where(higher, self.live[p], self.at_peak[p])

    def free(self, part: str, nbytes) -> None:
        self.live[part] = self.live[part] - nbytes
        self.total = self.total - nbytes


def feature_load(cfg: Config, name: str) -> tuple[list[int], float]:
    """Bags per feature in one rank's batch (batch size x num_poolings) and the ids of all its features."""
    t = cfg.table(name)
    c = cfg.constraint(name)
    n = len(t.feature_names)
    bs = F.batch_sizes(c, n, cfg.topology.batch_size)
    npool = F.num_poolings(c, n)
    pf = F.pooling_factors(c, n)
    bags = [max(1, round(b * q)) for b, q in zip(bs, npool)]
    return bags, float(sum(p * b for p, b in zip(pf, bags)))


def fused_state(opt: Optimizer, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """fbgemm's optimizer state of a piece: momentum1 (per element, or per row for row-wise Adagrad), momentum2."""
    per_element = {Optimizer.SGD: 0.0, Optimizer.ADAGRAD: 1.0, Optimizer.ROWWISE_ADAGRAD: 0.0, Optimizer.ADAM: 2.0}
    rowwise = 1.0 if opt is Optimizer.ROWWISE_ADAGRAD else 0.0
    return (rows * cols * per_element[opt] + rows * rowwise) * STATE_BYTES


def cache_bytes(cfg: Config, name: str, tp: TablePlan, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """fused_uvm_caching's HBM: the cached share of the rows and the cache's index state (as engine.estimate), at
    the plan's cache load factor when the planner chose one."""
    clf = F.cache_load_factor(cfg.constraint(name)) if tp.cache_load_factor is None else tp.cache_load_factor
    return np.round(weights * clf) + np.ceil(rows * (4 + clf * 16))


def dense_step_temp(opt: Optimizer, params: list[tuple[np.ndarray, float, float]], w: int,
                     cpu: bool) -> np.ndarray:
    """The largest temporaries of torch's optimizer step over the data-parallel tables, per rank. On CPU torch
    steps one tensor at a time: Adagrad's sqrt, Adam's sqrt and division, RowWiseAdagrad's squared gradient and
    row means, each kept until the next parameter's replaces it; on CUDA Adam and Adagrad step all at once."""
    peak, prev_full, prev_row, total = np.zeros(w), np.zeros(w), np.zeros(w), np.zeros(w)
    for ranks, full, row in params:
        on = np.zeros(w, dtype=bool)
        on[ranks] = True
        if opt is Optimizer.ADAGRAD:
            now = prev_full + full
        elif opt is Optimizer.ADAM:
            now = prev_full + 2 * full
        elif opt is Optimizer.ROWWISE_ADAGRAD:
            now = prev_row + full + row
        else:
            now = np.zeros(w)
        peak = np.where(on, np.maximum(peak, now), peak)
        prev_full = np.where(on, full, prev_full)
        prev_row = np.where(on, row, prev_row)
        total = total + on * full
    if not cpu and opt in (Optimizer.ADAGRAD, Optimizer.ADAM):
        return total
    return peak
