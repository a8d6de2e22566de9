"""The config's placement rules by table (pins to ranks or hosts, co-located groups, tables kept apart), as the
placement (engine.placement) asks them while shards are placed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.rules import allowed_ranks
from engine.types import Config

if TYPE_CHECKING:
    from engine.placement import Placement


@dataclass(frozen=True)
class PlacementRules:
    """The config's placement rules by table index: the ranks a pin allows, the co-located groups (symmetric and
    transitive: every member holds exactly the same ranks), the tables kept apart (symmetric). Tables with a rule
    are `fixed`: placed by the greedy pass within their rules and left where they are by the local search."""

    mask: dict[int, np.ndarray]  # table -> allowed ranks (bool per rank; a group's members share one array)
    group: dict[int, int]  # table -> its co-located group (the group's smallest table index)
    members: dict[int, tuple[int, ...]]  # group -> its tables, ascending
    apart: dict[int, tuple[int, ...]]
    fixed: frozenset[int]

    @staticmethod
    def of(cfg: Config) -> PlacementRules | None:
        if not any(c.places for c in cfg.constraints.values()):
            return None
        index = {t.name: i for i, t in enumerate(cfg.tables)}
        w = cfg.topology.world_size
        mask, parent, apart = {}, {}, {}
        for name, c in cfg.constraints.items():
            if not c.places:
                continue
            i = index[name]
            ranks = allowed_ranks(c, cfg.topology)
            if ranks is not None:
                m = np.zeros(w, dtype=bool)
                m[sorted(ranks)] = True
                mask[i] = m
            for other in c.colocate or ():
                a, b = _root(parent, i), _root(parent, index[other])
                parent[max(a, b)] = parent[a] = parent[b] = min(a, b)
            for other in c.apart or ():
                j = index[other]
                apart.setdefault(i, set()).add(j)
                apart.setdefault(j, set()).add(i)
        group = {t: _root(parent, t) for t in sorted(parent)}
        members: dict[int, list[int]] = {}
        for t, g in group.items():
            members.setdefault(g, []).append(t)
        for g, ts in members.items():  # a group's pins bind every member
            pins = [mask[t] for t in ts if t in mask]
            if pins:
                both = np.logical_and.reduce(pins)
                mask.update((t, both) for t in ts)
        fixed = frozenset(mask) | frozenset(group) | frozenset(apart)
        return PlacementRules(mask, group, {g: tuple(ts) for g, ts in members.items()},
                              {i: tuple(sorted(v)) for i, v in apart.items()}, fixed)

    def allowed(self, pl: Placement, table: int) -> np.ndarray | None:
        """The ranks `table` may use now: its pins, within the ranks its placed co-located tables hold, none of
        the ranks of its placed apart tables. None: any rank."""
        if table not in self.fixed:
            return None
        out = self.mask.get(table)
        out = np.ones(pl.topo.world_size, dtype=bool) if out is None else out.copy()
        need = pl.group_ranks(table)
        if need is not None:
            out &= need
        for k in self.apart.get(table, ()):
            if k in pl.ranks:
                out[pl.ranks[k]] = False
        return out


def _root(parent: dict[int, int], x: int) -> int:
    """x's co-located group in the union-find `parent`, shortening the path it walked (near-constant time)."""
    root = x
    while parent.get(root, root) != root:
        root = parent[root]
    while x != root:
        parent[x], x = root, parent[x]
    return root
