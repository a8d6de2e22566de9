"""The training loop of one rank: DistributedModelParallel from our plan, K timed iterations of forward,
backward and optimizer, the memory the rank holds and the peak of a step (engine.validate.memory), and the
local shards the sharded module really holds.

Sharded tables train with TorchRec's fused optimizer (the config's optimizer applied inside backward);
data_parallel tables are dense parameters, stepped by the same optimizer class after backward.
"""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.optim import _apply_optimizer_in_backward
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import ShardedTensor, ShardingEnv
from torchrec.optim import RowWiseAdagrad
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter

from engine.errors import EngineError
from engine.torchrec_compat import build_ebc, sharders, to_sharding_plan
from engine.types import Config, Optimizer, ShardingType, TablePlan
from engine.validate import memory
from engine.validate.batches import local_batches
from engine.validate.embtime import EmbeddingTimer
from engine.validate.types import EMBEDDING_TIMES
from engine.validate.shards import Piece, expected_pieces, mismatches, pieces_to_json

OPTIMIZERS = {Optimizer.SGD: torch.optim.SGD, Optimizer.ADAGRAD: torch.optim.Adagrad,
              Optimizer.ROWWISE_ADAGRAD: RowWiseAdagrad, Optimizer.ADAM: torch.optim.Adam}
KIB = 1024
MEMORY_STEPS = 5  # untimed steps measured for memory after the timed ones; the median peak is reported (of 5:
# a gloo buffer freed late on its own thread, on a loaded machine, lifted 2 of 3 steps of a rank by 7% twice in CI)


@dataclass(frozen=True)
class Settings:
    iters: int
    warmup: int
    seed: int
    learning_rate: float
    ids: str | None = None  # a sample file to replay (engine.dryrun.sample_ids), else synthetic batches


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KIB  # Linux: KiB


def build_model(cfg: Config, tables: dict[str, TablePlan], device: torch.device,
                lr: float) -> tuple[DistributedModelParallel, torch.optim.Optimizer]:
    """The EBC on meta, sharded by DMP with our plan; returns the model and its combined optimizer."""
    ebc = build_ebc(cfg, "meta")
    opt_class = OPTIMIZERS[cfg.topology.optimizer]
    sharded = [p for name, p in ebc.named_parameters()
               if tables[name.split(".")[-2]].sharding_type is not ShardingType.DATA_PARALLEL]
    if sharded:
        _apply_optimizer_in_backward(opt_class, sharded, {"lr": lr})
    model = DistributedModelParallel(
        ebc, env=ShardingEnv.from_process_group(dist.group.WORLD),
        plan=to_sharding_plan(cfg, tables, device=device.type), sharders=sharders(cfg, device.type),
        device=device)
    dense = dict(in_backward_optimizer_filter(model.named_parameters()))
    optimizers = [model.fused_optimizer]
    if dense:
        optimizers.append(KeyedOptimizerWrapper(dense, lambda params: opt_class(params, lr=lr)))
    return model, CombinedOptimizer(optimizers)


def local_shards(model: torch.nn.Module) -> dict[str, list[Piece]]:
    """Per table, the (offsets, sizes) of every weight piece this rank holds (ShardedTensor local shards;
    a plain tensor is a data_parallel replica: the whole table)."""
    out: dict[str, list[Piece]] = {}
    for key, value in model.state_dict().items():
        if not key.endswith(".weight"):
            continue
        table = key.split(".")[-2]
        if isinstance(value, ShardedTensor):
            out[table] = sorted((tuple(s.metadata.shard_offsets), tuple(s.metadata.shard_sizes))
                                for s in value.local_shards())
        else:
            out[table] = [((0, 0), tuple(value.shape))]
    return out


def _tensor_bytes(value: object) -> int:
    if isinstance(value, ShardedTensor):
        return sum(s.tensor.numel() * s.tensor.element_size() for s in value.local_shards())
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the weights and optimizer state this rank holds (its local shards and replicas)."""
    weights = sum(_tensor_bytes(v) for k, v in model.state_dict().items() if k.endswith(".weight"))
    return weights + _tensor_bytes(optimizer.state_dict().get("state", {}))


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, kjt, zero_grad: bool = True) -> None:
    loss = model(kjt).values().sum()
    loss.backward()
    optimizer.step()
    if zero_grad:
        optimizer.zero_grad()


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: list, s: Settings,
           sync) -> tuple[list[float], dict[str, list[float]]]:
    """Each timed step's wall time, and this rank's own embedding work in it (engine.validate.embtime): the
    lookups' forward and backward, the optimizer step, and their sum."""
    times: list[float] = []
    parts: dict[str, list[float]] = {k: [] for k in EMBEDDING_TIMES}
    timer = EmbeddingTimer(model, sync)
    try:
        for i in range(s.warmup + s.iters):
            kjt = batches[i % len(batches)]
            timer.reset()
            t0 = time.perf_counter()
            model(kjt).values().sum().backward()
            sync()
            t1 = time.perf_counter()
            optimizer.step()
            sync()
            t2 = time.perf_counter()
            optimizer.zero_grad()
            sync()
            if i >= s.warmup:
                times.append((time.perf_counter() - t0) * 1000.0)
                fwd, bwd = timer.read()
                opt = (t2 - t1) * 1000.0
                for k, v in zip(EMBEDDING_TIMES, (fwd + bwd + opt, fwd, bwd, opt)):
                    parts[k].append(v)
    finally:
        timer.remove()
    return times, parts


def _step_peaks(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: list, device: torch.device,
                before: int | None) -> tuple[list[int], list[int]]:
    """Per measured step: the bytes allocated when it began and at its peak, each with the step's own batch
    (CPU: the c10 allocator's count since the model was built, batches made before; CUDA: allocated bytes
    above `before`, less the batches other steps use)."""
    sizes = [memory.batch_bytes(b) for b in batches]
    if before is None:  # CPU allocations not counted (track_cpu_allocations): no step peak
        return [], []
    if device.type != "cuda":
        starts, peaks = memory.cpu_step_peaks(lambda i: _step(model, optimizer, batches[i % len(batches)]),
                                              MEMORY_STEPS)
        mine = [sizes[i % len(batches)] for i in range(len(peaks))]
        return [a + b for a, b in zip(starts, mine)], [a + b for a, b in zip(peaks, mine)]
    starts, peaks = [], []
    for i in range(MEMORY_STEPS):
        others = sum(sizes) - sizes[i % len(batches)]
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        starts.append(torch.cuda.memory_allocated(device) - before - others)
        _step(model, optimizer, batches[i % len(batches)])
        torch.cuda.synchronize(device)
        peaks.append(torch.cuda.max_memory_allocated(device) - before - others)
    return starts, peaks


def measure_memory(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: list, device: torch.device,
                   before: int | None) -> dict:
    """The rank file's memory fields: what the model and optimizers hold after a step, by part (read before
    zero_grad, so data-parallel gradients show as the DDP buckets they are views of), and a step's peak."""
    starts, peaks = _step_peaks(model, optimizer, batches, device, before)
    _step(model, optimizer, batches[0], zero_grad=False)
    held = memory.held_parts(model, optimizer)
    optimizer.zero_grad()
    out = {"held_bytes": held.pop("held_bytes"), "batch_bytes": memory.batch_bytes(batches[0])}
    if peaks:
        out.update(step_peak_bytes=memory.median_int(peaks), step_peak_max_bytes=max(peaks),
                   step_start_bytes=memory.median_int(starts))
    out.update({f"held_{k}": v for k, v in held.items()})
    return out


def measure(cfg: Config, tables: dict[str, TablePlan], rank: int, device: torch.device, s: Settings) -> dict:
    """Build, train and inspect this rank; the numbers its rank file reports."""
    if s.iters < 1 or s.warmup < 0:
        raise EngineError(f"--iters must be >= 1 and --warmup >= 0, got {s.iters} and {s.warmup}")
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = _peak_rss_bytes()
    batches, ids = local_batches(cfg, rank, s.seed, device, s.warmup + s.iters, s.ids)
    for b in batches:
        b.offsets()  # computed now, with the batch, rather than inside a measured step
    counted = cuda or memory.track_cpu_allocations()
    model, optimizer = build_model(cfg, tables, device, s.learning_rate)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    times, embedding = _train(model, optimizer, batches, s, sync)
    peak = torch.cuda.max_memory_allocated(device) - before if cuda else max(0, _peak_rss_bytes() - before)
    measured = measure_memory(model, optimizer, batches, device, (before if cuda else 0) if counted else None)
    held = local_shards(model)
    return {
        "iteration_ms": float(statistics.median(times)), "iteration_ms_all": times, "peak_bytes": int(peak),
        **{k: float(statistics.median(v)) for k, v in embedding.items()}, "embedding_ms_all": embedding["embedding_ms"],
        "peak_rss_bytes": _peak_rss_bytes(), "state_bytes": state_bytes(model, optimizer),
        "local_shards": pieces_to_json(held), "mismatches": mismatches(expected_pieces(cfg, tables, rank), held),
        "batch_ids": int(sum(b.values().numel() for b in batches[:1])), "ids": ids, **measured,
    }
