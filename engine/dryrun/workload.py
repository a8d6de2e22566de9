"""Synthetic training batches, as numpy arrays: the global batch of each feature, and what reaches a piece.

A sample's bag holds floor(pf) or ceil(pf) ids (pf = the feature's pooling factor), so a bag averages pf ids
with the least spread. Ids are uniform over the table's rows, or Zipf-skewed (the table's constraint
zipf_exponent, or every table's with --distribution zipf). Hot ids are scattered over the rows by a fixed
permutation, as hashed ids are in training: the k-th hottest id is row (k x 1,000,003 + rows // 3) mod rows, so a
row split gets its share of hot and cold ids alike.
The global batch is every rank's local batch, rank r's being bags [r*b, (r+1)*b). Every step draws its own batch
(seeded by seed, table, feature and step), as training sees fresh ids; `batches` caps how many distinct ones the
steps cycle through.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from engine import constants as C
from engine import fields as F
from engine.types import Config, PoolingType, ShardingType, TableConfig

from engine.dryrun.pieces import scaled_rows
from engine.dryrun.types import OUTPUT_ELEMENT_BYTES, Distribution, DryrunSettings, Piece

INDEX_BYTES = C.INDEX_BYTES  # ids and offsets are int64


@dataclass(frozen=True)
class FeatureBatch:
    lengths: np.ndarray  # int64, ids per bag
    ids: np.ndarray  # int64, row ids, bag after bag


@dataclass(frozen=True)
class PieceBatch:
    """The ids one piece looks up in one step, per feature of its table, in the piece's local row ids."""

    piece: Piece
    features: tuple[FeatureBatch, ...]

    @property
    def lookups(self) -> int:
        return sum(len(f.ids) for f in self.features)

    @property
    def bags(self) -> int:
        return sum(len(f.lengths) for f in self.features)

    @property
    def bags_per_feature(self) -> int:
        return len(self.features[0].lengths) if self.features else 0

    @property
    def io_bytes(self) -> int:
        """int64 ids, one int64 offset per bag, fp32 outputs (a row per bag, or per id without pooling)."""
        out_rows = self.lookups if self.piece.pooling is PoolingType.NONE else self.bags
        return (self.lookups + self.bags) * INDEX_BYTES + out_rows * self.piece.cols * OUTPUT_ELEMENT_BYTES


def local_bags(cfg: Config, table: TableConfig) -> list[int]:
    """Bags per feature in one rank's batch: batch size x num_poolings."""
    c = cfg.constraint(table.name)
    n = len(table.feature_names)
    bs = F.batch_sizes(c, n, cfg.topology.batch_size)
    npool = F.num_poolings(c, n)
    return [max(1, round(b * q)) for b, q in zip(bs, npool)]


SCATTER_MULTIPLIERS = (1_000_003, 1_000_033, 1_000_037)  # primes; one of them is coprime to any row count
SCATTER_MAX_ROWS = 2**40  # (hotness rank x multiplier) stays inside int64 below this


def zipf_exponent(cfg: Config, table: TableConfig, s: DryrunSettings) -> float:
    """The skew of a table's ids in this dry-run: 0 for uniform."""
    if s.distribution is Distribution.UNIFORM:
        return 0.0
    if s.distribution is Distribution.ZIPF:
        return s.zipf_alpha
    return cfg.constraint(table.name).zipf_exponent


def scatter(hot: np.ndarray, rows: int) -> np.ndarray:
    """Row of each hotness rank (0: the hottest id): a fixed permutation of the rows."""
    if rows <= 1 or rows >= SCATTER_MAX_ROWS:
        return hot
    a = next(m for m in SCATTER_MULTIPLIERS if math.gcd(m, rows) == 1)
    return (hot * a + rows // 3) % rows


def _ids(rng: np.random.Generator, n: int, rows: int, alpha: float) -> np.ndarray:
    if alpha <= 0:
        return rng.integers(0, rows, size=n, dtype=np.int64)
    # inverse CDF of the continuous density (x+1)^-alpha on [0, rows): a bounded Zipf over the hotness ranks
    u = rng.random(n)
    if math.isclose(alpha, 1.0):
        x = np.power(rows + 1.0, u) - 1.0
    else:
        x = np.power(u * ((rows + 1.0) ** (1.0 - alpha) - 1.0) + 1.0, 1.0 / (1.0 - alpha)) - 1.0
    return scatter(np.minimum(x.astype(np.int64), rows - 1), rows)


def global_batch(cfg: Config, table_index: int, s: DryrunSettings, step: int = 0) -> tuple[FeatureBatch, ...]:
    """The table's global batch of one step, one FeatureBatch per feature; the same for every rank (seeded by
    seed, table, feature and step)."""
    t = cfg.tables[table_index]
    rows = scaled_rows(t.num_embeddings, s.scale_rows)
    pfs = F.pooling_factors(cfg.constraint(t.name), len(t.feature_names))
    alpha = zipf_exponent(cfg, t, s)
    out = []
    for f, (bags, pf) in enumerate(zip(local_bags(cfg, t), pfs)):
        rng = np.random.default_rng([s.seed, table_index, f, step])
        n = bags * cfg.topology.world_size
        whole = math.floor(pf)
        lengths = whole + (rng.random(n) < pf - whole).astype(np.int64)
        out.append(FeatureBatch(lengths, _ids(rng, int(lengths.sum()), rows, alpha)))
    return tuple(out)


TURN_STEPS = 4  # timed steps a rank runs in one turn (engine.dryrun.measure.measure_ranks)


def turns(iters: int) -> list[int]:
    """The timed steps of each of a rank's turns: iters in turns of TURN_STEPS (the last may be shorter)."""
    return [min(TURN_STEPS, iters - k) for k in range(0, iters, TURN_STEPS)]


def steps_per_rank(s: DryrunSettings) -> int:
    """Every step a rank runs: s.warmup untimed, then each turn's one untimed step and its timed ones."""
    return s.warmup + s.iters + len(turns(s.iters))


def distinct_batches(s: DryrunSettings) -> int:
    """How many different batches a rank's steps (steps_per_rank) cycle through."""
    steps = steps_per_rank(s)
    return steps if s.batches <= 0 else min(s.batches, steps)


def _local(fb: FeatureBatch, rank: int, world_size: int) -> FeatureBatch:
    b = len(fb.lengths) // world_size
    offsets = np.concatenate(([0], np.cumsum(fb.lengths)))
    lo, hi = offsets[rank * b], offsets[(rank + 1) * b]
    return FeatureBatch(fb.lengths[rank * b:(rank + 1) * b], fb.ids[lo:hi])


def _row_range(fb: FeatureBatch, start: int, rows: int) -> FeatureBatch:
    bag_of_id = np.repeat(np.arange(len(fb.lengths)), fb.lengths)
    keep = (fb.ids >= start) & (fb.ids < start + rows)
    lengths = np.bincount(bag_of_id[keep], minlength=len(fb.lengths)).astype(np.int64)
    return FeatureBatch(lengths, fb.ids[keep] - start)


def piece_batch(p: Piece, batch: tuple[FeatureBatch, ...], world_size: int) -> PieceBatch:
    """What the sharding sends a piece: data-parallel replicas their local batch; row-split pieces the ids
    of the global batch inside their rows; table- and column-wise pieces every id of the global batch."""
    if not p.sees_global_batch:
        return PieceBatch(p, tuple(_local(fb, p.rank, world_size) for fb in batch))
    if p.sharding_type.splits_rows or p.sharding_type is ShardingType.GRID_SHARD:  # grid: each piece's rows too
        return PieceBatch(p, tuple(_row_range(fb, p.row_offset, p.rows) for fb in batch))
    return PieceBatch(p, batch)


# (table index, step) -> the table's global batch of that step; default: the synthetic draw (global_batch)
BatchSource = Callable[[int, int], tuple[FeatureBatch, ...]]


def rank_batches(cfg: Config, pieces: list[Piece], s: DryrunSettings, step: int = 0,
                 source: Optional[BatchSource] = None) -> list[PieceBatch]:
    """One PieceBatch per non-empty piece of a rank, for one step (the global batches from `source`, else drawn)."""
    index = {t.name: i for i, t in enumerate(cfg.tables)}
    cache: dict[str, tuple[FeatureBatch, ...]] = {}
    out = []
    for p in pieces:
        if p.empty:
            continue
        if p.table not in cache:
            cache[p.table] = (source(index[p.table], step) if source is not None
                              else global_batch(cfg, index[p.table], s, step))
        out.append(piece_batch(p, cache[p.table], cfg.topology.world_size))
    return out


def rank_steps(cfg: Config, pieces: list[Piece], s: DryrunSettings, source: Optional[BatchSource] = None,
               batches: Optional[int] = None) -> list[list[PieceBatch]]:
    """A rank's batches for each distinct step: steps[k][i] is what piece i looks up in step k (`batches` distinct
    steps from `source` when given, else distinct_batches(s) synthetic ones)."""
    n = distinct_batches(s) if batches is None else batches
    return [rank_batches(cfg, pieces, s, k, source) for k in range(n)]
