"""Calibration from the database: every succeeded validation run on a device kind becomes an observation for
engine.calibrate.fit (the fitting is the engine's; reading the runs is the store's)."""

from __future__ import annotations

from db.models import RunKind, RunStatus
from db.store import Store
from engine.calibrate import Calibration, Observation, fit, observation
from engine.types import Device

MAX_PLANS = 10_000


def observations_from_store(store: Store, device: Device, device_name: str | None = None) -> list[Observation]:
    """Every succeeded validation run on `device` (whose device_name contains device_name, when given)."""
    out = []
    for plan in store.list_plans(limit=MAX_PLANS):
        for run in store.runs_for_plan(plan.token):
            if (run.kind, run.status, run.device) != (RunKind.VALIDATION, RunStatus.SUCCEEDED, device.value):
                continue
            info = run.device_info or {}
            if device_name and device_name.lower() not in str(info.get("device_name", "")).lower():
                continue
            per_rank: dict[int, dict[str, float]] = {}
            for m in store.metrics(run.id):
                per_rank.setdefault(m.rank, {})[m.name] = m.value
            obs = observation(per_rank, info, run.id)
            if obs is not None:
                out.append(obs)
    return sorted(out, key=lambda o: o.run_id or 0)


def calibrate_from_store(store: Store, device: Device, device_name: str | None = None) -> Calibration:
    """The calibration of `device` from the stored runs (computed on demand; nothing is stored)."""
    return fit(observations_from_store(store, device, device_name), device, device_name)


__all__ = ["MAX_PLANS", "calibrate_from_store", "observations_from_store"]
