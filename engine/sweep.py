"""Capacity sweep: one config planned over a grid of world sizes, accelerators and batch sizes, to answer "which
GPUs, and how many?" before asking for them.

Each point replaces the config's topology with an accelerator's published memory and bandwidths (ACCELERATORS:
labelled as published figures until a calibration replaces them), its world size (8 GPUs per host, as the
DGX/HGX machines have; fewer when the world is smaller) and its per-rank batch size, then plans it with the
same planner and settings as `python -m engine plan`. A point that cannot fit is kept with the planner's reason.
The points that no other point beats on both GPUs and step time form the Pareto front.

Every point depends only on the config, the point and the settings: the same sweep gives the same points with
one worker process or many.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Optional

from engine.accelerators import ACCELERATORS, GPUS_PER_HOST, Accelerator  # noqa: F401 (Accelerator: re-exported)
from engine import limits as L
from engine.config import check_load, check_pairs
from engine.replicas import group_topology
from engine.rules import check_placement_rules
from engine.errors import ConfigError, PlanningError, one_line
from engine.memory import OUT_OF_MEMORY
from engine.planner import PlannerSettings, plan
from engine.types import Config, Plan, Topology

MIXED_GROUPS = ("2D groups on a mixed fleet are not planned yet: a group's ranks would span device kinds "
                "(sweep the mix with one group)")
MAX_POINTS = 4096  # a sweep is interactive: more points than this is a mistake, not a question
DEFAULT_EFFORT = 10_000  # per point; 8 world sizes x 4 accelerators of 1,000 tables plan in about 30 s on 2 cores
WORLD_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class SweepPoint:
    device: str  # key of ACCELERATORS
    world_size: int
    batch_size: int  # per rank
    planned: bool  # the planner placed every table within the memory the tables store
    fits: bool = False  # planned, and no rank's estimated step peak outgrows its device (engine.memory)
    reason: str = ""  # why it does not fit (one line)
    step_ms: Optional[float] = None  # the slowest rank's estimated step
    lower_bound_ms: Optional[float] = None
    peak_hbm_fraction: Optional[float] = None  # the fullest rank's step peak over its usable HBM (the
    # reservation for the dense model left out): above 1.0 the step eats into it
    samples_per_s: Optional[float] = None  # world_size * batch_size / step
    pareto: bool = False  # fits, and no other point that fits has at most as many GPUs and a faster step
    group_size: Optional[int] = None  # 2D: ranks per sharding group (engine.replicas); None: the whole world

    @property
    def replicas(self) -> int:
        return self.world_size // self.group_size if self.group_size else 1

    @property
    def hosts(self) -> int:
        return math.ceil(self.world_size / min(GPUS_PER_HOST, self.world_size))

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["hosts"] = self.hosts
        d["replicas"] = self.replicas
        d["device_label"] = device_label(self.device)
        return d


# ---- mixed candidates: "8 h100_80gb + 8 a100_80gb" (hosts of several SKUs), one point per batch size ------------


_GROUP = re.compile(r"^\s*(\d+)\s*(?:x\s*|\s)\s*(\S+)\s*$")  # "8 h100_80gb" or "8x h100_80gb"


def parse_mix(text: str) -> tuple[tuple[int, str], ...] | None:
    """A mixed candidate as (ranks, accelerator) groups in rank order; None where `text` is one accelerator's key.
    Raises ConfigError (--devices) naming what is wrong."""
    if "+" not in text:
        return None
    groups = []
    for part in text.split("+"):
        m = _GROUP.match(part)
        if m is None or int(m.group(1)) < 1:
            raise ConfigError("--devices", f"{part.strip()!r} in {text!r}: write a mixed fleet as GPUs and an "
                              "accelerator per group, e.g. \"8 h100_80gb + 8 a100_80gb\"")
        if m.group(2) not in ACCELERATORS:
            raise ConfigError("--devices", f"unknown accelerator {m.group(2)!r} in {text!r}; choose from "
                              f"{', '.join(ACCELERATORS)}")
        groups.append((int(m.group(1)), m.group(2)))
    total = sum(n for n, _ in groups)
    if total > GPUS_PER_HOST and any(n % GPUS_PER_HOST for n, _ in groups):
        raise ConfigError("--devices", f"{text!r}: each group must fill whole hosts of {GPUS_PER_HOST} GPUs (a host "
                          "has one kind of GPU)")
    return tuple(groups)


def mix_text(groups: tuple[tuple[int, str], ...]) -> str:
    return " + ".join(f"{n} {d}" for n, d in groups)


def device_label(device: str) -> str:
    """A candidate's label: the accelerator's, or each group's GPUs and label for a mixed fleet."""
    groups = parse_mix(device)
    if groups is None:
        return ACCELERATORS[device].label
    return " + ".join(f"{n} x {ACCELERATORS[d].label}" for n, d in groups)


def candidate_topology(base: Topology, device: str, world_size: int, batch_size: int) -> Topology:
    """A point's topology: every rank the accelerator, or a mixed fleet (its own world size) whose ranks are each
    priced with their group's accelerator and hold its HBM (topology.rank_devices), the first group's figures for
    the topology's own fields."""
    groups = parse_mix(device)
    if groups is None:
        return ACCELERATORS[device].topology(base, world_size, batch_size)
    topo = ACCELERATORS[groups[0][1]].topology(base, sum(n for n, _ in groups), batch_size)
    return dataclasses.replace(topo, rank_devices=groups)


def _peak_hbm_fraction(p: Plan) -> float:
    worst = 0.0
    for r in p.ranks:
        if r.hbm_cap_bytes:
            peak = r.memory.peak_hbm_bytes if r.memory is not None else r.hbm_bytes
            worst = max(worst, peak / r.hbm_cap_bytes)
    return worst


def plan_point(cfg: Config, device: str, world_size: int, batch_size: int,
               settings: PlannerSettings, group_size: Optional[int] = None) -> SweepPoint:
    """One point of the sweep: planned, or refused with the planner's reason. group_size: 2D sharding's group
    (None: the whole world, one group)."""
    point = dict(device=device, world_size=world_size, batch_size=batch_size, group_size=group_size)
    if group_size is not None and (group_size > world_size or world_size % group_size):
        return SweepPoint(**point, planned=False, reason=f"sharding_group_size {group_size:,} does not divide "
                          f"{world_size:,} ranks")
    if group_size is not None and parse_mix(device) is not None:
        return SweepPoint(**point, planned=False, reason=MIXED_GROUPS)
    topo = dataclasses.replace(candidate_topology(cfg.topology, device, world_size, batch_size),
                               sharding_group_size=group_size)
    try:
        check_placement_rules(cfg.tables, cfg.constraints, group_topology(topo))  # pins to ranks or hosts it lacks
        check_load(cfg.tables, cfg.constraints, topo)  # a larger world or batch may look up too many ids
        p = plan(dataclasses.replace(cfg, topology=topo), settings)
    except (PlanningError, ConfigError) as e:
        return SweepPoint(**point, planned=False, reason=one_line(str(e)))
    step = p.max_rank_cost_ms
    oom = [n for n in p.notes if n.startswith(OUT_OF_MEMORY)]
    return SweepPoint(**point, planned=True, fits=not oom, reason=oom[0] if oom else "", step_ms=step,
                      lower_bound_ms=p.lower_bound_ms,
                      peak_hbm_fraction=_peak_hbm_fraction(p),
                      samples_per_s=world_size * batch_size / (step / 1000.0) if step > 0 else None)


def pareto(points: list[SweepPoint]) -> list[SweepPoint]:
    """The points, each with `pareto` set when it fits and no other point that fits has at most as many GPUs and
    a faster step (of equal points, the first in sweep order)."""
    best: Optional[float] = None
    front = set()
    order = sorted((i for i, p in enumerate(points) if p.fits), key=lambda i: (points[i].world_size,
                                                                                   points[i].step_ms, i))
    for i in order:
        if best is None or points[i].step_ms < best:
            front.add(i)
            best = points[i].step_ms
    return [dataclasses.replace(p, pareto=i in front) for i, p in enumerate(points)]


def _check_grid(devices: list[str], world_sizes: list[int], batch_sizes: list[int], cfg: Config,
                groups: int = 1) -> None:
    """Refuse a grid the sweep cannot answer, naming the flag: unknown accelerators, sizes out of the bounds a
    config's topology has, too many points."""
    if not devices or not world_sizes or not batch_sizes:
        raise ConfigError("--devices", "a sweep needs at least one device, world size and batch size")
    for d in devices:
        if parse_mix(d) is None and d not in ACCELERATORS:
            raise ConfigError("--devices", f"unknown accelerator {d!r}; choose from {', '.join(ACCELERATORS)}")
    n = len(devices) * len(world_sizes) * len(batch_sizes) * groups
    if n > MAX_POINTS:
        raise ConfigError("--world-sizes", f"{n:,} points; at most {MAX_POINTS:,} are swept (fewer devices, "
                          "world sizes or batch sizes)")
    for w in world_sizes:
        if not 1 <= w <= L.MAX_WORLD_SIZE:
            raise ConfigError("--world-sizes", f"{w:,} is out of range: 1 to {L.MAX_WORLD_SIZE:,} ranks")
        if w > GPUS_PER_HOST and w % GPUS_PER_HOST:
            raise ConfigError("--world-sizes", f"{w:,} GPUs do not fill whole hosts of {GPUS_PER_HOST} (a config's "
                              "local_world_size must divide its world_size: table_row_wise shards and hosts pins "
                              f"take a whole host); give {GPUS_PER_HOST} or fewer, or a multiple of {GPUS_PER_HOST} "
                              f"({w // GPUS_PER_HOST * GPUS_PER_HOST:,} or {-(-w // GPUS_PER_HOST) * GPUS_PER_HOST:,})")
        try:
            check_pairs(len(cfg.tables), w)
        except ConfigError as e:
            raise ConfigError("--world-sizes", e.message) from None
    for b in batch_sizes:
        if not 1 <= b <= L.MAX_BATCH_SIZE:
            raise ConfigError("--batch-sizes", f"{b:,} is out of range: 1 to {L.MAX_BATCH_SIZE:,} per rank")


def _run(args: tuple) -> SweepPoint:  # a module-level function: worker processes import it by name
    return plan_point(*args)


def sweep(cfg: Config, devices: Iterable[str], world_sizes: Iterable[int], batch_sizes: Optional[Iterable[int]] = None,
          settings: PlannerSettings = PlannerSettings(effort=DEFAULT_EFFORT), jobs: int = 1,
          group_sizes: Optional[Iterable[Optional[int]]] = None) -> list[SweepPoint]:
    """Every (device, world size, batch size, group size) point planned, in that order, with the Pareto front
    marked. group_sizes: 2D sharding's candidate group sizes (None in it: one group; default: the config's); a
    size that does not divide a world size is reported as such. jobs > 1 plans points in worker processes; the
    points are the same."""
    devices, world_sizes = list(dict.fromkeys(devices)), sorted(set(world_sizes))
    batch_sizes = sorted(set(batch_sizes or [cfg.topology.batch_size]))
    groups = sorted(set(group_sizes or [cfg.topology.sharding_group_size]), key=lambda g: (g is not None, g or 0))
    _check_grid(devices, world_sizes, batch_sizes, cfg, len(groups))
    devices = [d if parse_mix(d) is None else mix_text(parse_mix(d)) for d in devices]
    grid = [(cfg, d, w, b, settings, g) for d in devices
            for w in (world_sizes if parse_mix(d) is None else [sum(n for n, _ in parse_mix(d))])
            for b in batch_sizes for g in groups]
    if jobs > 1 and len(grid) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(grid))) as pool:
            points = list(pool.map(_run, grid, chunksize=1))
    else:
        points = [_run(g) for g in grid]
    return pareto(points)


def default_jobs() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))




PUBLISHED_NOTE = ("every accelerator's bandwidths and fixed costs are published figures, not measurements: "
                  "calibrate from validation runs on the machine you get (python -m db calibrate)")


def table(points: list[SweepPoint]) -> str:
    """The sweep as a text table, one point a line, the Pareto front starred."""
    width = max([12] + [len(p.device) for p in points])
    head = (f"{'device':<{width}} {'GPUs':>6} {'hosts':>5} {'batch':>7} {'group':>6} {'step ms':>10} "
            f"{'peak HBM':>9} {'samples/s':>12}  ")
    lines = [head + "why not", "-" * (len(head) + 8)]
    for p in points:
        group = f"{p.group_size}x{p.replicas}" if p.group_size else "all"
        left = f"{p.device:<{width}} {p.world_size:>6} {p.hosts:>5} {p.batch_size:>7} {group:>6} "
        if p.fits:
            rate = f"{p.samples_per_s:,.0f}" if p.samples_per_s else "-"
            lines.append(left + f"{p.step_ms:>10.4g} {p.peak_hbm_fraction:>9.1%} {rate:>12} "
                         f"{'*' if p.pareto else ' '}")
        elif p.planned:  # placed, but the step's peak outgrows the device
            lines.append(left + f"{p.step_ms:>10.4g} {p.peak_hbm_fraction:>9.1%} {'-':>12}  {p.reason}")
        else:
            lines.append(left + f"{'-':>10} {'-':>9} {'-':>12}  does not fit: {p.reason}")
    lines.append("")
    lines.append("* Pareto front: no point with as few GPUs or fewer is faster.")
    if any(p.group_size for p in points):
        lines.append("group: 2D sharding's ranks per group x replicas (DMPCollection); all: one group (DMP).")
    lines.append("Note: " + PUBLISHED_NOTE + ".")
    return "\n".join(lines)


def point_config(cfg: Config, device: str, world_size: int, batch_size: int,
                 group_size: Optional[int] = None) -> dict:
    """The config of one sweep point as config JSON, ready to plan or edit: the accelerator's topology, its fixed
    costs as `"profile": "published"` (so they follow the host count if the world size is edited), the point's 2D
    group size (None: one group)."""
    from engine.config import config_to_dict

    topo = dataclasses.replace(candidate_topology(cfg.topology, device, world_size, batch_size),
                               sharding_group_size=group_size)
    out = config_to_dict(dataclasses.replace(cfg, topology=dataclasses.replace(topo, profile=None)))
    out["topology"]["profile"] = "published"
    return out
