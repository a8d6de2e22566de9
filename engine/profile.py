"""Device profiles: the fixed costs of a training step as DistributedModelParallel runs it (per step, per
collective, per lookup-kernel launch, per table piece) on one device, backend and host count, and the per-rank
terms they add to a plan's estimate. Fitted from validation runs by engine.calibrate; docs/estimator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import ConfigError
from engine.fields import PRESSURE_TERM, PROFILE_TERM_NAMES, PROFILE_TERMS  # PRESSURE_TERM: engine.table_costs sets it
from engine.types import Config, Device, DeviceProfile, ShardingType, TablePlan, Topology

BACKEND = {Device.CPU: "gloo", Device.CUDA: "nccl"}  # the backend validation runs use on each device
PROFILE_FIELDS = ("device", "backend", "hosts", "cores_per_host", "step_ms", "collective_ms", "launch_ms",
                  "piece_ms", "source", "device_name", *PROFILE_TERM_NAMES, "set_by_table_costs")
FIXED_COSTS = ("step_ms", "collective_ms", "launch_ms", "piece_ms")
TABLE_COSTS_SET = "set_by_table_costs"  # the fixed costs measure-tables set in a user's profile (DeviceProfile)
TABLE_COSTS_FIXED = ("step_ms", "collective_ms")  # those it may set there
MAX_FIXED_MS = 1e6
MIN_CORES = 0.25
MAX_SOURCE_CHARS = 500

# Collectives of one step per sharded (non data-parallel) sharding type, as TorchRec 1.8 issues them (counted
# with torch.profiler on gloo): the input dist's splits, lengths and values all-to-alls (weights too when a
# feature is weighted), the output dist forward (all-to-all; a reduce-scatter for row-wise) and its backward
# (all-to-all; an all-gather for row-wise). Data-parallel gradients are all-reduced in DDP buckets.
INPUT_DIST_COLLECTIVES = 3
DDP_BUCKET_BYTES = 25 * 2**20  # TorchRec's DDP wrapper: bucket_cap_mb=25
# A collective's fixed cost is counted in latency rounds, as the alpha-beta model does (Thakur, Rabenseifner and
# Gropp 2005): an all-to-all by pairwise exchange, an all-gather and a reduce-scatter take n - 1 rounds among n
# ranks, a ring all-reduce 2 (n - 1). gloo has no reduce-scatter: it all-reduces (seen as gloo:all_reduce).
ALL_REDUCE_ROUNDS = 2
REDUCE_SCATTER_ROUNDS = {"gloo": ALL_REDUCE_ROUNDS, "nccl": 1}
FWD_SHARE = 1.0 / 3.0  # fixed compute work splits forward : backward as 1 : 2, as the bandwidth terms do

# Published figures for GPUs, used until a GPU profile is measured (orders of magnitude, not a measurement): a CUDA
# kernel launch takes about 5 us; NCCL's small-message all-reduce on 8 NVLink GPUs about 20 us (nccl-tests), about
# 1.5 us for each of its 14 latency rounds, and a few times that across InfiniBand hosts. DMP's Python work is left
# out: on GPUs it overlaps device work unless the host is the bottleneck.
PUBLISHED = "published"  # topology.profile: "published" takes PUBLISHED_CUDA for the topology's hosts
PUBLISHED_CUDA = {1: {"collective_ms": 0.0015, "launch_ms": 0.005}, 2: {"collective_ms": 0.005, "launch_ms": 0.005}}


def published_cuda(hosts: int) -> DeviceProfile:
    """The GPU profile from published figures (kernel launch, NCCL latency), until one is measured."""
    fig = PUBLISHED_CUDA[min(hosts, 2)]
    return DeviceProfile(Device.CUDA, "nccl", hosts, None, 0.0, fig["collective_ms"], fig["launch_ms"], 0.0,
                         "published figures: CUDA launch 5 us; NCCL 1.5 us a latency round in a host, 5 us across")


def active(topo: Topology) -> DeviceProfile | None:
    """The topology's profile when it applies to the topology's device and hosts."""
    prof = getattr(topo, "profile", None)
    return prof if prof is not None and prof.applies(topo) else None


CPU_DEFAULTS_NOTE = ("CPU estimate from the default cost terms, fitted on one 2-core AMD EPYC VM: another VM of "
                     "the same name ran the same plans 3-17x faster (docs/benchmarks.md), so until this machine's "
                     "terms are fitted read it as relative (which rank, which plan); fit them from dry-runs recorded "
                     "here: python -m db calibrate --terms --config C.json --config-out C.json")


def _fitted(prof: DeviceProfile) -> list[str]:
    return [n for n, _ in prof.terms if n != PRESSURE_TERM]


def notes(topo: Topology) -> list[str]:
    """What a plan says about its profile: which one priced it, or why it did not; on a CPU topology without
    fitted terms, that the default terms describe another machine."""
    prof = getattr(topo, "profile", None)
    defaults = [CPU_DEFAULTS_NOTE] if topo.compute_device is Device.CPU and (
        prof is None or not prof.applies(topo) or not _fitted(prof)) else []
    return _profile_notes(topo, prof) + defaults


def _profile_notes(topo: Topology, prof: DeviceProfile | None) -> list[str]:
    if prof is None:
        return []
    where = f"{prof.device.value}/{prof.backend} on {prof.hosts} host{'s' if prof.hosts > 1 else ''}"
    if not prof.applies(topo):
        return [f"profile {where} not applied: the topology is {topo.compute_device.value} on {topo.num_hosts} "
                "hosts; estimates price bandwidth only"]
    if prof.published:
        return [f"step priced with profile {where}; its fixed costs are defaults from published figures until a "
                f"GPU profile is measured (python -m db calibrate --device cuda)"]
    fitted = [f"CPU terms {', '.join(_fitted(prof))} as fitted on {prof.device_name!r}"] if _fitted(prof) else []
    return [f"step priced with profile {where} ({prof.source})", *fitted]


# ---- config <-> profile -------------------------------------------------------------------------


def _number(v: Any, path: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ConfigError(path, f"must be a number from {lo:g} to {hi:g}, got {v!r}"[:200])
    return float(v)


def _count(v: Any, path: str, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
        raise ConfigError(path, f"must be an integer from 1 to {hi:,}, got {v!r}"[:200])
    return v


def parse_profile(raw: Any, path: str = "topology.profile", topo: Topology | None = None) -> DeviceProfile:
    """A profile from its JSON object, or "published" (GPU topologies: the published figures for the topology's
    host count); raises ConfigError naming the field."""
    if raw == PUBLISHED:
        if topo is None or topo.compute_device is not Device.CUDA:
            raise ConfigError(path, '"published" figures exist for cuda only; measure a CPU profile with '
                              "`python -m db calibrate --device cpu --config-out ...`")
        return published_cuda(topo.num_hosts)
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be an object: device, backend, hosts and the fixed costs in ms")
    unknown = [k for k in raw if k not in PROFILE_FIELDS]
    if unknown:
        raise ConfigError(f"{path}.{str(unknown[0])[:50]}", f"unknown field; known fields: {', '.join(PROFILE_FIELDS)}")
    for req in ("device", "backend", "hosts"):
        if req not in raw:
            raise ConfigError(f"{path}.{req}", "is required")
    try:
        device = Device(raw["device"])
    except (ValueError, TypeError):
        raise ConfigError(f"{path}.device", "must be one of: cpu, cuda") from None
    if raw["backend"] != BACKEND[device]:
        raise ConfigError(f"{path}.backend", f"must be {BACKEND[device]!r} for {device.value}, as validation runs use")
    cores = raw.get("cores_per_host")
    source = raw.get("source", "measured")
    if not isinstance(source, str) or len(source) > MAX_SOURCE_CHARS or not source.isprintable():
        raise ConfigError(f"{path}.source", f"must be one line of text, at most {MAX_SOURCE_CHARS} characters")
    name = raw.get("device_name")
    if name is not None and (not isinstance(name, str) or not name or len(name) > MAX_SOURCE_CHARS
                             or not name.isprintable()):
        raise ConfigError(f"{path}.device_name", f"must be one line of text, at most {MAX_SOURCE_CHARS} characters "
                          "(the device the profile's terms were fitted on)")
    terms = tuple((f.name, _number(raw[f.name], f"{path}.{f.name}", f.lo, f.hi)) for f in PROFILE_TERMS
                  if f.name in raw)
    if terms and device is not Device.CPU:
        raise ConfigError(f"{path}.{terms[0][0]}", "is a CPU cost term; a cuda profile has none")
    fixed = {k: _number(raw.get(k, 0.0), f"{path}.{k}", 0.0, MAX_FIXED_MS) for k in FIXED_COSTS}
    return DeviceProfile(
        device=device, backend=raw["backend"], hosts=_count(raw["hosts"], f"{path}.hosts", 16_384),
        cores_per_host=None if cores is None else _number(cores, f"{path}.cores_per_host", MIN_CORES, 1e6),
        **fixed, source=source, terms=tuple(sorted(terms)), device_name=name,
        set_by_table_costs=_table_costs_set(raw.get(TABLE_COSTS_SET, []), f"{path}.{TABLE_COSTS_SET}", fixed))


def _table_costs_set(raw: Any, path: str, fixed: dict[str, float]) -> tuple[str, ...]:
    """The fixed costs a profile says measure-tables set in it: distinct names of TABLE_COSTS_FIXED, each priced."""
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw) or len(set(raw)) != len(raw):
        raise ConfigError(path, f"must be a list of distinct names from: {', '.join(TABLE_COSTS_FIXED)} (the fixed "
                          "costs measure-tables set in this profile)")
    for k in raw:
        if k not in TABLE_COSTS_FIXED:
            raise ConfigError(path, f"{k[:50]!r} is not a fixed cost measure-tables sets; known: "
                              f"{', '.join(TABLE_COSTS_FIXED)}")
        if not fixed[k] > 0:
            raise ConfigError(path, f"names {k} but the profile's {k} is 0: remove {k!r} from the list")
    return tuple(sorted(raw))


# ---- what a plan's ranks do in one step ----------------------------------------------------------


@dataclass(frozen=True)
class StepCounts:
    """Per step: the latency rounds of the collectives every rank takes part in, by phase; lookup kernels and
    table pieces per rank."""

    input_rounds: float
    fwd_rounds: float
    bwd_rounds: float
    launches: np.ndarray  # (W,)
    pieces: np.ndarray  # (W,)

    @property
    def rounds(self) -> float:
        return self.input_rounds + self.fwd_rounds + self.bwd_rounds


def _holders(tp: TablePlan) -> list[int]:
    if tp.shards is None:
        return list(tp.ranks)
    return [s.rank for s in tp.shards if s.sizes[0] * s.sizes[1] > 0]


def _output_rounds(st: ShardingType, topo: Topology, backend: str) -> tuple[float, float]:
    """(forward, backward) rounds of a sharding type's output dist."""
    w, local, hosts = topo.world_size, topo.local_world_size, topo.num_hosts
    rs = REDUCE_SCATTER_ROUNDS.get(backend, 1)
    if st is ShardingType.ROW_WISE:
        return rs * (w - 1), w - 1.0
    if st.rows_in_host:  # reduce-scatter (all-gather back) in the host, all-to-all across
        return rs * (local - 1) + (hosts - 1), (local - 1) + (hosts - 1.0)
    return w - 1.0, w - 1.0


def type_rounds(st: ShardingType, topo: Topology, backend: str, weighted: bool = False,
                dp_bytes: float = 0.0) -> tuple[float, float, float]:
    """(input, forward, backward) latency rounds that a plan's step takes because some table uses sharding type
    `st` (weighted: one of them has weighted features; dp_bytes: data-parallel tables' weight bytes, all-reduced in
    DDP buckets). The same for a plan whatever else it holds: a plan pays them once per type it uses."""
    w = topo.world_size
    if st is ShardingType.DATA_PARALLEL:
        return 0.0, 0.0, math.ceil(dp_bytes / DDP_BUCKET_BYTES) * ALL_REDUCE_ROUNDS * (w - 1.0)
    fwd, bwd = _output_rounds(st, topo, backend)
    return (INPUT_DIST_COLLECTIVES + weighted) * (w - 1.0), fwd, bwd


def counts_of(topo: Topology, held: dict[ShardingType, np.ndarray], weighted_types: set[ShardingType],
              dp_bytes: float, backend: str, pieces: np.ndarray | None = None) -> StepCounts:
    """StepCounts from each sharding type's ranks holding a piece (bool per rank) and the types a weighted table
    uses; `pieces` per rank where known (zeros otherwise)."""
    w = topo.world_size
    launches = np.zeros(w)
    rounds = np.zeros(3)
    for st, on in held.items():
        launches += on
        rounds += type_rounds(st, topo, backend, st in weighted_types, dp_bytes)
    return StepCounts(*rounds.tolist(), launches, np.zeros(w) if pieces is None else pieces)


def step_counts(topo: Topology, tables: dict[str, TablePlan], weighted: set[str] | frozenset = frozenset(),
                dp_bytes: float = 0.0, backend: str = "gloo") -> StepCounts:
    """Collective rounds, launches and pieces of one step. `weighted`: tables with weighted features;
    `dp_bytes`: the data-parallel tables' weight bytes (their gradients are all-reduced in DDP buckets)."""
    w = topo.world_size
    pieces = np.zeros(w)
    held: dict[ShardingType, np.ndarray] = {}
    weighted_types: set[ShardingType] = set()
    for name, tp in tables.items():
        ranks = np.array(_holders(tp), dtype=np.int64)
        np.add.at(pieces, ranks, 1.0)
        held.setdefault(tp.sharding_type, np.zeros(w, dtype=bool))[ranks] = True
        if name in weighted:
            weighted_types.add(tp.sharding_type)
    return counts_of(topo, held, weighted_types, dp_bytes, backend, pieces)


def fixed_perf(prof: DeviceProfile, counts: StepCounts) -> np.ndarray:
    """(W, 6) per-rank fixed costs in Perf's columns; pieces are priced per shard instead."""
    w = len(counts.launches)
    perf = np.zeros((w, 6))
    compute = prof.step_ms + prof.launch_ms * counts.launches
    perf[:, 0] = compute * FWD_SHARE
    perf[:, 2] = compute * (1.0 - FWD_SHARE)
    perf[:, 1] = prof.collective_ms * counts.fwd_rounds
    perf[:, 3] = prof.collective_ms * counts.bwd_rounds
    perf[:, 4] = prof.collective_ms * counts.input_rounds
    return perf


def plan_counts(cfg: Config, tables: dict[str, TablePlan], backend: str) -> StepCounts:
    """step_counts of a plan under its config (weighted features and data-parallel bytes read off the config)."""
    weighted = {n for n in tables if cfg.constraint(n).is_weighted}
    dp_bytes = sum(cfg.table(n).weight_bytes for n, tp in tables.items()
                   if tp.sharding_type is ShardingType.DATA_PARALLEL)
    return step_counts(cfg.topology, tables, weighted, dp_bytes, backend)


def host_floor(totals_ms: np.ndarray, latency_ms: float, topo: Topology, cores: int) -> np.ndarray:
    """Per rank, its host's work over the host's cores plus the collectives' latency once (a rank waiting in a
    collective occupies no core): no rank's step is shorter when ranks share cores."""
    host = np.arange(len(totals_ms)) // topo.local_world_size
    return (np.bincount(host, weights=totals_ms - latency_ms) / cores + latency_ms)[host]


def step_perf(cfg: Config, tables: dict[str, TablePlan], perf_ms: np.ndarray) -> np.ndarray:
    """(W, 6) per-rank times under the config's profile: its per-step, per-collective and per-launch costs added
    and, where a host has more ranks than cores, each rank stretched to the host's work / cores plus the
    collectives' latency (a rank waits for a core). Without a profile that applies, perf_ms unchanged."""
    topo = cfg.topology
    prof = active(topo)
    if prof is None:
        return perf_ms
    return with_fixed(prof, topo, plan_counts(cfg, tables, prof.backend), perf_ms)


def with_fixed(prof: DeviceProfile, topo: Topology, counts: StepCounts, perf_ms: np.ndarray) -> np.ndarray:
    """(W, 6) per-rank times perf_ms with the profile's fixed costs of a step that `counts` describes (step_perf)."""
    perf = perf_ms + fixed_perf(prof, counts)
    if prof.shares_cores(topo):
        total = perf.sum(axis=1)
        floor = host_floor(total, prof.collective_ms * counts.rounds, topo, prof.cores_per_host)
        perf = perf * np.where(total < floor, floor / np.maximum(total, 1e-300), 1.0)[:, None]
    return perf


def piece_perf(prof: DeviceProfile) -> np.ndarray:
    """(6,) the fixed cost of one table piece, in Perf's columns."""
    row = np.zeros(6)
    row[0], row[2] = prof.piece_ms * FWD_SHARE, prof.piece_ms * (1.0 - FWD_SHARE)
    return row


__all__ = ["BACKEND", "DeviceProfile", "FIXED_COSTS", "PROFILE_FIELDS", "TABLE_COSTS_FIXED", "TABLE_COSTS_SET",
           "StepCounts", "active", "fixed_perf", "notes",
           "parse_profile", "piece_perf", "host_floor", "plan_counts", "published_cuda", "step_counts",
           "step_perf", "type_rounds", "counts_of", "with_fixed"]
