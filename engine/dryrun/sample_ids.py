"""Batches cut from a sample of real training ids (`--ids SAMPLE`), for the dry-run and the validation run, in
place of the synthetic ones (engine.dryrun.workload).

A sample has one column per feature and one row per training sample (engine.stats.sample reads Parquet, CSV and
NPZ, streamed). A step's global batch is the next `world_size x batch_size` rows, in file order: rank r's local
batch is rows [r x batch_size, (r+1) x batch_size) of it, as DistributedModelParallel splits a global batch. Every
feature has one bag per row (its cell's ids); a feature's ids are folded by its table's num_embeddings as TorchRec
folds them (engine.stats.sample.fold_ids), and by the scaled rows when --scale-rows shrinks the table.

Only the rows the steps need are read: the first K x world_size x batch_size rows, K = min(steps, --batches when
given, MAX_SAMPLE_BATCHES); the file's other rows are never read. A sample with fewer rows gives fewer whole
batches, and the steps cycle through them (`cycled` in the result). Pure numpy: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.stats.sample import SampleError, fold_ids, read_sample
from engine.types import Config

from engine.dryrun.pieces import scaled_rows
from engine.dryrun.workload import FeatureBatch, PieceBatch

MAX_SAMPLE_BATCHES = 64  # distinct global batches read from a sample at most; the steps cycle through them


@dataclass(frozen=True)
class SampleBatches:
    """The rows of a sample that a run's steps use, per feature (lengths, folded ids), and how they are cut."""

    file: str  # the sample's file name
    steps: int  # distinct batches the run wants: its steps (workload.steps_per_rank), or --batches where fewer
    global_rows: int  # rows per step: world_size x batch_size
    batches: int  # distinct global batches read
    features: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # feature -> (lengths, offsets, folded ids)
    tables: tuple[tuple[str, ...], ...]  # each table's features, in config order
    file_bytes: int = 0  # the sample file's size

    @property
    def rows_used(self) -> int:
        return self.batches * self.global_rows

    @property
    def cycled(self) -> bool:
        return self.batches < self.steps

    def global_batch(self, table_index: int, step: int) -> tuple[FeatureBatch, ...]:
        """The table's global batch of a step: rows [k x G, (k+1) x G) of the sample, k = step mod batches."""
        k = step % self.batches
        lo, hi = k * self.global_rows, (k + 1) * self.global_rows
        out = []
        for f in self.tables[table_index]:
            lengths, offsets, ids = self.features[f]
            out.append(FeatureBatch(lengths[lo:hi], ids[offsets[lo]:offsets[hi]]))
        return tuple(out)

    def ids_block(self) -> dict:
        """What a result records of the ids used."""
        return {"source": "sample", "file": self.file, "bytes": self.file_bytes, "rows_used": self.rows_used,
                "batches": self.batches, "cycled": self.cycled}


def load_sample_batches(cfg: Config, path: str | Path, steps: int, max_batches: int = 0,
                        scale_rows: float = 1.0) -> SampleBatches:
    """Read the rows `steps` steps need (at most max_batches distinct batches when > 0, and MAX_SAMPLE_BATCHES);
    raises SampleError (one line naming the feature and row) for a bad sample, EngineError for one too short."""
    world, batch = cfg.topology.world_size, cfg.topology.batch_size
    global_rows = world * batch
    want = min(steps, MAX_SAMPLE_BATCHES, max_batches if max_batches > 0 else steps) * global_rows
    table_of = {f: t for t in cfg.tables for f in t.feature_names}
    features = tuple(table_of)
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {f: [] for f in features}
    rows = 0
    for _, chunk in read_sample(path, features):
        take = min(want - rows, next(iter(chunk.values()))[0].size)
        for f, (lengths, values) in chunk.items():
            lengths = lengths[:take]
            parts[f].append((lengths, values[: int(lengths.sum())]))
        rows += take
        if rows >= want:
            break
    batches = rows // global_rows
    if batches == 0:
        raise SampleError(path, f"has {rows:,} rows; one step needs {global_rows:,} (world_size {world} x "
                          f"batch_size {batch}): give a sample with at least that many rows")
    kept = batches * global_rows
    out = {}
    for f in features:
        t = table_of[f]
        lengths = np.concatenate([p[0] for p in parts[f]])[:kept]
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        values = np.concatenate([p[1] for p in parts[f]])[: int(offsets[-1])]
        ids = fold_ids(values, t.num_embeddings)
        rows_here = scaled_rows(t.num_embeddings, scale_rows)
        if rows_here != t.num_embeddings:
            ids = fold_ids(ids, max(1, rows_here))
        out[f] = (lengths, offsets, ids)
    wanted = min(steps, max_batches) if max_batches > 0 else steps  # cycling --batches asks for is not running out
    return SampleBatches(file=Path(path).name, steps=wanted, global_rows=global_rows, batches=batches, features=out,
                         tables=tuple(tuple(t.feature_names) for t in cfg.tables), file_bytes=Path(path).stat().st_size)


class SeenIds:
    """Per table, what its pieces were handed over the distinct steps, mapped back to the table's rows: lookups
    (each id of a global batch once: column pieces share their ids, row pieces split them, replicas each see
    their rank's batch) and distinct rows. A check that the kernels saw the sample's ids."""

    def __init__(self) -> None:
        self.rows: dict[str, list[np.ndarray]] = {}
        self.lookups: dict[tuple, int] = {}

    def add(self, steps: list[list[PieceBatch]]) -> None:
        for k, batches in enumerate(steps):
            for b in batches:
                p = b.piece
                part = ("rows", p.row_offset) if p.sees_global_batch else ("replica", p.rank)
                self.lookups[(p.table, k, part)] = b.lookups
                ids = np.concatenate([f.ids for f in b.features]) if b.features else np.zeros(0, np.int64)
                self.rows.setdefault(p.table, []).append(np.unique(ids) + p.row_offset)

    def tables(self) -> dict[str, dict[str, int]]:
        out = {name: {"lookups": 0, "distinct_rows": int(np.unique(np.concatenate(parts)).size)}
               for name, parts in self.rows.items()}
        for (name, _, _), n in self.lookups.items():
            out[name]["lookups"] += n
        return out


__all__ = ["SeenIds", "MAX_SAMPLE_BATCHES", "SampleBatches", "load_sample_batches"]
