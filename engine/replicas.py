"""2D sharding, as TorchRec 1.8's DMPCollection(sharding_group_size=...) runs it: the tables are sharded over one
group of ranks, every group of the world holds a replica, and DMPCollection.sync() all-reduces (ReduceOp.AVG) each
rank's embedding weights, with Adagrad's state, across the groups after each step.

The plan is one group's: planned and priced on the group's topology (group_config), ranks 0 to size - 1.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from engine.errors import human_bytes
from engine.memory_parts import fused_state
from engine.types import Config, CustomTopologyData, Optimizer, Plan, ShardingType, TablePlan, Topology

# fbgemm's get_optimizer_state() entries DMPCollection syncs: it reads state["sum"] of every TBE, which only
# Adagrad and row-wise Adagrad have (SGD keeps no state; Adam's exp_avg has no "sum": TorchRec 1.8 raises KeyError)
SYNCED_STATE = (Optimizer.ADAGRAD, Optimizer.ROWWISE_ADAGRAD)


def grouped(topo: Topology) -> bool:
    """True where the world holds more than one replica (a group size below world_size)."""
    return topo.sharding_group_size is not None and topo.sharding_group_size < topo.world_size


def replica_count(topo: Topology) -> int:
    """Groups (replicas) in the world: world_size / sharding_group_size (1 without 2D)."""
    return topo.world_size // topo.sharding_group_size if grouped(topo) else 1


def global_rank(topo: Topology, group_rank: int, group: int) -> int:
    """The world rank a plan rank runs on in a group: DMPCollection's default mesh (use_inter_host_allreduce False)
    puts plan rank r of group g on r * replicas + g (_remap_sharding_plan), so a replica group is replicas
    consecutive ranks and its all-reduce stays within a host where replicas divides local_world_size."""
    return group_rank * replica_count(topo) + group


def sync_in_host(topo: Topology) -> bool:
    """Whether every replica group (consecutive ranks, as above) sits in one host."""
    return topo.local_world_size % replica_count(topo) == 0


def group_topology(topo: Topology) -> Topology:
    """The topology one group is planned on: sharding_group_size ranks, as many per host as the mesh puts there,
    each plan rank with the least capacity of the world ranks that hold it (mixed fleets)."""
    if not grouped(topo):
        return topo
    r, size = replica_count(topo), topo.sharding_group_size
    per_host = topo.local_world_size // r if sync_in_host(topo) else 1
    custom = topo.custom_topology_data
    if custom is not None:
        def least(caps):
            return None if caps is None else tuple(min(caps[global_rank(topo, k, g)] for g in range(r))
                                                   for k in range(size))
        custom = CustomTopologyData(least(custom.hbm_cap), least(custom.ddr_cap), least(custom.ssd_cap))
    group = replace(topo, world_size=size, local_world_size=per_host, sharding_group_size=None,
                    custom_topology_data=custom, sync_ms_per_byte=2.0 * (r - 1) / r / sync_bw(topo))
    if topo.profile is not None and topo.profile.applies(topo) and not topo.profile.applies(group):
        # the world's profile prices its group too: where replicas do not divide a host, each plan rank of a group
        # is on a host of its own (more hosts than the world's count), and the fixed costs still hold
        group = replace(group, profile=replace(topo.profile, hosts=group.num_hosts))
    return group


def group_config(cfg: Config) -> Config:
    """The config one group is planned on (the same config where there is one group)."""
    if not grouped(cfg.topology):
        return cfg
    return Config(tables=cfg.tables, constraints=cfg.constraints, topology=group_topology(cfg.topology))


def sync_bw(topo: Topology) -> float:
    """The all-reduce's bandwidth, bytes per ms: within a host where the replica group is, else across hosts."""
    return topo.intra_host_bw if sync_in_host(topo) else topo.inter_host_bw


def synced_bytes(topo: Topology, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Bytes a piece's rank all-reduces in DMPCollection.sync(): its weights, and Adagrad's "sum" state."""
    if topo.optimizer in SYNCED_STATE:
        return weights + fused_state(topo.optimizer, rows, cols)
    return weights


def sync_ms(topo: Topology, nbytes: np.ndarray) -> np.ndarray:
    """replica_sync_ms, milliseconds per step: a ring all-reduce over R replicas sends and receives 2 (R - 1) / R
    of the bytes on each rank (as TorchRec prices data-parallel all-reduce), at sync_bw. topo is the group's
    topology (group_topology sets its sync_ms_per_byte; 0 where there is one group)."""
    return nbytes * topo.sync_ms_per_byte


def describe(topo: Topology) -> str | None:
    """One line: the group size and replica count of a 2D config (None without 2D)."""
    if not grouped(topo):
        return None
    r = replica_count(topo)
    return (f"2D sharding: the plan is one group of {topo.sharding_group_size:,} ranks; {r:,} replicas over "
            f"{topo.world_size:,} ranks, synced by DMPCollection's all-reduce across groups "
            f"({'within a host' if sync_in_host(topo) else 'across hosts'})")


def replica_memory(plan: Plan) -> tuple[int, int]:
    """(HBM, DDR) bytes one replica holds at its peak: the sum over the group's ranks."""
    return sum(r.hbm_bytes for r in plan.ranks), sum(r.ddr_bytes for r in plan.ranks)


def rank_sync_ms(cfg: Config, tables: dict[str, TablePlan]) -> np.ndarray:
    """Per plan rank, replica_sync_ms (ms per step): the part of bwd_comms engine.estimate adds for 2D."""
    topo = group_topology(cfg.topology)
    nbytes = np.zeros(topo.world_size)
    for name, tp in tables.items():
        if tp.shards is None or tp.sharding_type is ShardingType.DATA_PARALLEL:
            continue  # data-parallel tables are DDP's (its all-reduce over the world), not sync()'s
        dtype = cfg.table(name).data_type.bytes
        for s in tp.shards:
            rows, cols = float(s.sizes[0]), float(s.sizes[1])
            nbytes[s.rank] += synced_bytes(topo, rows, cols, np.ceil(dtype * rows * cols))
    return sync_ms(topo, nbytes)


def report_lines(cfg: Config, plan: Plan) -> list[str]:
    """The report's 2D lines: groups and replicas, one replica's memory, the slowest sync ([] without 2D)."""
    line = describe(cfg.topology)
    if line is None:
        return []
    hbm, ddr = replica_memory(plan)
    sync = rank_sync_ms(cfg, plan.tables)
    worst = int(np.argmax(sync)) if len(sync) else 0
    return [line,
            f"Memory per replica (the group's ranks together): {human_bytes(hbm)} HBM, {human_bytes(ddr)} DDR; the "
            f"world holds {replica_count(cfg.topology):,} such replicas",
            f"replica_sync_ms (ms per step, inside bwd comms): up to {float(sync[worst]) if len(sync) else 0.0:.4f} "
            f"on rank {worst}, all-reducing {_what_syncs(cfg.topology)}"]


def _what_syncs(topo: Topology) -> str:
    return "weights and Adagrad's state" if topo.optimizer in SYNCED_STATE else "weights"


def dmp_collection_comment(topo: Topology) -> str:
    """A comment line for TorchRec-format text: the DMPCollection arguments a grouped plan needs ('' without 2D)."""
    if not grouped(topo):
        return ""
    return (f"# DMPCollection(plan=..., world_size={topo.world_size}, sharding_group_size={topo.sharding_group_size}"
            f"): ranks are one group's 0-{topo.sharding_group_size - 1}; group g runs plan rank r on world rank "
            f"r * {replica_count(topo)} + g\n")


def with_group_note(topo: Topology, plan: Plan) -> Plan:
    """The plan with describe(topo)'s line among its notes (unchanged without 2D, or where it is there)."""
    line = describe(topo)
    if line is None or line in plan.notes:
        return plan
    return replace(plan, notes=(line, *plan.notes))
