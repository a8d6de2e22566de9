"""A device profile's collective and launch costs depend on which sharding types a plan uses, not on its tables:
each type in use adds its all-to-alls (or data-parallel all-reduces) to every rank's step (engine.profile). So the
search also tries plans limited to one or two sharding types (after the search over every type, on a share of work
of their own: engine.planner), scores placements with these costs, and the lower bound adds the least that any
plan's types cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from engine.enumerate import Option
from engine.placement import Placement
from engine.profile import DDP_BUCKET_BYTES, active, counts_of, type_rounds, with_fixed
from engine.strategy import OptionArrays
from engine.types import Config, DeviceProfile, ShardingType

MAX_SET = 2  # besides every type at once, the search tries each set of at most this many sharding types


@dataclass(frozen=True)
class FixedCosts:
    """What a config's profile charges a plan for the sharding types it uses."""

    cfg: Config
    prof: DeviceProfile
    weighted: np.ndarray  # per table: its features are weighted (an extra input all-to-all for its type)
    weight_bytes: np.ndarray  # per table: its weights' bytes (data-parallel gradients are all-reduced in buckets)

    def type_ms(self, st: ShardingType) -> float:
        """The least a plan's every rank pays for using `st`: its rounds (data-parallel: one DDP bucket) at the
        profile's cost per round."""
        return self.prof.collective_ms * sum(type_rounds(st, self.cfg.topology, self.prof.backend, False,
                                                         DDP_BUCKET_BYTES))

    def types_ms(self, types) -> float:
        """The least the sharding types `types` cost a plan's every rank (type_ms summed)."""
        return sum(self.type_ms(st) for st in set(types))

    def loads(self, pl: Placement) -> np.ndarray:
        """Every rank's step with the profile's fixed costs (engine.profile.step_perf on the placement's loads)."""
        w = self.cfg.topology.world_size
        held: dict[ShardingType, np.ndarray] = {}
        weighted_types: set[ShardingType] = set()
        dp_bytes = 0.0
        for t, opt in pl.choice.items():
            st, ranks = opt.sharding_type, pl.ranks[t]
            on = held.setdefault(st, np.zeros(w, dtype=bool))
            if st is ShardingType.DATA_PARALLEL:
                on[ranks] = True
                dp_bytes += float(self.weight_bytes[t])
            else:
                on[ranks[(opt.sizes[:, 0] * opt.sizes[:, 1]) > 0]] = True
            if self.weighted[t]:
                weighted_types.add(st)
        counts = counts_of(self.cfg.topology, held, weighted_types, dp_bytes, self.prof.backend)
        perf = np.zeros((w, 6))
        perf[:, 0] = pl.load
        return with_fixed(self.prof, self.cfg.topology, counts, perf).sum(axis=1)


def fixed_costs(cfg: Config) -> FixedCosts | None:
    """The config's plan-dependent fixed costs; None where no profile applies or it charges nothing per collective
    and launch (then every plan pays the same)."""
    prof = active(cfg.topology)
    if prof is None or (prof.collective_ms <= 0 and prof.launch_ms <= 0):
        return None
    return FixedCosts(cfg, prof, np.array([cfg.constraint(t.name).is_weighted for t in cfg.tables], dtype=bool),
                      np.array([float(t.weight_bytes) for t in cfg.tables]))


def score(pl: Placement, fc: FixedCosts | None) -> tuple[float, float]:
    """The search's objective (the slowest rank, then the spread), with the fixed costs where they apply."""
    if fc is None:
        return pl.score()
    load = fc.loads(pl)
    return float(load.max()), float(np.square(load).sum())


class TypeSet:
    """A set of sharding types the search limits a plan to (None: every type), a lower bound on the slowest rank of
    any plan within it without fixed costs (bound_ms) and with them, the step cost included, where they apply
    (lower_ms: on what `score` compares), and its options, selected when the search first asks."""

    def __init__(self, types: tuple[ShardingType, ...] | None, bound_ms: float, lower_ms: float, arr: OptionArrays,
                 options: list[list[Option]] | None = None, keep: np.ndarray | None = None):
        self.types, self.bound_ms, self.lower_ms = types, bound_ms, lower_ms
        self._all, self._keep, self._arr, self._options = arr, keep, (arr if keep is None else None), options

    @property
    def arr(self) -> OptionArrays:
        if self._arr is None:
            self._arr = self._all.select(self._keep)
        return self._arr

    @property
    def options(self) -> list[list[Option]]:
        if self._options is None:
            self._options = self.arr.per_table()
        return self._options

    @property
    def label(self) -> str:
        return "" if self.types is None else f"sharding types limited to {', '.join(t.value for t in self.types)}"


def _least_fixed_ms(fc: FixedCosts, types: list[ShardingType], has: np.ndarray, size: int) -> float:
    """The least fixed cost of a set of at most `size` of `types` that gives every table an option (has: tables x
    types); inf where none does."""
    cost = np.array([fc.type_ms(st) for st in types])
    best = np.inf
    for k in range(1, size + 1):
        for pick in combinations(range(len(types)), k):
            if has[:, list(pick)].any(axis=1).all():
                best = min(best, float(cost[list(pick)].sum()))
    return best + fc.prof.launch_ms + fc.prof.step_ms


def type_sets(arr: OptionArrays, options: list[list[Option]], bound_ms: float, fc: FixedCosts | None,
              ranks_worth: float, scale: float) -> list[TypeSet]:
    """The sets to try, every type at once first, then those of at most MAX_SET types that give every table an
    option, by their lower bound (ties: fewer types, then ShardingType's order). Without fixed costs, one set."""
    if fc is None:
        return [TypeSet(None, bound_ms, bound_ms, arr, options)]
    code = {st: i for i, st in enumerate(ShardingType)}
    kind = np.fromiter((code[o.sharding_type] for o in arr.options), dtype=np.int64, count=len(arr.options))
    types = [st for st in ShardingType if (kind == code[st]).any()]
    # per table and type: its options' least piece and least total cost (inf: no option of that type)
    piece = np.stack([arr.min_per_table(np.where(kind == code[st], arr.piece_ms, np.inf)) for st in types], axis=1)
    cost = np.stack([arr.min_per_table(np.where(kind == code[st], arr.cost_ms, np.inf)) for st in types], axis=1)
    has = np.isfinite(cost)
    out = [TypeSet(None, bound_ms, bound_ms + _least_fixed_ms(fc, types, has, len(types)), arr, options)]
    for k in range(1, min(MAX_SET, len(types) - 1) + 1):
        for pick in map(list, combinations(range(len(types)), k)):
            if not has[:, pick].any(axis=1).all():
                continue
            least = max(float(piece[:, pick].min(axis=1).max()),
                        float(cost[:, pick].min(axis=1).sum()) / ranks_worth) * scale
            var = max(bound_ms, least)
            fixed = sum(fc.type_ms(types[j]) for j in pick) + fc.prof.launch_ms + fc.prof.step_ms
            out.append(TypeSet(tuple(types[j] for j in pick), var, var + fixed, arr,
                               keep=np.isin(kind, [code[types[j]] for j in pick])))
    return out[:1] + sorted(out[1:], key=lambda s: (s.lower_ms, len(s.types)))


def lower_bound_ms(sets: list[TypeSet]) -> float:
    """No plan's slowest rank is faster (on `score`'s scale): every type at once bounds any plan's load, plus the
    least fixed cost of the types any plan must use, a launch and the step's own cost."""
    return sets[0].lower_ms
