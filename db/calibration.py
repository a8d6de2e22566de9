"""Calibration from the database: every succeeded validation run on a device kind, with its stored config and
plan, becomes a StepObservation for engine.calibrate (the fitting is the engine's; reading the runs is the store's).
"""

from __future__ import annotations

from dataclasses import replace

from db.models import RunKind, RunStatus
from db.records import PlanRecord, RunRecord
from db.store import Store
from engine.calibrate import Calibration, HeldOut, StepObservation, fit, leave_one_out, observation
from engine.config import parse_config
from engine.errors import EngineError
from engine.planfile import parse_plan
from engine.types import Device

MAX_PLANS = 10_000
STEP_METRIC = "step_ms"


def _per_rank_steps(store: Store, run: RunRecord, world_size: int) -> list[float] | None:
    steps = {m.rank: m.value for m in store.metrics(run.id) if m.name == STEP_METRIC}
    if sorted(steps) != list(range(world_size)) or not all(v > 0 for v in steps.values()):
        return None
    return [steps[r] for r in range(world_size)]


def run_observation(store: Store, rec: PlanRecord, run: RunRecord, device: Device) -> StepObservation | None:
    """One stored run as the engine sees it: the config priced for the device and ranks per host it ran on,
    its plan, and each rank's measured step; None when the run lacks a rank's step or its config no longer parses."""
    info = run.device_info or {}
    try:
        cfg = parse_config(rec.config)
        tables = parse_plan(rec.plan, cfg)
    except EngineError:
        return None
    nodes = info.get("nodes", 1)
    nodes = nodes if isinstance(nodes, int) and nodes >= 1 and cfg.topology.world_size % nodes == 0 else 1
    topo = replace(cfg.topology, compute_device=device, local_world_size=cfg.topology.world_size // nodes,
                   profile=None)
    measured = _per_rank_steps(store, run, topo.world_size)
    if measured is None:
        return None
    cores = info.get("cpu_count") if device is Device.CPU else None
    cores = cores if isinstance(cores, int) and cores > 0 else None
    return observation(replace(cfg, topology=topo), tables, measured, cores_per_host=cores, group=rec.config_name,
                       run_id=run.id, plan=rec.token)


def _wanted(run: RunRecord, device: Device, device_name: str | None) -> bool:
    if (run.kind, run.status, run.device) != (RunKind.VALIDATION, RunStatus.SUCCEEDED, device.value):
        return False
    return not device_name or device_name.lower() in str((run.device_info or {}).get("device_name", "")).lower()


def observations_from_store(store: Store, device: Device, device_name: str | None = None,
                            hosts: int | None = None) -> list[StepObservation]:
    """Every succeeded validation run on `device` (whose device_name contains device_name, on `hosts` hosts,
    when given), grouped by the name of the config it ran."""
    out = []
    for summary in store.list_plans(limit=MAX_PLANS):
        runs = [r for r in store.runs_for_plan(summary.token) if _wanted(r, device, device_name)]
        rec = store.get_plan(summary.token) if runs else None
        for run in runs:
            obs = run_observation(store, rec, run, device) if rec else None
            if obs is not None and (hosts is None or obs.hosts == hosts):
                out.append(obs)
    return sorted(out, key=lambda o: o.run_ids)


def calibrate_from_store(store: Store, device: Device, device_name: str | None = None,
                         hosts: int | None = None) -> Calibration:
    """The calibration of `device` from the stored runs (computed on demand; nothing is stored)."""
    return fit(observations_from_store(store, device, device_name, hosts), device, device_name)


def leave_one_out_from_store(store: Store, device: Device, device_name: str | None = None,
                             hosts: int | None = None) -> list[HeldOut]:
    """Each stored config's runs predicted by the calibration from the other configs' runs."""
    return leave_one_out(observations_from_store(store, device, device_name, hosts), device)


__all__ = ["MAX_PLANS", "calibrate_from_store", "leave_one_out_from_store", "observations_from_store",
           "run_observation"]
