"""The cache load factor of fused_uvm_caching, chosen per table from its measured miss curve.

A table whose constraints carry a workload block (`python -m engine stats --apply`) and no typed
`cache_load_factor` gets a fused_uvm_caching option of every geometry at each load factor of its curve's points
(cache_rows / num_embeddings, below 1) and at the default 0.2, past the knee only those that miss less
(`candidates`). Each is priced as
any option is (engine.estimate: the HBM its cache holds, the lookup time its miss rate gives) and placement picks
among them within the HBM each rank has left, as it picks among sharding types: a larger cache misses less and
holds more HBM. TorchRec's EmbeddingOffloadScaleupProposer scales the caches of a placed plan with the HBM left,
continuously, in proportion to each table's cacheability; here the sizes are the curve's measured points and the
choice is the partitioner's (docs/estimator.md, *Cache load factor*).

A typed `cache_load_factor` is kept as it is: no other size is tried.
"""

from __future__ import annotations

import math

from engine import fields as F
from engine.cachecurve import curve_clfs, miss_rate
from engine.errors import human_bytes
from engine.types import ComputeKernel, Config, Constraints, Device, ShardingType, TableConfig, TablePlan

CACHING = ComputeKernel.FUSED_UVM_CACHING
# kernels with an HBM cache of cache_load_factor x the rows: fused_uvm_caching and the offload tiers (engine.tiers)
CACHED = (CACHING, ComputeKernel.KEY_VALUE, ComputeKernel.SSD_VIRTUAL_TABLE, ComputeKernel.DRAM_VIRTUAL_TABLE,
          ComputeKernel.DRAM_SSD_VIRTUAL_TABLE)
# A larger cache is priced only when it misses at least this much less (0.1 point of the lookups) than every
# smaller one tried: past the curve's knee (the hot rows held) a larger cache adds HBM and no hits.
FLAT_MISS = 0.001


def candidates(table: TableConfig, c: Constraints) -> tuple[float, ...]:
    """The cache load factors worth pricing for the table: the curve's points below 1 and the default, smallest
    first, each kept only when it misses at least FLAT_MISS less than every smaller one (a larger cache that misses
    no less only holds more HBM). Empty without a curve or with a typed load factor."""
    if c.workload is None or c.cache_load_factor is not None:
        return ()
    rows = table.num_embeddings
    out: list[float] = []
    best = math.inf
    for x in sorted({*curve_clfs(c.workload, rows), F.cache_load_factor(c)}):
        m = miss_rate(c.workload, rows, x)
        if m <= best - FLAT_MISS:
            out.append(x)
            best = m
    return tuple(out)


def clf_geometries(table: TableConfig, c: Constraints, base: list) -> list:
    """engine.enumerate's geometries ((sharding type, kernels, width, None)) for a table with a miss curve and no
    typed load factor: fused_uvm_caching taken out of each, and a geometry of that kernel alone at each of the
    candidates' load factors put in its place. `base` itself for other tables (never mutated: it is cached)."""
    clfs = candidates(table, c)
    if not clfs:
        return base
    out = []
    for st, kernels, w, _ in base:
        rest = tuple(k for k in kernels if k not in CACHED)
        if rest:
            out.append((st, rest, w, None))
        out += [(st, (k,), w, x) for k in kernels if k in CACHED for x in clfs]
    return out


def cache_note(cfg: Config, name: str, tp: TablePlan) -> str | None:
    """Why a fused_uvm_caching table's cache is the size it is, and where its miss rate comes from: for the plan
    file and the dashboard. None for other kernels and devices."""
    if tp.compute_kernel not in CACHED or cfg.topology.compute_device is not Device.CUDA:
        return None
    t, c = cfg.table(name), cfg.constraint(name)
    default = F.BY_NAME["cache_load_factor"].default
    if c.workload is None:
        clf = F.cache_load_factor(c)
        how = "typed" if c.cache_load_factor is not None else "the default"
        if tp.compute_kernel is not CACHING:
            return (f"cache load factor {clf:.4g} ({how}); every lookup priced at the backing store's bandwidth, as "
                    f"TorchRec prices {tp.compute_kernel.value}: no measured workload")
        return (f"cache load factor {clf:.4g} ({how}); miss rate {1 - clf:.1%} by default pricing (the cache load "
                "factor taken as the hit rate, as TorchRec does): no measured workload")
    source = f"sample {c.workload.source_file} ({c.workload.source_rows:,} rows, {c.workload.source_modified})"
    if tp.cache_load_factor is None:
        clf = F.cache_load_factor(c)
        how = "typed, kept" if c.cache_load_factor is not None else "the default, placed over the curve's sizes"
        return f"cache load factor {clf:.4g} ({how}); miss rate {miss_rate(c.workload, t.num_embeddings, clf):.1%} " \
               f"from {source}"
    clf = tp.cache_load_factor
    miss, miss0 = miss_rate(c.workload, t.num_embeddings, clf), miss_rate(c.workload, t.num_embeddings, default)
    extra = _cache_bytes(cfg, t, tp, clf) - _cache_bytes(cfg, t, tp, default)
    sign = "+" if extra >= 0 else "-"
    tried = candidates(t, c)
    why = ("holds the hot rows: no larger cache on the curve misses less" if clf >= tried[-1] else
           f"placed within the HBM left; the largest size tried, {tried[-1]:.4g}, misses less")
    return (f"cache load factor {clf:.4g} ({round(clf * t.num_embeddings):,} rows, of {len(tried)} sizes tried from "
            f"the curve): {why}; miss rate {miss:.1%} vs {miss0:.1%} at the default {default:g}; "
            f"{sign}{human_bytes(abs(extra))} HBM vs the default; miss rates from {source}")


def _cache_bytes(cfg: Config, t: TableConfig, tp: TablePlan, clf: float) -> float:
    """The HBM the table's cache holds over all its pieces at `clf` (engine.memory's cache part)."""
    if tp.sharding_type is ShardingType.DATA_PARALLEL or tp.shards is None:
        return 0.0
    rows = sum(s.sizes[0] for s in tp.shards)
    weights = sum(math.ceil(s.sizes[0] * s.sizes[1] * t.data_type.bytes) for s in tp.shards)
    return round(weights * clf) + math.ceil(rows * (4 + clf * 16))


def with_notes(cfg: Config, tables: dict[str, TablePlan]) -> dict[str, TablePlan]:
    """The table plans with their cache notes (fused_uvm_caching tables on a GPU), the rest as they are."""
    from dataclasses import replace

    out = {}
    for name, tp in tables.items():
        note = cache_note(cfg, name, tp)
        out[name] = tp if note is None or note == tp.cache_note else replace(tp, cache_note=note)
    return out
