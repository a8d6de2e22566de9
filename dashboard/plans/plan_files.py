"""Plan dicts (a plan file: engine.plan_to_dict, as the store and a background planner hand them back) parsed once
into the engine's typed Plan, with the figures the dict carries (engine.read_plan_file): the pages show a saved
plan's own estimates, never recomputed ones. Pure: no Streamlit.

The typed objects (engine.Plan, engine.Config: frozen dataclasses) are shared between reruns and sessions by
the caches in dashboard.ui.services: nothing in the dashboard mutates them (dataclasses.replace makes a new one).
"""

from __future__ import annotations

import engine


def parse(plan: dict, config: dict) -> tuple[engine.Plan, engine.Config]:
    """A stored (plan, config) pair of dicts as the engine's typed objects."""
    cfg = engine.parse_config(config)
    return engine.read_plan_file(plan, cfg), cfg
