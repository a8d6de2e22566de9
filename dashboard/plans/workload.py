"""The Workload page's numbers and figures (plain Python): a sample's statistics (`engine.workload_stats`) plus,
per feature, its pooling histogram and rank-frequency counts read from the same file; the applied config
(`engine.apply_workload`) and what it changed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go

import engine
from dashboard.text import plotly_text

MAX_UPLOAD_BYTES = 64 * 2**20  # an uploaded sample above this is refused before it is read
SUFFIXES = ("parquet", "pq", "csv", "npz")
MAX_RANK_POINTS = 200  # a rank-frequency plot draws at most this many log-spaced ranks


def feature_shapes(cfg: engine.Config, path: str | Path) -> dict[str, dict]:
    """Per feature: `pooling` (samples with 0, 1, 2, ... ids) and `counts` (each distinct id's lookups, most
    frequent first); engine.SampleError for a bad sample."""
    features = tuple(f for t in cfg.tables for f in t.feature_names)
    hist = {f: np.zeros(1, np.int64) for f in features}
    ids: dict[str, list[np.ndarray]] = {f: [] for f in features}
    for _row0, chunk in engine.read_sample(path, features):
        for f, (lengths, values) in chunk.items():
            h = np.bincount(lengths)
            if h.size < hist[f].size:
                h = np.pad(h, (0, hist[f].size - h.size))
            h[: hist[f].size] += hist[f]
            hist[f] = h
            ids[f].append(np.asarray(values, np.int64))
    out = {}
    for f in features:
        values = np.concatenate(ids[f]) if ids[f] else np.zeros(0, np.int64)
        counts = np.unique(values, return_counts=True)[1] if values.size else np.zeros(0, np.int64)
        out[f] = {"pooling": hist[f], "counts": np.sort(counts)[::-1]}
    return out


def measure(cfg: engine.Config, path: str | Path) -> dict:
    """The sample's statistics and its per-feature shapes (engine.SampleError for a bad sample)."""
    return {"stats": engine.workload_stats(cfg, path), "shapes": feature_shapes(cfg, path)}


def measure_upload(cfg: engine.Config, data: bytes, suffix: str, name: str) -> tuple[dict | None, str | None]:
    """(figures, None) for an uploaded sample's bytes, or (None, one line saying why not): too big, an unknown
    suffix, a bad sample (the line names the feature and row). The bytes go to a temp file named by us."""
    if len(data) > MAX_UPLOAD_BYTES:
        return None, (f"{name} is {engine.human_bytes(len(data))}: samples up to "
                      f"{engine.human_bytes(MAX_UPLOAD_BYTES)} are read here; use `python -m engine stats` for more.")
    if suffix not in SUFFIXES:
        return None, f"{name}: not a .parquet, .csv or .npz file."
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"sample.{suffix}"
        path.write_bytes(data)
        try:
            measured = measure(cfg, path)
        except engine.SampleError as exc:
            return None, engine.one_line(str(exc).replace(str(path), name).replace(path.name, name))
    measured["stats"]["sample"]["file"] = name  # the workload block says which file, as the person named it
    return measured, None


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


def rank_points(counts: np.ndarray, limit: int = MAX_RANK_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(rank, lookups) at up to `limit` log-spaced ranks from 1 to the number of distinct ids (counts sorted
    most frequent first)."""
    n = counts.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ranks = np.unique(np.round(np.logspace(0, np.log10(n), min(n, limit))).astype(np.int64))
    return ranks, counts[ranks - 1]


def pooling_histogram(feature: str, pooling: np.ndarray) -> go.Figure:
    fig = go.Figure(go.Bar(x=list(range(pooling.size)), y=pooling.tolist(), name="samples"))
    fig.update_layout(title=plotly_text(f"{feature}: ids per sample"), xaxis_title="ids per sample",
                      yaxis_title="samples", height=300, margin=dict(l=40, r=10, t=40, b=40))
    return fig


def rank_frequency(feature: str, counts: np.ndarray) -> go.Figure:
    ranks, lookups = rank_points(counts)
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
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", name="LRU miss rate"))
    if at is not None:
        fig.add_trace(go.Scatter(x=[rows], y=[at], mode="markers", name=f"chosen cache ({clf:g} of rows)",
                                 marker=dict(size=14, symbol="diamond")))
        fig.add_vline(x=rows, line_dash="dash")
    fig.update_layout(title=plotly_text(f"{table}: LRU miss ratio by cache size"), xaxis_title="cache rows",
                      yaxis_title="miss rate", xaxis_type="log", yaxis_range=[0, 1.02], height=340,
                      margin=dict(l=40, r=10, t=40, b=40))
    return fig


def table_summary(stats: dict) -> pd.DataFrame:
    rows = []
    for name, t in stats["tables"].items():
        per = t["unique_rows_per_batch"]
        rows.append({"table": name, "lookups": t["lookups"], "folded ids": t["folded_ids"],
                     "distinct rows": t["unique_rows"], "distinct rows per batch (mean)": per["mean"],
                     "distinct rows per batch (p99)": per["p99"],
                     "Zipf exponent (batch)": t.get("batch_zipf_exponent"),
                     "miss curve": t["miss_ratio_method"]["method"]})
    return pd.DataFrame(rows)


def feature_summary(stats: dict) -> pd.DataFrame:
    return pd.DataFrame([{"feature": f, "samples": s["samples"], "ids": s["ids"],
                          "pooling factor (ids/sample)": s["pooling_factor"], "p99 ids/sample": s["pooling_p99"],
                          "empty bags (share)": s["empty_share"], "distinct ids": s["unique_ids"],
                          "top 1% ids' share of lookups": s["top_1pct_share"], "Zipf exponent": s["zipf_exponent"]}
                         for f, s in stats["features"].items()])
