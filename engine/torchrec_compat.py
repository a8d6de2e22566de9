"""Our plans as TorchRec objects and back: ShardingPlan export, the EBC and sharders that run it, and
TorchRec's own EmbeddingShardingPlanner as a baseline. Imports torch and torchrec: import it only when asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
import warnings
from typing import Iterator, Optional, Union

import torch
import torchrec
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner
from torchrec.distributed.planner import Topology as TorchRecTopology
from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
from torchrec.distributed.planner.types import CustomTopologyData, ParameterConstraints, PlannerError, Stats
from torchrec.distributed.types import (
    CacheParams,
    EmbeddingModuleShardingPlan,
    EnumerableShardingSpec,
    ModuleSharder,
    ParameterSharding,
    ShardingPlan,
    ShardMetadata,
)
from torchrec.modules import embedding_configs
from torchrec.optim import RowWiseAdagrad

from engine import fields as F
from engine.clf import CACHED
from engine.errors import EngineError, PlanningError
from engine.evaluate import evaluate
from engine.capacity import hbm_cap_of
from engine.fleet import kind_topologies
from engine.replicas import group_topology
from engine.types import (
    ComputeKernel,
    Config,
    Device,
    Optimizer,
    Plan,
    PoolingType,
    Shard,
    ShardingType,
    TableConfig,
    TablePlan,
    Topology,
)
from engine.virtual import keywords

DeviceLike = Union[str, Device, None]

# The optimizer class TorchRec's estimator reads off each weight to size optimizer state.
OPTIMIZER_CLASSES = {
    Optimizer.SGD: torch.optim.SGD,
    Optimizer.ADAGRAD: torch.optim.Adagrad,
    Optimizer.ROWWISE_ADAGRAD: RowWiseAdagrad,
    Optimizer.ADAM: torch.optim.Adam,
}

# Sharding types TorchRec's CPU sharder leaves out but that run on CPU + gloo (tests/engine/test_dmp_gloo.py); its
# enumerator offers grid_shard only to tables whose constraints list it, on CPU too with this sharder.
CPU_EXTRA_SHARDING_TYPES = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)


# ---- our plan -> TorchRec ShardingPlan ------------------------------------------------------------


def _device(cfg: Config, device: DeviceLike) -> Device:
    if device is None:
        return cfg.topology.compute_device
    try:
        return Device(device.value if isinstance(device, Device) else str(device).split(":")[0])
    except ValueError:
        raise EngineError(f"device {device!r} is not one of: {', '.join(d.value for d in Device)}") from None


def placement(rank: int, device: Device, local_world_size: int) -> str:
    """TorchRec's placement string: rank:R/cuda:(R mod local world size), or rank:R/cpu."""
    if device is Device.CUDA:
        return f"rank:{rank}/cuda:{rank % local_world_size}"
    return f"rank:{rank}/cpu"


def parameter_sharding(cfg: Config, name: str, tp: TablePlan, device: DeviceLike = None) -> ParameterSharding:
    """One table's ParameterSharding, as TorchRec's planner writes it (planners.to_sharding_plan)."""
    dev = _device(cfg, device)
    spec = None
    if tp.sharding_type is not ShardingType.DATA_PARALLEL and tp.shards is not None:
        spec = EnumerableShardingSpec([
            ShardMetadata(shard_offsets=list(s.offsets), shard_sizes=list(s.sizes),
                          placement=placement(s.rank, dev, group_topology(cfg.topology).local_world_size))
            for s in tp.shards
        ])
    load_factor = cfg.constraint(name).cache_load_factor if tp.cache_load_factor is None else tp.cache_load_factor
    if tp.sharding_type is ShardingType.DATA_PARALLEL:
        load_factor = None  # the dense kernel has no cache; TorchRec warns and ignores it
    return ParameterSharding(
        sharding_type=tp.sharding_type.value,
        compute_kernel=tp.compute_kernel.value,
        ranks=list(tp.ranks),
        sharding_spec=spec,
        cache_params=CacheParams(load_factor=load_factor) if load_factor is not None else None,
        **F.sharding_options(cfg.constraint(name)),
    )


def to_sharding_plan(cfg: Config, tables: dict[str, TablePlan], module_path: str = "",
                     device: DeviceLike = None) -> ShardingPlan:
    """A ShardingPlan for an EBC at `module_path`; `device` overrides the config's compute device in the
    placements (e.g. "cpu" to run a CUDA plan on gloo)."""
    module_plan = EmbeddingModuleShardingPlan()
    for name, tp in tables.items():
        module_plan[name] = parameter_sharding(cfg, name, tp, device)
    return ShardingPlan({module_path: module_plan})


# ---- the module and sharders that run a plan ----------------------------------------------------


def virtual_keywords(t: TableConfig) -> dict:
    """A virtual table's EmbeddingBagConfig keywords (engine.virtual.keywords), its eviction policy as TorchRec's own
    class (torchrec.modules.embedding_configs); {} for another table."""
    kw = keywords(t)
    if "virtual_table_eviction_policy" in kw:
        cls, fields = kw["virtual_table_eviction_policy"]
        kw["virtual_table_eviction_policy"] = getattr(embedding_configs, cls)(**fields)
    return kw


def build_ebc(cfg: Config, device: Union[str, torch.device] = "meta") -> torchrec.EmbeddingBagCollection:
    """The config's tables as an EmbeddingBagCollection (on the meta device: no memory allocated)."""
    configs = []
    for i, t in enumerate(cfg.tables):
        if t.pooling is PoolingType.NONE:
            raise EngineError(f"tables[{i}].pooling: an EmbeddingBagCollection needs sum or mean pooling, "
                              f"table {t.name!r} has none")
        configs.append(torchrec.EmbeddingBagConfig(
            name=t.name, num_embeddings=t.num_embeddings, embedding_dim=t.embedding_dim,
            feature_names=list(t.feature_names), pooling=torchrec.PoolingType[t.pooling.name],
            data_type=torchrec.DataType[t.data_type.name], **virtual_keywords(t),
        ))
    return torchrec.EmbeddingBagCollection(tables=configs, device=torch.device(device))


class CpuRowWiseEmbeddingBagCollectionSharder(EmbeddingBagCollectionSharder):
    """TorchRec's EBC sharder, also offering row_wise, table_row_wise and grid_shard on CPU, where they run on gloo.
    DistributedModelParallel runs a given row_wise plan with either sharder; TorchRec's planner needs this one
    to consider row splits on CPU."""

    def sharding_types(self, compute_device_type: str) -> list[str]:
        types = list(super().sharding_types(compute_device_type))
        if compute_device_type == "cpu":
            types += [st.value for st in CPU_EXTRA_SHARDING_TYPES if st.value not in types]
        return types


def sharders(cfg: Config, runtime_device: DeviceLike = None) -> list[ModuleSharder[torch.nn.Module]]:
    """The sharders DistributedModelParallel needs to run our plans on `runtime_device`."""
    if _device(cfg, runtime_device) is Device.CPU:
        return [CpuRowWiseEmbeddingBagCollectionSharder()]
    return [EmbeddingBagCollectionSharder()]


# ---- TorchRec's planner as a baseline ------------------------------------------------------------


def torchrec_topology(cfg: Config) -> TorchRecTopology:
    """TorchRec's Topology of the config. TorchRec has one speed for every rank: on a fleet of several device kinds
    (topology.rank_devices) it gets the first kind's bandwidths and each rank's own HBM (docs/estimator.md). With
    2D sharding it is the group's (sharding_group_size ranks), as DMPCollection's plan must be made for the group's
    world (torchrec#3295), never the whole world."""
    group = group_topology(cfg.topology)
    kinds = kind_topologies(group)
    t = kinds[0] if kinds else group
    return TorchRecTopology(
        world_size=t.world_size, compute_device=t.compute_device.value, hbm_cap=t.hbm_cap, ddr_cap=t.ddr_cap,
        ssd_cap=t.ssd_cap, ssd_mem_bw=t.ssd_mem_bw,
        local_world_size=t.local_world_size, hbm_mem_bw=t.hbm_mem_bw, ddr_mem_bw=t.ddr_mem_bw,
        hbm_to_ddr_mem_bw=t.hbm_to_ddr_mem_bw, intra_host_bw=t.intra_host_bw, inter_host_bw=t.inter_host_bw,
        custom_topology_data=_custom_topology_data(group),  # 2D: the group's ranks, each its replicas' least
    )


def _custom_topology_data(t: Topology) -> Optional[CustomTopologyData]:
    """TorchRec's per-rank capacities: the lists the config gives (engine.fields.CUSTOM_CAPS), None without."""
    custom = t.custom_topology_data
    if t.rank_devices is not None:  # each rank's HBM: its own, or its device's
        data = {"hbm_cap": [hbm_cap_of(t, r) for r in range(t.world_size)]}
        if custom is not None and custom.ddr_cap is not None:
            data["ddr_cap"] = list(custom.ddr_cap)
        return CustomTopologyData(data=data, world_size=t.world_size)
    if custom is None:
        return None
    data = {k: list(v) for k in F.CUSTOM_CAPS if (v := getattr(custom, k)) is not None}
    return CustomTopologyData(data=data, world_size=t.world_size)


# TorchRec's objects that hold a constraint declared with a dotted TorchRec name (cache_params.load_factor)
_TORCHREC_HOLDERS = {"cache_params": CacheParams}


def torchrec_constraints(cfg: Config) -> dict[str, ParameterConstraints]:
    """ParameterConstraints of each table: every constraint with a TorchRec name (engine.fields) that is set. A
    virtual table is said in its EmbeddingBagConfig (build_ebc), not here: ParameterConstraints.use_virtual_table
    would have TorchRec's storage estimate count only a cache for its fused kernels too (docs/estimator.md, 13)."""
    out = {}
    for name, c in cfg.constraints.items():
        kwargs: dict = {}
        for f in F.CONSTRAINT:
            v = getattr(c, f.name)
            if f.torchrec is None or v is None:
                continue
            holder, _, attr = f.torchrec.rpartition(".")
            v = F.json_value(v)
            if holder:
                kwargs[holder] = _TORCHREC_HOLDERS[holder](**{attr: v})
            else:
                kwargs[attr] = v
        out[name] = ParameterConstraints(**kwargs)
    return out


@contextlib.contextmanager
def quiet_torchrec() -> Iterator[None]:
    """Silence TorchRec's planner warnings and logging (the CLI prints only our output). TorchRec also logs
    through the root logger, whose first use installs a stderr handler: that handler is taken back."""
    handlers = list(logging.root.handlers)
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)
        for h in logging.root.handlers[:]:
            if h not in handlers:
                logging.root.removeHandler(h)


def _enum_of(cls: type, value: str, what: str, name: str):
    try:
        return cls(value)
    except ValueError:
        known = ", ".join(m.value for m in cls)
        raise EngineError(f"TorchRec chose {what} {value!r} for table {name!r}, which this planner does not model "
                          f"(it models: {known})") from None


def from_parameter_sharding(name: str, ps: ParameterSharding) -> TablePlan:
    """A TorchRec ParameterSharding as our TablePlan; kernels or types we do not model raise EngineError."""
    st = _enum_of(ShardingType, ps.sharding_type, "sharding type", name)
    kernel = _enum_of(ComputeKernel, ps.compute_kernel, "compute kernel", name)
    if st is ShardingType.DATA_PARALLEL or ps.sharding_spec is None:
        return TablePlan(st, kernel, tuple(ps.ranks or ()), None)
    shards = tuple(
        Shard((int(m.shard_offsets[0]), int(m.shard_offsets[1])), (int(m.shard_sizes[0]), int(m.shard_sizes[1])),
              int(m.placement.rank()))
        for m in ps.sharding_spec.shards
    )
    return TablePlan(st, kernel, tuple(s.rank for s in shards), shards)


def from_sharding_plan(cfg: Config, plan: ShardingPlan, module_path: str = "") -> dict[str, TablePlan]:
    """Our table plans from a TorchRec ShardingPlan, in the config's table order."""
    module_plan = plan.plan.get(module_path) or {}
    missing = [t.name for t in cfg.tables if t.name not in module_plan]
    if missing:
        raise EngineError(f"TorchRec's plan places no shards for tables: {', '.join(missing)}")
    out = {}
    for t in cfg.tables:
        tp = from_parameter_sharding(t.name, module_plan[t.name])
        cache = module_plan[t.name].cache_params
        clf = None if cache is None else cache.load_factor
        if tp.compute_kernel in CACHED and clf is not None and \
                clf != cfg.constraint(t.name).cache_load_factor:  # a size our planner chose (engine.clf)
            tp = dataclasses.replace(tp, cache_load_factor=clf)
        out[t.name] = tp
    return out


# TorchRec's shard descriptions carry perf numbers and an unset rank: noise in a one-line error.
_NOISE = (re.compile(r",? perf: Perf\([^)]*\)"), re.compile(r",? rank: None"), re.compile(r" To debug, .*$"))


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = lines[0] if lines else ""
    for i, ln in enumerate(lines):
        if ln.startswith("Last planner error") and i + 1 < len(lines):
            head += " " + " ".join(lines[i + 1:])
    head = " ".join(head.split())
    for pattern in _NOISE:
        head = pattern.sub("", head)
    return head


def _planning_error(cfg: Config, e: Exception, sharder: ModuleSharder[torch.nn.Module]) -> PlanningError:
    """TorchRec's multi-line planner error as one line, naming the tables it mentions and what would help."""
    text = str(e)
    tables = tuple(t.name for t in cfg.tables if re.search(rf"\b{re.escape(t.name)}\b", text))
    topo = cfg.topology
    if isinstance(e, PlannerError):
        fixes = (f"add ranks (topology.world_size, now {topo.world_size})",
                 "raise topology.hbm_cap / topology.ddr_cap or shrink the tables",
                 f"lower topology.batch_size (now {topo.batch_size})", "relax the tables' constraints")
    else:
        dev = topo.compute_device.value
        offered = sharder.sharding_types(dev)
        fixes = (f"on {dev} the sharder offers sharding types {', '.join(offered)} "
                 f"and kernels {', '.join(_kernels_offered(sharder, dev))}: use those in the constraints",)
    where = f" (tables: {', '.join(tables)})" if tables else ""
    return PlanningError(f"TorchRec: {_one_line(text).rstrip('.')}{where}.", tables=tables, fixes=fixes)


def _kernels_offered(sharder: ModuleSharder[torch.nn.Module], device: str) -> list[str]:
    kernels = {k for st in sharder.sharding_types(device) for k in sharder.compute_kernels(st, device)}
    return [k.value for k in ComputeKernel if k.value in kernels]


def planning_ebc(cfg: Config) -> torchrec.EmbeddingBagCollection:
    """The meta-device EBC TorchRec's planner sees: each weight carries the optimizer class its estimator reads."""
    ebc = build_ebc(cfg, "meta")
    for p in ebc.parameters():
        p._optimizer_classes = [OPTIMIZER_CLASSES[cfg.topology.optimizer]]  # type: ignore[attr-defined]
    return ebc


def torchrec_sharding_plan(cfg: Config, module_sharders: Optional[list[ModuleSharder[torch.nn.Module]]] = None,
                           stats: Optional[list[Stats]] = None) -> ShardingPlan:
    """TorchRec's EmbeddingShardingPlanner's ShardingPlan for the config, planned without a process group.
    `module_sharders` defaults to TorchRec's own EmbeddingBagCollectionSharder (as TorchRec plans); `stats`
    (TorchRec Stats) are handed the planner's chosen sharding options, shards with their ranks and perf."""
    module_sharders = module_sharders or [EmbeddingBagCollectionSharder()]
    with quiet_torchrec():
        ebc = planning_ebc(cfg)
        planner = EmbeddingShardingPlanner(
            topology=torchrec_topology(cfg), batch_size=cfg.topology.batch_size,
            storage_reservation=HeuristicalStorageReservation(percentage=cfg.topology.storage_reservation),
            constraints=torchrec_constraints(cfg), stats=list(stats or []), debug=False,
        )
        try:
            return planner.plan(ebc, module_sharders)
        except PlannerError as e:
            raise _planning_error(cfg, e, module_sharders[0]) from None
        except RuntimeError as e:  # the enumerator's "No available sharding type and compute kernel ..."
            if not str(e).startswith("No available"):
                raise
            raise _planning_error(cfg, e, module_sharders[0]) from None


def torchrec_plan(cfg: Config, module_sharders: Optional[list[ModuleSharder[torch.nn.Module]]] = None) -> Plan:
    """TorchRec's planner's plan as our Plan, scored by our estimator (so it compares with engine.plan's)."""
    start = time.perf_counter()
    tables = from_sharding_plan(cfg, torchrec_sharding_plan(cfg, module_sharders))
    return evaluate(cfg, tables, planner="torchrec", planning_seconds=time.perf_counter() - start)


__all__ = [
    "CpuRowWiseEmbeddingBagCollectionSharder", "build_ebc", "from_sharding_plan", "parameter_sharding", "placement",
    "planning_ebc", "sharders", "to_sharding_plan", "torchrec_plan", "torchrec_sharding_plan",
]
