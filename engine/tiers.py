"""TorchRec 1.8's embedding offload tiers: the kernels key_value, ssd_virtual_table, dram_virtual_table and
dram_ssd_virtual_table keep a cache of hot rows in HBM and the table in a backing store (SSD, DRAM, or both).

When they are offered, what they hold and how fast they look up, as TorchRec 1.8's planner says (enumerators.py,
shard_estimators.calculate_shard_storages, constants.kernel_bw_lookup), with our differences in docs/estimator.md:
- offered only where a table's compute_kernels lists them (TorchRec's GUARDED_COMPUTE_KERNELS), on CUDA, and
  key_value only where some rank has SSD (torchrec#4088): default plans do not change;
- HBM: the cache fbgemm's SSD TBE allocates, cache_load_factor x the shard's rows (TorchRec's planner counts
  min(KeyValueParams.max_l1_cache_size, ...), 0 by default), plus the ids and outputs as for any kernel;
- SSD (key_value only, as TorchRec): the shard's weights, optimizer state and cache state, TorchRec's formula;
  the virtual tables' backing store grows with the ids seen and is counted by neither planner;
- lookups at TorchRec's bandwidth for the kernel (key_value: ssd_mem_bw; the virtual tables: hbm_to_ddr_mem_bw); a
  table with a measured miss curve looks up its hits at HBM bandwidth and its misses at that one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine import fields as F
from engine.capacity import has_ssd, ssd_cap_of
from engine.errors import PlanningError, human_bytes
from engine.types import ComputeKernel, Config, Device, ShardingType, TableConfig, TablePlan, Topology
from engine.virtual import keywords_text

if TYPE_CHECKING:
    from engine.enumerate import Option
    from engine.placement import Placement

KV = ComputeKernel.KEY_VALUE
OFFLOAD = (KV, ComputeKernel.SSD_VIRTUAL_TABLE, ComputeKernel.DRAM_VIRTUAL_TABLE, ComputeKernel.DRAM_SSD_VIRTUAL_TABLE)
# where each keeps the table (the dashboard's words)
BACKING = {KV: "SSD", ComputeKernel.SSD_VIRTUAL_TABLE: "SSD (virtual table)",
           ComputeKernel.DRAM_VIRTUAL_TABLE: "DRAM (virtual table)",
           ComputeKernel.DRAM_SSD_VIRTUAL_TABLE: "DRAM and SSD (virtual table)"}


def is_offload(kernel: ComputeKernel) -> bool:
    return kernel in BACKING


def guarded(listed: tuple[ComputeKernel, ...], topo: Topology) -> tuple[ComputeKernel, ...]:
    """The offload kernels a table's compute_kernels lists that TorchRec 1.8's planner would enumerate: on CUDA only
    (EmbeddingBagCollectionSharder.compute_kernels), key_value only where some rank has SSD."""
    if topo.compute_device is not Device.CUDA:
        return ()
    return tuple(k for k in OFFLOAD if k in listed and (k is not KV or has_ssd(topo)))


def offloadable(raw_constraints: object, topo: Topology, tables: Sequence[TableConfig]) -> frozenset[str]:
    """The tables whose constraints (as a config file writes them, read or not yet) list an offload kernel the
    topology offers (guarded; the virtual-table kernels to virtual tables only): their weights may leave HBM and
    DDR, so the early size check does not count them."""
    if topo.compute_device is not Device.CUDA or not isinstance(raw_constraints, dict):
        return frozenset()
    offered = {k.value for k in guarded(OFFLOAD, topo)}
    plain = {k for k in offered if not ComputeKernel(k).virtual_only}
    virtual = {t.name for t in tables if t.use_virtual_table}
    out = []
    for name, c in raw_constraints.items():
        kernels = getattr(c, "compute_kernels", None) if not isinstance(c, dict) else c.get("compute_kernels")
        ok = offered if name in virtual else plain
        if isinstance(kernels, (list, tuple)) and any(
                (k.value if isinstance(k, ComputeKernel) else str(k).strip().lower()) in ok for k in kernels):
            out.append(name)
    return frozenset(out)


def ssd_need(opt: Option) -> np.ndarray | None:
    """Per shard, the option's SSD bytes: key_value's backing store (memory, below); None for other kernels."""
    return opt.est.ssd_bytes if opt.kernel is KV else None


class SsdRoom:
    """While an option's shards are placed one by one: the ranks whose SSD still holds shard j (the `allowed` mask
    narrowed by it). Free for an option that holds no SSD."""

    def __init__(self, pl: Placement, opt: Option):
        self.need = ssd_need(opt)
        self.caps = pl.ssd_caps
        self.ssd = None if self.need is None else pl.ssd.copy()

    def room(self, j: int, allowed: np.ndarray | None) -> np.ndarray | None:
        if self.need is None:
            return allowed
        ok = self.ssd + self.need[j] <= self.caps
        return ok if allowed is None else ok & allowed

    def fill(self, j: int, pick: np.ndarray) -> np.ndarray | float:
        """The `pick` ranks' SSD as a share of their own once shard j is on them (0 for an option holding none)."""
        if self.need is None:
            return 0.0
        return (self.ssd[pick] + self.need[j]) / np.maximum(self.caps[pick], 1.0)

    def take(self, j: int, r: int) -> None:
        if self.need is not None:
            self.ssd[r] += self.need[j]


def plans_kv(cfg: Config) -> bool:
    """Whether some table may be planned on key_value (listed, on cuda, some rank with SSD: guarded)."""
    return any(KV in (c.compute_kernels or ()) for c in cfg.constraints.values()) and KV in guarded((KV,), cfg.topology)


def ssd_pieces(options: Sequence[Option]) -> np.ndarray:
    """Per option, its largest piece's SSD bytes (key_value's backing store; 0 for the other kernels)."""
    return np.array([o.piece_ssd_bytes if o.kernel is KV else 0.0 for o in options])


def ssd_short(pl: Placement, options: list[Option]) -> str | None:
    """Where none of a table's key_value options finds ranks with SSD room for its pieces: what they need and the
    most SSD a rank has free, in words; None where SSD is not what stops them (or none is key_value)."""
    kv = [(o, s) for o in options if o.kernel is KV and (s := ssd_need(o)) is not None]
    free = pl.ssd_caps - pl.ssd
    if not kv or not all(_no_ssd_room(pl, o, s, free) for o, s in kv):
        return None
    r = int(np.argmax(free))
    need, cap = human_bytes(min(float(s.max()) for _, s in kv)), human_bytes(float(pl.ssd_caps[r]))
    return (f"its key_value options find no ranks with the SSD their pieces need (the largest piece {need} at least; "
            f"rank {r}, the one with the most SSD free, has {human_bytes(float(free[r]))} of its {cap})")


def _no_ssd_room(pl: Placement, o: Option, s: np.ndarray, free: np.ndarray) -> bool:
    """Whether SSD alone rules the option out: a piece on every rank (row_wise), pieces on one host's ranks
    (table_row_wise, grid_shard) or each anywhere (the rest), some piece without a rank or host with SSD room."""
    st = o.sharding_type
    if st in (ShardingType.ROW_WISE, ShardingType.DATA_PARALLEL):
        return bool((s > free[:len(s)]).any())
    if st in (ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD):
        lw = pl.topo.local_world_size
        by_host = free[:pl.topo.num_hosts * lw].reshape(-1, lw)
        return any(not (s[j:j + lw] <= by_host).all(axis=1).any() for j in range(0, len(s), lw))
    return bool(s.max() > free.max())


def ssd_fixes(topo: Topology, name: str, row_wise: bool) -> tuple[str, ...]:
    """What would help a table short of SSD (row_wise: whether it may be row_wise already)."""
    custom = topo.custom_topology_data
    raise_cap = "raise topology.ssd_cap" if custom is None or custom.ssd_cap is None else \
        "raise the ranks' ssd_cap in topology.custom_topology_data"
    spread = () if row_wise else (f"or allow row_wise for {name!r} to spread its rows over the ranks' SSDs",)
    return (raise_cap, *spread, f"or list a kernel besides key_value in constraints.{name}.compute_kernels")


def backing_bw(topo: Topology, kernel: ComputeKernel) -> float:
    """TorchRec's kernel_bw_lookup for the kernel on CUDA (bytes/ms): key_value at the SSD's bandwidth, the virtual
    tables at HBM-to-DDR bandwidth (TorchRec 1.8: "TODO: revisit whether this estimation makes sense")."""
    return topo.ssd_mem_bw if kernel is KV else topo.hbm_to_ddr_mem_bw


def lookup_bw(topo: Topology, kernel: ComputeKernel, measured_hit: np.ndarray | float) -> np.ndarray | float:
    """Effective lookup bandwidth: TorchRec's figure where the table has no miss curve (measured_hit NaN); else the
    hits at HBM bandwidth and the misses at TorchRec's figure (ours: the cache's measured hit rate)."""
    flat = backing_bw(topo, kernel)
    hit = np.nan_to_num(np.asarray(measured_hit, dtype=np.float64), nan=0.0)
    return np.where(np.isnan(measured_hit), flat, hit * topo.hbm_mem_bw + (1.0 - hit) * flat)


def cache_state_bytes(rows: np.ndarray, clf: np.ndarray) -> np.ndarray:
    """TorchRec's _calculate_cache_aux_state_sizes: per row 4 bytes, per cached slot 16."""
    return np.ceil(rows * (4 + clf * 16))


def memory(kernel: ComputeKernel, rows: np.ndarray, clf: np.ndarray, weights: np.ndarray,
           opt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(HBM, DDR, SSD) bytes per shard that the kernel keeps (buffers apart): the cache in HBM, as fused_uvm_caching's;
    no DDR (TorchRec's estimate); on SSD, for key_value, weights + optimizer state + cache state (TorchRec's; the
    placement keeps each rank within its SSD with them, as TorchRec's partitioner does); None for the others."""
    state = cache_state_bytes(rows, clf)
    hbm = np.round(weights * clf) + np.ceil(opt * clf) + state
    return hbm, np.zeros(len(rows)), (weights + opt + state if kernel is KV else None)


def ssd_by_rank(cfg: Config, tables: dict[str, TablePlan]) -> np.ndarray:
    """Every rank's SSD bytes under the plan: its key_value shards' weights, optimizer state and cache state."""
    topo = cfg.topology
    out = np.zeros(topo.world_size)
    for name, tp in tables.items():
        if tp.compute_kernel is not KV or tp.shards is None:
            continue
        t = cfg.table(name)
        for s in tp.shards:
            rows, cols = s.sizes
            weights = math.ceil(t.data_type.bytes * rows * cols)
            opt = math.ceil(weights * topo.optimizer.state_multiplier(t.embedding_dim))
            clf = tp.cache_load_factor if tp.cache_load_factor is not None else _clf(cfg, name)
            out[s.rank] += weights + opt + math.ceil(rows * (4 + clf * 16))
    return out


def _clf(cfg: Config, name: str) -> float:
    return F.cache_load_factor(cfg.constraint(name))


def check_ssd(cfg: Config, tables: dict[str, TablePlan]) -> None:
    """Refuse a plan whose key_value shards need more SSD than a rank has, naming the table and the rank."""
    if not any(tp.compute_kernel is KV for tp in tables.values()):
        return
    topo = cfg.topology
    need = ssd_by_rank(cfg, tables)
    for r in np.flatnonzero(need > np.array([ssd_cap_of(topo, r) for r in range(topo.world_size)])).tolist():
        names = [n for n, tp in tables.items() if tp.compute_kernel is KV and tp.shards is not None
                 and any(s.rank == r for s in tp.shards)]
        cap = ssd_cap_of(topo, r)
        where = "has no SSD" if cap == 0 else f"has {human_bytes(cap)} of SSD"
        raise PlanningError(
            f"Table {names[0]!r} keeps its key_value shard on rank {r}, which {where}: the rank's key_value shards "
            f"need {human_bytes(float(need[r]))} ({', '.join(names[:5])}).", tables=tuple(names),
            fixes=("raise topology.ssd_cap" if topo.custom_topology_data is None or
                   topo.custom_topology_data.ssd_cap is None else
                   f"raise rank {r}'s ssd_cap in topology.custom_topology_data",
                   f"or take key_value out of constraints.{names[0]}.compute_kernels"))



# What TorchRec 1.8's DistributedModelParallel says when it builds these kernels for an EmbeddingBagCollection (tests/
# engine/test_tiers.py runs it on gloo/CPU): the plans are TorchRec's planner's, the runs need more than a plan.
_CUDA = "runs on CUDA only (fbgemm's SSDTableBatchedEmbeddingBags; on CPU: Torch not compiled with CUDA enabled)"
RUN_LIMITS = {
    KV: _CUDA,
    ComputeKernel.DRAM_SSD_VIRTUAL_TABLE: "runs in an EmbeddingCollection only; an EmbeddingBagCollection refuses it "
                                          "('not supported for EmbeddingBagCollection (pooled embeddings)')",
}
# ssd_virtual_table and dram_virtual_table (on tables declared virtual): the first thing DMP refuses, in its order
VIRTUAL_NEEDS = {
    "row_wise": "runs them row_wise only: its other sharding types hand the kernel no total_num_buckets (table_wise, "
                "table_row_wise: Unexpected `None` from _get_sharded_local_buckets_for_zero_collision) or no "
                "use_virtual_table (column_wise: Try to create ZeroCollisionKeyValueEmbeddingBag for non virtual "
                "tables)",
    "buckets": "needs the table's total_num_buckets (without it: Unexpected `None` from "
               "_get_sharded_local_buckets_for_zero_collision)",
    "policy": "needs the table's virtual_table_eviction_policy (without it: virtual_table_eviction_policy for kvzch "
              "table should not be None); no_eviction is the one that needs nothing more",
    "l2": "with an eviction policy other than no_eviction also needs KeyValueParams' l2_cache_size and "
          "kvzch_tbe_config, which a config here cannot give (KeyError: 'l2_cache_size'), on CUDA too",
    "cuda": "builds it from this plan and config (row_wise, total_num_buckets, no_eviction) on CUDA only: fbgemm's "
            "SSDTableBatchedEmbeddingBags (on CPU: Torch not compiled with CUDA enabled)",
}


def virtual_need(table: TableConfig, tp: TablePlan) -> str:
    """The first VIRTUAL_NEEDS key TorchRec 1.8's DMP stops a virtual table's ssd/dram_virtual_table shards at."""
    if tp.sharding_type is not ShardingType.ROW_WISE:
        return "row_wise"
    if table.total_num_buckets is None:
        return "buckets"
    policy = table.virtual_table_eviction_policy
    return "policy" if policy is None else "cuda" if policy.type == "no_eviction" else "l2"


def run_notes(cfg: Config, tables: dict[str, TablePlan]) -> list[str]:
    """One note per offload kernel the plan uses (per kernel and need, for the virtual tables' two): what TorchRec
    1.8's DMP needs to run it."""
    used: dict[tuple[ComputeKernel, str], list[str]] = {}
    for name, tp in tables.items():
        k = tp.compute_kernel
        if is_offload(k):
            why = RUN_LIMITS.get(k) or VIRTUAL_NEEDS[virtual_need(cfg.table(name), tp)]
            used.setdefault((k, why), []).append(name)
    return [f"{k.value} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}): TorchRec 1.8's "
            f"DistributedModelParallel {why}" for (k, why), names in used.items()]


def virtual_comment(cfg: Config) -> str:
    """Comment lines for TorchRec-format text naming the tables declared virtual with the EmbeddingBagConfig keywords
    they need (use_virtual_table=True, total_num_buckets, the eviction policy: one line per set of keywords; '' where
    none is)."""
    groups: dict[str, list[str]] = {}
    for t in cfg.tables:
        if t.use_virtual_table:
            groups.setdefault(keywords_text(t), []).append(repr(t.name))
    return "".join(f"# EmbeddingBagConfig(..., {kw}) for {', '.join(names)}\n" for kw, names in groups.items())
