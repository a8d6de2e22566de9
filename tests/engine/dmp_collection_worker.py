"""One rank of the DMPCollection check: TorchRec 1.8's 2D wrapper given our group's plan on gloo/CPU, as
DistributedModelParallel is given a plan in tests/engine/dmp_worker.py. Writes what happened as JSON: the error
TorchRec raised, or the shards this rank holds (world ranks, after DMPCollection's remap) and its forward's shape.

Run by tests/engine/test_dmp_collection.py:
  python tests/engine/dmp_collection_worker.py --rank R --world-size N --init-file PATH --config CONFIG.json
      --plan PLAN.json --out OUT.json
"""

from __future__ import annotations

import argparse
import datetime

import torch
import torch.distributed as dist
from torchrec.distributed.model_parallel import DMPCollection

import engine
from engine.torchrec_compat import build_ebc, sharders, to_sharding_plan
from tests.engine.dmp_worker import PG_TIMEOUT_S, batch, local_pieces, main


def run(args: argparse.Namespace) -> dict:
    dist.init_process_group("gloo", init_method=f"file://{args.init_file}", rank=args.rank,
                            world_size=args.world_size, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    cfg = engine.load_config(args.config)
    tables = engine.load_plan(args.plan, cfg)
    try:
        model = DMPCollection(
            module=build_ebc(cfg, "meta"), device=torch.device("cpu"),
            plan=to_sharding_plan(cfg, tables, device="cpu"), world_size=args.world_size,
            sharding_group_size=cfg.topology.sharding_group_size, global_pg=dist.group.WORLD,
            sharders=sharders(cfg, "cpu"))
    except Exception as e:  # what TorchRec says, recorded for the test to pin
        dist.destroy_process_group()
        return {"rank": args.rank, "error": f"{type(e).__name__}: {e}"}
    out = model(batch(cfg, args.rank))
    out.values().sum().backward()
    model.sync()
    dist.barrier()
    dist.destroy_process_group()
    shards = {t: [{"offsets": o, "sizes": list(x.shape)} for o, x in pieces]
              for t, pieces in local_pieces(model).items()}
    return {"rank": args.rank, "error": None, "local_shards": shards, "output_shape": list(out.values().shape)}


if __name__ == "__main__":
    main(run)
