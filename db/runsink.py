"""Validation runs in the database (`python -m db validate | import-results`): the run's status and log as it
goes, then per-rank metrics, measured beside estimated, and the device it ran on. The engine runs the job
(engine.validate) and reports through a DbSink it is handed; it never imports db.

Metric names per rank: step_ms (what Compare reads as measured), iteration_ms, peak_bytes, state_bytes,
shards_match (1 or 0), estimated_ms, estimated_compute_ms, estimated_comms_ms, estimated_bytes.
"""

from __future__ import annotations

import sys
from typing import Any

from db.compare import MEASURED_TIME_METRIC
from db.models import RunKind
from db.store import Store
from engine.config import config_to_dict
from engine.errors import EngineError
from engine.planfile import parse_plan, plan_to_dict
from engine.types import Config, Plan, TablePlan
from engine.validate.types import RunStatus, ValidationResult

RUN_KIND = RunKind.VALIDATION.value
MAX_LOG_CHARS = 1_000_000  # a run's log in the database stops growing here
RANK_METRICS = (("iteration_ms", "ms"), ("peak_bytes", "bytes"), ("state_bytes", "bytes"), ("estimated_ms", "ms"),
                ("estimated_compute_ms", "ms"), ("estimated_comms_ms", "ms"), ("estimated_bytes", "bytes"))
SOURCE = "python -m db validate"


def open_store(url: str | None = None) -> Store:
    """The Store at url (default: DATABASE_URL or the SQLite file), schema brought up to date; raises StoreError."""
    store = Store(url)
    store.upgrade()
    return store


def metrics(result: dict) -> list[tuple[int, str, float, str]]:
    """(rank, name, value, unit) of a result's ranks (a ValidationResult.as_dict(), or a results file)."""
    out = []
    for r in result.get("ranks") or []:
        rank = r.get("rank")
        if not isinstance(rank, int):
            continue
        if isinstance(r.get("iteration_ms"), (int, float)):
            out.append((rank, MEASURED_TIME_METRIC, float(r["iteration_ms"]), "ms"))
        out.append((rank, "shards_match", 1.0 if r.get("shards_match") else 0.0, ""))
        out += [(rank, name, float(r[name]), unit) for name, unit in RANK_METRICS
                if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)]
    return out


def device_info(result: dict) -> dict:
    """The result's flat top-level values (backend, device, versions, the bandwidths the estimate assumed)."""
    return {k: v for k, v in result.items()
            if k not in ("ranks", "log_tail", "error") and isinstance(v, (str, int, float, bool, type(None)))}


class DbSink:
    """A validation run row, kept up to date while the job runs (engine.validate.run.Sink). Database trouble
    mid-run is reported once on stderr and stops the reporting; it never stops the job."""

    def __init__(self, store: Store, run_id: int, token: str):
        self.store, self.run_id, self.token = store, run_id, token
        self.logged = 0
        self.broken = False

    @classmethod
    def create(cls, store: Store, cfg: Config, tables: dict[str, TablePlan], plan: Plan, token: str | None,
               backend: str, device: str, config_name: str = "validate") -> DbSink:
        """A new run (status queued) of the plan `token`, or of this plan stored now when token is None."""
        token = store_plan(store, cfg, tables, plan, token, config_name)
        return cls(store, store.create_run(token, RUN_KIND, backend, device), token)

    def _call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            return None
        try:
            return getattr(self.store, fn)(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the job goes on; its results file still holds everything
            self.broken = True
            print(f"warning: the database stopped taking this run's updates ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return None

    def status(self, status: RunStatus) -> None:
        self._call("update_run", self.run_id, status=status.value)

    def log(self, text: str) -> None:
        if not text or self.logged >= MAX_LOG_CHARS:
            return
        text = text[:MAX_LOG_CHARS - self.logged]
        self.logged += len(text)
        if self.logged >= MAX_LOG_CHARS:
            text += "\n[log truncated: the full log is in the run's out-dir]\n"
        self._call("update_run", self.run_id, log_append=text)

    def cancel_requested(self) -> bool:
        """True once someone (the dashboard) marked the run cancelled in the database."""
        rec = self._call("get_run", self.run_id)
        return rec is not None and getattr(rec.status, "value", rec.status) == RunStatus.CANCELLED.value

    def finish(self, result: ValidationResult) -> None:
        data = result.as_dict()
        rows = metrics(data)
        if rows:
            self._call("add_metrics", self.run_id, rows)
        self._call("update_run", self.run_id, status=result.status.value, error=result.error,
                   device_info=device_info(data))

    def fail(self, error: str) -> None:
        self._call("update_run", self.run_id, status=RunStatus.FAILED.value, error=error)


def store_plan(store: Store, cfg: Config, tables: dict[str, TablePlan], plan: Plan, token: str | None,
               config_name: str) -> str:
    """The token of the plan being validated: `token` checked against the plan, or the plan stored now."""
    if token is not None:
        _check_token(store, token, cfg, tables)
        return token
    return store.save_plan(config_to_dict(cfg), plan_to_dict(plan), label=f"validation of {config_name}",
                           config_name=config_name, settings={"source": SOURCE})


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
                          "validate the stored plan, or leave out --plan-token to store this one")


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
    run_id = store.create_run(token, RUN_KIND, str(result.get("backend", "")), str(result.get("device", "")))
    store.update_run(run_id, status=RunStatus.RUNNING.value, log_append=str(result.get("log_tail") or ""))
    rows = metrics(result)
    if rows:
        store.add_metrics(run_id, rows)
    store.update_run(run_id, status=status.value, error=result.get("error"), device_info=device_info(result))
    return run_id


__all__ = ["DbSink", "check_results", "device_info", "import_results", "metrics", "open_store", "store_plan"]
