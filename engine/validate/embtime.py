"""A rank's own embedding work inside a DMP training step, timed apart from the collectives: what the dry-run
measures per rank (lookup, backward with the fused update, optimizer), here inside the real distributed step.

- forward (`embedding_forward_ms`): wall time inside the sharded collection's lookup modules (`_lookups`, called
  by compute_and_output_dist), i.e. the rank's TBE lookups on its shards and replicas; the input and output
  all-to-alls run outside them and are not counted.
- backward (`embedding_backward_ms`): the autograd nodes the lookups' outputs were made by (the TBE's backward,
  which applies the fused optimizer to the rows it touched, and the views and concatenations around it), each
  node timed from its pre-hook to its post-hook and summed, so the backward all-to-alls, DDP's all-reduce and any
  other node the autograd engine runs in between are not counted. Accumulating a data-parallel table's gradient
  (AccumulateGrad, where DDP's hooks start its all-reduce) is not counted either.
- optimizer (`embedding_optimizer_ms`): `optimizer.step()` after backward: the data-parallel tables' dense
  optimizer (the fused one has already run inside backward). No collective runs in it.

On CUDA each timestamp follows a `torch.cuda.synchronize`, so the times include the kernels (and the step is
slower by those synchronisations); on CPU the timestamps are plain `time.perf_counter`.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

MAX_NODES = 256  # autograd nodes walked below one lookup's output (a TBE, views, a concatenation: a handful)
NOT_TIMED = ("AccumulateGrad",)  # a leaf's gradient accumulation: where DDP's all-reduce hooks run


def sharded_collections(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules holding lookup modules (TorchRec's sharded embedding collections) inside a DMP model."""
    return [m for m in model.modules() if isinstance(getattr(m, "_lookups", None), (list, torch.nn.ModuleList))]


class EmbeddingTimer:
    """Hooks on every lookup module of a DMP model; `reset()` before a step, `read()` after it gives the step's
    forward and backward milliseconds of this rank's lookups. `remove()` takes the hooks off."""

    def __init__(self, model: torch.nn.Module, sync: Callable[[], None] = lambda: None):
        self.sync = sync
        self.forward_ms: list[float] = []  # one entry per lookup call in the step
        self.backward_ms = 0.0
        self._started: list[float] = []
        self._handles = []
        for collection in sharded_collections(model):
            for lookup in collection._lookups:
                inner = getattr(lookup, "module", lookup)  # a data-parallel lookup is wrapped in DDP
                self._handles.append(inner.register_forward_pre_hook(self._forward_start))
                self._handles.append(inner.register_forward_hook(self._forward_end))

    def _now(self) -> float:
        self.sync()
        return time.perf_counter()

    def _forward_start(self, *_: object) -> None:
        self._started.append(self._now())

    def _forward_end(self, _module: torch.nn.Module, _inputs: object, output: object) -> None:
        self.forward_ms.append((self._now() - self._started.pop()) * 1e3)
        for t in _tensors(output):
            if t.grad_fn is not None:
                self._time_backward(t.grad_fn)

    def _time_backward(self, root: torch.autograd.graph.Node) -> None:
        seen: set[int] = set()
        stack = [root]
        while stack and len(seen) < MAX_NODES:
            node = stack.pop()
            if node is None or id(node) in seen or type(node).__name__ in NOT_TIMED:
                continue
            seen.add(id(node))
            started: list[float] = []
            node.register_prehook(lambda _grads, started=started: self._backward_start(started))
            node.register_hook(lambda _gi, _go, started=started: self._backward_end(started))
            stack.extend(n for n, _ in node.next_functions)

    def _backward_start(self, started: list[float]) -> None:
        started.append(self._now())

    def _backward_end(self, started: list[float]) -> None:
        if started:
            self.backward_ms += (self._now() - started.pop()) * 1e3

    def reset(self) -> None:
        self.forward_ms, self.backward_ms, self._started = [], 0.0, []

    def read(self) -> tuple[float, float]:
        """(forward ms, backward ms) of this rank's lookups since reset()."""
        return sum(self.forward_ms), self.backward_ms

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def _tensors(output: object) -> list[torch.Tensor]:
    """The tensors a lookup returned (a tensor, or a list / tuple / dict of them, or an object with values())."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for x in output for t in _tensors(x)]
    if isinstance(output, dict):
        return [t for x in output.values() for t in _tensors(x)]
    values = getattr(output, "values", None)
    if callable(values):
        try:
            return _tensors(values())
        except TypeError:
            return []
    return []


__all__ = ["EmbeddingTimer", "sharded_collections"]
