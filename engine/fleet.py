"""A mixed fleet's device kinds (topology.rank_devices: groups of consecutive ranks, each with its accelerator): read
at the door, each rank's kind, and the topology each kind is priced with (its accelerator's published bandwidths,
engine.accelerators). Without the field every rank is priced with the topology's own bandwidths.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Optional

import numpy as np

from engine import fields as F
from engine.accelerators import ACCELERATORS
from engine.errors import ConfigError
from engine.readers import type_name
from engine.types import Device, Topology

PATH = f"topology.{F.RANK_DEVICES_FIELD.name}"


def read_rank_devices(v: Any, world_size: int, device: Device) -> Optional[tuple[tuple[int, str], ...]]:
    """rank_devices as (ranks, accelerator) groups; None for an empty list. Raises ConfigError naming the entry."""
    if not isinstance(v, list):
        raise ConfigError(PATH, f'must be a list of groups such as {{"ranks": 8, "device": "h100_80gb"}}, got '
                          f"{type_name(v)}")
    if not v:
        return None
    if device is not Device.CUDA:
        raise ConfigError(PATH, "names GPUs: set compute_device to cuda, or leave rank_devices out")
    out = []
    for i, g in enumerate(v):
        where = f"{PATH}[{i}]"
        if not isinstance(g, dict):
            raise ConfigError(where, 'must be an object: {"ranks": N, "device": "h100_80gb"}')
        unknown = [k for k in g if k not in F.RANK_DEVICE_KEYS]
        if unknown:
            raise ConfigError(f"{where}.{str(unknown[0])[:50]}", "unknown field; known fields: ranks, device")
        n, name = g.get("ranks"), g.get("device")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= world_size:
            raise ConfigError(f"{where}.ranks", f"must be a whole number of ranks from 1 to {world_size:,}, got "
                              f"{n!r}"[:200])
        if not isinstance(name, str) or name not in ACCELERATORS:
            raise ConfigError(f"{where}.device", f"unknown device {str(name)[:40]!r}; known devices: "
                              f"{', '.join(ACCELERATORS)}")
        out.append((n, name))
    total = sum(n for n, _ in out)
    if total != world_size:
        raise ConfigError(PATH, f"the groups hold {total:,} ranks; they must add up to world_size ({world_size:,})")
    return tuple(out)


def to_json(groups: tuple[tuple[int, str], ...]) -> list[dict]:
    return [{"ranks": n, "device": d} for n, d in groups]


def rank_device_names(topo: Topology) -> Optional[list[str]]:
    """Each rank's accelerator key; None where the topology names none."""
    if topo.rank_devices is None:
        return None
    return [d for n, d in topo.rank_devices for _ in range(n)]


@lru_cache(maxsize=16)
def kinds(topo: Topology) -> Optional[tuple[tuple[str, ...], np.ndarray]]:
    """(the distinct devices in first-seen order, each rank's index into them, read-only); None without rank_devices."""
    names = rank_device_names(topo)
    if names is None:
        return None
    keys = tuple(dict.fromkeys(names))
    kind = np.array([keys.index(d) for d in names], dtype=np.int64)
    kind.setflags(write=False)
    return keys, kind


@lru_cache(maxsize=16)
def kind_topologies(topo: Topology) -> tuple[Topology, ...]:
    """The topology each device kind is priced with (kinds' order): the topology with that accelerator's bandwidths
    and no rank_devices; () without rank_devices."""
    k = kinds(topo)
    if k is None:
        return ()
    plain = dataclasses.replace(topo, rank_devices=None)
    return tuple(ACCELERATORS[d].priced(plain) for d in k[0])


def device_hbm_cap(topo: Topology, rank: int) -> int:
    """The rank's HBM from its device (the driver's visible bytes); topology.hbm_cap where it names none."""
    k = kinds(topo)
    if k is None:
        return topo.hbm_cap
    return ACCELERATORS[k[0][int(k[1][rank])]].hbm_bytes


def per_rank(topo: Topology) -> bool:
    """Whether ranks differ: per-rank capacities or device kinds."""
    return topo.custom_topology_data is not None or topo.rank_devices is not None


__all__ = ["device_hbm_cap", "kind_topologies", "kinds", "per_rank", "rank_device_names", "read_rank_devices",
           "to_json"]
