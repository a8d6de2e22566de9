"""run_dryrun: build each rank's pieces for real, time forward + backward on synthetic batches, and set the
measurements beside the engine's estimates. The ranks are measured in this process, in turns of a few steps each
round the ranks (one after another where all of them at once would pass --max-bytes).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from engine.errors import EngineError, human_bytes
from engine.evaluate import evaluate
from engine.types import Config, Optimizer, TablePlan

from engine.dryrun.sample_ids import SeenIds, load_sample_batches
from engine.dryrun.pieces import low_precision_tables, rank_pieces, state_bytes
from engine.dryrun.types import (SCHEDULE_ONE_BY_ONE, SCHEDULE_TURNS, Backend, Distribution, DryrunDevice, DryrunResult,
                                 DryrunSettings, Piece, RankResult)
from engine.dryrun.workload import BatchSource, distinct_batches, local_bags, rank_steps, steps_per_rank


def check_settings(s: DryrunSettings) -> None:
    """One-line errors naming the flag, for values no measurement can use."""
    checks = (
        (s.iters >= 1, "--iters", f"must be >= 1, got {s.iters}"),
        (s.warmup >= 0, "--warmup", f"must be >= 0, got {s.warmup}"),
        (s.threads >= 1, "--threads", f"must be >= 1, got {s.threads}"),
        (s.zipf_alpha > 0, "--zipf-alpha", f"must be > 0, got {s.zipf_alpha:g}"),
        (0 < s.scale_rows <= 1, "--scale-rows", f"must be > 0 and <= 1, got {s.scale_rows:g}"),
        (s.max_bytes > 0, "--max-bytes", f"must be > 0, got {s.max_bytes}"),
        (s.batches >= 0, "--batches", f"must be >= 0 (0: a fresh batch every step), got {s.batches}"),
    )
    for ok, flag, message in checks:
        if not ok:
            raise EngineError(f"{flag} {message}")


def all_state_bytes(pieces: list[list[Piece]], optimizer: Optimizer) -> int:
    """Every rank's weights and optimizer state, held at once (the ranks are measured in turns when it fits in
    --max-bytes; engine.dryrun.measure.measure_ranks)."""
    return sum(state_bytes(rank, optimizer) for rank in pieces)


def guard_memory(pieces: list[list[Piece]], optimizer: Optimizer, max_bytes: int) -> None:
    """Refuse before allocating anything when a rank's weights and optimizer state exceed max_bytes."""
    for r, rank in enumerate(pieces):
        need = state_bytes(rank, optimizer)
        if need > max_bytes:
            raise EngineError(
                f"rank {r} needs {human_bytes(need)} ({need} bytes) of weights and optimizer state, over "
                f"--max-bytes {human_bytes(max_bytes)}; raise --max-bytes or shrink the tables with --scale-rows "
                f"{max(max_bytes / need * 0.9, 1e-6):.2g} (changes what is measured)")


def spearman(x: list[float], y: list[float]) -> Optional[float]:
    """Spearman rank correlation (average ranks for ties); None under 3 points or when either is constant."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    rx, ry = _ranks(np.asarray(x, dtype=float)), _ranks(np.asarray(y, dtype=float))
    return round(float(np.corrcoef(rx, ry)[0, 1]), 6)


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=float)
    for v in np.unique(a):
        tie = a == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def run_dryrun(cfg: Config, tables: dict[str, TablePlan], settings: DryrunSettings = DryrunSettings()
               ) -> DryrunResult:
    """Measure every rank of a plan; raises EngineError (one line) for bad settings or a rank over max_bytes."""
    s = settings
    check_settings(s)
    optimizer = cfg.topology.optimizer
    pieces = rank_pieces(cfg, tables, s.scale_rows)
    guard_memory(pieces, optimizer, s.max_bytes)
    estimates = evaluate(cfg, tables, planner="file").ranks
    source, distinct, ids, seen = _ids(cfg, s)
    from engine.dryrun import measure  # imports torch

    device = measure.pick_device(s.device)
    backend, notes = measure.pick_backend(s, [p for rank in pieces for p in rank], optimizer, device)
    notes += _notes(pieces, s)
    if s.ids is not None:
        notes += _sample_notes(cfg, ids)
    elif s.distribution is Distribution.CONFIG:
        skewed = [f"{t.name} ({cfg.constraint(t.name).zipf_exponent:g})" for t in cfg.tables
                  if cfg.constraint(t.name).zipf_exponent > 0]
        if skewed:
            notes.append(f"Zipf-skewed ids (exponent) in {', '.join(skewed[:10])}"
                         + (f" and {len(skewed) - 10} more tables" if len(skewed) > 10 else ""))
    held = all_state_bytes(pieces, optimizer)
    together = s.turns and held <= s.max_bytes
    if not s.turns and len(pieces) > 1:
        notes.append("ranks measured one after another (--one-rank-at-a-time)")
    elif s.turns and not together:  # two ranks or more: each alone fits (guard_memory)
        notes.append(f"ranks measured one after another: all {len(pieces)} held at once need "
                     f"{human_bytes(held)} of weights and optimizer "
                     f"state, over --max-bytes {human_bytes(s.max_bytes)} (raise it to measure them in turns, which "
                     "a drifting machine speed moves less)")
    first: dict[int, list] = {}

    def steps_of(r: int) -> list:
        steps = rank_steps(cfg, pieces[r], s, source, distinct)
        if seen is not None:
            seen.add(steps)
        first[r] = steps[0] if steps else []
        return steps

    with measure.threads(s.threads), measure.kept_heap(backend is Backend.TORCH and device.type == "cpu") as kept:
        if kept:
            notes.append(measure.KEPT_HEAP_NOTE)
        timings = measure.measure_ranks(len(pieces), steps_of, backend, device, optimizer, s, together)
    results = []
    for r, (rank, t) in enumerate(zip(pieces, timings)):
        batches = first.get(r, [])
        io_b = sum(b.io_bytes for b in batches)
        est = estimates[r].perf
        results.append(RankResult(
            rank=r, num_pieces=len(rank), lookups=sum(b.lookups for b in batches), measured_ms=t.ms,
            measured_bytes=t.weight_bytes + t.optimizer_bytes + io_b, weight_bytes=t.weight_bytes,
            optimizer_bytes=t.optimizer_bytes, io_bytes=io_b, estimated_ms=est.total,
            estimated_compute_ms=est.fwd_compute + est.bwd_compute, measured_p25_ms=t.p25_ms))
    corr = spearman([x.estimated_ms for x in results], [x.measured_ms for x in results])
    return DryrunResult(
        ranks=tuple(results), backend=backend, device=DryrunDevice(device.type), iters=s.iters, warmup=s.warmup,
        threads=s.threads, distribution=s.distribution,
        zipf_alpha=s.zipf_alpha if s.distribution is Distribution.ZIPF else None, scale_rows=s.scale_rows,
        estimate_rank_correlation=corr, notes=tuple(notes), seed=s.seed, batches=distinct, ids=ids,
        ids_seen=seen.tables() if seen is not None else {},
        schedule=SCHEDULE_TURNS if together else SCHEDULE_ONE_BY_ONE)


class UnitTimes(NamedTuple):
    ms: list[float]  # each unit's median step
    backend: Backend
    device: DryrunDevice
    schedule: str  # SCHEDULE_TURNS or SCHEDULE_ONE_BY_ONE


def run_units(units: list[tuple[Config, dict[str, TablePlan]]], settings: DryrunSettings = DryrunSettings()
              ) -> UnitTimes:
    """Rank 0 of each (config, plan), every one a rank of a single dry-run: each priced and fed by its own config
    (they share one topology and optimizer), all measured with one backend, timed in turns round the units where all
    of them fit in --max-bytes together (else, or with --one-rank-at-a-time, one after another). measure-tables' round
    of tables alone, their half-width copies, the fixed step and the probe ranks: measured in turns, a drift of the
    machine's speed falls on the tables alone and on the probes that add them up alike. Raises EngineError (one line)
    for bad settings or a unit over max_bytes."""
    s = settings
    check_settings(s)
    if not units:
        raise EngineError("no unit to measure")
    optimizer = units[0][0].topology.optimizer
    pieces = [rank_pieces(cfg, tables, s.scale_rows)[0] for cfg, tables in units]
    guard_memory(pieces, optimizer, s.max_bytes)
    feeds = [_ids(cfg, s) for cfg, _ in units]
    from engine.dryrun import measure  # imports torch

    device = measure.pick_device(s.device)
    backend, _ = measure.pick_backend(s, [p for rank in pieces for p in rank], optimizer, device)
    together = s.turns and all_state_bytes(pieces, optimizer) <= s.max_bytes

    def steps_of(r: int) -> list:
        source, distinct, _, _ = feeds[r]
        return rank_steps(units[r][0], pieces[r], s, source, distinct)

    with measure.threads(s.threads), measure.kept_heap(backend is Backend.TORCH and device.type == "cpu"):
        timings = measure.measure_ranks(len(pieces), steps_of, backend, device, optimizer, s, together)
    return UnitTimes([t.ms for t in timings], backend, DryrunDevice(device.type),
                     SCHEDULE_TURNS if together else SCHEDULE_ONE_BY_ONE)


def _ids(cfg: Config, s: DryrunSettings) -> tuple[Optional[BatchSource], int, dict, Optional[SeenIds]]:
    """Where the batches come from: (source, distinct batches, the result's ids block, the seen-ids check); the
    sample is read (and checked: SampleError, one line) before anything is allocated."""
    if s.ids is None:
        n = distinct_batches(s)
        return None, n, {"source": "synthetic", "seed": s.seed, "distribution": s.distribution.value,
                         "zipf_alpha": s.zipf_alpha if s.distribution is Distribution.ZIPF else None,
                         "batches": n}, None
    sample = load_sample_batches(cfg, s.ids, steps_per_rank(s), s.batches, s.scale_rows)
    return sample.global_batch, sample.batches, sample.ids_block(), SeenIds()


def _sample_notes(cfg: Config, ids: dict) -> list[str]:
    b = cfg.topology.batch_size
    notes = [f"ids from the sample {ids['file']}: {ids['rows_used']:,} rows in order, {ids['batches']} global "
             f"batch(es) of world_size x batch_size = {cfg.topology.world_size} x {b} rows"
             + ("; the sample ran out and the steps cycle through them" if ids["cycled"] else "")]
    other = [t.name for t in cfg.tables if any(x != b for x in local_bags(cfg, t))]
    if other:
        notes.append(f"with --ids every feature has one bag per sample row: the batch_sizes / num_poolings "
                     f"constraints of {', '.join(other[:10])} are not applied")
    return notes


def _notes(pieces: list[list[Piece]], s: DryrunSettings) -> list[str]:
    notes = []
    low = low_precision_tables(pieces)
    if low:
        notes.append(f"tables {', '.join(low)} are measured with 2-byte weights (int8/int4/int2 as fp16, and "
                     "bf16 as fp16 with fbgemm, whose CPU training kernels take only fp32 and fp16)")
    if s.scale_rows != 1.0:
        notes.append(f"rows scaled by {s.scale_rows:g}: measured on smaller tables; estimated_ms is for the "
                     "full-size plan")
    return notes
