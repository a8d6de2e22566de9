"""The torch side of the dry-run: pick the device and the backend, then time the ranks' steps.

Imported only when a dry-run runs (it imports torch, and fbgemm_gpu when that backend is chosen).
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import time
from typing import Callable, Iterator, NamedTuple

import numpy as np
import torch

from engine.errors import EngineError
from engine.types import Optimizer

from engine.dryrun.types import Backend, DryrunDevice, DryrunSettings, Piece
from engine.dryrun.workload import PieceBatch, turns


class RankTiming(NamedTuple):
    ms: float  # median step
    p25_ms: float  # 25th percentile step
    weight_bytes: int  # as allocated
    optimizer_bytes: int


def pick_device(device: DryrunDevice) -> torch.device:
    if device is DryrunDevice.CUDA and not torch.cuda.is_available():
        raise EngineError("--device cuda: no CUDA device here (torch.cuda.is_available() is False); "
                          "use --device cpu")
    return torch.device(device.value)


def pick_backend(s: DryrunSettings, pieces: list[Piece], optimizer: Optimizer,
                 device: torch.device) -> tuple[Backend, list[str]]:
    """fbgemm when asked or (auto) when it imports and runs the case; otherwise torch, with a note why."""
    if s.backend is Backend.TORCH:
        return Backend.TORCH, []
    try:
        from engine.dryrun import fbgemm_backend
    except (ImportError, OSError, RuntimeError) as e:
        why = f"fbgemm_gpu cannot be imported ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    else:
        why = fbgemm_backend.unsupported(pieces, optimizer, device)
        if why is None:
            return Backend.FBGEMM, []
    if s.backend is Backend.FBGEMM:
        raise EngineError(f"--backend fbgemm: {why}; use --backend torch or --backend auto")
    return Backend.TORCH, [f"{why}: measured with the torch fallback"]


# glibc's malloc, held while the torch fallback measures (kept_heap); its defaults put back after
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
KEPT_MMAP_THRESHOLD = 64 << 20  # a step's temporaries under this come from the heap, not a fresh mapping each time
KEPT_TRIM_THRESHOLD = 256 << 20  # free heap kept up to this, not handed back to the system after every step
GLIBC_DEFAULT_THRESHOLD = 128 * 1024  # both thresholds' defaults
KEPT_HEAP_NOTE = ("torch fallback measured with glibc keeping freed memory (mmap threshold 64 MiB, trim threshold "
                  "256 MiB, defaults put back after): a fresh process times steady steps, not its heap's growth")


def _glibc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc, not another libc of that name)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def kept_heap(active: bool) -> Iterator[bool]:
    """While the torch fallback measures: glibc keeps what a step frees for the next step (yields True), where glibc
    is the C library; else nothing changes (yields False). The fallback's steps allocate temporaries of 1-30 MB;
    with glibc's defaults a fresh process maps and returns them step after step until its heap settles, and a
    dry-run run as a fresh process (bench.measured, measure-tables) timed that: m7-3r-adam-zipf's ranks measured
    13.5/17.4/9.7 ms in the first run of a process, 8.6/9.9/9.1 in the third, 9.3/10.6/10.2 from the first with
    the heap kept (docs/dryrun.md). After: the defaults are put back (fixed, no longer adjusted as the process
    runs) and the free heap is handed back to the system."""
    libc = _glibc() if active else None
    if libc is None:
        yield False
        return
    libc.mallopt(M_MMAP_THRESHOLD, KEPT_MMAP_THRESHOLD)
    libc.mallopt(M_TRIM_THRESHOLD, KEPT_TRIM_THRESHOLD)
    try:
        yield True
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
        libc.malloc_trim(0)


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _rank_class(backend: Backend) -> type:
    if backend is Backend.FBGEMM:
        from engine.dryrun.fbgemm_backend import FbgemmRank
        return FbgemmRank
    from engine.dryrun.torch_backend import TorchRank
    return TorchRank


class _Timed:
    """One rank's model and the wall-clock ms of its timed steps."""

    def __init__(self, model, sync: Callable[[], None], warmup: int):
        self.model, self.sync, self.times = model, sync, []
        for _ in range(warmup):
            model.step()
        sync()

    def turn(self, timed: int) -> None:
        """One untimed step (the rank's caches warm again after whatever ran between), then `timed` timed steps."""
        self.model.step()
        self.sync()
        for _ in range(timed):
            t0 = time.perf_counter()
            self.model.step()
            self.sync()
            self.times.append((time.perf_counter() - t0) * 1000.0)

    def result(self) -> RankTiming:
        return RankTiming(float(statistics.median(self.times)), float(np.percentile(self.times, 25)),
                          self.model.weight_bytes, self.model.optimizer_bytes)


def measure_ranks(n_ranks: int, steps_of: Callable[[int], list[list[PieceBatch]]], backend: Backend,
                  device: torch.device, optimizer: Optimizer, s: DryrunSettings, together: bool) -> list[RankTiming]:
    """Each rank's timing: s.warmup untimed steps, then its s.iters timed steps in turns (workload.turns), each
    after one untimed step; the median is what a rank reports, the 25th percentile (less moved by another process
    taking the core) is what the cost terms were fitted to (bench.cost_terms). steps_of(r): rank r's batches
    (steps[k][i]: piece i's ids in step k), asked once per rank in rank order.

    together: every rank is built first and the turns go round the ranks, so the machine's speed, which on a shared
    VM drifts by tens of percent within seconds, falls on every rank alike (python -m bench.schedule, 20 stored plans
    on a 2-core VM: a rank's share of its plan moved 0.024 between runs, log SD median, against 0.068 one rank after
    another); else each rank is built, run through all its turns and freed before the next, holding one rank's
    memory at a time."""
    cls = _rank_class(backend)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    out = [RankTiming(0.0, 0.0, 0, 0)] * n_ranks
    for group in [range(n_ranks)] if together else [[r] for r in range(n_ranks)]:
        built = {r: _Timed(cls(steps, optimizer, device, s.learning_rate), sync, s.warmup)
                 for r in group if (steps := steps_of(r)) and steps[0]}
        for timed in turns(s.iters):
            for rank in built.values():
                rank.turn(timed)
        for r, rank in built.items():
            out[r] = rank.result()
        del built  # one group's memory at a time
    return out
