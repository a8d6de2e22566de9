"""Calibration: fit the estimator's bandwidths for a device kind to what validation runs measured.

Each run gives one observation, its bottleneck rank (in a synchronous job every rank waits for the slowest):
measured_ms = compute_bytes / lookup_bw + comms_bytes / comms_bw, where compute_bytes and comms_bytes are the
estimate's components times the bandwidths it assumed. Non-negative least squares gives 1/bandwidth; the
result is a topology patch ({"ddr_mem_bw" or "hbm_mem_bw", "intra_host_bw", "inter_host_bw"}) and R^2.
Pure numpy on plain numbers: db.calibration turns the stored runs into Observations (the engine never
imports db).
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from engine.config import parse_config
from engine.errors import ConfigError, EngineError
from engine.types import Device

COMPUTE_FIELD = {Device.CPU: "ddr_mem_bw", Device.CUDA: "hbm_mem_bw"}
TERMS = ("compute", "intra_host_bw", "inter_host_bw")
BANDWIDTH_FIELDS = ("hbm_mem_bw", "ddr_mem_bw", "hbm_to_ddr_mem_bw", "intra_host_bw", "inter_host_bw")


@dataclass(frozen=True)
class Observation:
    """One run's bottleneck rank: estimated components (ms), the bandwidths they assumed (bytes/ms), measured ms."""

    estimated_compute_ms: float
    estimated_comms_ms: float
    measured_ms: float
    compute_bw: float
    comms_bw: float
    multi_host: bool = False
    run_id: int | None = None

    def work_bytes(self) -> tuple[float, float, float]:
        """Bytes behind each term: lookups, comms inside a host, comms across hosts."""
        comms = self.estimated_comms_ms * self.comms_bw
        return (self.estimated_compute_ms * self.compute_bw, 0.0 if self.multi_host else comms,
                comms if self.multi_host else 0.0)


@dataclass(frozen=True)
class Calibration:
    device: Device
    patch: dict[str, float]  # topology field -> fitted bandwidth (bytes/ms); only the terms the runs determine
    r2: float | None  # of measured vs fitted over the runs; None under two runs
    n_runs: int
    run_ids: tuple[int, ...] = ()
    device_name: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {"device": self.device.value, "device_name": self.device_name, "patch": dict(self.patch),
                "r2": self.r2, "n_runs": self.n_runs, "run_ids": list(self.run_ids), "notes": list(self.notes)}


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||x c - y|| over c >= 0, exactly, by trying every support (x has a handful of columns)."""
    n = x.shape[1]
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    best, best_res = np.zeros(n), float(np.sum(y**2))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = xs[:, cols]
            if np.linalg.matrix_rank(sub) < k:
                continue
            c, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(c < 0):
                continue
            res = float(np.sum((sub @ c - y) ** 2))
            if res < best_res - 1e-12 * max(1.0, best_res):
                best, best_res = np.zeros(n), res
                best[list(cols)] = c
    return best / scale


def r_squared(y: np.ndarray, fitted: np.ndarray) -> float | None:
    if len(y) < 2:
        return None
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ss_res = float(np.sum((y - fitted) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else None
    return 1.0 - ss_res / ss_tot


def fit(observations: Iterable[Observation], device: Device, device_name: str | None = None) -> Calibration:
    """The bandwidths that best explain the observations; a term no run exercised (or fitted at zero cost)
    is left out of the patch, with a note."""
    obs = list(observations)
    if not obs:
        raise EngineError(f"no succeeded validation runs on {device.value} to calibrate from; record some "
                          "with `python -m db validate CONFIG.json --plan PLAN.json` first")
    x = np.array([o.work_bytes() for o in obs], dtype=np.float64)
    y = np.array([o.measured_ms for o in obs], dtype=np.float64)
    coef = nnls(x, y)
    patch, notes = {}, []
    for term, c, column in zip(TERMS, coef, x.T):
        name = COMPUTE_FIELD[device] if term == "compute" else term
        if not np.any(column > 0):
            continue
        if c > 0 and math.isfinite(1.0 / c):
            patch[name] = float(1.0 / c)
        else:
            notes.append(f"{name}: the runs do not determine it (its fitted cost is zero); left as configured")
    ids = tuple(o.run_id for o in obs if o.run_id is not None)
    return Calibration(device, patch, r_squared(y, x @ coef), len(obs), ids, device_name, tuple(notes))


def apply_calibration(config: dict, patch: dict) -> dict:
    """A copy of a config dict with the patch's bandwidths in its topology (a Calibration.as_dict() works too);
    checked by parse_config."""
    if isinstance(patch, dict) and isinstance(patch.get("patch"), dict):
        patch = patch["patch"]
    if not isinstance(patch, dict):
        raise ConfigError("calibration", "must be an object of topology bandwidths, e.g. {\"ddr_mem_bw\": 1e6}")
    out = copy.deepcopy(config)
    topo = out.setdefault("topology", {})
    for name, value in patch.items():
        if name not in BANDWIDTH_FIELDS:
            raise ConfigError(f"calibration.{name}", f"not a bandwidth; known: {', '.join(BANDWIDTH_FIELDS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
            raise ConfigError(f"calibration.{name}", f"must be a positive number of bytes/ms, got {value!r}")
        topo[name] = float(value)
    parse_config(out)
    return out


def observation(per_rank: dict[int, dict[str, float]], device_info: dict, run_id: int | None = None
                ) -> Observation | None:
    """A run's bottleneck rank (highest estimated_ms) as an Observation, from its per-rank metrics (rank ->
    name -> value) and device info (the result's flat values); None without the numbers."""
    bw = (device_info.get("estimate_compute_bw_bytes_per_ms"), device_info.get("estimate_comms_bw_bytes_per_ms"))
    need = ("estimated_compute_ms", "estimated_comms_ms", "step_ms")
    ranks = [r for r in per_rank.values() if all(k in r for k in need)]
    if not ranks or not all(isinstance(b, (int, float)) and b > 0 for b in bw):
        return None
    worst = max(ranks, key=lambda r: r.get("estimated_ms", r["estimated_compute_ms"] + r["estimated_comms_ms"]))
    return Observation(worst["estimated_compute_ms"], worst["estimated_comms_ms"], max(r["step_ms"] for r in ranks),
                       float(bw[0]), float(bw[1]), bool(device_info.get("estimate_multi_host", False)), run_id)


__all__ = ["Calibration", "Observation", "apply_calibration", "fit", "nnls", "observation", "r_squared"]
