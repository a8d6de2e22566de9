"""How a re-plan places tables: keep those that can stay on their earlier ranks, place the others around them
(near their earlier shards where they had some), then move shards off the slowest rank within a byte budget
(the local search's move/swap, engine.localsearch.move_or_swap, with the budget as its hook)."""

from __future__ import annotations

import numpy as np

from engine.enumerate import Option
from engine.localsearch import FreeShards, Shift, move_or_swap
from engine.placement import FREE_PLACEMENT, Placement
from engine.replan.moves import OldTable, as_old, old_pieces, piece_bytes_moved
from engine.tiers import SsdRoom
from engine.types import Config, TablePlan
from engine.work import Work

MAX_CANDIDATES = 16  # options tried per table placed around the kept ones, cheapest first


def old_option(options: list[Option], o: OldTable, w: int) -> tuple[Option, np.ndarray] | None:
    """The option with the earlier plan's sharding type, kernel and column split, on its earlier ranks."""
    if max(o.ranks) >= w:
        return None
    for opt in options:
        if opt.sharding_type is not o.sharding_type or opt.kernel is not o.compute_kernel:
            continue
        if o.shards is None:
            if opt.num_shards == len(o.ranks):
                return opt, np.array(o.ranks, dtype=np.int64)
            continue
        if opt.num_shards != len(o.shards) or any(int(opt.sizes[j][1]) != o.shards[j][3]
                                                  for j in range(opt.num_shards)):
            continue
        return opt, np.array([s[4] for s in o.shards], dtype=np.int64)
    return None


def _peak_with(pl: Placement, opt: Option, ranks: np.ndarray) -> float:
    return float(pl.loads_with(opt, ranks).max())


def _affine_ranks(pl: Placement, opt: Option, old_pieces: np.ndarray,
                  claimed: np.ndarray | None = None) -> np.ndarray | None:
    """Ranks for a freely placed option that keep each shard where the earlier plan held most of its region (when
    it fits there and the rules allow it; the shards holding the most earlier elements choose first), the least
    loaded fitting rank otherwise (one not `claimed`, by tables still to go home, where one fits); None when a
    shard fits nowhere."""
    w, n = pl.topo.world_size, opt.num_shards
    allowed = pl.rules.allowed(pl, opt.table) if pl.rules is not None else None
    load, hbm, ddr = pl.load.copy(), pl.hbm.copy(), pl.ddr.copy()
    h, d, cost = opt.est.hbm_bytes, opt.est.ddr_bytes, opt.cost_ms
    ssd = SsdRoom(pl, opt)  # key_value's SSD (engine.tiers)
    held = np.zeros((n, w))  # elements of shard j that rank r held
    ranks = old_pieces[:, 0]
    inside = ranks < w
    for j in range(n):
        r0, c0 = int(opt.offsets[j][0]), int(opt.offsets[j][1])
        r1, c1 = r0 + int(opt.sizes[j][0]), c0 + int(opt.sizes[j][1])
        rows = np.clip(np.minimum(r1, old_pieces[:, 2]) - np.maximum(r0, old_pieces[:, 1]), 0, None)
        cols = np.clip(np.minimum(c1, old_pieces[:, 4]) - np.maximum(c0, old_pieces[:, 3]), 0, None)
        np.add.at(held[j], ranks[inside], (rows * cols)[inside].astype(np.float64))
    out = np.full(n, -1, dtype=np.int64)
    used = np.zeros(w, dtype=bool)

    def take(j: int, r: int) -> None:
        out[j] = r
        used[r] = True
        load[r] += cost[j]
        hbm[r] += h[j]
        ddr[r] += d[j]
        ssd.take(j, r)

    def fitting(j: int) -> np.ndarray:
        ok = (hbm + h[j] <= pl.hbm_caps) & (ddr + d[j] <= pl.ddr_caps)
        room = ssd.room(j, allowed)
        return ok & room if room is not None else ok

    for j in sorted(range(n), key=lambda j: (-held[j].max(), j)):  # first: shards that go home
        home = fitting(j) & (held[j] > 0)
        if home.any():
            pick = np.flatnonzero(home)
            take(j, int(pick[np.lexsort((load[pick], -held[j][pick]))[0]]))
    for j in np.flatnonzero(out < 0):  # then the rest, least loaded first
        ok = fitting(int(j))
        if not ok.any():
            return None
        free = ok & ~claimed if claimed is not None and (ok & ~claimed).any() else ok
        pick = np.flatnonzero(free & ~used if (free & ~used).any() else free)
        take(int(j), int(pick[np.argmin(load[pick])]))
    return out


def _repairable(pl: Placement, opt: Option, ranks: np.ndarray, target_peak: float) -> bool:
    """Whether the option on `ranks` leaves a plan that moves of other shards could bring to `target_peak`: the
    load it adds to each rank is within the target, and so is the average load of the ranks with it."""
    added = pl.loads_with(opt, ranks) - pl.load
    return float(added.max()) <= target_peak and float(pl.load.sum() + added.sum()) <= target_peak * len(pl.load)


def _claim(claims: np.ndarray, cfg: Config, old: dict[str, OldTable], t: int, by: int) -> None:
    o = old.get(cfg.tables[t].name)
    if o is not None:
        ranks = old_pieces(o, cfg.tables[t].num_embeddings, cfg.tables[t].embedding_dim)[:, 0]
        np.add.at(claims, np.unique(ranks[ranks < len(claims)]), by)


def place_rest(cfg: Config, old: dict[str, OldTable], pl: Placement, options: list[list[Option]],
                tables: list[int], work: Work, target_peak: float, home: frozenset[int] = frozenset(),
                budget: float = float("inf")) -> list[int]:
    """Place each table around what is there (heaviest first). Its candidates: its cheapest options on the ranks
    the search would pick, and, for a table the earlier plan had, its options of the earlier sharding type kept
    as near the earlier ranks as they fit. Of the candidates that keep the slowest rank within `target_peak` (or
    the lowest peak, when none does), the one that moves the fewest bytes, then the lowest peak. A table in `home`
    takes the candidate that moves the fewest bytes of those that could still meet `target_peak` once other
    shards make way (`_repairable`), then the one putting the fewest bytes on ranks that other `home` tables still
    to place held (so that they find room there), leaving the slowest rank to the moves that follow; under a byte
    `budget`, the fastest of those that keep the bytes placed so far within it (a kernel with its weights in host
    DDR on the same rank moves nothing between ranks). Returns the tables that found no room."""
    unplaced = []
    order = sorted(tables, key=lambda t: (-min(o.total_cost_ms for o in options[t]), t))
    claims = np.zeros(cfg.topology.world_size, dtype=np.int64)  # earlier pieces of `home` tables still to place
    for t in home & set(order):
        _claim(claims, cfg, old, t, 1)
    for t in order:
        if t in home:
            _claim(claims, cfg, old, t, -1)
        name = cfg.tables[t].name
        o = old.get(name)
        pieces = None if o is None else old_pieces(o, cfg.tables[t].num_embeddings, cfg.tables[t].embedding_dim)
        cheapest = sorted(options[t], key=lambda x: x.total_cost_ms)
        tried = cheapest[:MAX_CANDIDATES]
        if o is not None:
            tried += [x for x in cheapest[MAX_CANDIDATES:] if x.sharding_type is o.sharding_type][:MAX_CANDIDATES]
        found = []  # (peak, moved bytes, cost, option, ranks)
        for opt in tried:
            work.spend()
            choices = [pl.find_ranks(opt)]
            if pieces is not None and opt.sharding_type in FREE_PLACEMENT and not (
                    pl.rules is not None and t in pl.rules.fixed):
                choices.append(_affine_ranks(pl, opt, pieces, claims > 0 if t in home else None))
            for ranks in choices:
                if ranks is None or not pl.fits(opt, ranks):
                    continue
                moved = 0.0 if o is None else sum(piece_bytes_moved(cfg, old, opt, j, int(r))
                                                  for j, r in enumerate(ranks))
                found.append((_peak_with(pl, opt, ranks), moved, opt.total_cost_ms, opt, ranks))
        if not found:
            unplaced.append(t)
            continue
        limit = max(target_peak, min(f[0] for f in found))
        best = min(found, key=lambda f: (f[0] > limit * (1 + 1e-9), f[1], f[0], f[2]))
        if t in home and budget < float("inf"):
            best = min(found, key=lambda f: (f[1] > budget, f[0], f[1], f[2]))
        elif t in home:
            best = min(found, key=lambda f: (not _repairable(pl, f[3], f[4], target_peak), f[1],
                                             float(f[3].est.hbm_bytes[claims[f[4]] > 0].sum()), f[0], f[2]))
        budget -= best[1]
        pl.add(best[3], best[4])
    return unplaced


def improve_within(cfg: Config, pl: Placement, old: dict[str, OldTable], budget: float, work: Work,
                    stop_peak: float = 0.0) -> tuple[float, int]:
    """Moves and swaps of table-wise and column-wise shards off the slowest rank (the planner's local search,
    engine.localsearch.move_or_swap), each kept only while the bytes moved so far stay within `budget`, until the
    slowest rank is at or below `stop_peak`. Returns the bytes the moves add and how many were made."""
    if float(pl.load.max()) <= stop_peak:
        work.done()  # the safety stop's clock, read as the loop below would (its note says when it fired)
        return 0.0, 0
    fs = FreeShards(pl)
    spent, steps = 0.0, 0

    def moved(step: tuple[Shift, ...]) -> float:
        """Bytes a step adds to what the re-plan moves (less where a shard goes back to where it was)."""
        total = 0.0
        for i, src, dst in step:
            opt, j = pl.choice[int(fs.t[i])], int(fs.j[i])
            total += piece_bytes_moved(cfg, old, opt, j, dst) - piece_bytes_moved(cfg, old, opt, j, src)
        return total

    while len(fs.t) and not work.done():
        if float(pl.load.max()) <= stop_peak:
            break
        step = move_or_swap(pl, fs, work, allow=lambda s: spent + moved(s) <= budget, margin=1e-12)
        if not step:
            break
        spent += moved(step)
        steps += 1
    return spent, steps


def keep(cfg: Config, old: dict[str, OldTable], options: list[list[Option]], pl: Placement,
          skip: frozenset[int] = frozenset()) -> tuple[list[int], list[int]]:
    """Put every table that can stay on its earlier ranks there, in config order, except the tables in `skip`.
    (Making room for a grown table by sending smaller ones away was tried: on the bench cases it moved more bytes
    in the end, 42-49% of a plan from scratch; re-placing the grown table itself near its old shards is the second
    attempt of `replan`.) Returns (kept tables, tables to place)."""
    w = cfg.topology.world_size
    kept, rest = [], []
    for i, t in enumerate(cfg.tables):
        o = old.get(t.name) if i not in skip else None
        found = old_option(options[i], o, w) if o is not None else None
        allowed = pl.rules.allowed(pl, i) if pl.rules is not None and found is not None else None
        if allowed is not None and not allowed[found[1]].all():
            found = None  # its placement rules (new, or its partners') no longer allow its earlier ranks
        if found is not None and pl.fits(*found):
            pl.add(*found)
            kept.append(i)
        else:
            rest.append(i)
    return kept, rest


def search_peak(cfg: Config, options: list[list[Option]], tables: dict[str, TablePlan]) -> float:
    """The slowest rank of a plan in the search's own load figures (0.0 when an option cannot be matched)."""
    load = np.zeros(cfg.topology.world_size)
    for i, t in enumerate(cfg.tables):
        found = old_option(options[i], as_old(tables[t.name]), cfg.topology.world_size)
        if found is None:
            return 0.0
        np.add.at(load, found[1], found[0].cost_ms)
    return float(load.max())


def fits(cfg: Config, options: list[list[Option]], tables: dict[str, TablePlan]) -> bool:
    """Whether a plan's options, matched on their ranks, fit every rank's memory (False: one cannot be matched)."""
    pl = Placement(cfg.topology)
    for i, t in enumerate(cfg.tables):
        found = old_option(options[i], as_old(tables[t.name]), cfg.topology.world_size)
        if found is None or not pl.fits(*found):
            return False
        pl.add(*found)
    return True


def changed_tables(cfg: Config, old: dict[str, OldTable]) -> frozenset[int]:
    """Tables whose rows or columns differ from the earlier plan's shards (grown, shrunk or widened)."""
    out = set()
    for i, t in enumerate(cfg.tables):
        o = old.get(t.name)
        if o is not None and o.shards is not None and (max(r0 + nr for r0, _, nr, _, _ in o.shards),
                                                        max(c0 + nc for _, c0, _, nc, _ in o.shards)) != (
                                                           t.num_embeddings, t.embedding_dim):
            out.add(i)
    return frozenset(out)


def cheapest_ddr_piece_ms(cfg: Config, options: list[list[Option]]) -> dict[str, float]:
    """Per table, the lowest cost of the costliest piece among its options whose weights live in host DDR
    (fused_uvm, fused_uvm_caching; inf when it has none): a plan whose slowest rank is below it has no such piece of
    the table (a rank's load is at least its pieces' costs)."""
    return {t.name: min((float(o.max_shard_cost_ms) for o in options[i] if o.kernel.weights_in_ddr),
                        default=float("inf")) for i, t in enumerate(cfg.tables)}


def pull_home(cfg: Config, old: dict[str, OldTable], options: list[list[Option]], tables: dict[str, TablePlan],
              pl: Placement, work: Work, target_peak: float) -> list[int] | None:
    """Start from a plan (the plan from scratch) and bring tables back towards the earlier plan: the tables that
    plan moves most bytes of first, each given the fewest-bytes of its earlier option on its earlier ranks and its
    present option with its shards sent where their regions were (`_affine_ranks`), where it fits and keeps the
    slowest rank within `target_peak` (or at most where it was), on the empty placement `pl`. Returns the tables
    brought back; None when an option of `tables` cannot be matched."""
    w = cfg.topology.world_size
    for i, t in enumerate(cfg.tables):
        found = old_option(options[i], as_old(tables[t.name]), w)
        if found is None:
            return None
        pl.add(*found)
    moved = [piece_moved(cfg, old, pl.choice[i], pl.ranks[i]) for i in range(len(cfg.tables))]
    back = []
    for i in sorted(range(len(cfg.tables)), key=lambda i: (-moved[i], i)):
        if moved[i] <= 0 or work.done():
            continue
        work.spend()
        o = old.get(cfg.tables[i].name)
        limit = max(target_peak, float(pl.load.max()))
        opt, ranks = pl.remove(i)
        pieces = old_pieces(o, cfg.tables[i].num_embeddings, cfg.tables[i].embedding_dim)
        tried = [old_option(options[i], o, w)]
        if opt.sharding_type in FREE_PLACEMENT and not (pl.rules is not None and i in pl.rules.fixed):
            tried.append((opt, _affine_ranks(pl, opt, pieces)))
        best = (moved[i], opt, ranks)
        for cand in tried:
            if cand is None or cand[1] is None or not pl.fits(*cand) or _peak_with(pl, *cand) > limit * (1 + 1e-9):
                continue
            if pl.rules is not None and not pl.rules.allowed(pl, i)[cand[1]].all():
                continue
            b = piece_moved(cfg, old, *cand)
            if b < best[0]:
                best = (b, *cand)
        pl.add(best[1], best[2])
        if best[0] < moved[i]:
            back.append(i)
            moved[i] = best[0]
    if pl.rules is None:
        back += [t for t in _swap_home(cfg, old, pl, moved, work, target_peak) if t not in back]
    return back


def _swap_home(cfg: Config, old: dict[str, OldTable], pl: Placement, moved: list[float], work: Work,
               target_peak: float) -> list[int]:
    """After pull_home: a one-shard table still away from the rank that held it goes home in exchange for a
    one-shard table there, where the two move fewer bytes together, both fit and the slowest rank stays within
    `target_peak` (or where it was). Returns the tables moved. Placement rules are left to the caller (none here)."""
    def one(t: int) -> bool:
        return pl.choice[t].num_shards == 1 and pl.choice[t].sharding_type in FREE_PLACEMENT

    def at(t: int, r: int) -> float:
        return piece_moved(cfg, old, pl.choice[t], np.array([r]))

    swapped: list[int] = []
    for t in sorted((t for t in pl.choice if moved[t] > 0 and one(t)), key=lambda t: (-moved[t], t)):
        if work.done():
            break
        work.spend()
        o = old[cfg.tables[t].name]
        held = sorted({int(r) for r in old_pieces(o, cfg.tables[t].num_embeddings, cfg.tables[t].embedding_dim)[:, 0]
                       if r < pl.topo.world_size})
        a = int(pl.ranks[t][0])
        b = min(held, key=lambda r: (at(t, r), r), default=a)
        if b == a or at(t, b) >= moved[t]:
            continue
        limit = max(target_peak, float(pl.load.max())) * (1 + 1e-9)
        best: tuple[float, int] | None = None
        for u in sorted(u for u in pl.choice if u != t and one(u) and int(pl.ranks[u][0]) == b):
            gain = moved[t] + at(u, b) - at(t, b) - at(u, a)
            if gain <= 0 or (best is not None and gain <= best[0]):
                continue
            ot, ou = pl.remove(t)[0], pl.remove(u)[0]
            ok = pl.fits(ot, np.array([b]))
            if ok:
                pl.add(ot, np.array([b]))
                ok = pl.fits(ou, np.array([a])) and float(pl.loads_with(ou, np.array([a])).max()) <= limit
                pl.remove(t)
            pl.add(ot, np.array([a]))
            pl.add(ou, np.array([b]))
            if ok:
                best = (gain, u)
        if best is not None:
            u = best[1]
            ot, ou = pl.remove(t)[0], pl.remove(u)[0]
            pl.add(ot, np.array([b]))
            pl.add(ou, np.array([a]))
            moved[t], moved[u] = at(t, b), at(u, a)
            swapped += [t, u]
    return swapped


def piece_moved(cfg: Config, old: dict[str, OldTable], opt: Option, ranks: np.ndarray) -> float:
    """Bytes the option on `ranks` takes from other ranks of the earlier plan."""
    return sum(piece_bytes_moved(cfg, old, opt, j, int(r)) for j, r in enumerate(ranks))
