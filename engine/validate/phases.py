"""Per-rank phases of a DMP training step, for the truth benchmark: each iteration's wall time, the rank's CPU time
(its process, gloo's threads included) and the wall time of forward (input dist, lookups, output dist), the
lookups alone, backward and the optimizer. Runs under torchrun like engine.validate.worker:

  python -m torch.distributed.run --standalone --nproc-per-node N -m engine.validate.phases CONFIG PLAN OUT_DIR
      [--iters K] [--warmup W]

Writes OUT_DIR/phases{R}.json: {"rank", "median": {name: ms}, "iterations": [{name: ms}, ...]}.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from engine import atomicfile


PHASES = ("wall", "cpu", "forward", "lookup", "backward", "optimizer")


def _lookup_timer(model) -> list[float]:
    """Hooks on the sharded collection's lookup modules; returns the list their wall times (ms) go to."""
    spent: list[float] = []
    started: list[float] = []
    module = model
    while not hasattr(module, "_lookups"):
        module = getattr(module, "module", None) or module._dmp_wrapped_module
    for lookup in module._lookups:
        lookup.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))
        lookup.register_forward_hook(lambda *_: spent.append((time.perf_counter() - started.pop()) * 1e3))
    return spent


def measure(config: str, plan: str, iters: int, warmup: int) -> list[dict]:
    import torch
    import torch.distributed as dist

    from engine.config import load_config
    from engine.planfile import load_plan
    from engine.types import Device
    from engine.validate.batches import local_batches
    from engine.validate.train import build_model

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cfg = load_config(config)
    tables = load_plan(plan, cfg)
    cfg = replace(cfg, topology=replace(cfg.topology, compute_device=Device.CPU,
                                        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", world))))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    device = torch.device("cpu")
    model, optimizer = build_model(cfg, tables, device, 0.01)
    batches, _ = local_batches(cfg, rank, 0, device, warmup + iters)
    lookups = _lookup_timer(model)
    rows = []
    for i in range(warmup + iters):
        lookups.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = model(batches[i % len(batches)]).values().sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        t3, c3 = time.perf_counter(), time.process_time()
        if i >= warmup:
            rows.append({"wall": (t3 - t0) * 1e3, "cpu": (c3 - c0) * 1e3, "forward": (t1 - t0) * 1e3,
                         "lookup": sum(lookups), "backward": (t2 - t1) * 1e3, "optimizer": (t3 - t2) * 1e3})
    dist.barrier()
    dist.destroy_process_group()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.validate.phases", description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("plan")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args(argv)
    rows = measure(args.config, args.plan, args.iters, args.warmup)
    rank = int(os.environ["RANK"])
    median = {k: statistics.median(r[k] for r in rows) for k in PHASES}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    atomicfile.write_json(args.out_dir / f"phases{rank}.json", {"rank": rank, "median": median, "iterations": rows},
                          indent=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
