"""Measuring runs in the database: a run's status and log as it goes, then its result. `record_result` is the one
way a result is stored, for `python -m db validate | dryrun | import-results` and for the dashboard's runs
(which start those commands). The engine runs the job and reports through a DbSink it is handed; it never
imports db.

A result's per-rank numbers become metrics under their own names (true/false as 1/0), its `measured_ms` as
step_ms, what Compare reads as measured (validation: the iteration time, also kept as iteration_ms).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from db.compare import MEASURED_TIME_METRIC
from db.models import RunKind
from db.store import Store
from engine.config import config_to_dict
from engine.errors import EngineError
from engine.planfile import parse_plan, plan_to_dict
from engine.types import Config, Plan, TablePlan
from engine.validate.types import RunStatus, ValidationResult

MAX_LOG_CHARS = 1_000_000  # a run's log in the database stops growing here
MEASURED_NAMES = ("measured_ms", "iteration_ms")  # the first present is stored as step_ms
UNITS = (("_ms", "ms"), ("_bytes", "bytes"))
NOT_DEVICE_INFO = ("ranks", "log_tail", "status", "error")  # stored elsewhere: metrics, log, status, error
SCALARS = (str, int, float, bool, type(None))
SOURCES = {RunKind.VALIDATION: ("validation", "python -m db validate"),
           RunKind.DRYRUN: ("dry-run", "python -m db dryrun")}
SOURCE = SOURCES[RunKind.VALIDATION][1]


def open_store(url: str | None = None) -> Store:
    """The Store at url (default: DATABASE_URL or the SQLite file), schema brought up to date; raises StoreError."""
    store = Store(url)
    store.upgrade()
    return store


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def metrics(result: dict) -> list[tuple[int, str, float, str]]:
    """(rank, name, value, unit) of a result's ranks (a dry-run's or a validation's --json, or a results file):
    every finite number and true/false under its name, the measured time also as step_ms."""
    out = []
    for r in result.get("ranks") or []:
        rank = r.get("rank") if isinstance(r, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool):
            continue
        measured = next((r[n] for n in MEASURED_NAMES if _number(r.get(n))), None)
        if measured is not None:
            out.append((rank, MEASURED_TIME_METRIC, float(measured), "ms"))
        for name, value in r.items():
            if name in ("rank", "measured_ms") or not _number(value):
                continue
            unit = next((u for suffix, u in UNITS if name.endswith(suffix)), "")
            out.append((rank, name, float(value), unit))
    return out


def device_info(result: dict) -> dict:
    """The result's top-level values but ranks, log, status and error (backend, device, versions, the device the
    estimates are priced for, the bandwidths they assumed, notes, the ids used): scalars, and lists and objects of
    scalars (such as `ids`, {"source": "sample", "file", ...})."""
    def keep(v: Any) -> bool:
        return scalar(v) or (isinstance(v, list) and all(keep(x) for x in v)) or \
            (isinstance(v, dict) and all(isinstance(k, str) and scalar(x) for k, x in v.items()))

    def scalar(v: Any) -> bool:
        return isinstance(v, SCALARS) and not (isinstance(v, float) and not math.isfinite(v))

    return {k: v for k, v in result.items() if k not in NOT_DEVICE_INFO and keep(v)}


def status_of(result: dict) -> RunStatus:
    """A result's status: its "status" (a validation), else succeeded (a dry-run prints a result only then)."""
    try:
        return RunStatus(result.get("status", RunStatus.SUCCEEDED.value))
    except ValueError:
        raise EngineError(f"the result's status {result['status']!r} is not a run status") from None


def record_result(store: Store, run_id: int, result: dict, status: RunStatus | None = None,
                  error: str | None = None) -> RunStatus:
    """Store a run's result: per-rank metrics, device info, the final status (given, or the result's) and the
    one-line error (given, or the result's). The only function that finishes a run with a result."""
    status = status or status_of(result)
    rows = metrics(result)
    if rows:
        store.add_metrics(run_id, rows)
    why = error or result.get("error")
    store.update_run(run_id, status=status.value, error=str(why) if why else None, device_info=device_info(result))
    return status


class DbSink:
    """A run row kept up to date while the job runs (engine.validate.run.Sink). Database trouble mid-run is
    reported once on stderr and stops the reporting; it never stops the job."""

    def __init__(self, store: Store, run_id: int, token: str):
        self.store, self.run_id, self.token = store, run_id, token
        self.logged = 0
        self.broken = False

    @classmethod
    def create(cls, store: Store, cfg: Config, tables: dict[str, TablePlan], plan: Plan, token: str | None,
               backend: str, device: str, config_name: str = "validate", kind: RunKind = RunKind.VALIDATION,
               run_id: int | None = None) -> DbSink:
        """A new run (status queued) of the plan `token`, or of this plan stored now when token is None; or the
        run `run_id` (created queued by the dashboard), which must be a `kind` run of plan `token` not yet ended."""
        if run_id is not None:
            return cls(store, _check_run(store, run_id, token, kind), str(token))
        token = store_plan(store, cfg, tables, plan, token, config_name, kind)
        return cls(store, store.create_run(token, kind.value, backend, device), token)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the job goes on; its results file still holds everything
            self.broken = True
            print(f"warning: the database stopped taking this run's updates ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return None

    def status(self, status: RunStatus) -> None:
        self._call(self.store.update_run, self.run_id, status=status.value)

    def log(self, text: str) -> None:
        if not text or self.logged >= MAX_LOG_CHARS:
            return
        text = text[:MAX_LOG_CHARS - self.logged]
        self.logged += len(text)
        if self.logged >= MAX_LOG_CHARS:
            text += "\n[log truncated: the full log is in the run's out-dir]\n"
        self._call(self.store.update_run, self.run_id, log_append=text)

    def cancel_requested(self) -> bool:
        """True once someone (the dashboard) marked the run cancelled in the database."""
        rec = self._call(self.store.get_run, self.run_id)
        return rec is not None and rec.status == RunStatus.CANCELLED

    def finish(self, result: ValidationResult) -> None:
        self.record(result.as_dict())

    def record(self, result: dict, status: RunStatus | None = None, error: str | None = None) -> None:
        self._call(record_result, self.store, self.run_id, result, status, error)

    def fail(self, error: str) -> None:
        self.record({}, RunStatus.FAILED, error)


def _check_run(store: Store, run_id: int, token: str | None, kind: RunKind) -> int:
    rec = store.get_run(run_id)
    if token is None or rec is None or rec.plan_token != token or rec.kind != kind:
        raise EngineError(f"--run-id {run_id}: no {kind.value} run of plan {token!r} with that id in the database; "
                          "give --plan-token with it, or leave --run-id out to record a new run")
    if rec.status.finished:
        raise EngineError(f"--run-id {run_id}: that run has ended ({rec.status.value}); leave --run-id out to "
                          "record a new run")
    return run_id


def store_plan(store: Store, cfg: Config, tables: dict[str, TablePlan], plan: Plan, token: str | None,
               config_name: str, kind: RunKind = RunKind.VALIDATION) -> str:
    """The token of the plan being measured: `token` checked against the plan, or the plan stored now."""
    if token is not None:
        _check_token(store, token, cfg, tables)
        return token
    what, source = SOURCES[kind]
    return store.save_plan(config_to_dict(cfg), plan_to_dict(plan), label=f"{what} of {config_name}",
                           config_name=config_name, settings={"source": source})


def _check_token(store: Store, token: str, cfg: Config, tables: dict[str, TablePlan]) -> None:
    rec = store.get_plan(token)
    if rec is None:
        raise EngineError(f"--plan-token {token!r}: no plan with that token in the database")
    try:
        stored = parse_plan(rec.plan, cfg)
    except EngineError:
        stored = None
    if stored != tables:
        raise EngineError(f"--plan-token {token!r}: the stored plan places the tables differently from --plan; "
                          "measure the stored plan, or leave out --plan-token to store this one")


def check_results(result: Any) -> RunStatus:
    """The status of a results file's JSON; raises EngineError when it is not a validation result."""
    if not isinstance(result, dict) or not isinstance(result.get("ranks"), list) or "status" not in result:
        raise EngineError("the results file is not a validation result (it needs \"status\" and \"ranks\")")
    try:
        return RunStatus(result["status"])
    except ValueError:
        raise EngineError(f"the results file's status {result['status']!r} is not a run status") from None


def import_results(store: Store, token: str, result: dict) -> int:
    """Store a results file (e.g. from a script launcher's job) as a run of plan `token`; returns the run id."""
    status = check_results(result)
    run_id = store.create_run(token, RunKind.VALIDATION.value, str(result.get("backend", "")),
                              str(result.get("device", "")))
    store.update_run(run_id, status=RunStatus.RUNNING.value, log_append=str(result.get("log_tail") or ""))
    record_result(store, run_id, result, status)
    return run_id


__all__ = ["DbSink", "check_results", "device_info", "import_results", "metrics", "open_store", "record_result",
           "status_of", "store_plan"]
