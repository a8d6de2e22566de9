"""Plan bundles: one JSON file with a plan, its config, its estimates and every measured run.

A bundle carries the plan's share token, so importing it twice (or into the database it came from)
returns the same plan instead of a copy; a token that names different content is refused.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.checks import (
    check_enum,
    check_json_object,
    check_labels,
    check_metrics,
    check_str,
    check_time,
    check_token,
    shown,
    type_name,
)
from db.errors import StoreError
from db.estimates import BUNDLED, prepare_plan
from db.models import SHORT_LEN, MetricRow, PlanRow, RunKind, RunRow, RunStatus
from db.writes import ensure_config, insert_metrics, insert_plan, insert_run, plan_by_token, require_plan
from engine import JsonError
from engine import json_loads as loads

BUNDLE_VERSION = 1
BUNDLE_FIELDS = ("bundle_version", "token", "label", "author", "created_at", "planner", "settings", "config",
                 "config_name", "plan", "runs")
RUN_FIELDS = ("uid", "kind", "backend", "device", "status", "created_at", "started_at", "ended_at", "log",
              "error", "device_info", "metrics")
METRIC_FIELDS = ("rank", "name", "value", "unit")


def _iso(t: Any) -> Any:
    return None if t is None else t.isoformat()


def _run_dict(s: Session, run: RunRow) -> dict:
    metrics = s.scalars(select(MetricRow).where(MetricRow.run_id == run.id).order_by(MetricRow.id))
    return {"uid": run.uid, "kind": run.kind.value, "backend": run.backend, "device": run.device,
            "status": run.status.value, "created_at": _iso(run.created_at), "started_at": _iso(run.started_at),
            "ended_at": _iso(run.ended_at), "log": run.log, "error": run.error, "device_info": run.device_info,
            "metrics": [{"rank": m.rank, "name": m.name, "value": m.value, "unit": m.unit} for m in metrics]}


def export_bundle(s: Session, token: str) -> dict:
    plan = require_plan(s, token)
    runs = s.scalars(select(RunRow).where(RunRow.plan_id == plan.id).order_by(RunRow.created_at, RunRow.id))
    return {"bundle_version": BUNDLE_VERSION, "token": plan.token, "label": plan.label, "author": plan.author,
            "created_at": _iso(plan.created_at), "planner": plan.planner, "settings": plan.settings,
            "config": plan.config_row.config, "config_name": plan.config_row.name, "plan": plan.plan,
            "runs": [_run_dict(s, r) for r in runs]}


def read_bundle_text(text: str | bytes, source: str = "bundle") -> Any:
    """Decoded JSON within engine.jsonsafe's bounds, or a StoreError saying where the text stops making sense."""
    try:
        return loads(text, source)
    except JsonError as e:
        raise StoreError(f"{e}; nothing was changed") from None


def _fields(d: Any, field: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(d, dict):
        raise StoreError(f"{field}: must be a JSON object, got {type_name(d)}")
    unknown = [k for k in d if k not in allowed]
    if unknown:
        raise StoreError(f"{field}.{unknown[0]}: unknown field (expected: {', '.join(allowed)})")
    missing = [k for k in allowed if k not in d]
    if missing:
        raise StoreError(f"{field}.{missing[0]}: is missing; the bundle is incomplete")
    return d


def _check_version(b: Any) -> None:
    if not isinstance(b, dict):
        raise StoreError(f"bundle: must be a JSON object, got {type_name(b)}")
    v = b.get("bundle_version")
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise StoreError(f"bundle.bundle_version: must be a positive integer, got {shown(v)}; is this a plan bundle?")
    if v > BUNDLE_VERSION:
        raise StoreError(f"bundle.bundle_version: {v} is newer than this planner reads ({BUNDLE_VERSION}); "
                         "upgrade the planner to import it")


def _check_run(raw: Any, field: str) -> dict:
    r = _fields(raw, field, RUN_FIELDS)
    if not isinstance(r["metrics"], list):
        raise StoreError(f"{field}.metrics: must be a list, got {type_name(r['metrics'])}")
    for i, m in enumerate(r["metrics"]):
        _fields(m, f"{field}.metrics[{i}]", METRIC_FIELDS)
    return {"uid": check_token(r["uid"], f"{field}.uid"), "kind": check_enum(r["kind"], f"{field}.kind", RunKind),
            "backend": check_str(r["backend"], f"{field}.backend", SHORT_LEN),
            "device": check_str(r["device"], f"{field}.device", SHORT_LEN),
            "status": check_enum(r["status"], f"{field}.status", RunStatus),
            "created_at": check_time(r["created_at"], f"{field}.created_at"),
            "started_at": check_time(r["started_at"], f"{field}.started_at", optional=True),
            "ended_at": check_time(r["ended_at"], f"{field}.ended_at", optional=True),
            "log": check_str(r["log"], f"{field}.log", max_len=1 << 30),
            "error": None if r["error"] is None else check_str(r["error"], f"{field}.error", max_len=1 << 30),
            "device_info": check_json_object(r["device_info"], f"{field}.device_info"),
            "metrics": check_metrics([(m["rank"], m["name"], m["value"], m["unit"]) for m in r["metrics"]],
                                     f"{field}.metrics")}


def _check_runs(raw: Any) -> list[dict]:
    if not isinstance(raw, list):
        raise StoreError(f"bundle.runs: must be a list, got {type_name(raw)}")
    runs = [_check_run(r, f"bundle.runs[{i}]") for i, r in enumerate(raw)]
    seen: set[str] = set()
    for i, r in enumerate(runs):
        if r["uid"] in seen:
            raise StoreError(f"bundle.runs[{i}].uid: {r['uid']!r} is listed twice; a run is measured once")
        seen.add(r["uid"])
    return runs


def check_bundle(raw: Any, recompute: bool = False) -> dict:
    """Every field of a bundle checked, before anything touches the database; its estimates recomputed
    (a difference is refused, or with recompute=True the recomputed figures are what gets stored)."""
    _check_version(raw)
    b = _fields(raw, "bundle", BUNDLE_FIELDS)
    label, author, config_name = check_labels(b["label"], b["author"], b["config_name"], "bundle.")
    return {"token": check_token(b["token"], "bundle.token"), "label": label, "author": author,
            "config_name": config_name, "created_at": check_time(b["created_at"], "bundle.created_at"),
            "prepared": prepare_plan(b["config"], b["plan"], check_json_object(b["settings"], "bundle.settings"),
                                     planner=check_str(b["planner"], "bundle.planner", SHORT_LEN, empty_ok=False),
                                     normalize=False, recompute=recompute, source=BUNDLED),
            "runs": _check_runs(b["runs"])}


def _add_runs(s: Session, plan: PlanRow, runs: list[dict]) -> None:
    """Runs this database lacks (by uid); a run it has already is left as it is."""
    for i, r in enumerate(runs):
        other = s.scalar(select(RunRow).where(RunRow.uid == r["uid"]))
        if other is not None:
            if other.plan_id != plan.id:
                raise StoreError(f"bundle.runs[{i}].uid: {r['uid']!r} is a run of another plan in this database; "
                                 "nothing was imported")
            continue
        fields = {k: v for k, v in r.items() if k not in ("kind", "backend", "device", "metrics")}
        run = insert_run(s, plan, r["kind"], r["backend"], r["device"], **fields)
        insert_metrics(s, run.id, r["metrics"])


def import_checked(s: Session, b: dict) -> str:
    """Store a bundle that check_bundle passed; the same bundle again returns the same token, adds nothing."""
    p = b["prepared"]
    plan = plan_by_token(s, b["token"])
    if plan is not None and plan.content_hash != p.content_hash:
        raise StoreError(f"bundle.token: {b['token']!r} already names a different plan in this database; "
                         "nothing was imported (a token is never reused for other content)")
    if plan is None:
        cfg = ensure_config(s, b["config_name"], p.config)
        plan = insert_plan(s, p, cfg, token=b["token"], label=b["label"], author=b["author"],
                           created_at=b["created_at"])
    _add_runs(s, plan, b["runs"])
    return plan.token
