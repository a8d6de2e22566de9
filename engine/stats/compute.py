"""Workload statistics of a config's features and tables, measured on a sample of real ids (one streamed pass).

Per feature: the ids as written. Per table: its features' ids merged in sample order (within a sample, features in
the table's order) and folded as TorchRec folds them, id % num_embeddings.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from engine.workset import zipf_matching
from engine.stats.counts import Batcher, IdCounter, histogram_quantile, nearest_rank, top_share, zipf_fit
from engine.stats.lru import (EXACT_MAX_LOOKUPS, SAMPLED_MAX_LOOKUPS, LookupSampler, cache_sizes, error_bound,
                              miss_curve)
from engine.stats.replay import Background, ExactReplay
from engine.stats.sample import (SampleError, check_size, ids_bound, read_sample, sample_format,
                                 sample_rows)
from engine.types import Config, TablePlan, TableConfig


Progress = Callable[[int, Optional[int], int], None]


class _Feature:
    def __init__(self) -> None:
        self.samples = 0
        self.ids = 0
        self.empty = 0
        self.hist = np.zeros(1, np.int64)
        self.counter = IdCounter()

    def add(self, lengths: np.ndarray, values: np.ndarray) -> None:
        self.samples += lengths.size
        self.ids += values.size
        self.empty += int((lengths == 0).sum())
        h = np.bincount(lengths)
        if h.size > self.hist.size:
            h[: self.hist.size] += self.hist
            self.hist = h
        else:
            self.hist[: h.size] += h
        self.counter.add(values)

    def result(self) -> dict:
        _, counts = self.counter.result()
        self.counter = IdCounter()  # the counts go with this result
        s, err = zipf_fit(counts)
        n = self.samples
        return {"samples": n, "ids": self.ids, "pooling_factor": self.ids / n if n else 0.0,
                "pooling_p50": histogram_quantile(self.hist, 0.5), "pooling_p99": histogram_quantile(self.hist, 0.99),
                "max_pooling": int(np.flatnonzero(self.hist)[-1]) if n else 0,
                "empty_share": self.empty / n if n else 0.0, "unique_ids": int(counts.size),
                "top_1pct_share": top_share(counts), "zipf_exponent": s, "zipf_fit_error": err}


class _Table:
    def __init__(self, table: TableConfig, batch_size: int, budget: int, background: Background,
                 bound: Optional[int] = None) -> None:
        self.table = table
        self.lookups = 0
        self.folded = 0
        self.rows = IdCounter()
        self.budget = budget  # lookups replayed exactly; past them, the sampled replay's curve
        self.exact: Optional[ExactReplay] = ExactReplay(cache_sizes(table.num_embeddings),
                                                        num_rows=table.num_embeddings, background=background)
        # the sampled replay, unless the file tells that the exact one will see every lookup (`bound`: at most)
        self.sampler = (LookupSampler(min(budget, SAMPLED_MAX_LOOKUPS), table.num_embeddings)
                        if bound is None or bound > budget else None)
        self.batch_counts: list[np.ndarray] = []
        self.batcher = Batcher(batch_size, lambda first, pb, pr, n: self.batch_counts.append(
            np.bincount(pb, minlength=n)))
        self.step: Optional[_StepBytes] = None

    def add(self, rows: np.ndarray, sample: np.ndarray, end_sample: int) -> None:
        self.lookups += rows.size
        self.rows.add(rows)
        if self.sampler is not None:
            self.sampler.add(rows)
        if self.exact is not None:
            if self.lookups > self.budget:
                self.close()  # its state goes: the sampled replay takes over
            else:
                self.exact.add(rows)
        self.batcher.add(rows, sample, end_sample)
        if self.step is not None:
            self.step.batcher.add(rows, sample, end_sample)

    def close(self) -> None:
        """Stop the exact replay's thread, if it runs (no exact curve after this)."""
        if self.exact is not None:
            self.exact.close()
            self.exact = None

    def result(self, total_samples: int) -> dict:
        self.batcher.finish(total_samples)
        counts = np.concatenate(self.batch_counts) if self.batch_counts else np.zeros(0, np.int64)
        ids, _ = self.rows.result()
        self.rows = IdCounter()
        if self.exact is not None:
            method, curve = {"method": "exact"}, self.exact.curve()
        else:
            assert self.sampler is not None  # lookups past the budget: the file's bound was above it
            replay, rate = self.sampler.lookups(), self.sampler.rate
            method = {"method": "exact"} if rate >= 1.0 else {
                "method": "shards", "sampling_rate": rate,
                "error_bound": error_bound(int(np.unique(replay).size), rate), "lookups_replayed": int(replay.size)}
            curve = miss_curve(replay, self.table.num_embeddings, rate, self.sampler.seen, int(ids.size))
        return {"features": list(self.table.feature_names), "num_embeddings": self.table.num_embeddings,
                "lookups": self.lookups, "folded_ids": self.folded, "unique_rows": int(ids.size),
                "unique_rows_per_batch": {
                    "batch_size": self.batcher.size, "batches": int(counts.size),
                    "partial": self.batcher.partial_samples > 0,
                    "mean": float(counts.mean()) if counts.size else 0.0, "p99": nearest_rank(np.sort(counts), 0.99)},
                "miss_ratio_method": method, "miss_ratio_curve": curve}


class _StepBytes:
    """Bytes of the rows a step touches on each rank, for one table placed by a plan: a sharded table's shards
    see the whole step's lookups in their row range (world x batch samples), times their columns; a data-parallel
    copy sees its rank's own batch, every column."""

    def __init__(self, table: TableConfig, tp: TablePlan, world: int, batch_size: int) -> None:
        self.row_bytes = table.data_type.bytes
        self.per_rank: dict[int, list[np.ndarray]] = {}
        self.tp, self.world, self.dim = tp, world, table.embedding_dim
        self.local_counts: list[np.ndarray] = []
        if tp.shards is None:
            self.batcher = Batcher(batch_size, self._local)
            return
        self.bounds = np.array(sorted({s.offsets[0] for s in tp.shards}
                                      | {s.offsets[0] + s.sizes[0] for s in tp.shards}), dtype=np.int64)
        self.batcher = Batcher(batch_size * world, self._sharded)

    def _local(self, first: int, pb: np.ndarray, pr: np.ndarray, n: int) -> None:
        self.local_counts.append(np.bincount(pb, minlength=n).astype(np.float64) * (self.dim * self.row_bytes))

    def _sharded(self, first: int, pb: np.ndarray, pr: np.ndarray, n: int) -> None:
        nb = self.bounds.size - 1
        b = np.searchsorted(self.bounds, pr, side="right") - 1
        per_bin = np.bincount(pb * nb + b, minlength=n * nb).reshape(n, nb)
        call: dict[int, np.ndarray] = {}
        for s in self.tp.shards or ():
            i0 = int(np.searchsorted(self.bounds, s.offsets[0]))
            i1 = int(np.searchsorted(self.bounds, s.offsets[0] + s.sizes[0]))
            add = per_bin[:, i0:i1].sum(axis=1).astype(np.float64) * (s.sizes[1] * self.row_bytes)
            call[s.rank] = call[s.rank] + add if s.rank in call else add
        for r, v in call.items():
            self.per_rank.setdefault(r, []).append(v)

    def steps(self) -> dict[int, np.ndarray]:
        """Per rank: bytes in each step (a rank's shards added). A data-parallel rank r's batch in step s is
        batch s * world + r; fewer samples than a step: the batches there are, the missing ones empty."""
        if self.tp.shards is None:
            counts = np.concatenate(self.local_counts)
            steps = max(1, counts.size // self.world)
            counts = np.concatenate((counts[: steps * self.world], np.zeros(max(0, self.world - counts.size))))
            return {r: counts[r::self.world] for r in self.tp.ranks}
        return {r: np.concatenate(parts) for r, parts in self.per_rank.items()}


def _sample_info(path: str | Path, size: int, rows: int) -> dict:
    mtime = dt.datetime.fromtimestamp(int(os.stat(path).st_mtime), tz=dt.timezone.utc)
    return {"file": Path(path).name, "format": sample_format(path), "rows": rows, "bytes": size,
            "modified": mtime.strftime("%Y-%m-%dT%H:%M:%SZ")}


def workload_stats(cfg: Config, sample: str | Path, batch_size: Optional[int] = None,
                   plan: Optional[dict[str, TablePlan]] = None, budget: int = EXACT_MAX_LOOKUPS,
                   progress: Optional[Progress] = None) -> dict:
    """The statistics of every feature and table of `cfg` on the sample file (SampleError when it is bad).
    `progress(rows read, the sample's rows or None, ids read)` is called after each chunk read (sample_rows)."""
    size = check_size(sample)
    batch = batch_size or cfg.topology.batch_size
    features = tuple(f for t in cfg.tables for f in t.feature_names)
    fstats = {f: _Feature() for f in features}
    background = Background()  # the exact replays run there, while the next chunks are read and counted
    bound = ids_bound(sample, features)
    tstats = {t.name: _Table(t, batch, budget, background,
                             None if bound is None else sum(bound[f] for f in t.feature_names)) for t in cfg.tables}
    world = cfg.topology.world_size
    if plan is not None:
        for t in cfg.tables:
            tstats[t.name].step = _StepBytes(t, plan[t.name], world, batch)
    try:
        rows = _read(cfg, sample, features, fstats, tstats, progress)
        background.wait()
    except BaseException:  # a bad sample: the replays still queued are dropped, the thread ends
        for st in tstats.values():
            st.close()
        background.wait(raise_error=False)
        raise
    if rows == 0:
        raise SampleError(sample, "has no rows; write at least one sample")
    out = {"sample": _sample_info(sample, size, rows), "batch_size": batch,
           "features": {f: s.result() for f, s in fstats.items()},
           "tables": {name: s.result(rows) for name, s in tstats.items()}}
    for t in out["tables"].values():
        t["batch_zipf_exponent"] = batch_skew(t, out["features"])
    if plan is not None:
        out["working_set"] = _working_set(cfg, tstats, batch, rows)
    return out


def _read(cfg: Config, sample: str | Path, features: tuple[str, ...], fstats: dict[str, _Feature],
          tstats: dict[str, _Table], progress: Optional[Progress]) -> int:
    """One pass over the sample into the features' and tables' counts; the rows read."""
    rows = ids = 0
    total = sample_rows(sample) if progress is not None else None
    for row0, chunk in read_sample(sample, features):
        n = next(iter(chunk.values()))[0].size
        for f, (lengths, values) in chunk.items():
            fstats[f].add(lengths, values)
        for t in cfg.tables:
            rows_t, sample_t = merged([chunk[f] for f in t.feature_names], row0)
            beyond = rows_t >= t.num_embeddings
            st = tstats[t.name]
            st.folded += int(beyond.sum())
            if st.folded:
                rows_t = rows_t % t.num_embeddings
            st.add(rows_t, sample_t, row0 + n)
        rows = row0 + n
        if progress is not None:
            ids += sum(values.size for _, values in chunk.values())
            progress(rows, total, ids)
    return rows


def merged(parts: list[tuple[np.ndarray, np.ndarray]], row0: int) -> tuple[np.ndarray, np.ndarray]:
    """A table's features merged: sample by sample, within a sample the features in order; (ids, sample of each)."""
    n = parts[0][0].size
    if len(parts) == 1:
        lengths, values = parts[0]
        return values, row0 + np.repeat(np.arange(n, dtype=np.int64), lengths)
    total = np.sum([lengths for lengths, _ in parts], axis=0)
    base = np.cumsum(total) - total  # where each sample's ids start in the merged order
    out = np.empty(int(total.sum()), dtype=np.int64)
    for lengths, values in parts:
        cell = np.cumsum(lengths) - lengths  # where each cell starts in this feature's values
        out[np.repeat(base - cell, lengths) + np.arange(values.size)] = values
        base = base + lengths
    return out, row0 + np.repeat(np.arange(n, dtype=np.int64), total)


def _working_set(cfg: Config, tstats: dict[str, _Table], batch: int, rows: int) -> dict:
    world = cfg.topology.world_size
    totals: dict[int, np.ndarray] = {}
    tables: dict[str, dict[str, float]] = {}
    for name, st in tstats.items():
        assert st.step is not None
        st.step.batcher.finish(rows)
        per_rank = st.step.steps()
        tables[name] = {str(r): float(v.mean()) if v.size else 0.0 for r, v in sorted(per_rank.items())}
        for r, v in per_rank.items():
            totals[r] = totals[r] + v if r in totals else v.copy()
    steps = max((v.size for v in totals.values()), default=0)
    ranks = []
    for r in range(world):
        v = totals.get(r, np.zeros(max(steps, 1)))
        ranks.append({"rank": r, "mean_bytes": float(v.mean()), "p99_bytes": float(nearest_rank(np.sort(v), 0.99)),
                      "max_bytes": float(v.max())})
    return {"step_samples": world * batch, "steps": steps, "partial": rows < world * batch,
            "per_rank": ranks, "tables": tables}


def pooling_constraints(result: dict, cfg: Config) -> dict[str, dict]:
    """Per table: the measured pooling_factors (mean ids per sample, per feature), num_poolings (1 per feature: in
    this layout a sample has one bag per feature) and, where the sample is skewed, the zipf_exponent that makes the
    estimate touch as many distinct rows per batch as the sample does (batch_skew)."""
    out = {}
    for t in cfg.tables:
        fields = {"pooling_factors": [result["features"][f]["pooling_factor"] for f in t.feature_names],
                  "num_poolings": [1.0 for _ in t.feature_names]}
        s = result["tables"][t.name].get("batch_zipf_exponent")
        if s:
            fields["zipf_exponent"] = s
        out[t.name] = fields
    return out


def batch_skew(table: dict, features: dict) -> float | None:
    """The Zipf exponent whose draws touch the sample's mean distinct rows per batch (engine.workset.zipf_matching):
    the skew the CPU estimate prices, read from what it prices. None without a whole batch."""
    per = table["unique_rows_per_batch"]
    if not per["batches"] or per["partial"]:
        return None
    ids = sum(features[f]["pooling_factor"] for f in table["features"]) * per["batch_size"]
    return zipf_matching(ids, table["num_embeddings"], per["mean"])

