"""The ids a measuring run uses: generated from its config (seeded, fresh every step) or replayed from a sample of
real ids the person uploads. An upload is checked as the Workload page checks one (its size limit and formats,
engine.read_sample: a bad cell is one line naming the feature and row) and that it holds one step's rows, then
stored under the data directory, in a folder named by its content's hash, under the name it was uploaded with: a
file name and an element of the run's argument list (runs are argument lists), never a shell word or a path.
And which ids a stored run used, as one line of plain text.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import engine
from dashboard.tables import importers
from db.session import DATA_DIR_ENV, DEFAULT_DATA_DIR

SAMPLES = "samples"  # under the data directory
MAX_NAME_BYTES = 200  # a longer upload name is stored as sample.SUFFIX (file systems stop at 255 bytes)
HASH_CHARS = 32


def samples_dir() -> Path:
    """Where uploaded samples are kept: <PLANNER_DATA_DIR, default ./data>/samples, absolute."""
    return (Path(os.environ.get(DATA_DIR_ENV, "").strip() or DEFAULT_DATA_DIR) / SAMPLES).absolute()


def suffix_of(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def file_name(name: str, suffix: str) -> str:
    """The name an upload is stored under: its last path part, or sample.SUFFIX where that is no usable file name
    (empty, '.', '..', a NUL, too long)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if base in ("", ".", "..") or "\x00" in base or len(base.encode("utf-8", "replace")) > MAX_NAME_BYTES:
        return f"sample.{suffix}"
    return base


def _rows(cfg: engine.Config, path: Path) -> int:
    """The sample's rows, every cell read and checked (engine.SampleError)."""
    features = tuple(f for t in cfg.tables for f in t.feature_names)
    return sum(len(next(iter(chunk.values()))[0]) for _, chunk in engine.read_sample(path, features) if chunk)


def store_sample(cfg: engine.Config, data: bytes, name: str, folder: Path | None = None) -> tuple[Path | None,
                                                                                                   str | None]:
    """(the stored sample's path, None), or (None, one line saying why not: too big, not a sample format, a bad
    cell, fewer rows than one step of the config takes). Nothing is kept of a refused upload."""
    if len(data) > importers.MAX_SAMPLE_BYTES:
        return None, (f"{name} is {engine.human_bytes(len(data))}: samples up to "
                      f"{engine.human_bytes(importers.MAX_SAMPLE_BYTES)} are taken here; for more, run `python -m db "
                      "dryrun|validate CONFIG --plan PLAN --ids SAMPLE` on the machine that holds it.")
    suffix = suffix_of(name)
    if suffix not in importers.SAMPLE_SUFFIXES:
        return None, f"{name}: not a .parquet, .csv or .npz file; upload a sample in one of those formats."
    where = (folder or samples_dir()) / hashlib.sha256(data).hexdigest()[:HASH_CHARS]
    where.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=where, prefix=".upload-", suffix=f".{suffix}")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            rows = _rows(cfg, Path(tmp))
        except engine.SampleError as e:
            return None, engine.one_line(str(e).replace(tmp, name).replace(Path(tmp).name, name))
        need = cfg.topology.world_size * cfg.topology.batch_size
        if rows < need:
            return None, (f"{name} has {rows:,} rows; one step of this plan takes {need:,} (world_size "
                          f"{cfg.topology.world_size} x batch_size {cfg.topology.batch_size}): upload a longer sample.")
        path = where / file_name(name, suffix)
        os.replace(tmp, path)
        return path, None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def ids_text(info: dict | None) -> str:
    """Which ids a run used, from its record's device_info: 'sample clicks.parquet (1.20 MiB, 4,096 rows in 4
    batches)', 'generated: config distribution, seed 0, 10 batches', or 'not recorded'."""
    ids = (info or {}).get("ids")
    if not isinstance(ids, dict):
        return "not recorded"
    if ids.get("source") == "sample":
        size = f"{engine.human_bytes(ids['bytes'])}, " if isinstance(ids.get("bytes"), int) else ""
        rows, batches = ids.get("rows_used"), ids.get("batches")
        used = f"{rows:,} rows in {batches} batch{'es' if batches != 1 else ''}" if isinstance(rows, int) else ""
        return f"sample {ids.get('file', '?')} ({size}{used}{', cycled' if ids.get('cycled') else ''})"
    dist = str(ids.get("distribution") or "config")
    alpha = f" {ids['zipf_alpha']:g}" if isinstance(ids.get("zipf_alpha"), (int, float)) else ""
    n = ids.get("batches")
    return (f"generated: {dist}{alpha} distribution, seed {ids.get('seed', 0)}"
            + (f", {n} distinct batch{'es' if n != 1 else ''}" if isinstance(n, int) else ""))


__all__ = ["file_name", "ids_text", "samples_dir", "store_sample", "suffix_of"]
