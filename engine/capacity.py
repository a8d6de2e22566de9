"""Each rank's memory: its own capacity where the topology's custom_topology_data gives one (a mixed fleet, as
TorchRec's CustomTopologyData), else its device's HBM where rank_devices names one (engine.fleet), else the
topology's hbm_cap / ddr_cap / ssd_cap; and the bytes the planner may fill on it
(usable: HBM less storage_reservation, as TorchRec's HeuristicalStorageReservation keeps on every device).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from engine.fleet import device_hbm_cap, per_rank
from engine.types import Device, Topology


def hbm_cap_of(topo: Topology, rank: int) -> int:
    """The rank's HBM bytes: its own where custom_topology_data gives them, else its device's where rank_devices
    names one (engine.fleet), else the topology's."""
    custom = topo.custom_topology_data
    return device_hbm_cap(topo, rank) if custom is None or custom.hbm_cap is None else custom.hbm_cap[rank]


def ddr_cap_of(topo: Topology, rank: int) -> int:
    custom = topo.custom_topology_data
    return topo.ddr_cap if custom is None or custom.ddr_cap is None else custom.ddr_cap[rank]


def ssd_cap_of(topo: Topology, rank: int) -> int:
    """The rank's SSD bytes (no reservation: TorchRec's storage reservation keeps HBM only)."""
    custom = topo.custom_topology_data
    return topo.ssd_cap if custom is None or custom.ssd_cap is None else custom.ssd_cap[rank]


def has_ssd(topo: Topology) -> bool:
    """Whether any rank has SSD bytes: TorchRec 1.8 plans the key_value kernel only then (torchrec#4088)."""
    custom = topo.custom_topology_data
    return (topo.ssd_cap if custom is None or custom.ssd_cap is None else max(custom.ssd_cap)) > 0


def usable_hbm_of(topo: Topology, rank: int) -> int:
    """The HBM the planner may fill on the rank: Topology.usable_hbm_bytes from the rank's own capacity."""
    if not per_rank(topo):
        return topo.usable_hbm_bytes
    if topo.compute_device is Device.CPU:
        return 0
    return int(hbm_cap_of(topo, rank) * (1.0 - topo.storage_reservation))


def usable_ddr_of(topo: Topology, rank: int) -> int:
    if not per_rank(topo):
        return topo.usable_ddr_bytes
    if topo.compute_device is Device.CPU:
        return int(ddr_cap_of(topo, rank) * (1.0 - topo.storage_reservation))
    return ddr_cap_of(topo, rank)


@lru_cache(maxsize=16)
def usable_caps(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's usable HBM and DDR bytes, as read-only float arrays (the planner compares with them)."""
    out = []
    for of in (usable_hbm_of, usable_ddr_of):
        a = np.array([float(of(topo, r)) for r in range(topo.world_size)])
        a.setflags(write=False)
        out.append(a)
    return out[0], out[1]


@lru_cache(maxsize=16)
def ssd_caps(topo: Topology) -> np.ndarray:
    """Every rank's SSD bytes, as a read-only float array (key_value's backing store: the placement keeps each rank
    within its own, as TorchRec's partitioner does with Storage.ssd)."""
    a = np.array([float(ssd_cap_of(topo, r)) for r in range(topo.world_size)])
    a.setflags(write=False)
    return a


def total_usable(topo: Topology) -> tuple[int, int]:
    """All ranks' usable HBM and DDR bytes together."""
    if not per_rank(topo):
        return topo.usable_hbm_bytes * topo.world_size, topo.usable_ddr_bytes * topo.world_size
    w = range(topo.world_size)
    return sum(usable_hbm_of(topo, r) for r in w), sum(usable_ddr_of(topo, r) for r in w)

