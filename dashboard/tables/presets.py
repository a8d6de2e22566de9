"""Ready-made configs: the TorchRec tutorial's tables, DLRM on Criteo 1TB, a seeded synthetic generator,
and topology presets for common GPUs and clusters. Every function returns plain config JSON (dicts).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import engine

GIB = 1024**3
# Bandwidths are entered in GiB/s (TorchRec's constants say GB/s but count 2**30 bytes); configs hold bytes per ms.
GBPS_TO_BYTES_PER_MS = GIB / 1000

# ---- tables -------------------------------------------------------------------------------------

TUTORIAL_TOPOLOGY = {"world_size": 2, "local_world_size": 2, "compute_device": "cuda", "batch_size": 512}

# MLPerf Training DLRM-DCNv2 on Criteo 1TB (TorchRec's torchrec_dlrm reference): 26 categorical features,
# embedding_dim 128, cardinalities capped at 40M (--num_embeddings_per_feature) and the multi-hot sizes
# of the synthetic multi-hot dataset (--multi_hot_sizes), used here as pooling factors.
DLRM_CRITEO_1TB_ROWS = engine.CRITEO_1TB_ROWS
DLRM_CRITEO_1TB_MULTI_HOT = engine.CRITEO_1TB_MULTI_HOT
DLRM_EMBEDDING_DIM = engine.CRITEO_1TB_EMBEDDING_DIM
# The reference run: global batch 16384 over 8 GPUs with row-wise Adagrad on the embeddings.
DLRM_TOPOLOGY = {"world_size": 8, "local_world_size": 8, "compute_device": "cuda", "batch_size": 2048,
                 "optimizer": "rowwise_adagrad"}

SYNTHETIC_DIMS = (32, 64, 128, 256)


def _table(name: str, rows: int, dim: int, feature: str) -> dict:
    return {"name": name, "num_embeddings": rows, "embedding_dim": dim, "feature_names": [feature],
            "pooling": "sum", "data_type": "fp32"}


def tutorial() -> dict:
    """The sharding tutorial's config: two 4096x64 and two 1024x64 tables on 2 GPUs."""
    tables = [_table(f"{size}_table_{i}", rows, 64, f"{size}_table_feature_{i}")
              for size, rows in (("large", 4096), ("small", 1024)) for i in range(2)]
    return {"tables": tables, "constraints": {}, "topology": dict(TUTORIAL_TOPOLOGY)}


def dlrm_criteo_1tb() -> dict:
    """The 26 tables of MLPerf DLRM-DCNv2 on Criteo 1TB, with their multi-hot sizes as pooling factors."""
    tables, constraints = [], {}
    for i, (rows, hot) in enumerate(zip(DLRM_CRITEO_1TB_ROWS, DLRM_CRITEO_1TB_MULTI_HOT)):
        name = f"t_cat_{i}"
        tables.append(_table(name, rows, DLRM_EMBEDDING_DIM, f"cat_{i}"))
        constraints[name] = {"pooling_factors": [float(hot)]}
    return {"tables": tables, "constraints": constraints, "topology": dict(DLRM_TOPOLOGY)}


@dataclass(frozen=True)
class SyntheticSpec:
    count: int = 200
    min_rows: int = 1_000
    max_rows: int = 10_000_000
    seed: int = 0
    max_pooling_factor: float = 50.0


def synthetic(spec: SyntheticSpec, topology: dict | None = None) -> dict:
    """`count` tables with log-uniform rows in [min_rows, max_rows], dims from SYNTHETIC_DIMS and
    log-uniform pooling factors; the same spec always gives the same tables."""
    if spec.count < 1:
        raise ValueError("count: must be >= 1")
    if not 1 <= spec.min_rows <= spec.max_rows:
        raise ValueError("rows: need 1 <= min rows <= max rows")
    rng = random.Random(spec.seed)
    lo, hi = math.log(spec.min_rows), math.log(spec.max_rows)
    width = len(str(spec.count - 1))
    tables, constraints = [], {}
    for i in range(spec.count):
        name = f"table_{i:0{width}d}"
        rows = int(round(math.exp(rng.uniform(lo, hi))))
        tables.append(_table(name, rows, rng.choice(SYNTHETIC_DIMS), f"feature_{i:0{width}d}"))
        pf = round(math.exp(rng.uniform(0.0, math.log(max(spec.max_pooling_factor, 1.0)))), 1)
        constraints[name] = {"pooling_factors": [pf]}
    topo = dict(topology) if topology else {"world_size": 8, "local_world_size": 8, "compute_device": "cuda",
                                            "batch_size": 512}
    return {"tables": tables, "constraints": constraints, "topology": topo}


TABLE_PRESETS = {
    "tutorial": "TorchRec tutorial: 4 tables (2 x 4096x64, 2 x 1024x64), 2 GPUs",
    "dlrm_criteo_1tb": "DLRM-DCNv2, Criteo 1TB (MLPerf): 26 tables, dim 128, 8 GPUs",
    "synthetic": "Synthetic: N random tables (seeded)",
}


# ---- topology -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    """One accelerator's memory and bandwidths, in the units the Topology page shows."""

    label: str
    hbm_gib: float
    hbm_gbps: float
    intra_host_gbps: float  # NVLink (or PCIe) bandwidth to the other GPUs of the host
    hbm_to_ddr_gbps: float  # PCIe to host memory
    device: str = "cuda"


GPUS = {
    "torchrec_default": Gpu("TorchRec defaults (V100-era)", 32, 897, 600, 32),
    "v100_32gb": Gpu("NVIDIA V100 32GB SXM2", 32, 900, 300, 16),
    "a100_40gb": Gpu("NVIDIA A100 40GB SXM", 40, 1555, 600, 32),
    "a100_80gb": Gpu("NVIDIA A100 80GB SXM", 80, 2039, 600, 32),
    "h100_80gb": Gpu("NVIDIA H100 80GB SXM", 80, 3350, 900, 64),
    "h200_141gb": Gpu("NVIDIA H200 141GB SXM", 140, 4800, 900, 64),
    "l4_24gb": Gpu("NVIDIA L4 24GB (PCIe)", 24, 300, 32, 32),
}


@dataclass(frozen=True)
class Cluster:
    label: str
    gpu: str  # key of GPUS, or "cpu"
    world_size: int
    local_world_size: int
    ddr_gib: float
    inter_host_gbps: float  # network bandwidth per rank
    ddr_gbps: float = 51.0


CLUSTERS = {
    "tutorial": Cluster("Tutorial: 1 host x 2 GPUs (TorchRec defaults)", "torchrec_default", 2, 2, 128, 12.5),
    "dgx_a100_1": Cluster("1 x DGX A100 80GB (8 GPUs)", "a100_80gb", 8, 8, 256, 25),
    "dgx_a100_2": Cluster("2 x DGX A100 80GB (16 GPUs, HDR 200 Gb/s per GPU)", "a100_80gb", 16, 8, 256, 25),
    "dgx_h100_1": Cluster("1 x DGX H100 (8 GPUs)", "h100_80gb", 8, 8, 256, 50, 64),
    "dgx_h100_4": Cluster("4 x DGX H100 (32 GPUs, NDR 400 Gb/s per GPU)", "h100_80gb", 32, 8, 256, 50, 64),
    "hgx_h200_1": Cluster("1 x HGX H200 (8 GPUs)", "h200_141gb", 8, 8, 256, 50, 64),
    "cpu_2": Cluster("CPU: 1 host x 2 ranks (gloo)", "cpu", 2, 2, 64, 12.5),
}


PER_RANK = ("custom_topology_data", "rank_devices")  # a mixed fleet's per-rank memory and devices: a preset gives
# every rank the same


def gpu_topology(key: str, base: dict) -> dict:
    """`base` topology with one GPU's memory and bandwidths on every rank."""
    g = GPUS[key]
    base = {k: v for k, v in base.items() if k not in PER_RANK}
    return {**base, "compute_device": g.device, "hbm_cap": int(g.hbm_gib * GIB),
            "hbm_mem_bw": g.hbm_gbps * GBPS_TO_BYTES_PER_MS, "intra_host_bw": g.intra_host_gbps * GBPS_TO_BYTES_PER_MS,
            "hbm_to_ddr_mem_bw": g.hbm_to_ddr_gbps * GBPS_TO_BYTES_PER_MS}


def _full(topo: dict) -> dict | None:
    """A topology with every default written out (config units); None when the engine refuses it."""
    try:
        return engine.config_to_dict(engine.parse_config({"tables": [PROBE_TABLE], "topology": topo}))["topology"]
    except engine.ConfigError:
        return None


def _same(a: dict, b: dict) -> bool:
    """Equal field by field, numbers to 1e-6 (the form's GiB and GiB/s come back through floats)."""
    for k in a.keys() | b.keys():
        x, y = a.get(k), b.get(k)
        numbers = isinstance(x, (int, float)) and isinstance(y, (int, float))
        if not (math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) if numbers else x == y):
            return False
    return True


def cluster_in_use(topo: dict) -> str | None:
    """The key of the cluster preset `topo` is (its other fields, batch size and optimizer, aside), or None."""
    full = _full(topo)
    if full is None:
        return None
    return next((k for k in CLUSTERS if (preset := _full(cluster_topology(k, full))) and _same(preset, full)), None)


def gpu_in_use(topo: dict) -> str | None:
    """The key of the GPU preset whose memory and bandwidths `topo` has, or None."""
    full = _full(topo)
    if full is None:
        return None
    return next((k for k in GPUS if (preset := _full(gpu_topology(k, full))) and _same(preset, full)), None)


def cluster_topology(key: str, base: dict) -> dict:
    """`base` topology (batch size, optimizer, reservation kept) sized as one of CLUSTERS."""
    c = CLUSTERS[key]
    base = {k: v for k, v in base.items() if k not in PER_RANK}
    topo = {**base, "world_size": c.world_size, "local_world_size": c.local_world_size,
            "ddr_cap": int(c.ddr_gib * GIB), "ddr_mem_bw": c.ddr_gbps * GBPS_TO_BYTES_PER_MS,
            "inter_host_bw": c.inter_host_gbps * GBPS_TO_BYTES_PER_MS}
    if c.gpu == "cpu":
        return {**topo, "compute_device": "cpu", "hbm_cap": 0}
    return gpu_topology(c.gpu, topo)


# ---- topology in the units people type ------------------------------------------------------------

BANDWIDTH_FIELDS = ("hbm_mem_bw", "ddr_mem_bw", "hbm_to_ddr_mem_bw", "intra_host_bw", "inter_host_bw", "ssd_mem_bw")
PROBE_TABLE = {"name": "t", "num_embeddings": 1, "embedding_dim": 1}


def topology_form(topo: dict) -> dict:
    """A topology with every default filled in, memory in GiB, bandwidth in GB/s, reservation in %, and the
    number of hosts (world_size / local_world_size)."""
    full = _full(topo) or _fields_that_fit(topo)
    form = dict(full)
    form["hbm_cap"] = full["hbm_cap"] / GIB
    form["ddr_cap"] = full["ddr_cap"] / GIB
    form["ssd_cap"] = full["ssd_cap"] / GIB
    for k in BANDWIDTH_FIELDS:
        form[k] = full[k] / GBPS_TO_BYTES_PER_MS
    form["storage_reservation"] = full["storage_reservation"] * 100
    ws, lws = form.get("world_size"), form.get("local_world_size")
    ok = isinstance(ws, int) and isinstance(lws, int) and 0 < lws <= ws and ws % lws == 0
    form["hosts"] = ws // lws if ok else 1
    return form


def _fields_that_fit(topo: dict) -> dict:
    """A topology the engine refused, every field it accepts on its own kept, the others at their defaults."""
    out = _full({"world_size": 1})
    ranks = {k: topo[k] for k in ("world_size", "local_world_size") if k in topo}
    fit = (_full(ranks) or _full({"world_size": ranks.get("world_size")})) if ranks else None
    if fit is not None:
        out.update(world_size=fit["world_size"], local_world_size=fit["local_world_size"])
    for k, v in topo.items():
        if k in out and k not in ranks and _full({"world_size": 1, k: v}) is not None:
            out[k] = v
    return out


def split_ranks(world_size: int, hosts: int) -> int | None:
    """Ranks per host when `world_size` ranks split evenly over `hosts` hosts, else None."""
    if hosts < 1 or world_size < hosts or world_size % hosts:
        return None
    return world_size // hosts


def uneven_text(world_size: int, hosts: int) -> str:
    """Why `world_size` ranks do not fit `hosts` hosts, and the values that would."""
    multiples = ", ".join(str(hosts * k) for k in range(1, 4))
    divisors = ", ".join([str(d) for d in range(1, world_size + 1) if world_size % d == 0][:8])
    return (f"{world_size} ranks do not split evenly over {hosts} hosts: set the world size to a multiple of "
            f"{hosts} ({multiples}...), or the hosts to one of {divisors}")


def form_topology(form: dict) -> dict:
    """The inverse of topology_form: config units (bytes, bytes per ms, a fraction); hosts become
    local_world_size."""
    topo = {k: v for k, v in form.items() if k != "hosts"}
    topo["hbm_cap"] = int(round(form["hbm_cap"] * GIB))
    topo["ddr_cap"] = int(round(form["ddr_cap"] * GIB))
    topo["ssd_cap"] = int(round(form["ssd_cap"] * GIB))
    for k in BANDWIDTH_FIELDS:
        topo[k] = form[k] * GBPS_TO_BYTES_PER_MS
    topo["storage_reservation"] = form["storage_reservation"] / 100
    return topo
