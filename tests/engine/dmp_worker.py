"""One rank of the DistributedModelParallel check: shard the config's EBC with our plan on gloo/CPU, give
every weight a known value, run forward and backward on a KeyedJaggedTensor batch, write what it saw as JSON.

Run by tests/engine/test_dmp_gloo.py:
  python tests/engine/dmp_worker.py --rank R --world-size N --init-file PATH --config CONFIG.json
      --plan PLAN.json --out OUT.json
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
from engine.planfile import table_plan_to_dict
from engine.torchrec_compat import build_ebc, sharders, to_sharding_plan

BATCH_SIZE = 8  # samples per rank
MAX_IDS_PER_SAMPLE = 3
PG_TIMEOUT_S = 60  # collectives fail instead of hanging when a peer dies


def reference_weight(t: engine.TableConfig) -> torch.Tensor:
    """The value every rank writes into its pieces of table t: distinct per (row, column)."""
    cells = torch.arange(t.num_embeddings * t.embedding_dim, dtype=torch.float64)
    return (cells.remainder(251) / 251 - 0.5).reshape(t.num_embeddings, t.embedding_dim).float()


def batch(cfg: engine.Config, rank: int) -> KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(1234 + rank)
    keys, lengths, values = [], [], []
    for t in cfg.tables:
        for f in t.feature_names:
            n = torch.randint(1, MAX_IDS_PER_SAMPLE + 1, (BATCH_SIZE,), generator=gen)
            keys.append(f)
            lengths.append(n)
            values.append(torch.randint(0, t.num_embeddings, (int(n.sum()),), generator=gen))
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat(values), lengths=torch.cat(lengths))


def expected_pooled(cfg: engine.Config, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
    out = {}
    for t in cfg.tables:
        w = reference_weight(t)
        for f in t.feature_names:
            rows = [w[ids].sum(0) for ids in kjt[f].to_dense()]
            pooled = torch.stack(rows)
            if t.pooling is engine.PoolingType.MEAN:
                pooled = pooled / kjt[f].lengths().unsqueeze(1).clamp(min=1)
            out[f] = pooled
    return out


def local_pieces(model: torch.nn.Module) -> dict[str, list[tuple[list[int], torch.Tensor]]]:
    """Per table, (offsets, tensor) of each weight piece this rank holds; data_parallel: the full table."""
    out: dict[str, list[tuple[list[int], torch.Tensor]]] = {}
    for key, value in model.state_dict().items():
        if not key.endswith(".weight"):
            continue
        table = key.split(".")[-2]
        if isinstance(value, ShardedTensor):
            out[table] = [(list(s.metadata.shard_offsets), s.tensor) for s in value.local_shards()]
        else:
            out[table] = [([0, 0], value)]
    return out


@torch.no_grad()
def write_reference_weights(cfg: engine.Config, model: torch.nn.Module) -> None:
    for table, pieces in local_pieces(model).items():
        ref = reference_weight(cfg.table(table))
        for (r, c), tensor in pieces:
            tensor.copy_(ref[r:r + tensor.shape[0], c:c + tensor.shape[1]])


def run(args: argparse.Namespace) -> dict:
    dist.init_process_group("gloo", init_method=f"file://{args.init_file}", rank=args.rank,
                            world_size=args.world_size, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    cfg = engine.load_config(args.config)
    tables = engine.load_plan(args.plan, cfg)
    model = DistributedModelParallel(
        build_ebc(cfg, "meta"),
        env=ShardingEnv.from_process_group(dist.group.WORLD),
        plan=to_sharding_plan(cfg, tables, device="cpu"),
        sharders=sharders(cfg, "cpu"),
        device=torch.device("cpu"),
    )
    write_reference_weights(cfg, model)
    kjt = batch(cfg, args.rank)
    out = model(kjt)
    expected = expected_pooled(cfg, kjt)
    errors = {f: float((out[f].detach() - expected[f]).abs().max()) for f in expected}
    out.values().sum().backward()
    # fused kernels apply their optimizer (SGD) inside backward; data_parallel's dense kernel leaves .grad
    changed = sorted(t for t, pieces in local_pieces(model).items() for (r, c), tensor in pieces
                     if not torch.equal(tensor, reference_weight(cfg.table(t))[r:r + tensor.shape[0],
                                                                                c:c + tensor.shape[1]]))
    grads = sorted(n.split(".")[-2] for n, p in model.named_parameters() if p.grad is not None and p.grad.any())
    dist.barrier()
    dist.destroy_process_group()
    shards = {t: [{"offsets": o, "sizes": list(x.shape)} for o, x in pieces]
              for t, pieces in local_pieces(model).items()}
    return {"rank": args.rank, "output_shape": list(out.values().shape), "output_keys": list(out.keys()),
            "max_abs_error": errors, "local_shards": shards, "batch_size": BATCH_SIZE,
            "plan": {n: table_plan_to_dict(tp) for n, tp in tables.items()},
            "tables_updated": changed, "tables_with_grad": grads}


def main(run=run) -> None:
    """Parse the worker's arguments, run it, write its report (tests/engine/dmp_collection_worker.py too)."""
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--init-file", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--plan", required=True, help="a plan file (python -m engine plan --out)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    Path(args.out).write_text(json.dumps(run(args)), encoding="utf-8")


if __name__ == "__main__":
    main()
