"""Calibration from the database: every succeeded validation run on a device kind, with its stored config and
plan, becomes a StepObservation for engine.calibrate (the fitting is the engine's; reading the runs is the store's).
"""

from __future__ import annotations

from dataclasses import replace

from db.models import RunKind, RunStatus
from db.records import PlanRecord, RunRecord
from db.store import Store
from engine import FIELDS as BY_NAME
from engine import (
    Calibration, Device, EngineError, HeldOut, StepObservation, TermFit, TermRun, fit_terms, parse_config, parse_plan,
    term_run,
)
from engine import calibration_leave_one_out as leave_one_out
from engine import fit_calibration as fit
from engine import step_observation as observation

MAX_PLANS = 10_000
STEP_METRIC = "step_ms"


def _per_rank_steps(store: Store, run: RunRecord, world_size: int, metric: str = STEP_METRIC) -> list[float] | None:
    steps = {m.rank: m.value for m in store.metrics(run.id) if m.name == metric}
    if sorted(steps) != list(range(world_size)) or not all(v > 0 for v in steps.values()):
        return None
    return [steps[r] for r in range(world_size)]


def run_observation(store: Store, rec: PlanRecord, run: RunRecord, device: Device) -> StepObservation | None:
    """One stored run as the engine sees it: the config priced for the device and ranks per host it ran on,
    its plan, each rank's measured step and own embedding time (where the run recorded it); None when the run lacks a
    rank's step or its config no longer parses."""
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
    own = _per_rank_steps(store, run, topo.world_size, EMBEDDING_METRIC)  # each rank's own work, where recorded
    return observation(replace(cfg, topology=topo), tables, measured, cores_per_host=cores, group=rec.config_name,
                       run_id=run.id, plan=rec.token, own_ms=own)


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


# ---- per-term calibration from dry-runs ------------------------------------------------------------------

REFERENCE_DDR_BW = BY_NAME["ddr_mem_bw"].default  # every run is priced at it: the terms' bytes are at this bandwidth
EMBEDDING_METRIC = "embedding_ms"  # a rank's own embedding work: validation runs and dry-runs (engine.validate.types)
VALIDATION_KERNELS = "torchrec"  # a validation's label among the dry-run backends: DMP's fbgemm kernels in a real step


def _unusable(info: dict) -> str | None:
    """Why a run's per-rank times cannot fit the terms, or None."""
    ids = info.get("ids")
    if isinstance(ids, dict) and ids.get("source", "synthetic") != "synthetic":
        return "its ids were replayed from a sample (--ids), which its config's id distribution does not describe"
    if info.get("scale_rows", 1.0) != 1.0:
        return "measured with --scale-rows (smaller tables than its config's)"
    iters, warmup, batches = info.get("iters"), info.get("warmup"), info.get("batches")
    if isinstance(iters, int) and isinstance(warmup, int) and isinstance(batches, int) and batches < iters + warmup:
        return "its steps cycled a few batches (big tables look cached); run with fresh ids (--batches 0)"
    if info.get("distribution", "config") != "config":
        return "its ids were not drawn as its config says (--distribution other than config)"
    if info.get("threads", 1) != 1:
        return "measured with more than one thread (the terms are per thread)"
    return None


def term_runs_from_store(store: Store, device_name: str | None = None,
                         backend: str | None = None) -> tuple[list[TermRun], list[str]]:
    """Every succeeded CPU dry-run, and validation run that recorded each rank's own embedding work (embedding_ms),
    whose device name contains device_name and whose kernels are `backend` (a dry-run's backend, or "torchrec" for
    validation runs), when given, as a TermRun priced at REFERENCE_DDR_BW; and notes on the runs left out and why."""
    runs, skipped, validations, loads = [], {}, 0, []
    for summary in store.list_plans(limit=MAX_PLANS):
        rec = None
        for run in store.runs_for_plan(summary.token):
            info = run.device_info or {}
            name = str(info.get("device_name") or "")
            kernels = VALIDATION_KERNELS if run.kind == RunKind.VALIDATION else str(info.get("backend", ""))
            if run.status != RunStatus.SUCCEEDED or run.device != Device.CPU.value or \
                    (device_name and device_name.lower() not in name.lower()) or (backend and kernels != backend):
                continue
            why = _unusable(info)
            rec = rec or store.get_plan(summary.token)
            try:
                cfg = parse_config(rec.config)
                tables = parse_plan(rec.plan, cfg)
            except EngineError:
                why = "its stored config or plan no longer parses"
            w = cfg.topology.world_size
            measured = None if why else _per_rank_steps(store, run, w, EMBEDDING_METRIC)
            if measured is None and not why and run.kind == RunKind.VALIDATION:
                validations += 1  # recorded before validation runs timed each rank's own work
                continue
            if measured is None and not why:  # a dry-run recorded before embedding_ms: its measured_ms is the same
                measured = _per_rank_steps(store, run, w)
            if measured is None:
                skipped.setdefault(why or "a rank's measured time is missing", []).append(run.id)
                continue
            cfg = replace(cfg, topology=replace(cfg.topology, ddr_mem_bw=REFERENCE_DDR_BW))
            runs.append(term_run(cfg, tables, measured, run.id, rec.config_name, name, kernels))
            if isinstance(info.get("load_average"), (int, float)):
                loads.append(float(info["load_average"]))
    notes = [f"run{'s' if len(ids) > 1 else ''} {', '.join(map(str, sorted(ids)))} left out: {why}"
             for why, ids in sorted(skipped.items())]
    if loads:
        notes.append(f"1-minute load average as the runs ended: {min(loads):.1f}-{max(loads):.1f} "
                     f"({len(loads)} of {len(runs)} runs): a busy machine's times fit busy-machine terms")
    if validations:
        notes.append(f"{validations} validation run{'s' if validations > 1 else ''} not used: "
                     f"{'they' if validations > 1 else 'it'} recorded synchronised steps only (every rank waits for "
                     "the slowest), no rank's own embedding_ms")
    return sorted(runs, key=lambda r: r.run_id), notes


def terms_from_store(store: Store, device_name: str | None = None, backend: str | None = None) -> TermFit:
    """The CPU terms fitted to the stored dry-runs of one device and backend (computed on demand; nothing is
    stored)."""
    runs, notes = term_runs_from_store(store, device_name, backend)
    return fit_terms(runs, REFERENCE_DDR_BW, notes)


__all__ = ["MAX_PLANS", "calibrate_from_store", "leave_one_out_from_store", "observations_from_store",
           "run_observation", "term_runs_from_store", "terms_from_store"]
