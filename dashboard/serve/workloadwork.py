"""The Workload page's measuring, run in the server's worker processes (dashboard.serve.planpool's task `workload`),
never on the page's thread: an uploaded sample's statistics (`engine.workload_stats`) plus, per feature, its pooling
histogram and rank-frequency points read from the same file. Plain Python: no Streamlit, no plotly."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import engine
from dashboard.serve import planpool
from dashboard.tables.importers import MAX_SAMPLE_BYTES as MAX_UPLOAD_BYTES
from dashboard.tables.importers import SAMPLE_SUFFIXES as SUFFIXES

MAX_RANK_POINTS = 200  # a rank-frequency plot draws at most this many log-spaced ranks


def rank_points(counts: np.ndarray, limit: int = MAX_RANK_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(rank, lookups) at up to `limit` log-spaced ranks from 1 to the number of distinct ids (counts sorted
    most frequent first)."""
    n = counts.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ranks = np.unique(np.round(np.logspace(0, np.log10(n), min(n, limit))).astype(np.int64))
    return ranks, counts[ranks - 1]


Progress = Callable[[int, Optional[int], int], None]  # rows read, the sample's rows (None: unknown), ids read


def feature_shapes(cfg: engine.Config, path: str | Path, progress: Optional[Progress] = None) -> dict[str, dict]:
    """Per feature: `pooling` (samples with 0, 1, 2, ... ids), `counts` (each distinct id's lookups, most frequent
    first) and its rank-frequency points `ranks`, `lookups` (rank_points); engine.SampleError for a bad sample.
    `progress` as engine.workload_stats calls it, after each chunk read."""
    features = tuple(f for t in cfg.tables for f in t.feature_names)
    hist = {f: np.zeros(1, np.int64) for f in features}
    ids: dict[str, list[np.ndarray]] = {f: [] for f in features}
    total = engine.sample_rows(path) if progress is not None else None
    read = 0
    for row0, chunk in engine.read_sample(path, features):
        for f, (lengths, values) in chunk.items():
            h = np.bincount(lengths)
            if h.size < hist[f].size:
                h = np.pad(h, (0, hist[f].size - h.size))
            h[: hist[f].size] += hist[f]
            hist[f] = h
            ids[f].append(np.asarray(values, np.int64))
        if progress is not None:
            read += sum(values.size for _, values in chunk.values())
            progress(row0 + next(iter(chunk.values()))[0].size, total, read)
    out = {}
    for f in features:
        values = np.concatenate(ids[f]) if ids[f] else np.zeros(0, np.int64)
        counts = np.unique(values, return_counts=True)[1] if values.size else np.zeros(0, np.int64)
        counts = np.sort(counts)[::-1]
        ranks, lookups = rank_points(counts)
        out[f] = {"pooling": hist[f], "counts": counts, "ranks": ranks, "lookups": lookups}
    return out


def measure(cfg: engine.Config, path: str | Path, report: Optional[Callable[[dict], None]] = None) -> dict:
    """The sample's statistics and its per-feature shapes (engine.SampleError for a bad sample): two passes over
    the file. `report({"pass": 1 or 2, "rows", "total_rows", "ids"})` after each chunk read (counted, never timed)."""
    def on(n: int) -> Optional[Progress]:
        if report is None:
            return None
        return lambda rows, total, ids: report({"pass": n, "rows": rows, "total_rows": total, "ids": ids})
    return {"stats": engine.workload_stats(cfg, path, progress=on(1)), "shapes": feature_shapes(cfg, path, on(2))}


def progress_text(p: dict | None) -> str:
    """What the page says of a measuring's progress: "reading the sample (pass 1 of 2): 42% of 400,000 rows read
    (12,000,000 ids so far)"; "" before the first chunk is read."""
    if not p:
        return ""
    what = "measuring" if p["pass"] == 1 else "drawing its features"
    return f"{what} (pass {p['pass']} of 2): {engine.stats_progress_text(p['rows'], p['total_rows'], p['ids'])}"


def measure_upload(cfg: engine.Config, data: bytes, suffix: str, name: str,
                   report: Optional[Callable[[dict], None]] = None) -> tuple[dict | None, str | None]:
    """(figures, None) for an uploaded sample's bytes, or (None, one line saying why not): too big, an unknown
    suffix, a bad sample (the line names the feature and row). The bytes go to a temp file named by us."""
    refused = refusal(data, suffix, name)
    if refused is not None:
        return None, refused
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"sample.{suffix}"
        path.write_bytes(data)
        try:
            measured = measure(cfg, path, report)
        except engine.SampleError as exc:
            return None, engine.one_line(str(exc).replace(str(path), name).replace(path.name, name))
    measured["stats"]["sample"]["file"] = name  # the workload block says which file, as the person named it
    return measured, None


def refusal(data: bytes, suffix: str, name: str) -> str | None:
    """Why these bytes are not read at all (too big, an unknown suffix, empty), in one line; None to read them."""
    if len(data) > MAX_UPLOAD_BYTES:
        return (f"{name} is {engine.human_bytes(len(data))}: samples up to "
                f"{engine.human_bytes(MAX_UPLOAD_BYTES)} are read here; use `python -m engine stats` for more.")
    if suffix not in SUFFIXES:
        return f"{name}: not a .parquet, .csv or .npz file."
    if not data:
        return f"{name} is empty (0 bytes): write one column per feature and at least one row of ids."
    return None


def measure_task(config_json: str, data: bytes, suffix: str, name: str) -> tuple[dict | None, str | None]:
    """The pool's `workload` task: measure_upload on the config (JSON text); what goes back to the page is small
    (each feature's full id counts stay here: the page draws their rank-frequency points)."""
    try:
        cfg = engine.parse_config(json.loads(config_json))
    except engine.EngineError as exc:
        return None, f"The workspace config does not read: {engine.one_line(str(exc))}"
    measured, error = measure_upload(cfg, data, suffix, name, planpool.report)  # the page shows the progress
    if measured is not None:
        for shape in measured["shapes"].values():
            del shape["counts"]
    return measured, error
