"""The latency of one collective round among world_size CPU processes over gloo, as `measure-tables` times it for
the profile's collective_ms (engine.profile: each sharding type a plan uses adds its rounds to every rank's step).

A dry-run times kernels only, so a plan priced on measured tables alone sees no cost in adding a sharding type; in
real DMP runs on the VM measured, a plan that added column_wise to table_wise ran 1.24x slower per step than
TorchRec's (docs/estimator.md, "Tables measured alone"). Here world_size processes (spawned, one thread each, on
this machine's loopback) run tiny all-to-alls after a barrier; the median all-to-all over (world_size - 1), the
rounds engine.profile counts for one, is the round's latency. On the VM measured: 0.16, 0.18 and 0.66 ms a round
for 2, 3 and 4 processes on its 2 cores; the real runs' extra type there was 0.47 ms a round at 4 ranks.
"""

from __future__ import annotations

import os
import statistics
import time

from engine.validate.launch import free_port

WARMUP = 20
ITERS = 200
ELEMENTS = 16  # per peer: latency, not bandwidth


def _rank(rank: int, world: int, port: int, iters: int, out) -> None:  # pragma: no cover - runs in a child process
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        x = torch.zeros(world * ELEMENTS)
        y = torch.empty_like(x)
        for _ in range(WARMUP):
            dist.all_to_all_single(y, x)
        times = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_to_all_single(y, x)
            times.append((time.perf_counter() - t0) * 1000.0)
        if rank == 0:
            out.put(statistics.median(times))
    finally:
        dist.destroy_process_group()


def all_to_all_ms(world_size: int, iters: int = ITERS) -> float:
    """The median ms of one tiny all-to-all among world_size gloo processes on this machine."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(_rank, args=(world_size, free_port(), iters, out), nprocs=world_size, start_method="spawn")
    return float(out.get())


def collective_record(world_size: int, iters: int = ITERS) -> dict | None:
    """What a costs file keeps: the all-to-all's ms and a round's (None for one rank: no collectives)."""
    if world_size < 2:
        return None
    ms = all_to_all_ms(world_size, iters)
    return {"backend": "gloo", "world_size": world_size, "iters": iters, "all_to_all_ms": ms,
            "round_ms": ms / (world_size - 1)}


__all__ = ["all_to_all_ms", "collective_record"]
