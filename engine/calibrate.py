"""Calibration: fit a device profile (fixed costs per step, collective, lookup launch and table piece, and the
lookup and comms bandwidths) to what validation runs measured, and check it on configs it did not see.

In a synchronous DMP step every rank waits for the slowest, and ranks that share a host's cores wait for them too:
a run's step is `max(max over ranks of features_r . costs, max over hosts of their ranks' sum / cores)`,
features_r being rank r's step counts and bandwidth bytes (step_features); non-negative least squares on relative
errors fits the costs, re-picking the binding rank or host until the picks repeat. Pure numpy on plain numbers:
db.calibration turns stored runs into StepObservations (the engine never imports db).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine import limits as L
from engine.calibrate_apply import BANDWIDTH_FIELDS, apply_calibration
from engine.errors import ConfigError, EngineError
from engine.estimate import comms_bw, device_bw, perf_parts, piece_workset, pieces_of, table_load
from engine.workset import rank_workset_ms
from engine.evaluate import shard_arrays
from engine.fitting import nnls, r_squared
from engine.profile import BACKEND, DeviceProfile, parse_profile, plan_counts
from engine.types import ComputeKernel, Config, Device, TablePlan

COMPUTE_FIELD = {Device.CPU: "ddr_mem_bw", Device.CUDA: "hbm_mem_bw"}
FIXED = ("step_ms", "collective_ms", "launch_ms", "piece_ms")  # the first four features' costs
FEATURES = FIXED + ("compute", "intra_host_bw", "inter_host_bw")  # the last three: bytes, cost 1 / bandwidth
N_FIXED = len(FIXED)
COMPUTE = FEATURES.index("compute")
ROUNDS = FIXED.index("collective_ms")
MAX_PICK_ROUNDS = 30  # the slowest-rank assignment settles in a few rounds; a cycle stops here
RANDOM_STARTS = 12  # seeded: the fit is the same every time
# Shares of a CPU host's cores the ranks may have had while measured (a machine other work shares gives them
# less): the fit keeps the share that explains the steps best, and the profile the cores that share makes.
CORE_SHARES = (1.0, 0.875, 0.75, 0.625, 0.5)


@dataclass(frozen=True)
class StepObservation:
    """One run: per-rank features of its plan (step_features) and the step time each rank measured (ms)."""

    features: np.ndarray  # (W, 7): 1, collectives, launches, pieces, lookup bytes, comms bytes in / across hosts
    measured_ms: np.ndarray  # (W,)
    assumed_bw: tuple[float, float, float]  # bytes/ms the run's config had for the three bandwidth features
    group: str = ""  # the config measured: leave-one-out holds out one group at a time
    run_ids: tuple[int, ...] = ()
    hosts: int = 1
    cores_per_host: int | None = None  # CPU runs: the cores its host's ranks share
    plan: str = ""  # the plan measured: runs of one plan are combined (each rank's median step) before a fit
    own_ms: np.ndarray | None = None  # (W,) each rank's own embedding time inside the step (lookups, backward and
    # the fused update: a validation's embedding_ms), or None when the run has none

    @property
    def step_ms(self) -> float:
        """The run's step: the median over ranks (in a synchronous step every rank measures about the same)."""
        return float(np.median(self.measured_ms))

    @property
    def binding(self) -> np.ndarray:
        """(C, W) what can set the step: each rank alone, and each host's ranks summed over its cores where the
        host has more ranks than cores (engine.profile.host_floor)."""
        w = len(self.measured_ms)
        rows = [np.eye(w)]
        per_host = w // self.hosts
        if self.cores_per_host and per_host > self.cores_per_host:
            host = np.arange(w) // per_host
            rows.append(np.array([(host == h) / self.cores_per_host for h in range(self.hosts)], dtype=np.float64))
        return np.vstack(rows)

    @property
    def candidates(self) -> np.ndarray:
        """(C, 7) the features of what can set the step: each rank's, and each host's work over its cores plus
        the collectives' latency once (waiting occupies no core; engine.profile.step_perf)."""
        xc = self.binding @ self.features
        xc[len(self.measured_ms):, ROUNDS] = self.features[:, ROUNDS].max()
        return xc


@dataclass(frozen=True)
class Calibration:
    device: Device
    patch: dict[str, float]  # topology field -> fitted bandwidth (bytes/ms); only the terms the runs determine
    r2: float | None  # of measured vs fitted step over the runs; None under two runs
    n_runs: int
    run_ids: tuple[int, ...] = ()
    device_name: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    profile: DeviceProfile | None = None
    median_error: float | None = None  # median |fitted - measured| / measured over the runs' ranks, in-sample
    costs: tuple[float, ...] = ()  # per feature (FEATURES); a bandwidth left as configured has cost 0 here

    def as_dict(self) -> dict:
        return {"device": self.device.value, "device_name": self.device_name, "patch": dict(self.patch),
                "profile": self.profile.as_dict() if self.profile else None, "r2": self.r2,
                "median_error": self.median_error, "n_runs": self.n_runs, "run_ids": list(self.run_ids),
                "notes": list(self.notes)}

    @staticmethod
    def from_dict(data: Any, path: str = "calibration") -> Calibration:
        """A calibration from as_dict()'s object (as a saved plan's settings keep it); raises ConfigError naming
        the field. Its per-feature costs are not written there: ()."""
        if not isinstance(data, dict):
            raise ConfigError(path, "must be an object (Calibration.as_dict())")
        patch, n_runs, device = data.get("patch"), data.get("n_runs"), data.get("device")
        if not isinstance(patch, dict) or not all(isinstance(k, str) and _number(v) for k, v in patch.items()):
            raise ConfigError(f"{path}.patch", "must be an object of topology bandwidths (numbers)")
        if not isinstance(n_runs, int):
            raise ConfigError(f"{path}.n_runs", "must be a whole number")
        if device not in {d.value for d in Device}:
            raise ConfigError(f"{path}.device", f"must be one of {', '.join(d.value for d in Device)}")
        name, profile = data.get("device_name"), data.get("profile")
        return Calibration(
            device=Device(device), patch=dict(patch), r2=_float_or_none(data.get("r2")), n_runs=n_runs,
            run_ids=tuple(r for r in data.get("run_ids") or () if isinstance(r, int)),
            device_name=name if isinstance(name, str) else None,
            notes=tuple(str(n) for n in data.get("notes") or ()),
            profile=None if profile is None else parse_profile(profile, f"{path}.profile"),
            median_error=_float_or_none(data.get("median_error")))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _float_or_none(v: Any) -> float | None:
    return float(v) if _number(v) else None


# ---- features of a plan ----------------------------------------------------------------------------------


def step_features(cfg: Config, tables: dict[str, TablePlan]) -> tuple[np.ndarray, tuple[float, float, float]]:
    """(W, 7) per-rank features of one step (1, collective latency rounds, lookup launches, table pieces, lookup
    bytes, comms bytes in / across hosts) and the bandwidths (bytes/ms) the bytes were priced at. Lookup bytes are
    work at the fused kernel's bandwidth (a dense kernel's count double), the rank's working-set term included
    (CPU): a fitted lookup bandwidth scales every CPU compute term alike."""
    topo = replace(cfg.topology, profile=None)
    w, multi = topo.world_size, topo.num_hosts > 1
    lookup_bw, cbw = device_bw(topo, ComputeKernel.FUSED, 1.0), comms_bw(topo)
    compute_ms, comms_ms, workset, workset_rows = np.zeros(w), np.zeros(w), np.zeros(w), np.zeros(w)
    for name, tp in tables.items():
        ranks, rows, cols = shard_arrays(cfg, name, tp)
        t = cfg.table(name)
        load = table_load(t, cfg.constraint(name), topo)
        work, fixed = perf_parts(t, load, topo, tp.sharding_type, rows.astype(float), cols.astype(float))
        np.add.at(compute_ms, ranks, work.sum(axis=1) / device_bw(topo, tp.compute_kernel, load.cache_load_factor))
        np.add.at(comms_ms, ranks, fixed.sum(axis=1))
        ws_bytes, ws_rows = piece_workset(pieces_of(t, load, topo, rows.astype(float), cols.astype(float)), topo,
                                          tp.sharding_type)
        np.add.at(workset, ranks, ws_bytes)
        np.add.at(workset_rows, ranks, ws_rows)
    compute_ms += rank_workset_ms(workset, workset_rows, topo)
    counts = plan_counts(cfg, tables, BACKEND[topo.compute_device])
    x = np.zeros((w, len(FEATURES)))
    x[:, 0], x[:, 1], x[:, 2], x[:, 3] = 1.0, counts.rounds, counts.launches, counts.pieces
    x[:, 4] = compute_ms * lookup_bw
    x[:, 6 if multi else 5] = comms_ms * cbw
    return x, (lookup_bw, topo.intra_host_bw if not multi else cbw, topo.inter_host_bw)


def observation(cfg: Config, tables: dict[str, TablePlan], measured_ms: Sequence[float], *, cores_per_host: int | None,
                group: str = "", run_id: int | None = None, plan: str = "",
                own_ms: Sequence[float] | None = None) -> StepObservation:
    """A run as an observation: the config as it ran (its device, ranks per host), the plan, per-rank step ms, and
    where the run has them, each rank's own embedding ms."""
    x, bw = step_features(cfg, tables)
    own = None if own_ms is None else np.asarray(own_ms, dtype=np.float64)
    return StepObservation(x, np.asarray(measured_ms, dtype=np.float64), bw, group,
                           () if run_id is None else (run_id,), cfg.topology.num_hosts, cores_per_host, plan, own)


def combine(observations: Iterable[StepObservation]) -> list[StepObservation]:
    """Runs of one plan (same config, host count and cores) as one observation: each rank's median step over them,
    so that a run made while the machine was busy moves the fit less. Observations without a plan stay apart."""
    groups: dict[tuple, list[StepObservation]] = {}
    for i, o in enumerate(observations):
        key = (o.group, o.plan, o.hosts, o.cores_per_host, len(o.measured_ms)) if o.plan else (i,)
        groups.setdefault(key, []).append(o)
    out = []
    for runs in groups.values():
        first = runs[0]
        measured = np.median(np.array([o.measured_ms for o in runs]), axis=0)
        own = (np.median(np.array([o.own_ms for o in runs]), axis=0)
               if all(o.own_ms is not None for o in runs) else None)
        out.append(replace(first, measured_ms=measured, own_ms=own, run_ids=tuple(i for o in runs for i in o.run_ids)))
    return out


# ---- the fit ---------------------------------------------------------------------------------------------


def _offsets(o: StepObservation, held: Sequence[int]) -> np.ndarray:
    """Per rank, the ms of the bandwidth terms held at the run's configured bandwidth."""
    return sum((o.features[:, j] / o.assumed_bw[j - N_FIXED] for j in held), np.zeros(len(o.measured_ms)))


def busy_ms(costs: np.ndarray, o: StepObservation, held: Sequence[int] = ()) -> np.ndarray:
    """Per rank: its own work in the step under these costs."""
    return o.features @ costs + _offsets(o, held)


def step_of(costs: np.ndarray, o: StepObservation, held: Sequence[int] = ()) -> float:
    return float((o.candidates @ costs + o.binding @ _offsets(o, held)).max())


def _settle(obs: list[StepObservation], cols: list[int], held: Sequence[int], pick: list[int]
            ) -> tuple[np.ndarray, float]:
    """From one choice of what binds each run: least squares, re-pick under the new costs, until the picks repeat.
    Returns the best costs seen and their summed squared relative error."""
    seen, best, best_res = set(), np.zeros(len(FEATURES)), math.inf
    for _ in range(MAX_PICK_ROUNDS):
        rows = np.array([o.candidates[p, cols] / o.step_ms for o, p in zip(obs, pick)])
        y = np.array([1.0 - (o.binding @ _offsets(o, held))[p] / o.step_ms for o, p in zip(obs, pick)])
        costs = np.zeros(len(FEATURES))
        costs[cols] = nnls(rows, y)
        res = sum(((step_of(costs, o, held) - o.step_ms) / o.step_ms) ** 2 for o in obs)
        if res < best_res:
            best, best_res = costs, res
        pick = [int(np.argmax(o.candidates @ costs + o.binding @ _offsets(o, held))) for o in obs]
        if tuple(pick) in seen:
            break
        seen.add(tuple(pick))
    return best, best_res


def _solve(obs: list[StepObservation], cols: list[int], held: Sequence[int]) -> np.ndarray:
    """Costs minimising the relative error of each run's step, what binds it (a rank, or a host's ranks over its
    cores) being unknown: settled from the largest candidate of each run, then from a few seeded random choices
    (the picks can settle in a local optimum); the best is kept."""
    size = [o.candidates[:, N_FIXED:].sum(axis=1) + o.candidates[:, 2:N_FIXED].sum(axis=1) for o in obs]
    rng = np.random.default_rng(0)
    starts = [[int(np.argmax(v)) for v in size]] + [[int(rng.integers(len(v))) for v in size]
                                                     for _ in range(RANDOM_STARTS)]
    best, best_res = np.zeros(len(FEATURES)), math.inf
    for pick in starts:
        costs, res = _settle(obs, cols, held, pick)
        if res < best_res - 1e-15:
            best, best_res = costs, res
        if best_res < 1e-20:
            break
    return best


def own_cost(obs: Sequence[StepObservation]) -> float | None:
    """The lookup work's cost (ms per byte of the compute feature) that each rank's own embedding time gives, by
    least squares through 0 over every rank of every run; None unless every run has them and the fit is positive."""
    if not obs or any(o.own_ms is None for o in obs):
        return None
    x = np.concatenate([o.features[:, COMPUTE] for o in obs])
    y = np.concatenate([o.own_ms for o in obs])
    xx = float(x @ x)
    cost = float(x @ y) / xx if xx > 0 else 0.0
    return cost if cost > 0 and math.isfinite(cost) else None


def _fit_costs(obs: list[StepObservation]) -> tuple[np.ndarray, list[int], list[int], bool]:
    """(costs, columns fitted, bandwidth columns held at the configured bandwidth because they fitted at 0, whether
    the lookup cost is the ranks' own embedding time's). A synchronised step cannot tell the lookup work apart when
    the plans measured spread it alike (every rank waits for the slowest, or for a core): its cost fits 0. Held at
    the configured bandwidth, a default far off the machine makes every other cost fit 0 (on the VM measured, 12
    runs of 6 plans of a 4-rank config: R^2 -90). Where the runs carry each rank's own embedding time, the lookup
    cost is fitted to that instead (own_cost), and the fixed costs to the steps beside it."""
    used = [j for j in range(len(FEATURES)) if any(np.any(o.features[:, j] > 0) for o in obs)]
    held: list[int] = []
    own = None
    while True:
        cols = [j for j in used if j not in held]
        costs = _solve(obs, cols, held)
        zero = [j for j in cols if j >= N_FIXED and costs[j] == 0]
        if COMPUTE in zero and own is None and (own := own_cost(obs)) is not None:
            obs = [replace(o, assumed_bw=(1.0 / own, *o.assumed_bw[1:])) for o in obs]  # held at the ranks' own
        if not zero:
            break
        held += zero
    if own is not None and COMPUTE in held:
        held.remove(COMPUTE)
        cols = sorted(cols + [COMPUTE])
        costs[COMPUTE] = own
    return costs, cols, held, own is not None and COMPUTE in cols


def _residual(obs: list[StepObservation], costs: np.ndarray, held: Sequence[int]) -> float:
    return float(sum(((step_of(costs, o, held) - o.step_ms) / o.step_ms) ** 2 for o in obs))


def _fit_cores(obs: list[StepObservation], device: Device) -> tuple[list[StepObservation], float, tuple]:
    """(the observations with the cores their ranks effectively had, that share, _fit_costs of them): the share
    of CORE_SHARES whose fit explains the steps best (CPU runs; elsewhere all of them)."""
    shares = CORE_SHARES if device is Device.CPU and any(o.cores_per_host for o in obs) else (1.0,)
    best = None
    for share in shares:
        trial = [replace(o, cores_per_host=o.cores_per_host * share) if o.cores_per_host else o for o in obs]
        fitted = _fit_costs(trial)
        res = _residual(trial, fitted[0], fitted[2])
        if best is None or res < best[0] - 1e-12 * max(1.0, best[0]):
            best = (res, trial, share, fitted)
    return best[1], best[2], best[3]


def _profile(obs: list[StepObservation], device: Device, costs: np.ndarray) -> DeviceProfile:
    hosts = {o.hosts for o in obs}
    if len(hosts) > 1:
        raise EngineError(f"the runs are on {', '.join(map(str, sorted(hosts)))} hosts: a profile is for one host "
                          "count; calibrate from runs of one (--hosts N)")
    cores = Counter(o.cores_per_host for o in obs).most_common(1)[0][0] if device is Device.CPU else None
    cores = None if cores is None else float(cores)
    groups = len({o.group for o in obs})
    runs = sum(max(1, len(o.run_ids)) for o in obs)
    return DeviceProfile(device, BACKEND[device], hosts.pop(), cores,
                         **{name: float(costs[i]) for i, name in enumerate(FIXED)},
                         source=f"measured: fitted to {runs} validation runs of {len(obs)} plans, {groups} configs")


def fit(observations: Iterable[StepObservation], device: Device, device_name: str | None = None) -> Calibration:
    """The profile and bandwidths that best explain the runs' steps; a bandwidth no run exercised, or fitted at
    zero cost, stays as configured (a note says so)."""
    obs = combine(observations)
    if not obs:
        raise EngineError(f"no succeeded validation runs on {device.value} to calibrate from; record some "
                          "with `python -m db validate CONFIG.json --plan PLAN.json` first")
    obs, share, (costs, cols, held, from_own) = _fit_cores(obs, device)
    patch, notes = {}, []
    if share < 1.0:
        notes.append(f"the ranks had {share:.0%} of their hosts' cores while measured (other work shared the "
                     "machine): cores_per_host is that share")
    for j in range(N_FIXED, len(FEATURES)):
        name = COMPUTE_FIELD[device] if FEATURES[j] == "compute" else FEATURES[j]
        if j in held:
            notes.append(f"{name}: the runs do not determine it (its fitted cost is zero); left as configured")
        elif j in cols and costs[j] > 0 and math.isfinite(1.0 / costs[j]):
            patch[name] = float(min(L.MAX_BW, max(L.MIN_BW, 1.0 / costs[j])))
            if j == COMPUTE and from_own:
                notes.append(f"{name}: the steps do not determine it (the plans measured spread the lookups alike); "
                             "fitted to each rank's own embedding time in the runs instead")
    for i, name in enumerate(FIXED):
        if costs[i] == 0 and i in cols:
            notes.append(f"{name}: fitted at zero (the runs do not show it)")
    y = np.array([o.step_ms for o in obs])
    fitted = np.array([step_of(costs, o, held) for o in obs])
    errors = np.concatenate([np.abs(f - o.measured_ms) / o.measured_ms for f, o in zip(fitted, obs)])
    ids = tuple(sorted(i for o in obs for i in o.run_ids))
    return Calibration(device, patch, r_squared(y, fitted), max(len(ids), len(obs)), ids, device_name, tuple(notes),
                       _profile(obs, device, costs), float(np.median(errors)), tuple(float(c) for c in costs))


# ---- predictions and the honest check --------------------------------------------------------------------


def predict(cal: Calibration, o: StepObservation) -> tuple[float, np.ndarray, np.ndarray]:
    """(step ms, per-rank estimate ms, per-rank own work ms) of a run under a calibration, the first two as the
    estimator gives them once the calibration is applied to the run's config (each rank at least its host's work
    over its cores); a bandwidth the calibration left out stays the one the run's config had."""
    costs = np.asarray(cal.costs, dtype=np.float64)
    held = [j for j in range(N_FIXED, len(FEATURES)) if costs[j] == 0]
    if cal.profile is not None and o.cores_per_host:  # the cores the estimate assumes: the profile's
        o = replace(o, cores_per_host=cal.profile.cores_per_host)
    own = busy_ms(costs, o, held)
    floors = (o.candidates @ costs + o.binding @ _offsets(o, held))[len(own):]
    per_rank = own.copy()
    if len(floors):
        per_host = len(own) // o.hosts
        per_rank = np.maximum(own, floors[np.arange(len(own)) // per_host])
    return step_of(costs, o, held), per_rank, own


@dataclass(frozen=True)
class HeldOut:
    """One plan's runs (combined) of a config left out of the fit, predicted by the fit on the other configs."""

    group: str
    run_ids: tuple[int, ...]
    measured_ms: np.ndarray  # (W,)
    step_ms: float  # estimated step: what every rank of a synchronous step measures
    rank_ms: np.ndarray  # (W,) each rank's estimate (engine.evaluate's cost_ms under the calibration)
    busy_ms: np.ndarray  # (W,) each rank's own work (before waiting for a core)

    @property
    def errors(self) -> np.ndarray:
        """Per rank |estimated step - measured| / measured."""
        return np.abs(self.step_ms - self.measured_ms) / self.measured_ms


def leave_one_out(observations: Iterable[StepObservation], device: Device) -> list[HeldOut]:
    """Each config's runs predicted by the fit on all the other configs' runs (one config out at a time)."""
    obs = combine(observations)
    groups = sorted({o.group for o in obs})
    if len(groups) < 2:
        raise EngineError("leave-one-out needs runs of at least two configs")
    out = []
    for g in groups:
        cal = fit([o for o in obs if o.group != g], device)
        for o in obs:
            if o.group == g:
                out.append(HeldOut(g, o.run_ids, o.measured_ms, *predict(cal, o)))
    return out


def median_error(held: Sequence[HeldOut]) -> float:
    """Median over every held-out rank of |estimated - measured| / measured."""
    return float(np.median(np.concatenate([h.errors for h in held])))


__all__ = ["BANDWIDTH_FIELDS", "COMPUTE_FIELD", "FEATURES", "Calibration", "HeldOut", "StepObservation",
           "apply_calibration", "busy_ms", "combine", "fit", "leave_one_out", "median_error", "nnls", "observation",
           "predict", "r_squared", "step_features", "step_of"]
