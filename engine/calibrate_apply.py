"""Applying a calibration to a config dict: the fitted bandwidths and profile (engine.calibrate), or the CPU terms
fitted per device (engine.calibrate_terms) written into the topology's profile, never over a profile of another
device. Checked by parse_config."""

from __future__ import annotations

import copy
import math

from engine.config import parse_config
from engine.errors import ConfigError
from engine.fields import BY_NAME, PROFILE_TERM_NAMES
from engine.profile import BACKEND
from engine.types import Device

DDR_DEFAULT = BY_NAME["ddr_mem_bw"].default
BANDWIDTH_FIELDS = ("hbm_mem_bw", "ddr_mem_bw", "hbm_to_ddr_mem_bw", "intra_host_bw", "inter_host_bw")


def apply_calibration(config: dict, patch: dict) -> dict:
    """A copy of a config dict calibrated: the fitted bandwidths in its topology and, given a whole calibration
    (Calibration.as_dict()) with a profile, that profile and its device as compute_device. Checked by parse_config."""
    profile = None
    if isinstance(patch, dict) and isinstance(patch.get("patch"), dict):
        profile = patch.get("profile")
        patch = patch["patch"]
    if not isinstance(patch, dict):
        raise ConfigError("calibration", "must be an object of topology bandwidths, e.g. {\"ddr_mem_bw\": 1e6}")
    out = copy.deepcopy(config)
    topo = out.setdefault("topology", {})
    if not isinstance(topo, dict):
        raise ConfigError("topology", "must be an object")
    before = (topo.get("profile"), topo.get("ddr_mem_bw", DDR_DEFAULT))
    for name, value in patch.items():
        if name not in BANDWIDTH_FIELDS:
            raise ConfigError(f"calibration.{name}", f"not a bandwidth; known: {', '.join(BANDWIDTH_FIELDS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
            raise ConfigError(f"calibration.{name}", f"must be a positive number of bytes/ms, got {value!r}")
        topo[name] = float(value)
    if profile is not None:
        if not isinstance(profile, dict):
            raise ConfigError("calibration.profile", "must be an object (a device profile)")
        topo["profile"] = copy.deepcopy(profile)
        topo["compute_device"] = profile.get("device")
    _keep_terms(topo, *before)
    parse_config(out)
    return out


def _keep_terms(topo: dict, old: object, old_ddr: object) -> None:
    """The CPU terms (and their device) the config's profile carried stay in the calibrated profile of the same
    device kind, rescaled to its ddr_mem_bw so that they price the same time (they were fitted to measured times)."""
    prof = topo.get("profile")
    if not isinstance(old, dict) or not isinstance(prof, dict) or prof.get("device") != old.get("device"):
        return
    terms = {k: v for k, v in old.items() if k in PROFILE_TERM_NAMES and isinstance(v, (int, float))}
    new_ddr = topo.get("ddr_mem_bw", DDR_DEFAULT)
    if not terms or not all(isinstance(b, (int, float)) and b > 0 for b in (old_ddr, new_ddr)):
        return
    prof.update({k: float(v) * new_ddr / old_ddr for k, v in terms.items()}, device_name=old.get("device_name"))


def apply_terms(config: dict, fit: dict) -> dict:
    """A copy of a CPU config dict whose topology profile carries the fitted terms of `fit` (TermFit.as_dict()) and
    the device they were fitted on: scaled from the bandwidth they were fitted at to the config's ddr_mem_bw, so they
    price the time measured. A profile of another device (device_name) or kind is refused, naming both; a config
    without a profile gains a CPU profile with no fixed costs. Checked by parse_config."""
    if not isinstance(fit, dict) or fit.get("kind") != "cpu_terms" or not isinstance(fit.get("values"), dict):
        raise ConfigError("calibration", "must be a per-term calibration (python -m db calibrate --terms --out)")
    name, values, ref = fit.get("device_name"), fit["values"], fit.get("ddr_mem_bw")
    if not isinstance(name, str) or not isinstance(ref, (int, float)) or not ref > 0:
        raise ConfigError("calibration", "lacks its device_name or the ddr_mem_bw its terms were fitted at")
    if not name:
        raise ConfigError("calibration.device_name", "is empty: the dry-runs name no device (recorded before "
                          "dry-runs recorded it); record them again with `python -m db dryrun` to fit terms for a "
                          "device")
    unknown = [k for k in values if k not in PROFILE_TERM_NAMES]
    if unknown:
        raise ConfigError(f"calibration.values.{unknown[0]}", f"not a CPU term; known: {', '.join(PROFILE_TERM_NAMES)}")
    cfg = parse_config(config)
    topo_cfg = cfg.topology
    if topo_cfg.compute_device is not Device.CPU:
        raise ConfigError("topology.compute_device", f"is {topo_cfg.compute_device.value}; the terms are CPU terms "
                          f"fitted on {name!r}: apply them to a cpu config")
    out = copy.deepcopy(config)
    topo = out["topology"]
    prof = topo.get("profile")
    if prof is None:
        prof = {"device": Device.CPU.value, "backend": BACKEND[Device.CPU], "hosts": topo_cfg.num_hosts,
                "source": "CPU terms only: no fixed costs measured"}
    elif not isinstance(prof, dict) or prof.get("device") != Device.CPU.value:
        raise ConfigError("topology.profile", f"is not a cpu profile; the terms were fitted on {name!r} (cpu)")
    have = prof.get("device_name")
    if have is not None and have != name:
        raise ConfigError("topology.profile.device_name", f"the config's profile is for {have!r} but these terms "
                          f"were fitted on {name!r}: a planner never uses terms fitted on another device; calibrate "
                          f"from dry-runs on {have!r}, or apply them to a config without that profile")
    scale = topo_cfg.ddr_mem_bw / float(ref)
    prof = {k: v for k, v in prof.items() if k not in PROFILE_TERM_NAMES}  # no term of an earlier fit survives
    prof.update({"device_name": name, **{k: float(v) * scale for k, v in sorted(values.items())}})
    topo["profile"] = prof
    parse_config(out)
    return out


__all__ = ["BANDWIDTH_FIELDS", "apply_calibration", "apply_terms"]
