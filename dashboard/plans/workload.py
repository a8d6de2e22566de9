"""The Workload page's numbers and figures (plain Python) from a measured sample (dashboard.serve.workloadwork,
run in a worker process): per table the miss-ratio curve with the chosen cache marked, per feature its pooling
histogram and rank-frequency plot; the applied config (`engine.apply_workload`) and what it changed."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go

import engine
from dashboard.text import pct_text, plotly_text, sig_text

EXAMPLE_ROWS = 4000  # the generated example's rows for a few features
EXAMPLE_CELLS = 16_000  # its rows x features at most (the tutorial's 4 x 4,000), but at least one batch of rows


def example_rows(cfg: engine.Config) -> int:
    """The generated example's rows: EXAMPLE_ROWS, fewer for many features (1,000 features x 4,000 rows would be a
    132 MiB file, over the upload limit), never under one batch."""
    features = sum(len(t.feature_names) for t in cfg.tables)
    return max(cfg.topology.batch_size, min(EXAMPLE_ROWS, EXAMPLE_CELLS // max(features, 1)))


def applied_config(result: dict, cfg: engine.Config) -> dict:
    """The config with the sample's figures written in (pooling factors and each table's workload block)."""
    return engine.apply_workload(result, cfg)


def changes(old: dict, new: dict) -> pd.DataFrame:
    """What applying changed: one row per table and constraint field, old -> new."""
    rows = []
    old_c, new_c = old.get("constraints") or {}, new.get("constraints") or {}
    for name in sorted(set(old_c) | set(new_c)):
        a, b = old_c.get(name) or {}, new_c.get(name) or {}
        for field in sorted(set(a) | set(b)):
            if a.get(field) != b.get(field):
                rows.append({"table": name, "field": field, "old": _short(a.get(field)), "new": _short(b.get(field))})
    return pd.DataFrame(rows, columns=["table", "field", "old", "new"])


def _short(value) -> str:  # noqa: ANN001 - any JSON value
    if value is None:
        return "(not set)"
    if isinstance(value, dict) and "miss_ratio_curve" in value:
        return f"measured on {value['from']['file']} ({value['from']['rows']:,} rows, "\
               f"{len(value['miss_ratio_curve'])} curve points)"
    if isinstance(value, list):
        return ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in value)
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def pooling_histogram(feature: str, pooling: np.ndarray) -> go.Figure:
    fig = go.Figure(go.Bar(x=list(range(pooling.size)), y=pooling.tolist(), name="samples"))
    fig.update_layout(title=plotly_text(f"{feature}: ids per sample"), xaxis_title="ids per sample",
                      yaxis_title="samples", height=300, margin=dict(l=40, r=10, t=40, b=40))
    return fig


def rank_frequency(feature: str, ranks: np.ndarray, lookups: np.ndarray) -> go.Figure:
    """Lookups by id rank, log-log, at the points dashboard.serve.workloadwork.rank_points chose."""
    fig = go.Figure(go.Scatter(x=ranks.tolist(), y=lookups.tolist(), mode="lines+markers", name="lookups"))
    fig.update_layout(title=plotly_text(f"{feature}: rank-frequency (log-log)"), xaxis_title="id rank",
                      yaxis_title="lookups", xaxis_type="log", yaxis_type="log", height=300,
                      margin=dict(l=40, r=10, t=40, b=40))
    return fig


def chosen_cache_rows(num_embeddings: int, clf: float) -> int:
    """The cache's rows at a cache load factor (share of the table's rows)."""
    return max(1, round(clf * num_embeddings))


def table_clf(cfg: dict, table: str, plan: Optional[engine.Plan] = None) -> float:
    """The cache load factor the plan on screen gave the table (engine.clf's choice from its miss curve), else the
    table's typed one, else the engine's default."""
    chosen = plan.tables[table].cache_load_factor if plan is not None and table in plan.tables else None
    if chosen is not None:
        return float(chosen)
    typed = ((cfg.get("constraints") or {}).get(table) or {}).get("cache_load_factor")
    return float(typed) if typed is not None else float(engine.FIELDS["cache_load_factor"].default)


def miss_curve(table: str, curve: list[dict], num_embeddings: int, clf: float) -> go.Figure:
    """The LRU miss-ratio curve with the cache at `clf` x num_embeddings marked."""
    x = [p["cache_rows"] for p in curve]
    y = [p["lru_miss_rate"] for p in curve]
    rows = chosen_cache_rows(num_embeddings, clf)
    at = float(np.interp(np.log(rows), np.log(x), y)) if x else None
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", name="LRU miss rate",
                               hovertemplate="%{x:,} rows: %{y:.1%} misses"))
    if at is not None:
        fig.add_trace(go.Scatter(x=[rows], y=[at], mode="markers",
                                 name=f"chosen cache: {pct_text(clf)} of rows ({rows:,}), {pct_text(at)} misses",
                                 marker=dict(size=14, symbol="diamond"), hovertemplate="%{x:,} rows: %{y:.1%} misses"))
        fig.add_vline(x=rows, line_dash="dash")
    fig.update_layout(title=plotly_text(f"{table}: LRU miss ratio by cache size"), xaxis_title="cache rows",
                      yaxis_title="miss rate", xaxis_type="log", yaxis_range=[0, 1.02], yaxis_tickformat=".0%",
                      height=340, margin=dict(l=50, r=10, t=40, b=40),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    return fig


def _count(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,}"


def _number(x: float | None) -> str:
    return "n/a" if x is None else sig_text(x)


def table_summary(stats: dict) -> pd.DataFrame:
    """One row per table, its numbers as the page writes them (counts with separators, 3 significant digits)."""
    rows = []
    for name, t in stats["tables"].items():
        per = t["unique_rows_per_batch"]
        rows.append({"table": name, "lookups": _count(t["lookups"]), "folded ids": _count(t["folded_ids"]),
                     "distinct rows": _count(t["unique_rows"]), "distinct rows per batch (mean)": _number(per["mean"]),
                     "distinct rows per batch (p99)": _count(per["p99"]),
                     "Zipf exponent (batch)": _number(t.get("batch_zipf_exponent")),
                     "miss curve": t["miss_ratio_method"]["method"]})
    return pd.DataFrame(rows)


def feature_summary(stats: dict) -> pd.DataFrame:
    """One row per feature, its numbers as the page writes them (shares in percent)."""
    return pd.DataFrame([{"feature": f, "samples": _count(s["samples"]), "ids": _count(s["ids"]),
                          "pooling factor (ids/sample)": _number(s["pooling_factor"]),
                          "p99 ids/sample": _count(s["pooling_p99"]), "empty bags": pct_text(s["empty_share"]),
                          "distinct ids": _count(s["unique_ids"]),
                          "top 1% ids' share of lookups": pct_text(s["top_1pct_share"]),
                          "Zipf exponent": _number(s["zipf_exponent"])}
                         for f, s in stats["features"].items()])
