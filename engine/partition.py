"""Placing shards on ranks: greedy (longest first onto the least-loaded rank that has memory), then a
local search that moves, swaps and re-shards what sits on the slowest rank while it gets faster (making
room by demoting another table to a DDR-backed kernel where needed), then ruin and recreate around it.

Objective: the slowest rank's cost (what TorchRec's partitioner minimises), ties broken by the spread of the
loads. The pieces live in their own modules and are importable from here: the placement and its rules
(engine.placement), the work budget (engine.work), the local search (engine.localsearch); this module adds the
ruin-and-recreate rounds around them.
"""

from __future__ import annotations

import numpy as np

from engine.enumerate import Option
from engine.localsearch import EVICT, FreeShards, Shift, improve, move_or_swap, reshard
from engine.placement import EPS, FREE_PLACEMENT, Placement, PlacementRules, better, ws_term
from engine.work import Work

__all__ = ["EPS", "EVICT", "FREE_PLACEMENT", "FreeShards", "Placement", "PlacementRules", "Shift", "Work", "better",
           "improve", "move_or_swap", "perturb", "reshard", "ws_term"]

# ---- ruin and recreate ------------------------------------------------------------------------------

STALL_ROUNDS = 25  # the perturbation search stops after this many rounds in a row bring nothing
RUIN_TABLES = 3  # at most this many tables off the slowest rank, and as many others, per round


def _reinsert(pl: Placement, options: list[Option], work: Work) -> bool:
    """Put a removed table back in the option and ranks that leave the peak of its ranks lowest (the
    cheaper option in total at equal peaks). False where no option fits."""
    best, best_key = None, None
    work.spend(len(options))
    for opt in options:
        ranks = pl.find_ranks(opt)
        if ranks is None:
            continue
        load = pl.loads_with(opt, ranks)
        key = (float(load[ranks].max()), opt.total_cost_ms)
        if best_key is None or key < best_key:
            best, best_key = (opt, ranks), key
    if best is None:
        return False
    pl.add(*best)
    return True


def _ruin_and_recreate(pl: Placement, options: list[list[Option]], rng: np.random.Generator, work: Work) -> bool:
    """Take a few tables off the slowest rank and a few others at random, and put them back one by one,
    heaviest first, each where it leaves its ranks least loaded. False where one no longer fits."""
    b = int(np.argmax(pl.load))
    k = int(rng.integers(1, RUIN_TABLES + 1))
    fixed = pl.rules.fixed if pl.rules is not None else frozenset()
    on_b = np.array(sorted(t for t, r in pl.ranks.items() if (r == b).any() and t not in fixed), dtype=np.int64)
    picked = set(rng.choice(on_b, size=min(k, len(on_b)), replace=False).tolist())
    rest = np.array(sorted(set(pl.choice) - picked - fixed), dtype=np.int64)
    picked |= set(rng.choice(rest, size=min(k, len(rest)), replace=False).tolist())
    removed = sorted(((pl.remove(t)[0].max_shard_cost_ms, t) for t in sorted(picked)), reverse=True)
    return all(_reinsert(pl, options[t], work) for _, t in removed)


def perturb(pl: Placement, options: list[list[Option]], work: Work, seed: int = 0) -> tuple[Placement, int]:
    """Iterated local search: ruin and recreate part of the best plan, improve it, keep it if it is better;
    until the work is spent or STALL_ROUNDS rounds in a row bring nothing. The rounds draw from a generator
    seeded by `seed`. Returns the best plan and how many rounds improved it."""
    rng = np.random.default_rng(seed)
    best, idle, gains = pl, 0, 0
    while idle < STALL_ROUNDS and not work.done():
        trial = best.clone()
        if _ruin_and_recreate(trial, options, rng, work):
            improve(trial, options, work)
            if better(trial.score(), best.score()):
                best, idle, gains = trial, 0, gains + 1
                continue
        idle += 1
    return best, gains
