"""One rank of a validation run, as torchrun starts it: shard the config's EBC with our plan through
DistributedModelParallel, train K iterations on synthetic batches, and write what it measured and holds.

  python -m engine.validate.worker --config C.json --plan P.json --results-dir DIR [--backend gloo|nccl]
      [--iters K] [--warmup W] [--seed S] [--pg-timeout SECONDS]

Writes DIR/rank{R}.json; on any exception DIR/rank{R}.error.json (one line + traceback) and exits 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import socket
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from engine import atomicfile
from engine.errors import EngineError
from engine.validate.types import LEARNING_RATE, Backend


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise EngineError(f"${name} is not set: run the worker under torchrun (python -m torch.distributed.run)")
    return int(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine.validate.worker")
    p.add_argument("--config", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--results-dir", required=True)
    p.add_argument("--backend", choices=[b.value for b in Backend], default=Backend.GLOO.value)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pg-timeout", type=int, default=120)
    p.add_argument("--ids", default=None, help="a sample file whose ids replace the synthetic batches")
    return p.parse_args(argv)


def device_info(torch, device) -> dict:
    import torchrec

    info = {"hostname": socket.gethostname(), "torch_version": torch.__version__,
            "torchrec_version": getattr(torchrec, "__version__", "unknown"), "cpu_count": os.cpu_count() or 0,
            "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(device_name=props.name, device_memory_bytes=int(props.total_memory))
    else:
        info.update(cpu_device_info())
    return info


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's name as runs and fitted terms record it: the model name, with its family, model and stepping where
    the kernel gives them. A virtual machine's model name alone can cover different parts: "AMD EPYC" named two
    machines whose dry-runs were 3-15x apart (docs/benchmarks.md), and terms fitted on one must not price the
    other (engine.calibrate_apply)."""
    try:
        fields: dict[str, str] = {}
        for line in cpuinfo.read_text().splitlines():
            if not line.strip():
                break  # the first processor's block
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        fields = {}
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine()
    part = [f"{label} {fields[key]}" for label, key in (("family", "cpu family"), ("model", "model"),
                                                        ("stepping", "stepping")) if fields.get(key)]
    return name if not part else f"{name} ({', '.join(part)})"


CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
LIBRARIES = ("torch", "fbgemm-gpu-cpu", "fbgemm-gpu", "torchrec")  # the kernels a CPU run's times depend on
_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def cpu_caches(cache_dir: Path = CACHE_DIR) -> dict[str, int]:
    """The first CPU's caches as the kernel lists them, in bytes: {"L1d", "L1i", "L2", "L3", ...}; empty where the
    kernel says nothing (not Linux, a container without /sys)."""
    out: dict[str, int] = {}
    for index in sorted(cache_dir.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        found = re.fullmatch(r"(\d+)([KMG]?)B?", size)
        if found is None:
            continue
        out[f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")] = int(found[1]) * _SIZE_UNITS[found[2]]
    return out


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    """The installed versions of the libraries whose kernels a run times (those installed; none is imported)."""
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def machine_identity() -> dict:
    """What a CPU measurement records of the machine it ran on, so that a fit can say which machine it is for: the
    CPU's name (cpu_name), the platform string (which names a virtual machine's kernel build: two VMs both named
    "AMD EPYC" measured the same plans 3-17x apart), the caches in bytes, and the kernels' library versions."""
    return {"cpu": cpu_name(), "platform": platform.platform(), "caches": cpu_caches(),
            "libraries": library_versions()}


def cpu_device_info() -> dict:
    """What a CPU run stores of its machine in its device_info (validation runs, `db dryrun`): machine_identity with
    the CPU's name as device_name, the name per-term calibration fits by."""
    ident = machine_identity()
    return {"device_name": ident.pop("cpu"), **ident}


def run(args: argparse.Namespace, rank: int, world_size: int) -> dict:
    import torch
    import torch.distributed as dist

    from engine.config import load_config
    from engine.planfile import load_plan
    from engine.validate import train

    backend = Backend(args.backend)
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    cfg = load_config(args.config)
    tables = load_plan(args.plan, cfg)
    if cfg.topology.world_size != world_size:
        raise EngineError(f"the plan is for {cfg.topology.world_size} ranks but torchrun started {world_size}; "
                          f"run with --nproc {cfg.topology.world_size}")
    # placements name this machine's devices: rank R on cuda:(R mod local world size), as torchrun assigns
    cfg = replace(cfg, topology=replace(cfg.topology, local_world_size=local_world, compute_device=backend.device))
    if backend is Backend.NCCL:
        if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
            raise EngineError(f"--backend nccl: rank {rank} needs cuda:{local_rank}, but this machine has "
                              f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} CUDA devices")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend.value, timeout=datetime.timedelta(seconds=args.pg_timeout))
    try:
        out = train.measure(cfg, tables, rank, device, train.Settings(args.iters, args.warmup, args.seed,
                                                                      LEARNING_RATE, args.ids))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return {"rank": rank, "world_size": world_size, **out, "device_info": device_info(torch, device)}


def _write(path: Path, data: dict) -> None:
    atomicfile.write_json(path, data, indent=None)  # the gatherer never reads half a file


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    started = time.monotonic()
    try:
        rank = _env_int("RANK")
        result = run(args, rank, _env_int("WORLD_SIZE"))
    except BaseException as e:  # noqa: BLE001 - every failure is written down for the gatherer
        line = f"{type(e).__name__}: {' '.join(str(e).split())}"[:2000]
        _write(out_dir / f"rank{rank}.error.json", {"rank": rank, "error": line,
                                                    "traceback": traceback.format_exc()[-20000:]})
        print(f"validate worker rank {rank}: {line}", file=sys.stderr)
        traceback.print_exc()
        return 1
    result["wall_s"] = time.monotonic() - started
    _write(out_dir / f"rank{rank}.json", result)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's teardown: torch's and gloo's C++ destructors at exit can abort a rank whose
    # results are already written ("terminate called without an active exception", SIGABRT: seen once in CI on
    # the gloo row_wise run), and torchrun then fails the whole run.
    os._exit(code)
