"""Numbers the pages show about plans, computed here so pages stay thin: imbalance, what made the slowest rank slow
(from the table-by-rank matrix, dashboard.plans.table_matrix), per-table rows, plan differences and run metrics.
All inputs are the engine's typed objects (engine.Plan, engine.Config, engine.TablePlan), never mutated here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

import engine
from dashboard.plans.table_matrix import TableRankMatrix
from dashboard.text import ms_text

COMPONENTS = ("fwd_compute_ms", "fwd_comms_ms", "bwd_compute_ms", "bwd_comms_ms", "input_dist_comms_ms",
              "prefetch_compute_ms")
COMPONENT_LABELS = {"fwd_compute_ms": "forward compute", "fwd_comms_ms": "forward comms",
                    "bwd_compute_ms": "backward compute", "bwd_comms_ms": "backward comms",
                    "input_dist_comms_ms": "input distribution", "prefetch_compute_ms": "cache prefetch",
                    "workset_ms": "working set beyond the caches", "fixed_step_ms": "fixed step",
                    "pieces_ms": "table pieces"}
# Named parts of a rank's compute (engine.RankStats), each its own bar in the cost stack: the touched working set's
# cost beyond the caches (CPU), the device profile's fixed step and its cost per table piece the rank holds
COMPUTE_PARTS = ("workset_ms", "fixed_step_ms", "pieces_ms")
STACK = ("fwd_compute_ms", "bwd_compute_ms", *COMPUTE_PARTS, "fwd_comms_ms", "bwd_comms_ms", "input_dist_comms_ms",
         "prefetch_compute_ms")


@dataclass(frozen=True)
class Imbalance:
    max_ms: float
    mean_ms: float
    min_ms: float
    lower_bound_ms: Optional[float]
    bottleneck_rank: int

    @property
    def ratio(self) -> float:
        """Slowest rank over the average rank (1.0 = perfectly balanced)."""
        return self.max_ms / self.mean_ms if self.mean_ms > 0 else 1.0

    @property
    def vs_lower_bound(self) -> Optional[float]:
        """Slowest rank over the lower bound (1.0 = provably optimal)."""
        return self.max_ms / self.lower_bound_ms if self.lower_bound_ms else None


def imbalance(plan: engine.Plan) -> Imbalance:
    costs = [float(r.cost_ms) for r in plan.ranks] or [0.0]
    worst = int(np.argmax(costs))
    return Imbalance(max(costs), float(np.mean(costs)), min(costs), plan.lower_bound_ms,
                     int(plan.ranks[worst].rank) if plan.ranks else 0)


def components(rank: engine.RankStats) -> dict[str, float]:
    """A rank's cost by component (COMPONENTS: fwd_compute_ms, ...)."""
    return rank.perf.as_dict()


def stack_components(rank: engine.RankStats) -> dict[str, float]:
    """A rank's cost for the cost stack (STACK): the compute's named parts (COMPUTE_PARTS) taken out of forward and
    backward compute as the estimate splits them (1 : 2) and shown as their own; the parts sum to the rank's cost."""
    comp = components(rank)
    named = {k: max(float(getattr(rank, k)), 0.0) for k in COMPUTE_PARTS}
    out = max(min(sum(named.values()), comp["fwd_compute_ms"] + comp["bwd_compute_ms"]), 0.0)
    comp["fwd_compute_ms"] = max(comp["fwd_compute_ms"] - out / 3.0, 0.0)
    comp["bwd_compute_ms"] = max(comp["bwd_compute_ms"] - out * 2.0 / 3.0, 0.0)
    return {**comp, **named}


def rank_frame(plan: engine.Plan) -> pd.DataFrame:
    cols = ["rank", "hbm_bytes", "hbm_cap_bytes", "ddr_bytes", "ddr_cap_bytes", "cost_ms", *COMPONENTS, "num_shards"]
    return pd.DataFrame([{"rank": r.rank, "hbm_bytes": r.hbm_bytes, "hbm_cap_bytes": r.hbm_cap_bytes,
                          "ddr_bytes": r.ddr_bytes, "ddr_cap_bytes": r.ddr_cap_bytes, "cost_ms": r.cost_ms,
                          **components(r), "num_shards": r.num_shards} for r in plan.ranks], columns=cols)


@dataclass(frozen=True)
class Headroom:
    """The rank with the least free memory of one kind: free (negative when over) and usable bytes."""

    rank: int
    free_bytes: int
    cap_bytes: int


# A rank's memory fields (engine.MemoryParts) that are totals or outside the step's peak, not parts of it
NOT_PARTS = ("total", "held_bytes", "peak_bytes", "peak_hbm_bytes", "peak_ddr_bytes", "reserved_bytes",
             "ddr_weights_bytes")


def cap_bytes(rank: engine.RankStats, kind: str) -> int:
    """A rank's usable `kind` ("hbm" or "ddr") memory."""
    return rank.hbm_cap_bytes if kind == "hbm" else rank.ddr_cap_bytes


def peak_bytes(rank: engine.RankStats, kind: str) -> int:
    """A rank's estimated peak in `kind` memory: the step's peak (engine.memory) where the plan has it, else the
    stored bytes (hbm_bytes / ddr_bytes, TorchRec's storage estimate)."""
    if rank.memory is not None:
        return int(rank.memory.peak_hbm_bytes if kind == "hbm" else rank.memory.peak_ddr_bytes)
    return int(rank.hbm_bytes if kind == "hbm" else rank.ddr_bytes)


def headroom(plan: engine.Plan, kind: str = "hbm") -> Optional[Headroom]:
    """The tightest rank's headroom in `kind` ("hbm" or "ddr") memory; None when no rank has that memory."""
    ranks = [r for r in plan.ranks if cap_bytes(r, kind)]
    if not ranks:
        return None
    tight = min(ranks, key=lambda r: cap_bytes(r, kind) - peak_bytes(r, kind))
    cap = int(cap_bytes(tight, kind))
    return Headroom(int(tight.rank), cap - peak_bytes(tight, kind), cap)


@dataclass(frozen=True)
class SsdUse:
    """Each rank's SSD bytes under a plan (key_value's backing store) and its SSD capacity, in rank order."""

    used: tuple[int, ...]
    cap: tuple[int, ...]


def ssd_use(plan: engine.Plan, config: engine.Config) -> Optional[SsdUse]:
    """The plan's SSD by rank (engine.ssd_by_rank); None where no rank holds SSD bytes (no key_value table)."""
    used = engine.ssd_by_rank(config, plan.tables)
    if not used.any():
        return None
    return SsdUse(tuple(int(x) for x in used),
                  tuple(engine.ssd_cap_of(config.topology, r.rank) for r in plan.ranks))


def device_memory(plan: engine.Plan) -> str:
    """The memory a plan's device trains from: "hbm" when its ranks have any, else "ddr" (CPU plans)."""
    return "hbm" if any(r.hbm_cap_bytes for r in plan.ranks) else "ddr"


def memory_parts(plan: engine.Plan, kind: str = "all") -> Optional[dict[str, list[float]]]:
    """{part: bytes per rank} of the step's peak-memory estimate (weights, optimizer, cache, grad, input,
    output, output grad, a2a), when the plan's ranks carry them (engine.memory's MemoryParts); None for plans
    without them. Parts that are zero on every rank are left out. `kind`: "all" (they add up to the peak), "hbm"
    (what a GPU rank holds in its own memory: the weights and optimizer state that UVM kernels keep in host memory
    taken out; they add up to the HBM peak) or "ddr" (a GPU rank's host memory: those weights and that state; a CPU
    rank's is all of it)."""
    parts: dict[str, list[float]] = {}
    ranks = plan.ranks
    for i, r in enumerate(ranks):
        m = r.memory
        if m is None:
            return None
        values = {str(name).removesuffix("_bytes").replace("_", " "): float(v)
                  for name, v in m.as_dict().items() if name not in NOT_PARTS}
        if r.hbm_cap_bytes or kind == "hbm":  # a GPU rank: part of its weights and state may be in host memory
            ddr_weights = m.ddr_weights_bytes
            ddr_state = max(m.peak_ddr_bytes - ddr_weights, 0)
            if ddr_state > m.optimizer_bytes:  # a plan file from before the split was written: the rest is weights
                ddr_weights, ddr_state = ddr_weights + ddr_state - m.optimizer_bytes, m.optimizer_bytes
            in_ddr = {"weights": float(ddr_weights), "optimizer": float(ddr_state)}
            if kind == "hbm":
                values = {k: v - in_ddr.get(k, 0.0) for k, v in values.items()}
            elif kind == "ddr":
                values = {k: in_ddr.get(k, 0.0) for k in values}
        for label, value in values.items():
            parts.setdefault(label, [0.0] * len(ranks))[i] = value
    return {k: v for k, v in parts.items() if any(v)} or None


# ---- per table ----------------------------------------------------------------------------------


def _shards_text(tp: engine.TablePlan) -> str:
    if tp.shards is None:
        return "full copy on every rank"
    sizes = [tuple(s.sizes) for s in tp.shards if s.sizes[0] * s.sizes[1]]
    if len(set(sizes)) == 1:
        return f"{len(sizes)} x [{sizes[0][0]}, {sizes[0][1]}]"
    return ", ".join(f"[{r}, {c}]" for r, c in sizes)


def _cache_cell(config: engine.Config, name: str, tp: engine.TablePlan) -> str:
    """A UVM cache's load factor and where it comes from, short enough for a column ('0.2 (default)'); why it is that
    size is the table's cache note (cache_notes)."""
    if not tp.cache_note:
        return ""
    if tp.cache_load_factor is not None:
        return f"{tp.cache_load_factor:.4g} (from the curve)"
    typed = config.constraint(name).cache_load_factor
    clf = engine.FIELDS["cache_load_factor"].default if typed is None else typed
    return f"{clf:.4g} ({'default' if typed is None else 'typed'})"


def table_frame(plan: engine.Plan, config: engine.Config) -> pd.DataFrame:
    """One row per table: its shape, sharding type, kernel, ranks and shard sizes, and for a UVM cache its load factor
    and where it comes from (the why, engine.clf's note, is cache_notes': a sentence does not fit a column)."""
    tables = {t.name: t for t in config.tables}
    rows = []
    for name, tp in plan.tables.items():
        t = tables.get(name)
        rows.append({"table": name, "rows": t.num_embeddings if t else None, "dim": t.embedding_dim if t else None,
                     "sharding": tp.sharding_type.value, "kernel": tp.compute_kernel.value,
                     "ranks": engine.ranks_list_text(tp.ranks), "shards": _shards_text(tp),
                     "cache": _cache_cell(config, name, tp)})
    return pd.DataFrame(rows, columns=["table", "rows", "dim", "sharding", "kernel", "ranks", "shards", "cache"])


def cache_notes(plan: engine.Plan) -> list[tuple[str, list[str]]]:
    """Why each UVM cache is the size it is (engine.clf's notes), each note once with the tables it is about, in the
    plan's order: 1,000 tables on the default load factor share one note."""
    by_note: dict[str, list[str]] = {}
    for name, tp in plan.tables.items():
        if tp.cache_note:
            by_note.setdefault(tp.cache_note, []).append(name)
    return list(by_note.items())


# ---- why the slowest rank is slow ---------------------------------------------------------------


def bottleneck(plan: engine.Plan, m: Optional[TableRankMatrix] = None, top: int = 3,
               pressure: bool = False) -> list[str]:
    """Sentences on the slowest rank: how far above average, which cost component, which tables. pressure: the
    plan's topology prices what tables measured alone cost each other (engine.prices_pressure)."""
    if not plan.ranks:
        return []
    imb = imbalance(plan)
    worst = next(r for r in plan.ranks if r.rank == imb.bottleneck_rank)
    parts_ms = stack_components(worst)
    out = []
    if len(plan.ranks) > 1:
        above = (imb.max_ms / imb.mean_ms - 1) * 100 if imb.mean_ms else 0.0
        if above < 0.1:
            out.append(f"Rank {imb.bottleneck_rank} is the slowest at {ms_text(imb.max_ms)} per step, but barely: the "
                       f"ranks are balanced (within 0.1% of the average, {ms_text(imb.mean_ms)}).")
        else:
            out.append(f"Rank {imb.bottleneck_rank} is the slowest at {ms_text(imb.max_ms)} per step, "
                       f"{above:.1f}% above the average rank ({ms_text(imb.mean_ms)}).")
    else:
        out.append(f"The only rank takes {ms_text(imb.max_ms)} per step.")
    comp = max(STACK, key=lambda c: parts_ms.get(c, 0.0))
    if imb.max_ms > 0:
        share = parts_ms.get(comp, 0.0) / imb.max_ms * 100
        out.append(f"Most of its time is {COMPONENT_LABELS[comp]}: {ms_text(parts_ms.get(comp, 0.0))} ({share:.0f}%).")
    if worst.workset_ms > 0 and imb.max_ms > 0 and pressure:
        share = worst.workset_ms / imb.max_ms * 100
        out.append(f"Its tables touch {worst.workset_rows:,.0f} rows in a step "
                   f"({engine.human_bytes(int(worst.workset_bytes))} with their optimizer state) and evict each "
                   f"other's: {ms_text(worst.workset_ms)} ({share:.0f}%) of its time, inside its compute, is what they "
                   "cost each other beyond their times alone (the pressure the probe ranks measured, CPU).")
    elif worst.workset_ms > 0 and imb.max_ms > 0:
        share = worst.workset_ms / imb.max_ms * 100
        out.append(f"Its step touches {worst.workset_rows:,.0f} rows ({engine.human_bytes(int(worst.workset_bytes))} "
                   f"with their optimizer state), more than the cache holds: {ms_text(worst.workset_ms)} "
                   f"({share:.0f}%) of its time, inside its compute, goes to rows fetched from memory (the working-set "
                   "term, CPU).")
    if worst.pieces_ms > 0 and imb.max_ms > 0:
        out.append(f"Its table pieces cost {ms_text(worst.pieces_ms)} ({worst.pieces_ms / imb.max_ms * 100:.0f}%) "
                   f"beyond their lookups, and the fixed step {ms_text(worst.fixed_step_ms)} "
                   f"({worst.fixed_step_ms / imb.max_ms * 100:.0f}%): the device profile's cost per piece a rank "
                   "holds, and per step.")
    if m is not None and imb.max_ms > 0:
        col = m.values["cost_ms"][:, imb.bottleneck_rank]
        order = [int(i) for i in np.argsort(-col, kind="stable")[:top] if col[i] > 0]
        parts = [f"{m.tables[i]} ({plan.tables[m.tables[i]].sharding_type.value}, {ms_text(col[i])}, "
                 f"{col[i] / imb.max_ms * 100:.0f}%)" for i in order]
        if parts:
            out.append("The tables that weigh most on it: " + "; ".join(parts) + ".")
    vs = imb.vs_lower_bound
    if vs is not None:
        if vs <= 1.01:
            out.append(f"It is within 1% of the lower bound ({ms_text(imb.lower_bound_ms)}): no placement of these "
                       "options can make the slowest rank much faster; change the topology or the constraints.")
        else:
            loose = (" The bound leaves out what a rank's tables cost each other, so it is loose here." if pressure
                     else "")
            out.append(f"It is {(vs - 1) * 100:.1f}% above the lower bound ({ms_text(imb.lower_bound_ms)}).{loose}")
    cap = worst.hbm_cap_bytes or 0
    if cap and worst.hbm_bytes / cap > 0.9:
        peak = (f"; at the step's peak it needs {engine.human_bytes(worst.memory.peak_hbm_bytes)}"
                if worst.memory is not None else "")
        out.append(f"Its HBM is {worst.hbm_bytes / cap * 100:.0f}% full with what it stores "
                   f"({engine.human_bytes(worst.hbm_bytes)} of {engine.human_bytes(cap)} usable), which limits what "
                   f"can move to it{peak}.")
    return out


# ---- comparing plans ----------------------------------------------------------------------------


def moved_tables(base: engine.Plan, other: engine.Plan) -> pd.DataFrame:
    """Tables placed differently (type, kernel or ranks) in `other` than in `base`."""
    rows = []
    for name, tp in base.tables.items():
        o = other.tables.get(name)
        if o is None:
            rows.append({"table": name, "before": engine.placement_text(tp), "after": "(not in this plan)"})
        elif engine.has_moved(tp, o):
            rows.append({"table": name, "before": engine.placement_text(tp), "after": engine.placement_text(o)})
    return pd.DataFrame(rows, columns=["table", "before", "after"])


def compare_frame(plans: dict[str, engine.Plan]) -> pd.DataFrame:
    """Long frame, one row per (plan, rank): memory and cost of each labelled plan."""
    rows = []
    for label, plan in plans.items():
        for r in plan.ranks:
            rows.append({"plan": label, "rank": r.rank, "hbm_bytes": r.hbm_bytes, "ddr_bytes": r.ddr_bytes,
                         "cost_ms": r.cost_ms})
    return pd.DataFrame(rows, columns=["plan", "rank", "hbm_bytes", "ddr_bytes", "cost_ms"])


def _peak_text(plan: engine.Plan) -> str:
    """'2.84 MiB HBM': the fullest rank's step peak of the memory the plan's device trains from (DDR on CPU)."""
    kind = device_memory(plan)
    return f"{engine.human_bytes(max((peak_bytes(r, kind) for r in plan.ranks), default=0))} {kind.upper()}"


def summary_frame(plans: dict[str, engine.Plan], estimates: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per plan; `estimates` (label -> what the estimates assumed) adds an "estimates" column."""
    rows = []
    for label, plan in plans.items():
        imb = imbalance(plan)
        rows.append({"plan": label, "planner": plan.planner, "slowest rank ms": imb.max_ms,
                     "imbalance (max/mean)": imb.ratio, "vs lower bound": imb.vs_lower_bound,
                     "peak memory": _peak_text(plan)})
        if estimates is not None:
            rows[-1]["estimates"] = estimates.get(label, "")
    return pd.DataFrame(rows)


# ---- run metrics (ratios against the estimates: dashboard.plans.measured) ------------------------------


def _metric(m) -> tuple:
    """A metric as (rank, name, value, unit), from a db MetricRecord or a tuple."""
    if hasattr(m, "name"):
        return m.rank, m.name, m.value, m.unit
    return tuple(m)


def metrics_frame(metrics: list) -> pd.DataFrame:
    return pd.DataFrame([dict(zip(("rank", "metric", "value", "unit"), _metric(m))) for m in metrics],
                        columns=["rank", "metric", "value", "unit"])


def metrics_table(metrics: list) -> pd.DataFrame:
    """Run metrics as one row per rank and one column per metric (name [unit])."""
    frame = metrics_frame(metrics)
    if frame.empty:
        return frame
    frame["column"] = [f"{n} [{u}]" if u else n for n, u in zip(frame["metric"], frame["unit"])]
    return frame.pivot_table(index="rank", columns="column", values="value", aggfunc="mean").reset_index()


_PROGRESS = re.compile(r"(\d+)\s*/\s*(\d+)")


def run_progress(log: str) -> Optional[float]:
    """The last "i/n" a run printed (e.g. "rank 3/8"), as a fraction; None when it printed none."""
    for line in reversed((log or "").splitlines()[-50:]):
        if line.startswith("$ "):
            continue
        m = _PROGRESS.search(line)
        if m and 0 < int(m.group(2)) and int(m.group(1)) <= int(m.group(2)):
            return int(m.group(1)) / int(m.group(2))
    return None
