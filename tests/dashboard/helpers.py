"""Small helpers shared by the page tests: go to a page, read what is shown."""

from __future__ import annotations

import json
import re

from streamlit.testing.v1 import AppTest

import engine
from dashboard.text import WORD_JOINER
from tests.waits import budget_s, slowdown, trimmed, until  # noqa: F401 - the page tests' waits


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def plain(markdown: str) -> str:
    """What a person reads in markdown that went through dashboard.text.md: escapes and word joiners out."""
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown.replace("  \n", "\n"))
    return text.replace(WORD_JOINER, "")


def shown(at: AppTest, kind: str) -> list[str]:
    """Texts of every element of one kind (error, warning, success, info, caption, markdown, toast...), as a
    person reads them (user text in them is escaped: dashboard.text.md)."""
    return [plain(str(e.value)) for e in getattr(at, kind)]


def plotly_specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def workspace(at: AppTest) -> dict:
    return at.session_state["ws_config"]


def edit(at: AppTest, key: str, edited=None, added=None, deleted=None) -> AppTest:
    """Apply a data_editor edit the way the browser reports it, then rerun."""
    at.session_state[key] = {"edited_rows": edited or {}, "added_rows": added or [], "deleted_rows": deleted or []}
    at.run()
    assert not at.exception, at.exception
    return at


def values(v) -> list:
    """A trace's x/y as a list: plotly writes numpy arrays as {"dtype", "bdata"} (base64)."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def typed(plan: dict, config=None) -> engine.Plan:
    """A plan dict (a plan file, or a test's hand-written part of one) as the engine.Plan the dashboard's functions
    take: its tables parsed against `config` (a dict or engine.Config) when given, else none; its figures as
    written (engine.read_plan_file)."""
    if config is not None:
        return engine.read_plan_file(plan, engine.parse_config(config) if isinstance(config, dict) else config)
    bound = plan.get("lower_bound_ms")
    return engine.Plan(tables={}, ranks=tuple(engine.read_rank_stats(r) for r in plan.get("ranks") or ()),
                       planner=str(plan["planner"]) if plan.get("planner") is not None else "engine",
                       notes=tuple(plan.get("notes") or ()),
                       lower_bound_ms=float(bound) if bound is not None else None)


def typed_config(config) -> engine.Config:
    return engine.parse_config(config) if isinstance(config, dict) else config
