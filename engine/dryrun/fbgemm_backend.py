"""One rank's pieces in fbgemm's SplitTableBatchedEmbeddingBagsCodegen: a TBE per kind of piece, each piece
a table of it, trained with the fused optimizer (backward updates the weights, as TorchRec's FUSED kernel).

Pieces share a TBE when they agree on pooling, weight type, per-sample weights and bags per feature (and, for
sequence tables, width): those are per-TBE settings in fbgemm.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode, EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    SplitTableBatchedEmbeddingBagsCodegen,
)

from engine.errors import EngineError
from engine.types import DataType, Optimizer, PoolingType

from engine.dryrun.types import Piece
from engine.dryrun.workload import PieceBatch

OPTIMIZERS = {Optimizer.SGD: EmbOptimType.EXACT_SGD, Optimizer.ADAGRAD: EmbOptimType.EXACT_ADAGRAD,
              Optimizer.ROWWISE_ADAGRAD: EmbOptimType.EXACT_ROWWISE_ADAGRAD, Optimizer.ADAM: EmbOptimType.ADAM}
STATE_PREFIXES = {Optimizer.SGD: (), Optimizer.ADAGRAD: ("momentum1",),
                  Optimizer.ROWWISE_ADAGRAD: ("momentum1",), Optimizer.ADAM: ("momentum1", "momentum2")}
POOLING = {PoolingType.SUM: PoolingMode.SUM, PoolingType.MEAN: PoolingMode.MEAN, PoolingType.NONE: PoolingMode.NONE}


def unsupported(pieces: list[Piece], optimizer: Optimizer, device: torch.device) -> str | None:
    """Why fbgemm cannot run these pieces here, or None."""
    if device.type == "cpu" and optimizer is Optimizer.ADAM:
        return "fbgemm has no CPU kernel for the adam optimizer"
    for p in pieces:
        if p.cols % 4 and not p.empty:
            return f"fbgemm needs widths that are multiples of 4; table {p.table} has a {p.cols}-column piece"
    if device.type == "cuda" and not _cuda_works():
        return "this fbgemm_gpu build has no CUDA kernels (fbgemm-gpu-cpu)"
    return None


def _cuda_works() -> bool:
    try:
        tbe = SplitTableBatchedEmbeddingBagsCodegen(
            [(8, 4, EmbeddingLocation.DEVICE, ComputeDevice.CUDA)], device=torch.device("cuda"))
        tbe(torch.zeros(1, dtype=torch.int64, device="cuda"), torch.tensor([0, 1], device="cuda"))
        return True
    except Exception:  # any failure means: not usable here
        return False


def _group_key(b: PieceBatch) -> tuple:
    p = b.piece
    weighted = p.is_weighted and p.pooling is PoolingType.SUM
    width = p.cols if p.pooling is PoolingType.NONE else 0
    return (p.pooling, p.data_type is DataType.FP32, weighted, b.bags_per_feature, width)


class FbgemmRank:
    """A rank's TBEs with each step's inputs on the device; step() is one forward + backward (+ fused update) on
    the next step's ids (cycling through the steps given)."""

    def __init__(self, steps: list[list[PieceBatch]], optimizer: Optimizer, device: torch.device, lr: float):
        groups: dict[tuple, list[int]] = {}
        for i, b in enumerate(steps[0]):
            groups.setdefault(_group_key(b), []).append(i)
        self._runs: list[list[Callable[[], None]]] = [[] for _ in steps]
        self._next = 0
        self.weight_bytes = 0
        self.optimizer_bytes = 0
        for key, members in groups.items():
            self._add_group(key, [[step[i] for i in members] for step in steps], optimizer, device, lr)

    def _add_group(self, key: tuple, group_steps: list[list[PieceBatch]], optimizer: Optimizer,
                   device: torch.device, lr: float) -> None:
        pooling, fp32, weighted = key[0], key[1], key[2]
        group = group_steps[0]
        on_cuda = device.type == "cuda"
        loc, cdev = (EmbeddingLocation.DEVICE, ComputeDevice.CUDA) if on_cuda else (
            EmbeddingLocation.HOST, ComputeDevice.CPU)
        try:
            tbe = SplitTableBatchedEmbeddingBagsCodegen(
                [(b.piece.rows, b.piece.cols, loc, cdev) for b in group],
                feature_table_map=[i for i, b in enumerate(group) for _ in b.features],
                optimizer=OPTIMIZERS[optimizer], learning_rate=lr, pooling_mode=POOLING[pooling],
                weights_precision=SparseType.FP32 if fp32 else SparseType.FP16, output_dtype=SparseType.FP32,
                bounds_check_mode=BoundsCheckMode.NONE, device=device)
        except (AssertionError, RuntimeError, NotImplementedError) as e:
            raise EngineError(f"fbgemm cannot build rank {group[0].piece.rank}'s pieces: {e}; "
                              "try --backend torch") from None
        grad = None
        for k, batches in enumerate(group_steps):
            features = [f for b in batches for f in b.features]
            lengths = np.concatenate([f.lengths for f in features])
            indices = torch.from_numpy(np.concatenate([f.ids for f in features])).to(device)
            offsets = torch.from_numpy(np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)).to(device)
            psw = torch.ones(len(indices), dtype=torch.float32, device=device) if weighted else None
            if grad is None or pooling is PoolingType.NONE:  # pooled outputs have a row per bag in every step
                grad = torch.ones_like(tbe(indices, offsets, psw)).detach()
            self._runs[k].append(_run(tbe, indices, offsets, psw, grad))
        self.weight_bytes += _state_bytes(tbe, "weights")
        self.optimizer_bytes += sum(_state_bytes(tbe, p) for p in STATE_PREFIXES[optimizer])

    def step(self) -> None:
        for run in self._runs[self._next]:
            run()
        self._next = (self._next + 1) % len(self._runs)


def _run(tbe: torch.nn.Module, indices: torch.Tensor, offsets: torch.Tensor, psw: torch.Tensor | None,
         grad: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        tbe(indices, offsets, psw).backward(grad)

    return run


def _state_bytes(tbe: torch.nn.Module, prefix: str) -> int:
    total = 0
    for where in ("dev", "host", "uvm"):
        t = getattr(tbe, f"{prefix}_{where}", None)
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total
