"""Each rank's memory: its own capacity where the topology's custom_topology_data gives one (a mixed fleet, as
TorchRec's CustomTopologyData), else the topology's hbm_cap / ddr_cap; and the bytes the planner may fill on it
(usable: HBM less storage_reservation, as TorchRec's HeuristicalStorageReservation keeps on every device).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from engine.errors import human_bytes
from engine.types import Device, Topology


def hbm_cap_of(topo: Topology, rank: int) -> int:
    """The rank's HBM bytes (its own where custom_topology_data gives them)."""
    custom = topo.custom_topology_data
    return topo.hbm_cap if custom is None or custom.hbm_cap is None else custom.hbm_cap[rank]


def ddr_cap_of(topo: Topology, rank: int) -> int:
    custom = topo.custom_topology_data
    return topo.ddr_cap if custom is None or custom.ddr_cap is None else custom.ddr_cap[rank]


def usable_hbm_of(topo: Topology, rank: int) -> int:
    """The HBM the planner may fill on the rank: Topology.usable_hbm_bytes from the rank's own capacity."""
    if topo.custom_topology_data is None:
        return topo.usable_hbm_bytes
    if topo.compute_device is Device.CPU:
        return 0
    return int(hbm_cap_of(topo, rank) * (1.0 - topo.storage_reservation))


def usable_ddr_of(topo: Topology, rank: int) -> int:
    if topo.custom_topology_data is None:
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


def total_usable(topo: Topology) -> tuple[int, int]:
    """All ranks' usable HBM and DDR bytes together."""
    if topo.custom_topology_data is None:
        return topo.usable_hbm_bytes * topo.world_size, topo.usable_ddr_bytes * topo.world_size
    w = range(topo.world_size)
    return sum(usable_hbm_of(topo, r) for r in w), sum(usable_ddr_of(topo, r) for r in w)


def describe(topo: Topology) -> str:
    """The ranks' usable memory in words: one figure for all, or the range where they differ."""
    if topo.custom_topology_data is None:
        return f"{human_bytes(topo.usable_hbm_bytes)} HBM, {human_bytes(topo.usable_ddr_bytes)} DDR per rank"
    hbm, ddr = usable_caps(topo)

    def span(a: np.ndarray) -> str:
        lo, hi = int(a.min()), int(a.max())
        return human_bytes(lo) if lo == hi else f"{human_bytes(lo)} to {human_bytes(hi)}"

    return f"{span(hbm)} HBM, {span(ddr)} DDR per rank (custom_topology_data)"


@lru_cache(maxsize=16)
def row_shares(topo: Topology) -> np.ndarray | None:
    """Where custom_topology_data gives the device memory (hbm_cap on cuda, ddr_cap on cpu), each rank's share of
    a row_wise table's rows, in proportion to that memory as TorchRec 1.8 cuts them
    (_calculate_uneven_rw_shard_sizes_and_offsets); None where rows split evenly."""
    custom = topo.custom_topology_data
    sizes = None if custom is None else custom.ddr_cap if topo.compute_device is Device.CPU else custom.hbm_cap
    if sizes is None or not sum(sizes):
        return None
    total = sum(sizes)
    out = np.array([s / total for s in sizes])
    out.setflags(write=False)
    return out


def uneven_row_split(rows: int, shares: np.ndarray) -> np.ndarray:
    """Rows per rank: int(rows x share) on every rank but the last, which takes the rest (TorchRec's cut)."""
    out = np.empty(len(shares), dtype=np.int64)
    out[:-1] = (rows * shares[:-1]).astype(np.int64)
    out[-1] = rows - int(out[:-1].sum())
    return out
