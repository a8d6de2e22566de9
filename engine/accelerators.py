"""The accelerators a topology may name, with their published memory and bandwidths: the sweep's candidates
(engine.sweep) and the device kind of each rank of a mixed fleet (topology.rank_devices, engine.fleet). Labelled
published figures until a calibration replaces them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine import constants as C
from engine.profile import published_cuda
from engine.types import Device, Topology

GIB = C.GIB
GBPS = GIB / 1000  # a bandwidth in GB/s as the engine's bytes per ms (TorchRec's convention: GB/s = GiB/s)
GPUS_PER_HOST = 8


@dataclass(frozen=True)
class Accelerator:
    """One GPU's memory and bandwidths as its vendor publishes them, and the network its hosts usually have."""

    key: str
    label: str
    hbm_gib: float  # as the driver reports it (nvidia-smi), below the marketing figure
    hbm_gbps: float
    nvlink_gbps: float  # to the other GPUs of its host, per GPU
    network_gbps: float  # to other hosts, per GPU (one NIC per GPU)
    pcie_gbps: float  # to host memory (UVM)
    source: str

    @property
    def hbm_bytes(self) -> int:
        return int(self.hbm_gib * GIB)

    def priced(self, base: Topology) -> Topology:
        """`base` with this GPU's bandwidths (lookup, NVLink, network, PCIe): how a rank of this kind is priced;
        sizes, capacities and everything else kept."""
        return dataclasses.replace(base, compute_device=Device.CUDA, hbm_mem_bw=self.hbm_gbps * GBPS,
                                   intra_host_bw=self.nvlink_gbps * GBPS, inter_host_bw=self.network_gbps * GBPS,
                                   hbm_to_ddr_mem_bw=self.pcie_gbps * GBPS)

    def topology(self, base: Topology, world_size: int, batch_size: int) -> Topology:
        """`base` (its DDR, optimizer and reservation kept) on `world_size` of these GPUs, `batch_size` per rank,
        priced with the published fixed costs for its host count; every rank this GPU (no per-rank capacities)."""
        local = min(GPUS_PER_HOST, world_size)
        topo = self.priced(dataclasses.replace(
            base, world_size=world_size, local_world_size=local, hbm_cap=self.hbm_bytes, batch_size=batch_size,
            profile=None, custom_topology_data=None, rank_devices=None))
        return dataclasses.replace(topo, profile=published_cuda(topo.num_hosts))


ACCELERATORS = {a.key: a for a in (
    Accelerator("a100_40gb", "NVIDIA A100 40GB SXM", 40, 1555, 600, 25, 32,
                "published: A100 datasheet (HBM2 1,555 GB/s, NVLink 600 GB/s); DGX A100 HDR 200 Gb/s per GPU"),
    Accelerator("a100_80gb", "NVIDIA A100 80GB SXM", 80, 2039, 600, 25, 32,
                "published: A100 datasheet (HBM2e 2,039 GB/s, NVLink 600 GB/s); DGX A100 HDR 200 Gb/s per GPU"),
    Accelerator("h100_80gb", "NVIDIA H100 80GB SXM", 80, 3350, 900, 50, 64,
                "published: H100 datasheet (HBM3 3.35 TB/s, NVLink 900 GB/s); DGX H100 NDR 400 Gb/s per GPU"),
    Accelerator("h200_141gb", "NVIDIA H200 141GB SXM", 140, 4800, 900, 50, 64,
                "published: H200 datasheet (141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s); NDR 400 Gb/s per GPU"),
    Accelerator("b200_192gb", "NVIDIA B200 192GB", 179, 8000, 1800, 50, 64,
                "published: B200 datasheet (192 GB HBM3e, 179 GiB visible; 8 TB/s; NVLink 1.8 TB/s); "
                "DGX B200 400 Gb/s per GPU"),
)}

__all__ = ["ACCELERATORS", "GBPS", "GIB", "GPUS_PER_HOST", "Accelerator"]
