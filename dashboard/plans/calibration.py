"""Calibrations in the workspace (pure): the fitted bandwidths beside the current ones and the device profile's
fixed costs, a topology with a calibration applied or with TorchRec's defaults, whether a topology still holds
a calibration's fit, and the line that says a plan's estimates are calibrated. A calibration is the engine's
typed engine.Calibration; a saved plan's settings and the session keep its as_dict(), read back by `read`.
"""

from __future__ import annotations

import functools
import math

import engine
from dashboard.tables.presets import GBPS_TO_BYTES_PER_MS

# A calibrated value survives the Topology form's GiB/s round trip (x / k * k) to about 1e-16; a hand edit
# shown at one decimal moves it far more.
REL_TOLERANCE = 1e-9
PROBE_TABLE = {"name": "t", "num_embeddings": 1, "embedding_dim": 1}
BANDWIDTH_LABELS = {"hbm_mem_bw": "HBM", "ddr_mem_bw": "DDR", "hbm_to_ddr_mem_bw": "HBM to DDR (PCIe)",
                    "intra_host_bw": "Within a host (NVLink)", "inter_host_bw": "Across hosts (network)"}


@functools.cache
def _defaults() -> dict:
    """The engine's topology defaults (TorchRec's constants for the bandwidths); read only."""
    cfg = engine.parse_config({"tables": [PROBE_TABLE], "topology": {"world_size": 1}})
    return engine.config_to_dict(cfg)["topology"]


def default_bandwidths() -> dict[str, float]:
    """TorchRec's default bandwidths, bytes/ms."""
    defaults = _defaults()
    return {f: float(defaults[f]) for f in engine.BANDWIDTH_FIELDS}


def with_default_bandwidths(topology: dict) -> dict:
    """The topology with all five bandwidths back at TorchRec's defaults and no device profile."""
    return {k: v for k, v in {**topology, **default_bandwidths()}.items() if k != engine.PROFILE_FIELD}


def has_default_bandwidths(topology: dict) -> bool:
    defaults = _defaults()
    return topology.get(engine.PROFILE_FIELD) is None and all(
        isinstance(v := _effective(topology, f, defaults), (int, float))
        and math.isclose(v, defaults[f], rel_tol=REL_TOLERANCE) for f in engine.BANDWIDTH_FIELDS)


def keep_profile(before: dict, after: dict) -> dict:
    """`after` (the Topology form's values, which have no profile) with `before`'s profile while the device is
    the same: the form does not drop a calibration's fixed costs."""
    prof = before.get(engine.PROFILE_FIELD)
    if prof is None or after.get(engine.PROFILE_FIELD) is not None or after.get("compute_device") != before.get(
            "compute_device"):
        return after
    return {**after, engine.PROFILE_FIELD: prof}


def calibrated_topology(topology: dict, cal: engine.Calibration) -> dict:
    """The topology with the calibration's bandwidths and profile; raises engine.ConfigError (one line) when the
    topology or the patch is not valid."""
    patched = engine.apply_calibration({"tables": [PROBE_TABLE], "topology": dict(topology)}, cal.as_dict())
    return patched["topology"]


def _effective(topology: dict, field: str, defaults: dict) -> object:
    value = topology.get(field)
    return defaults[field] if value is None else value


def holds(cal: engine.Calibration | None, topology: dict) -> bool:
    """True while the topology is for the calibration's device and every fitted bandwidth is still the fit."""
    if cal is None or not cal.patch:
        return False
    defaults = _defaults()
    if _effective(topology, "compute_device", defaults) != cal.device.value:
        return False
    for field, fitted in cal.patch.items():
        value = _effective(topology, field, defaults)
        if not isinstance(value, (int, float)) or not math.isclose(value, fitted, rel_tol=REL_TOLERANCE):
            return False
    return _same_profile(cal.profile, topology.get(engine.PROFILE_FIELD))


def _same_profile(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return a == engine.parse_profile(b)
    except engine.ConfigError:
        return False


def read(cal: object) -> engine.Calibration | None:
    """A calibration as a saved plan's settings or the session keep it (Calibration.as_dict()), typed; None when
    it is not one."""
    try:
        return engine.Calibration.from_dict(cal)
    except engine.ConfigError:
        return None


def is_calibration(cal: object) -> bool:
    """A Calibration.as_dict() (as stored in a saved plan's settings) that reads as one."""
    return read(cal) is not None


def of_settings(settings: dict | None) -> engine.Calibration | None:
    """The calibration a plan's saved settings carry, if any."""
    return read((settings or {}).get("calibration"))


def r2_text(cal: engine.Calibration) -> str:
    return f"R^2 {cal.r2:.3f}" if cal.r2 is not None else "R^2 n/a"


def device_text(cal: engine.Calibration) -> str:
    return f"{cal.device.value} ({cal.device_name})" if cal.device_name else cal.device.value


def runs_text(cal: engine.Calibration) -> str:
    """'3 runs on cpu (R^2 0.981)'."""
    n = cal.n_runs
    return f"{n} run{'' if n == 1 else 's'} on {device_text(cal)} ({r2_text(cal)})"


def note(cal: engine.Calibration) -> str:
    """'Estimates calibrated from 3 runs on cpu (R^2 0.981)'."""
    return f"Estimates calibrated from {runs_text(cal)}"


def estimates_label(settings: dict | None) -> str:
    """What a plan's estimates assumed, for a comparison table."""
    cal = of_settings(settings)
    if cal is None:
        return "configured bandwidths"
    return f"calibrated: {cal.n_runs} runs on {device_text(cal)}, {r2_text(cal)}"


def profile_text(cal: engine.Calibration) -> str | None:
    """'Fixed costs (cpu/gloo, 1 host, 2 cores per host): 3.1 ms per step, ...', or None without a profile."""
    prof = cal.profile
    if prof is None:
        return None
    units = {"step_ms": "per step", "collective_ms": "per collective round", "launch_ms": "per lookup launch",
             "piece_ms": "per table piece"}
    cores = f", {prof.cores_per_host:g} cores per host" if prof.cores_per_host else ""
    costs = ", ".join(f"{getattr(prof, k):.3g} ms {units[k]}" for k in engine.FIXED_COSTS)
    return f"Fixed costs ({prof.device.value}/{prof.backend}, {prof.hosts} host{'s' if prof.hosts > 1 else ''}" \
           f"{cores}): {costs}"


def fitted_rows(topology: dict, cal: engine.Calibration) -> list[dict]:
    """One row per fitted bandwidth: its current and fitted value in GiB/s, and the fit in bytes/ms."""
    defaults = _defaults()
    rows = []
    for field, fitted in cal.patch.items():
        current = _effective(topology, field, defaults)
        current_gbps = current / GBPS_TO_BYTES_PER_MS if isinstance(current, (int, float)) else None
        rows.append({"bandwidth": BANDWIDTH_LABELS.get(field, field), "field": field, "current GiB/s": current_gbps,
                     "fitted GiB/s": fitted / GBPS_TO_BYTES_PER_MS, "fitted bytes/ms": fitted})
    return rows


__all__ = ["calibrated_topology", "default_bandwidths", "device_text", "estimates_label", "fitted_rows",
           "has_default_bandwidths", "holds", "is_calibration", "keep_profile", "note", "of_settings", "profile_text",
           "r2_text", "read", "runs_text",
           "with_default_bandwidths"]
