"""The store: configs, plans, runs and measured metrics in SQLite or PostgreSQL, with plan sharing.

Public API: Store and its records (db.store); `python -m db` for scripts. See docs/store.md.
"""

from db.errors import StoreError
from db.store import ConfigVersion, MetricRecord, PlanRecord, PlanSummary, RunRecord, Store

__all__ = ["ConfigVersion", "MetricRecord", "PlanRecord", "PlanSummary", "RunRecord", "Store", "StoreError"]
