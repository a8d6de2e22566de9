"""Placing a co-located group whole: every member must hold exactly the ranks the first one placed took, so the
first one's option decides for them all; where the others cannot follow, the group is taken off and its leader
tries its next option."""

from __future__ import annotations

from engine.enumerate import Option
from engine.partition import Placement, Work


def place_group(pl: Placement, options: list[list[Option]], chosen: list[Option], members: list[int],
                work: Work | None = None) -> dict[int, Option] | None:
    """Place the tables of one co-located group, the one with the fewest options leading: its chosen option
    first, then the others from the cheapest; each other member takes its chosen option, else the cheapest that
    holds exactly the leader's ranks. Returns the option each member took; None where no option of the leader
    lets the whole group fit (the placement is then as before). Tries beyond one per member count as work."""
    lead, *rest = sorted(members, key=lambda t: (len(options[t]), t))
    tries = 0
    for first in _in_order(options[lead], chosen[lead]):
        tries += 1
        ranks = pl.find_ranks(first)
        if ranks is None:
            continue
        pl.add(first, ranks)
        used = {lead: first}
        for t in rest:
            for opt in _in_order(options[t], chosen[t]):
                tries += 1
                ranks = pl.find_ranks(opt)
                if ranks is not None:
                    pl.add(opt, ranks)
                    used[t] = opt
                    break
            else:
                break
        else:
            _spend(work, tries - len(members))
            return used
        for t in used:
            pl.remove(t)
    _spend(work, tries - len(members))
    return None


def _in_order(options: list[Option], chosen: Option) -> list[Option]:
    return [chosen, *(o for o in sorted(options, key=lambda o: o.total_cost_ms) if o is not chosen)]


def _spend(work: Work | None, evaluations: int) -> None:
    if work is not None and evaluations > 0:
        work.spend(evaluations)


def place_past_apart(pl: Placement, options: list[list[Option]], chosen: list[Option], table: int,
                     work: Work | None = None) -> Option | None:
    """Place `table` where a table kept apart from it blocks every rank (one on every rank, say): take that one
    off, place `table`, and put it back in whichever of its options still fits, or undo. Returns the option
    `table` took; None where no partner moved makes room."""
    for other in pl.rules.apart.get(table, ()) if pl.rules is not None else ():
        if other not in pl.choice:
            continue
        was, was_ranks = pl.remove(other)
        for opt in _in_order(options[table], chosen[table]):
            _spend(work, 1)
            ranks = pl.find_ranks(opt)
            if ranks is None:
                continue
            pl.add(opt, ranks)
            for back in _in_order(options[other], was):
                _spend(work, 1)
                back_ranks = pl.find_ranks(back)
                if back_ranks is not None:
                    pl.add(back, back_ranks)
                    return opt
            pl.remove(table)
        pl.add(was, was_ranks)
    return None
