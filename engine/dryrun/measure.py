"""The torch side of the dry-run: pick the device and the backend, then time one rank's step.

Imported only when a dry-run runs (it imports torch, and fbgemm_gpu when that backend is chosen).
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import time
from typing import Callable, Iterator

import numpy as np
import torch

from engine.errors import EngineError
from engine.types import Optimizer

from engine.dryrun.types import Backend, DryrunDevice, DryrunSettings, Piece
from engine.dryrun.workload import PieceBatch


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


def step_ms(step: Callable[[], None], s: DryrunSettings, sync: Callable[[], None]) -> tuple[float, float]:
    """(median, 25th percentile) wall-clock ms of step() over s.iters runs, after s.warmup untimed ones: the median is
    what a rank reports; the 25th percentile, less moved by another process taking the core, is what the cost terms
    were fitted to (bench.cost_terms), so both are kept."""
    for _ in range(s.warmup):
        step()
    sync()
    times = []
    for _ in range(s.iters):
        t0 = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t0) * 1000.0)
    return float(statistics.median(times)), float(np.percentile(times, 25))


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


def measure_rank(steps: list[list[PieceBatch]], backend: Backend, device: torch.device, optimizer: Optimizer,
                 s: DryrunSettings) -> tuple[float, float, int, int]:
    """(median step ms, its 25th percentile, weight bytes, optimizer-state bytes) of one rank's pieces, as
    allocated; each step looks up the next of `steps` (steps[k][i]: piece i's ids in step k)."""
    if not steps or not steps[0]:
        return 0.0, 0.0, 0, 0
    if backend is Backend.FBGEMM:
        from engine.dryrun.fbgemm_backend import FbgemmRank as Rank
    else:
        from engine.dryrun.torch_backend import TorchRank as Rank
    model = Rank(steps, optimizer, device, s.learning_rate)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ms, p25 = step_ms(model.step, s, sync)
    return ms, p25, model.weight_bytes, model.optimizer_bytes
