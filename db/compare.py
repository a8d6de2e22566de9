"""What the store and its command line say of a plan's runs and placements: the metric a run's measured step
time is stored under, and a stored table plan as one line of text (engine.report's placement text).

(Plans side by side are the dashboard's Compare page: dashboard.plans.plan_deltas, dashboard.plans.plan_diff and
dashboard.plans.measured.)
"""

from __future__ import annotations

from engine.report import placement_words

MEASURED_TIME_METRIC = "step_ms"  # what dry-runs and validation runs report per rank, in milliseconds


def placement(table_plan: dict | None) -> str | None:
    if not isinstance(table_plan, dict):
        return None
    return placement_words(str(table_plan.get("sharding_type")), str(table_plan.get("compute_kernel")),
                           table_plan.get("ranks", []))
