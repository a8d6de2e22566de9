"""Refusing tables that cannot fit together, in one pass over them: every option holds each row and its optimizer
state at least once, so tables whose weights and state exceed all ranks' memory together never fit, whatever
their number. Used by the planner before any option is priced, and by the command line's reader of a config
as soon as its tables are read (a 100,000-table config that cannot fit is refused before its constraints are); and
the planner's refusal of a table that finds no rank with room (no_room), naming on a mixed fleet the rank short."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.capacity import total_usable
from engine.fleet import per_rank
from engine.errors import PlanningError, human_bytes
from engine.tiers import ssd_fixes, ssd_short
from engine.types import ComputeKernel, Config, ShardingType, TableConfig, Topology

if TYPE_CHECKING:
    from engine.enumerate import Option
    from engine.placement import Placement


def too_big(tables: Sequence[TableConfig], topo: Topology, need: float, counted: str) -> PlanningError:
    w = topo.world_size
    total_h, total_d = total_usable(topo)
    biggest = sorted(range(len(tables)), key=lambda i: -tables[i].weight_bytes)[:3]
    names = tuple(tables[i].name for i in biggest)
    return PlanningError(
        f"The tables do not fit: together they need at least {human_bytes(need)} ({counted}), but the {w} ranks "
        f"have {human_bytes(total_h)} HBM + {human_bytes(total_d)} DDR usable; the largest tables are "
        f"{', '.join(names)}.", tables=names,
        fixes=("raise topology.hbm_cap / topology.ddr_cap" if topo.custom_topology_data is None else
               "raise the ranks' capacities in topology.custom_topology_data", "add ranks (topology.world_size)"))


def refuse_too_big(tables: Sequence[TableConfig], topo: Topology, offloaded: frozenset[str] = frozenset()) -> None:
    """PlanningError when the tables' weights and optimizer state exceed every rank's memory together. `offloaded`:
    tables that may keep them on SSD or in a virtual table instead (engine.tiers.offloadable), not counted."""
    multiplier = {d: topo.optimizer.state_multiplier(d) for d in {t.embedding_dim for t in tables}}
    need = sum(w + math.ceil(w * multiplier[t.embedding_dim]) for t in tables for w in (t.weight_bytes,)
               if t.name not in offloaded)
    if need > sum(total_usable(topo)):
        raise too_big(tables, topo, need, "their weights and optimizer state alone")


# ---- a table that finds no rank with room (engine.planner's greedy placement) --------------------------------


def _footprint(o: Option, pl: Placement) -> float:
    """How full one rank gets from the option's largest piece, as a share of the usable memory."""
    h = o.piece_hbm_bytes / pl.hbm_cap if pl.hbm_cap else (np.inf if o.piece_hbm_bytes else 0.0)
    d = o.piece_ddr_bytes / pl.ddr_cap if pl.ddr_cap else (np.inf if o.piece_ddr_bytes else 0.0)
    return max(h, d)


def no_room(cfg: Config, options: list[list[Option]], t: int, pl: Placement) -> PlanningError:
    opts = options[t]
    name = cfg.tables[t].name
    ssd = ssd_short(pl, opts)  # key_value's SSD (engine.tiers): where every option is key_value, what stops it
    if ssd is not None and all(o.kernel is ComputeKernel.KEY_VALUE for o in opts):
        rw = any(o.sharding_type is ShardingType.ROW_WISE for o in opts)
        return PlanningError(f"Table {name!r} does not fit: {ssd}.", tables=(name,),
                             fixes=ssd_fixes(cfg.topology, name, rw))
    total_h, total_d = pl.hbm_total, pl.ddr_total
    fixes = []
    kinds = {o.sharding_type for o in opts}
    if ShardingType.ROW_WISE not in kinds:
        fixes.append(f"allow row_wise for {name!r} (constraints.{name}.sharding_types) to spread its rows")
    if cfg.topology.compute_device.value == "cuda" and ComputeKernel.FUSED_UVM_CACHING not in {o.kernel for o in opts}:
        fixes.append(f"allow fused_uvm_caching for {name!r} to keep its weights in DDR")
    fixes += ["raise topology.hbm_cap / topology.ddr_cap", "add ranks (topology.world_size)"]
    need = sum(min(o.total_hbm_bytes + o.total_ddr_bytes for o in opt) for opt in options)
    if need > total_h + total_d:
        return too_big(cfg.tables, cfg.topology, need, "each in its least memory-hungry option")
    crowded = ""
    if need > 0.9 * (total_h + total_d):
        crowded = (f" All tables together need {human_bytes(need)}, {need / (total_h + total_d):.0%} of the memory of "
                   f"all ranks: too full to pack.")
    smallest = min(opts, key=lambda o: _footprint(o, pl))
    need_h, need_d = int(smallest.piece_hbm_bytes), int(smallest.piece_ddr_bytes)
    emptiest = int(np.argmin(pl.fill()))
    free_h = int(max(pl.hbm_caps[emptiest] - pl.hbm[emptiest], 0))
    free_d = int(max(pl.ddr_caps[emptiest] - pl.ddr[emptiest], 0))
    usable = f"usable per rank: {human_bytes(pl.hbm_cap)} HBM, {human_bytes(pl.ddr_cap)} DDR"
    if per_rank(pl.topo):
        usable, rank = _short_ranks(pl, smallest)
        if rank is not None:
            fixes[fixes.index("raise topology.hbm_cap / topology.ddr_cap")] = \
                f"raise rank {rank}'s capacity in topology.custom_topology_data, or pin the table to larger ranks"
    return PlanningError(
        f"Table {name!r} does not fit: its smallest option ({smallest.label}) needs {human_bytes(need_h)} HBM "
        f"+ {human_bytes(need_d)} DDR on one rank, but after placing the other tables the emptiest rank has "
        f"{human_bytes(free_h)} HBM and {human_bytes(free_d)} DDR free ({usable}).{crowded}"
        f"{'' if ssd is None else ' On SSD, ' + ssd + '.'}",
        tables=(name,), fixes=tuple(fixes),
    )


def _short_ranks(pl: Placement, o: Option) -> tuple[str, int | None]:
    """On a mixed fleet: the smallest rank that has no room for one of the option's pieces, with its own usable
    capacity, and how many such ranks there are, in words; and that rank (None where every rank has room)."""
    h, d = o.est.hbm_bytes, o.est.ddr_bytes
    if o.sharding_type in (ShardingType.DATA_PARALLEL, ShardingType.ROW_WISE):  # piece j on rank j
        short = (pl.hbm + h > pl.hbm_caps) | (pl.ddr + d > pl.ddr_caps)
    else:
        short = (pl.hbm + h.min() > pl.hbm_caps) | (pl.ddr + d.min() > pl.ddr_caps)
    ranks = np.flatnonzero(short)
    if not len(ranks):
        return f"usable on the largest rank: {human_bytes(pl.hbm_cap)} HBM, {human_bytes(pl.ddr_cap)} DDR", None
    r = int(ranks[np.argmin(pl.hbm_caps[ranks] + pl.ddr_caps[ranks])])
    return (f"{len(ranks)} of {len(short)} ranks have no room for it; rank {r}'s own capacity is "
            f"{human_bytes(int(pl.hbm_caps[r]))} HBM, {human_bytes(int(pl.ddr_caps[r]))} DDR usable "
            "(topology.custom_topology_data)"), r
