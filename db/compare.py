"""Plans side by side: per rank (memory, estimated and measured cost) and per table (where each put it).

The measured time of a rank is the mean of its MEASURED_TIME_METRIC values in the plan's latest
succeeded run that reported it (or, when no succeeded run did, the latest run of any status that did).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.checks import check_token
from db.errors import StoreError
from db.models import MetricRow, PlanRankRow, PlanRow, RunRow, RunStatus
from db.records import PlanSummary
from engine.report import placement_words

MEASURED_TIME_METRIC = "step_ms"  # what dry-runs and validation runs report per rank, in milliseconds


def _plans(s: Session, tokens: Sequence[str]) -> list[PlanRow]:
    if isinstance(tokens, str) or not tokens:
        raise StoreError("tokens: give a list of one or more plan tokens to compare")
    wanted = list(dict.fromkeys(check_token(t, "tokens[]") for t in tokens))
    rows = {r.token: r for r in s.scalars(select(PlanRow).where(PlanRow.token.in_(wanted)))}
    missing = [t for t in wanted if t not in rows]
    if missing:
        raise StoreError(f"no plan with token {missing[0]!r} in this database (see `python -m db list`)")
    return [rows[t] for t in wanted]


def measured_ms(s: Session, plan_ids: Sequence[int],
                metric: str = MEASURED_TIME_METRIC) -> dict[tuple[int, int], float]:
    """{(plan_id, rank): mean measured ms} from each plan's chosen run."""
    q = (select(RunRow.plan_id, RunRow.id, RunRow.status, MetricRow.rank, func.avg(MetricRow.value))
         .join(MetricRow, MetricRow.run_id == RunRow.id)
         .where(RunRow.plan_id.in_(plan_ids), MetricRow.name == metric)
         .group_by(RunRow.plan_id, RunRow.id, RunRow.status, MetricRow.rank))
    best: dict[int, tuple[bool, int]] = {}
    per_run: dict[int, dict[int, float]] = {}
    for plan_id, run_id, status, rank, value in s.execute(q):
        per_run.setdefault(run_id, {})[rank] = float(value)
        key = (status == RunStatus.SUCCEEDED, run_id)
        best[plan_id] = max(best.get(plan_id, key), key)
    return {(plan_id, rank): v for plan_id, (_, run_id) in best.items() for rank, v in per_run[run_id].items()}


def placement(table_plan: dict | None) -> str | None:
    if not isinstance(table_plan, dict):
        return None
    return placement_words(str(table_plan.get("sharding_type")), str(table_plan.get("compute_kernel")),
                           table_plan.get("ranks", []))


def _table_names(plans: list[PlanRow]) -> list[str]:
    names: dict[str, None] = {}
    for p in plans:
        for t in p.config_row.config.get("tables", []):
            names.setdefault(t["name"], None)
    return list(names)


def compare(s: Session, tokens: Sequence[str], metric: str = MEASURED_TIME_METRIC) -> dict:
    plans = _plans(s, tokens)
    by_id = {p.id: p for p in plans}
    ranks = s.scalars(select(PlanRankRow).where(PlanRankRow.plan_id.in_(by_id)).order_by(PlanRankRow.rank))
    measured = measured_ms(s, list(by_id), metric)
    per_rank: dict[int, dict] = {}
    for r in ranks:
        row = per_rank.setdefault(r.rank, {"rank": r.rank, **{p.token: None for p in plans}})
        row[by_id[r.plan_id].token] = {"hbm_bytes": r.hbm_bytes, "ddr_bytes": r.ddr_bytes, "cost_ms": r.cost_ms,
                                       "measured_ms": measured.get((r.plan_id, r.rank))}
    per_table = [{"table": name, **{p.token: placement(p.plan.get("plan", {}).get(name)) for p in plans}}
                 for name in _table_names(plans)]
    return {"plans": [PlanSummary.of(p) for p in plans], "per_rank": [per_rank[k] for k in sorted(per_rank)],
            "per_table": per_table}
