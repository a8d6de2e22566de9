"""`python -m engine measure-tables CONFIG.json --out COSTS.json`: every table dry-run alone (engine.table_costs).

Each table is the one table-wise piece of a rank under the config's topology, priced for the device measured
(engine.pricing), timed as `python -m engine dryrun` times a rank (fresh ids every step, the median step); `--reps`
rounds, each in a seeded shuffled order with its own ids, give each table the median of its rounds. A table that may be
split by columns is also dry-run at half its width, next to the table in every round. A one-row table gives the
step's fixed time; in each round, the tables dealt at random into world_size probe ranks, each dry-run
whole, give the tables' pressure on each other (engine.table_costs.pressure_fit). A round's tables, copies, fixed step
and probes are the ranks of one dry-run, timed in turns round them (engine.dryrun.run.run_units; one after another
where together they pass --max-bytes, or with --one-rank-at-a-time; the file's `schedule` says which).
torch is imported only when the command runs; bad flags print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from engine import atomicfile
from engine.cliutil import one_line_errors
from engine.config import load_config
from engine.errors import EngineError
from engine.pricing import priced_for
from engine.replicas import group_config
from engine.table_costs import (FORMAT, MAX_REPS, VERSION, alone, alone_estimate, column_alone, column_width,
                                fixed_alone, probe_groups, table_record, together, topology_record)
from engine.types import Config, Device

from engine.dryrun.collectives import collective_record
from engine.dryrun.types import SCHEDULE_ONE_BY_ONE, SCHEDULE_TURNS, DryrunSettings


def measure_tables(cfg: Config, settings: DryrunSettings, reps: int = 3,
                   log: Callable[[str], None] = lambda _: None, collectives: bool = True) -> dict:
    """The table-costs file's content for cfg (already priced for the device measured); collectives False: no gloo
    round is timed (bench.table_costs_turns, which judges the tables and probes only)."""
    from engine.dryrun.run import run_units
    from engine.validate.worker import cpu_name

    if not 1 <= reps <= MAX_REPS:
        raise EngineError(f"--reps must be from 1 to {MAX_REPS}, got {reps}")
    names = [t.name for t in cfg.tables]
    times: dict[str, list[float]] = {n: [] for n in names}
    narrow = {t.name: w for t in cfg.tables if (w := column_width(t, cfg.constraint(t.name))) is not None}
    column_times: dict[str, list[float]] = {n: [] for n in narrow}  # each the table's half-width copy alone
    fixed: list[float] = []  # apart from the tables: a config may name a table as the fixed one is named
    backend = device = None
    started = time.perf_counter()
    rng = np.random.default_rng(settings.seed)
    probes: list[dict] = []
    schedules = set()
    for rep in range(reps):
        # None: the fixed step's one-row table; (name, width): the table's half-width copy, next to its table (after
        # it in round 1, before it in round 2, and so on). A round's units, probe ranks last, are the ranks of one
        # dry-run, timed in turns round them (run_units), so every figure of the round meets the same drift of the
        # machine's speed: on a noisy VM it drifts by tens of percent over tens of seconds, which a copy measured
        # apart from its table read as its width (table_costs.column_ratio takes the pairs' median ratio), and
        # which a probe measured apart from its tables alone read as their pressure on each other
        units: list[list] = [[n, (n, narrow[n])][::-1 if rep % 2 else 1] if n in narrow else [n] for n in names]
        units.append([None])
        order: list = [item for i in rng.permutation(len(units)) for item in units[i]]
        groups = probe_groups(names, cfg.topology.world_size, rng)
        runs = []
        for name in order:
            if isinstance(name, tuple):
                what = f"{name[0]} at {name[1]} of its columns"
                runs.append((column_alone(cfg, name[0]), column_times[name[0]], what))
            elif name is None:
                runs.append((fixed_alone(cfg), fixed, "the fixed step"))
            else:
                runs.append((alone(cfg, name), times[name], name))
        for k, group in enumerate(groups):
            probe = {"round": rep + 1, "tables": group}
            probes.append(probe)
            runs.append((together(cfg, group), probe, f"probe rank {k + 1}: {len(group)} tables together"))
        got = run_units([unit for unit, _, _ in runs], replace(settings, seed=settings.seed + rep))
        backend, device = got.backend, got.device
        schedules.add(got.schedule)
        for k, ((_, into, what), ms) in enumerate(zip(runs, got.ms)):
            if isinstance(into, dict):
                into["ms"] = ms
            else:
                into.append(ms)
            log(f"[{rep + 1}/{reps}] {what}: {ms:.3f} ms" if isinstance(into, dict)
                else f"[{rep + 1}/{reps}] {k + 1}/{len(order)} {what}: {ms:.3f} ms")
    round_ = None
    if collectives and device is not None and device.value == "cpu":  # gloo's round, for the profile's collective_ms
        round_ = collective_record(cfg.topology.world_size)
        if round_ is not None:
            log(f"a collective round among {cfg.topology.world_size} gloo processes: {round_['round_ms']:.3f} ms")
    tables = {}
    for name in names:
        est, ws = alone_estimate(cfg, name)
        tables[name] = {"ms": float(np.median(times[name])), "reps_ms": times[name],
                        "estimated_ms": est + ws, **table_record(cfg.table(name), cfg.constraint(name))}
        if name in narrow:
            tables[name]["column"] = {"dim": narrow[name], "ms": float(np.median(column_times[name])),
                                      "reps_ms": column_times[name]}
    return {"format": FORMAT, "version": VERSION, "topology": topology_record(cfg),
            "device_name": cpu_name() if device is not None and device.value == "cpu" else (device and device.value),
            "backend": backend.value if backend is not None else None, "reps": reps, "iters": settings.iters,
            "warmup": settings.warmup, "threads": settings.threads, "seed": settings.seed,
            "schedule": SCHEDULE_TURNS if schedules == {SCHEDULE_TURNS} else SCHEDULE_ONE_BY_ONE,
            "fixed_ms": float(np.median(fixed)), "fixed_reps_ms": fixed, "probes": probes,
            **({"collectives": round_} if round_ is not None else {}),
            "measure_s": round(time.perf_counter() - started, 3), "tables": tables}


def cmd_measure_tables(args: argparse.Namespace) -> int:
    from engine.dryrun.command import settings_of

    cfg = load_config(args.config)
    settings = settings_of(args)
    pricing = priced_for(group_config(cfg), Device(settings.device.value), "dry-run")
    log = (lambda line: print(line, file=sys.stderr)) if args.progress else (lambda _: None)
    data = measure_tables(pricing.config, settings, args.reps, log)
    if args.out:
        try:
            atomicfile.write_json(args.out, data)  # whole or not at all
        except OSError as e:
            raise EngineError(f"cannot write --out {args.out!r}: {e.strerror or e}") from None
        t = data["tables"]
        print(f"measured {len(t)} tables alone on {data['device_name']} ({data['backend']}) in "
              f"{data['measure_s']:.1f} s: fixed step {data['fixed_ms']:.3f} ms; wrote {args.out}; plan with "
              f"python -m engine plan {args.config} --table-costs {args.out}")
        if pricing.note:
            print(f"note: {pricing.note}")
    else:
        print(json.dumps(data, indent=1))
    return 0


def register(sub) -> None:
    from engine.dryrun.command import add_dryrun_arguments

    p = sub.add_parser("measure-tables", help="dry-run every table alone: measured costs for plan --table-costs")
    add_dryrun_arguments(p, plan=False)
    p.add_argument("--reps", type=int, default=3, help="rounds over the tables, each in a shuffled order; a table's "
                                                        "figure is the median of its rounds (default %(default)s)")
    p.add_argument("--out", metavar="COSTS.json", help="write the costs here (default: print them)")
    p.add_argument("--progress", action="store_true", help="a line per table measured, on stderr")
    p.set_defaults(func=cmd_measure_tables)
    one_line_errors(p, "measure-tables")
