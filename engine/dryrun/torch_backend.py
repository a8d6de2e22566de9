"""One rank's pieces with plain torch (the fallback where fbgemm is missing): a weight per piece,
torch.nn.functional.embedding_bag (embedding for sequence tables) forward, then a backward as fbgemm's fused one
makes it (each looked-up row's gradient summed over the ids that hit it, no per-id copy of the output's rows) and
the configured optimizer applied to those rows, as fbgemm's fused optimizers do.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from engine.types import DataType, Optimizer, PoolingType

from engine.dryrun.types import OPTIMIZER_STATE_BYTES
from engine.dryrun.workload import PieceBatch

EPS = 1.0e-8
ADAM_BETAS = (0.9, 0.999)
TORCH_DTYPES = {DataType.FP32: torch.float32, DataType.FP16: torch.float16, DataType.BF16: torch.bfloat16}
STATE_PER_ROW = {Optimizer.SGD: lambda d: (), Optimizer.ADAGRAD: lambda d: ((d,),),
                 Optimizer.ROWWISE_ADAGRAD: lambda d: ((),), Optimizer.ADAM: lambda d: ((d,), (d,))}


def _update(opt: Optimizer, weight: torch.Tensor, state: list[torch.Tensor], idx: torch.Tensor, v: torch.Tensor,
            lr: float) -> None:
    """Apply the optimizer to the rows idx (distinct) whose summed gradients are v (fbgemm's exact fused update)."""
    v = v.float()
    if opt is Optimizer.SGD:
        step = v
    elif opt is Optimizer.ADAGRAD:
        state[0].index_add_(0, idx, v * v)
        step = v / (state[0][idx].sqrt() + EPS)
    elif opt is Optimizer.ROWWISE_ADAGRAD:
        state[0].index_add_(0, idx, (v * v).mean(dim=1))
        step = v / (state[0][idx].sqrt() + EPS)[:, None]
    else:
        m = state[0][idx] * ADAM_BETAS[0] + v * (1 - ADAM_BETAS[0])
        s = state[1][idx] * ADAM_BETAS[1] + v * v * (1 - ADAM_BETAS[1])
        state[0][idx], state[1][idx] = m, s
        step = m / (s.sqrt() + EPS)
    weight.index_add_(0, idx, (step * -lr).to(weight.dtype))


class TorchRank:
    """A rank's pieces as torch weights with each step's inputs on the device; step() = forward, backward, update
    on the next step's ids (cycling through the steps given)."""

    def __init__(self, steps: list[list[PieceBatch]], optimizer: Optimizer, device: torch.device, lr: float):
        self._runs: list[list[Callable[[], None]]] = [[] for _ in steps]
        self._next = 0
        self.weight_bytes = 0
        self.optimizer_bytes = 0
        for i in range(len(steps[0])):
            self._add_piece([step[i] for step in steps], optimizer, device, lr)

    def _add_piece(self, piece_steps: list[PieceBatch], opt: Optimizer, device: torch.device, lr: float) -> None:
        p = piece_steps[0].piece
        dtype = TORCH_DTYPES.get(p.data_type, torch.float16)
        weight = torch.empty(p.rows, p.cols, dtype=dtype, device=device).uniform_(-0.01, 0.01)
        state = [torch.zeros((p.rows, *shape), dtype=torch.float32, device=device)
                 for shape in STATE_PER_ROW[opt](p.cols)]
        grad = None
        for k, b in enumerate(piece_steps):
            lengths = np.concatenate([f.lengths for f in b.features])
            ids = torch.from_numpy(np.concatenate([f.ids for f in b.features])).to(device)
            offsets = torch.from_numpy(np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)).to(device)
            psw = torch.ones(len(ids), dtype=dtype, device=device) if p.is_weighted and p.pooling is PoolingType.SUM \
                else None
            forward = _forward(p, weight, ids, offsets, psw)
            if grad is None or grad.shape != forward().shape:  # sequence tables' outputs follow the id count
                grad = torch.ones_like(forward()).detach()
            self._runs[k].append(_run(p, forward, ids, offsets, psw, grad, opt, weight, state, lr))
        self.weight_bytes += weight.numel() * weight.element_size()
        self.optimizer_bytes += sum(s.numel() for s in state) * OPTIMIZER_STATE_BYTES

    def step(self) -> None:
        for run in self._runs[self._next]:
            run()
        self._next = (self._next + 1) % len(self._runs)


def _forward(p, weight: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor,
             psw: torch.Tensor | None) -> Callable[[], torch.Tensor]:
    def forward() -> torch.Tensor:
        if p.pooling is PoolingType.NONE:
            return F.embedding(ids, weight)
        return F.embedding_bag(ids, weight, offsets, mode=p.pooling.value, per_sample_weights=psw)

    return forward


def _row_grads(p, ids: torch.Tensor, offsets: torch.Tensor, psw: torch.Tensor | None, grad: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows the step looked up (distinct, ascending) and each one's summed gradient, as fbgemm's backward makes
    them: the ids sorted by row, then each row's output gradients reduced in one pass (a segment sum, here
    embedding_bag over the gradient's rows). autograd's sparse gradient would first copy an output row per id (ids x
    columns), a temporary whose allocation, not the lookups, set the fallback's step time (docs/dryrun.md)."""
    rows, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    order = torch.argsort(inverse, stable=True)
    counts = torch.bincount(inverse, minlength=len(rows))
    starts = torch.cumsum(counts, 0) - counts
    if p.pooling is PoolingType.NONE:  # a sequence table's output has a row per id
        source, scale = order, None
    else:
        lengths = torch.diff(offsets, append=torch.tensor([len(ids)], dtype=offsets.dtype, device=offsets.device))
        bag = torch.repeat_interleave(torch.arange(len(offsets), device=ids.device), lengths)
        source = bag[order]
        scale = psw
        if p.pooling is PoolingType.MEAN:
            per_id = (1.0 / lengths.clamp(min=1).to(grad.dtype))[bag]
            scale = per_id if scale is None else scale * per_id
        scale = None if scale is None else scale[order].to(grad.dtype)
    return rows, F.embedding_bag(source, grad, starts, mode="sum", per_sample_weights=scale)


def _run(p, forward: Callable[[], torch.Tensor], ids: torch.Tensor, offsets: torch.Tensor, psw: torch.Tensor | None,
         grad: torch.Tensor, opt: Optimizer, weight: torch.Tensor, state: list[torch.Tensor], lr: float
         ) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            forward()
            if len(ids):
                rows, v = _row_grads(p, ids, offsets, psw, grad)
                _update(opt, weight, state, rows, v, lr)

    return run
