"""What a rank's sharded model really holds, and the peak of a step, measured exactly: the distinct storages of
every tensor the model and its optimizers reach (storages counted once), and on CPU the c10 allocator's running
total of bytes allocated, read through torch's profiler. Imports torch; docs/validation.md, "Memory".
"""

from __future__ import annotations

import ctypes
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torchrec.distributed.types import ShardedTensor

C10_TRACKING_FLAG = "FLAGS_caffe2_report_cpu_memory_usage"  # c10: count every CPU allocation, on every thread
MAX_DEPTH = 40  # module attributes nest about 12 deep in DMP; this stops a runaway walk
WALKED_PACKAGES = ("torch", "torchrec", "fbgemm_gpu")  # objects of these packages are walked into
# Held storages by part, from the attribute that holds them (fbgemm's TBE names) when state_dicts do not say.
CACHE_NAMES = ("lxu_cache_weights", "lxu_cache_state", "lxu_state", "cache_index_table_map")
KEPT_INPUT_NAMES = ("_indices", "_offsets")  # the TBE keeps its last forward's ids and offsets
BOOKKEEPING_SUFFIXES = ("_offsets", "_placements", "_physical_offsets", "_physical_placements")
STEP_MARK = "memory step"


def track_cpu_allocations() -> bool:
    """Make c10's CPU allocator count every allocation and free, on every thread, from now on (the profiler
    alone counts only its own thread's frees, and gloo frees buffers on its threads). Set before the model is
    built, so the count is the model's, the optimizers' and the steps': not the runtime's. False where this
    torch build has no such flag: the step peak is then not measured."""
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libc10.so"))
        ctypes.c_bool.in_dll(lib, C10_TRACKING_FLAG).value = True
    except (OSError, ValueError):
        return False
    return True


def _storage(t: torch.Tensor) -> tuple[int, int] | None:
    if t.device.type == "meta":
        return None
    s = t.untyped_storage()
    return (s.data_ptr(), s.nbytes()) if s.nbytes() else None


def _tensors(obj: object, name: str, depth: int, seen: set[int]) -> Iterator[tuple[str, torch.Tensor]]:
    """(attribute path, tensor) of every tensor reachable through modules, optimizers, lists, dicts and the
    attributes of torch, torchrec and fbgemm objects; ShardedTensors give their local shards, tensors their grad."""
    if isinstance(obj, ShardedTensor):
        for s in obj.local_shards():
            yield name, s.tensor
        return
    if isinstance(obj, torch.Tensor):
        yield name, obj
        if obj.grad is not None:
            yield f"{name}.grad", obj.grad
        return
    if depth > MAX_DEPTH or id(obj) in seen or isinstance(obj, torch.distributed.ProcessGroup):
        return
    if isinstance(obj, dict):
        seen.add(id(obj))
        for k, v in list(obj.items()):
            yield from _tensors(v, f"{name}.{k}" if isinstance(k, (str, int)) else name, depth + 1, seen)
    elif isinstance(obj, (list, tuple, set)):
        seen.add(id(obj))
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{name}[{i}]", depth + 1, seen)
    elif type(obj).__module__.split(".")[0] in WALKED_PACKAGES and hasattr(obj, "__dict__"):
        seen.add(id(obj))
        yield from _tensors(vars(obj), name, depth + 1, seen)


def _part(path: str) -> str:
    leaf = path.rsplit(".", 1)[-1]
    if leaf in KEPT_INPUT_NAMES:
        return "input_bytes"
    if leaf.startswith(CACHE_NAMES):
        return "cache_bytes"
    if leaf.endswith(BOOKKEEPING_SUFFIXES):
        return "other_bytes"
    if leaf.startswith("momentum"):
        return "optimizer_bytes"
    if leaf.startswith("weights_"):
        return "weights_bytes"
    return "other_bytes"


def held_parts(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the distinct storages the model and its optimizers hold, by part (weights, optimizer state,
    data-parallel gradients, the UVM cache, the kernels' kept ids, other buffers), and their total held_bytes."""
    claimed: dict[int, str] = {}
    sizes: dict[int, int] = {}

    def claim(part: str, tensors: Iterator[tuple[str, torch.Tensor]], by_name: bool = False) -> None:
        for path, t in tensors:
            key = _storage(t)
            if key and key[0] not in claimed:
                claimed[key[0]], sizes[key[0]] = (_part(path) if by_name else part), key[1]

    state = model.state_dict()
    claim("weights_bytes", _tensors({k: v for k, v in state.items() if k.endswith(".weight")}, "w", 0, set()))
    claim("optimizer_bytes", _tensors(optimizer.state_dict().get("state", {}), "opt", 0, set()))
    claim("grad_bytes", ((n, p.grad) for n, p in model.named_parameters() if p.grad is not None))
    claim("", _tensors(model, "model", 0, set()), by_name=True)
    claim("", _tensors(optimizer, "optimizer", 0, set()), by_name=True)
    parts = {p: 0 for p in ("weights_bytes", "optimizer_bytes", "grad_bytes", "cache_bytes", "input_bytes",
                            "other_bytes")}
    for ptr, part in claimed.items():
        parts[part] += sizes[ptr]
    parts["held_bytes"] = sum(sizes.values())
    return parts


def batch_bytes(kjt) -> int:
    """Bytes of a KeyedJaggedTensor's storages (ids, lengths, offsets, weights), each counted once."""
    keys = {_storage(t) for t in (kjt.values(), kjt.lengths_or_none(), kjt.offsets_or_none(), kjt.weights_or_none())
            if t is not None}
    return sum(k[1] for k in keys if k)


def _allocations(prof) -> list:
    """The profiler's allocation events, in time order, with their record_function ancestors."""
    out, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        ev = stack.pop()
        stack.extend(ev.children)
        if type(ev.extra_fields).__name__.endswith("Allocation"):
            out.append(ev)
    return sorted(out, key=lambda e: e.start_time_ns)


def _step_of(ev) -> str | None:
    p = ev.parent
    while p is not None:
        if p.name.startswith(STEP_MARK):
            return p.name
        p = p.parent
    return None


def cpu_step_peaks(step: Callable[[int], None], steps: int) -> tuple[list[int], list[int]]:
    """Run `steps` steps under torch's profiler; per step the allocator's total when it began and its largest
    total during it (bytes c10 allocated since track_cpu_allocations and not yet freed). Empty lists where this
    torch's profiler has no event tree to read."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for i in range(steps):
            with record_function(f"{STEP_MARK} {i}"):
                torch.empty(1)  # an allocation at the very start: the total before the step
                step(i)
    starts: dict[str, int] = {}
    peaks: dict[str, int] = {}
    try:
        events = _allocations(prof)
    except AttributeError:
        return [], []
    for ev in events:
        name = _step_of(ev)
        if name is None:
            continue
        f = ev.extra_fields
        starts.setdefault(name, f.total_allocated - f.alloc_size)
        peaks[name] = max(peaks.get(name, 0), f.total_allocated)
    names = [f"{STEP_MARK} {i}" for i in range(steps) if f"{STEP_MARK} {i}" in peaks]
    return [starts[n] for n in names], [peaks[n] for n in names]


def median_int(values: list[int]) -> int:
    return int(statistics.median(values)) if values else 0
