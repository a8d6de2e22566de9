"""Any plan's per-rank cost under TorchRec 1.8's own estimator (EmbeddingPerfEstimator): the sum its partitioner
balances, for our plans and TorchRec's alike (bench.planner_vs_torchrec scores both with both estimators). Imports
torch and torchrec, as engine.torchrec_compat does.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Union

import numpy as np
from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
from torchrec.distributed.planner.shard_estimators import EmbeddingPerfEstimator
from torchrec.distributed.planner.types import ParameterConstraints, ShardingOption

from engine.errors import PlanningError
from engine.torchrec_compat import planning_ebc, quiet_torchrec, sharders, torchrec_constraints, torchrec_topology
from engine.types import Config, Plan, ShardingType, TablePlan


def _pinned_constraints(cfg: Config, tables: dict[str, TablePlan]) -> dict[str, ParameterConstraints]:
    """The config's constraints narrowed, per table, to the plan's sharding type and kernel, and for column splits
    to the plan's shard width as min_partition (TorchRec's enumerator then cuts exactly those columns: it takes
    the first multiple of 4 from min_partition up that divides the dim, 128 when none is given)."""
    base = torchrec_constraints(cfg)
    out = {}
    for t in cfg.tables:
        tp = tables[t.name]
        c = base.get(t.name) or ParameterConstraints()
        width = c.min_partition
        if tp.sharding_type.has_width and tp.shards:
            width = tp.shards[0].sizes[1]
        out[t.name] = dataclasses.replace(c, sharding_types=[tp.sharding_type.value],
                                          compute_kernels=[tp.compute_kernel.value], min_partition=width)
    return out


def _no_option(name: str, tp: TablePlan, why: str) -> PlanningError:
    return PlanningError(
        f"TorchRec's estimator cannot price table {name!r} as planned ({tp.sharding_type.value}/"
        f"{tp.compute_kernel.value}): {why}.", tables=(name,),
        fixes=("give the table a sharding TorchRec enumerates: column splits of equal widths that are multiples "
               "of 4 and divide the dim, row splits as TorchRec cuts them (ceil(rows / ranks) per shard)",))


def _enumerate_pinned(cfg: Config, tables: dict[str, TablePlan]) -> list[ShardingOption]:
    topo, cons = torchrec_topology(cfg), _pinned_constraints(cfg, tables)
    enumerator = EmbeddingEnumerator(topology=topo, batch_size=cfg.topology.batch_size, constraints=cons,
                                     estimator=[EmbeddingPerfEstimator(topo, cons)])  # perf only: no storage
    try:
        return enumerator.enumerate(module=planning_ebc(cfg), sharders=sharders(cfg))
    except RuntimeError as e:  # "No available sharding type and compute kernel combination ... for NAME. ..."
        name = next((t.name for t in cfg.tables if re.search(rf"\bfor {re.escape(t.name)}\.", str(e))), None)
        if not str(e).startswith("No available") or name is None:
            raise
        raise _no_option(name, tables[name], f"the sharder does not offer it on {cfg.topology.compute_device.value}") \
            from None


def torchrec_rank_costs(cfg: Config, plan: Union[Plan, dict[str, TablePlan]]) -> np.ndarray:
    """Each rank's summed shard cost (ms) as TorchRec 1.8's EmbeddingPerfEstimator prices the plan: the sum its
    partitioner balances, `Perf.total` of each shard (forward and backward compute and comms, prefetch; not the
    input distribution). Works for any plan of the config: TorchRec's enumerator is asked for exactly each table's
    planned option and its shards are matched to the plan's by (offsets, sizes); data_parallel puts one replica on
    each of the table's ranks. A table TorchRec cannot price as planned raises PlanningError naming it."""
    tables = plan.tables if isinstance(plan, Plan) else plan
    missing = tuple(t.name for t in cfg.tables if t.name not in tables)
    if missing:
        raise PlanningError(f"the plan places no shards for tables: {', '.join(missing)}.", tables=missing)
    costs = np.zeros(torchrec_topology(cfg).world_size)  # 2D: the group's ranks (engine.replicas)
    with quiet_torchrec():
        options = {so.name: so for so in _enumerate_pinned(cfg, tables)}
    for t in cfg.tables:
        tp, so = tables[t.name], options.get(t.name)
        if so is None:
            raise _no_option(t.name, tp, "TorchRec enumerated no option for it")
        if tp.sharding_type is ShardingType.DATA_PARALLEL or tp.shards is None:
            for rank, shard in zip(tp.ranks, so.shards):
                costs[rank] += shard.perf.total
            continue
        theirs = {(tuple(s.offset), tuple(s.size)): s.perf.total for s in so.shards}
        mine = [(tuple(s.offsets), tuple(s.sizes)) for s in tp.shards]
        if sorted(mine) != sorted((tuple(s.offset), tuple(s.size)) for s in so.shards):
            raise _no_option(t.name, tp, f"TorchRec's shards (offsets, sizes) "
                             f"{[(tuple(s.offset), tuple(s.size)) for s in so.shards][:4]} are not the plan's "
                             f"{mine[:4]}")
        for key, s in zip(mine, tp.shards):
            costs[s.rank] += theirs[key]
    return costs
