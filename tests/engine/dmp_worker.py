"""One rank of the DistributedModelParallel check: shard the config's EBC with our plan on gloo/CPU,
run forward and backward on a KeyedJaggedTensor batch, and write what this rank holds as JSON.

Run by tests/engine/test_dmp_gloo.py: python tests/engine/dmp_worker.py --rank R --world-size N
--init-file PATH --config CONFIG.json --out RESULT.json
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import torch
import torch.distributed as dist
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import ShardedTensor, ShardingEnv
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

import engine
from engine.torchrec_compat import build_ebc, sharders, to_sharding_plan

BATCH_SIZE = 8  # samples per rank
IDS_PER_SAMPLE = 3
PG_TIMEOUT_S = 60  # collectives fail instead of hanging when a peer dies


def batch(cfg: engine.Config, rank: int) -> KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(rank)
    keys, lengths, values = [], [], []
    for t in cfg.tables:
        for f in t.feature_names:
            n = torch.randint(0, IDS_PER_SAMPLE + 1, (BATCH_SIZE,), generator=gen)
            keys.append(f)
            lengths.append(n)
            values.append(torch.randint(0, t.num_embeddings, (int(n.sum()),), generator=gen))
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat(values), lengths=torch.cat(lengths))


def local_shards(model: torch.nn.Module) -> dict[str, list[dict]]:
    """Per table, the (offsets, sizes) of the weight pieces this rank holds."""
    out: dict[str, list[dict]] = {}
    for key, value in model.state_dict().items():
        if not key.endswith(".weight"):
            continue
        table = key.split(".")[-2]
        if isinstance(value, ShardedTensor):
            out[table] = [{"offsets": list(s.metadata.shard_offsets), "sizes": list(s.metadata.shard_sizes)}
                          for s in value.local_shards()]
        else:  # data_parallel keeps a plain full tensor on every rank
            out[table] = [{"offsets": [0, 0], "sizes": list(value.shape)}]
    return out


def run(args: argparse.Namespace) -> dict:
    dist.init_process_group("gloo", init_method=f"file://{args.init_file}", rank=args.rank,
                            world_size=args.world_size, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    cfg = engine.load_config(args.config)
    ours = engine.plan(cfg, engine.PlannerSettings(search=True, time_budget_s=1.0))
    model = DistributedModelParallel(
        build_ebc(cfg, "meta"),
        env=ShardingEnv.from_process_group(dist.group.WORLD),
        plan=to_sharding_plan(cfg, ours.tables, device="cpu"),
        sharders=sharders(cfg, "cpu"),
        device=torch.device("cpu"),
    )
    before = {k: v.detach().clone() for k, v in _local_weights(model).items()}
    out = model(batch(cfg, args.rank))
    values = out.values()
    values.sum().backward()
    after = _local_weights(model)
    changed = sorted(k for k in before if not torch.equal(before[k], after[k].detach()))
    grads = sorted(n for n, p in model.named_parameters() if p.grad is not None)
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": args.rank, "output_shape": list(values.shape), "output_keys": list(out.keys()),
            "local_shards": local_shards(model), "plan": engine.plan_to_dict(ours)["plan"],
            "weights_changed": changed, "params_with_grad": grads}


def _local_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in model.state_dict().items():
        if isinstance(value, ShardedTensor):
            for i, s in enumerate(value.local_shards()):
                out[f"{key}[{i}]"] = s.tensor
        else:
            out[key] = value
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--init-file", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    result = run(args)
    Path(args.out).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
