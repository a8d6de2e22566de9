"""The one rule of every measurement: a dry-run or a validation run prices the plan for the device it measures
on (same placement, that device's bandwidths), and says so when the config named another device.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.types import Config, Device


@dataclass(frozen=True)
class Pricing:
    """The config the estimates of a measurement are made with, and what to tell the user about it."""

    config: Config  # the config's topology with compute_device (and ranks per host) as measured
    device: Device  # the device the estimates are for: the one measured
    config_device: Device  # what the config said
    note: str | None  # set when the two differ

    def fields(self) -> dict:
        """What a result carries about its estimates (--json, and a recorded run's device info)."""
        return {"estimated_device": self.device.value, "config_device": self.config_device.value}

    def lines(self) -> list[str]:
        """The human output's lines: the device the estimates are for, then the note."""
        return [f"estimates priced for {self.device.value}, the device measured"] + \
            ([f"note: {self.note}"] if self.note else [])


def priced_for(cfg: Config, device: Device, what: str, local_world_size: int | None = None) -> Pricing:
    """The plan priced for `device`, which `what` ("dry-run", "validation run") measures on; local_world_size,
    when given, is the ranks per host the measurement runs (the comms estimate follows it)."""
    topo = cfg.topology
    said = topo.compute_device
    priced = replace(topo, compute_device=device, local_world_size=local_world_size or topo.local_world_size,
                     rank_devices=topo.rank_devices if device is Device.CUDA else None)  # GPU kinds: not on a CPU
    note = None
    if said is not device:
        note = (f"the config says {said.value}; this {what} measures on {device.value}, so the plan is priced "
                f"for {device.value} (same placement)")
    return Pricing(replace(cfg, topology=priced), device, said, note)


__all__ = ["Pricing", "priced_for"]
