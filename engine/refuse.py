"""Refusing tables that cannot fit together, in one pass over them: every option holds each row and its optimizer
state at least once, so tables whose weights and state exceed all ranks' memory together never fit, whatever
their number. Used by the planner before any option is priced, and by the command line's reader of a config
as soon as its tables are read (a 100,000-table config that cannot fit is refused before its constraints are)."""

from __future__ import annotations

import math
from typing import Sequence

from engine.errors import PlanningError, human_bytes
from engine.types import TableConfig, Topology


def too_big(tables: Sequence[TableConfig], topo: Topology, need: float, counted: str) -> PlanningError:
    w = topo.world_size
    total_h, total_d = topo.usable_hbm_bytes * w, topo.usable_ddr_bytes * w
    biggest = sorted(range(len(tables)), key=lambda i: -tables[i].weight_bytes)[:3]
    names = tuple(tables[i].name for i in biggest)
    return PlanningError(
        f"The tables do not fit: together they need at least {human_bytes(need)} ({counted}), but the {w} ranks "
        f"have {human_bytes(total_h)} HBM + {human_bytes(total_d)} DDR usable; the largest tables are "
        f"{', '.join(names)}.", tables=names,
        fixes=("raise topology.hbm_cap / topology.ddr_cap", "add ranks (topology.world_size)"))


def refuse_too_big(tables: Sequence[TableConfig], topo: Topology) -> None:
    """PlanningError when the tables' weights and optimizer state exceed every rank's memory together."""
    multiplier = {d: topo.optimizer.state_multiplier(d) for d in {t.embedding_dim for t in tables}}
    need = sum(w + math.ceil(w * multiplier[t.embedding_dim]) for t in tables for w in (t.weight_bytes,))
    if need > (topo.usable_hbm_bytes + topo.usable_ddr_bytes) * topo.world_size:
        raise too_big(tables, topo, need, "their weights and optimizer state alone")
