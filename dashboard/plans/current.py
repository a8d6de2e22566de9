"""The workspace's plans as values (no Streamlit): the current plan with the exact config it was made for, a planner
running in the background, the canonical key of a config, whether two plans say the same, and a config with its
topology's defaults written out. dashboard.ui.state keeps them in the session.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Optional

import engine


@dataclass
class CurrentPlan:
    """A plan and the exact config it was made for (the workspace config may have moved on since), as the
    engine's typed objects: shared with the caches (dashboard.ui.services), never mutated."""

    plan: engine.Plan
    config: engine.Config
    planner: str
    settings: dict = field(default_factory=dict)
    token: Optional[str] = None  # set once saved
    label: str = ""
    source_key: str = ""  # config_key of the workspace config it was planned from
    replanned: bool = False  # the working view re-planned it from the plan on screen (else: from scratch)
    how: str = ""  # how it was made, one line for the headline ("re-planned from the plan on screen, ...")

    def __post_init__(self) -> None:
        self.source_key = self.source_key or config_key(engine.config_to_dict(self.config))

    def matches(self, config: dict) -> bool:
        return self.source_key == config_key(config)


def config_key(config: dict) -> str:
    """The config as a canonical JSON string: the cache key for planning."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def full_key(cfg: dict) -> str:
    """The config's key with every default written out (the Topology page's inputs write them all)."""
    try:
        return config_key(engine.config_to_dict(engine.parse_config(cfg)))
    except engine.ConfigError:
        return config_key(cfg)


# ---- the workspace's undo history: (what the edit was, the config before it as zlib'd canonical JSON), newest last


def push_history(history: list, edit: str, before: dict, max_steps: int) -> None:
    """Keep `before` as the newest undo step, at most max_steps of them (a 10,000-table config is megabytes)."""
    history.append((edit, zlib.compress(config_key(before).encode())))
    del history[:-max_steps]


def pop_history(history: list) -> Optional[tuple[str, dict]]:
    """The newest undo step taken off the history: (what the edit was, the config before it); None when empty."""
    if not history:
        return None
    edit, packed = history.pop()
    return edit, json.loads(zlib.decompress(packed))


@dataclass
class PlanJob:
    """A planner running in the background, or waiting for a slot to (dashboard.serve.jobs.Job), for the config whose
    key is source_key."""

    job: Any  # dashboard.serve.jobs.Job
    planner: str
    config: dict
    source_key: str
    settings: dict = field(default_factory=dict)


def same_plan(a: CurrentPlan, b: CurrentPlan) -> bool:
    """The same placements by the same planner (a config written out in full plans the same): no change to say."""
    return a.planner == b.planner and a.plan.tables == b.plan.tables and \
        a.plan.max_rank_cost_ms == b.plan.max_rank_cost_ms


def full_topology(cfg: dict) -> dict:
    """The config with its topology's defaults written out, as the Topology page's inputs write them when it
    opens: opening that page then leaves the config (its key, its plan) as it was. A device profile stays in the
    form it was given; a topology that does not parse stays as given (the Topology page says what is wrong)."""
    topo = cfg.get("topology")
    try:
        full = engine.complete_topology(topo)
    except engine.ConfigError:
        return cfg
    if engine.PROFILE_FIELD in topo:  # as the user gave it (a name such as "published", or the figures)
        full[engine.PROFILE_FIELD] = topo[engine.PROFILE_FIELD]
    return cfg if full == topo else {**cfg, "topology": full}
