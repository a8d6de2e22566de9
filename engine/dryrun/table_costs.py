"""`python -m engine measure-tables CONFIG.json --out COSTS.json`: every table dry-run alone (engine.table_costs).

Each table is the one table-wise piece of rank 0 under the config's topology, priced for the device measured
(engine.pricing), timed as `python -m engine dryrun` times a rank (fresh ids every step, the median step); `--reps`
rounds, each in a seeded shuffled order with its own ids, give each table the median of its rounds. A table that may be
split by columns is also dry-run at half its width, next to the table in every round. A one-row table gives the
step's fixed time; after each round, the tables dealt at random into world_size probe ranks, each dry-run
whole, give the tables' pressure on each other (engine.table_costs.pressure_fit).
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
from engine.dryrun.types import DryrunSettings


def measure_tables(cfg: Config, settings: DryrunSettings, reps: int = 3,
                   log: Callable[[str], None] = lambda _: None) -> dict:
    """The table-costs file's content for cfg (already priced for the device measured)."""
    from engine.dryrun.run import run_dryrun
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
    for rep in range(reps):
        # None: the fixed step's one-row table; (name, width): the table's half-width copy, dry-run next to its table
        # (after it in round 1, before it in round 2, and so on), so the two share the machine's state of that
        # moment: on a noisy VM the state drifts by tens of percent over tens of seconds, which a copy measured
        # apart from its table read as its width (table_costs.column_ratio takes the pairs' median ratio)
        units: list[list] = [[n, (n, narrow[n])][::-1 if rep % 2 else 1] if n in narrow else [n] for n in names]
        units.append([None])
        order = [item for i in rng.permutation(len(units)) for item in units[i]]
        s = replace(settings, seed=settings.seed + rep)
        for k, name in enumerate(order):
            if isinstance(name, tuple):
                one, plan = column_alone(cfg, name[0])
                into, what = column_times[name[0]], f"{name[0]} at {name[1]} of its columns"
            else:
                one, plan = fixed_alone(cfg) if name is None else alone(cfg, name)
                into, what = (fixed, "the fixed step") if name is None else (times[name], name)
            result = run_dryrun(one, plan, s)
            backend, device = result.backend, result.device
            into.append(result.ranks[0].measured_ms)
            log(f"[{rep + 1}/{reps}] {k + 1}/{len(order)} {what}: {result.ranks[0].measured_ms:.3f} ms")
        for k, group in enumerate(probe_groups(names, cfg.topology.world_size, rng)):
            result = run_dryrun(*together(cfg, group), s)
            probes.append({"round": rep + 1, "tables": group, "ms": result.ranks[0].measured_ms})
            log(f"[{rep + 1}/{reps}] probe rank {k + 1}: {len(group)} tables together: "
                f"{result.ranks[0].measured_ms:.3f} ms")
    collectives = None
    if device is not None and device.value == "cpu":  # gloo's round, for the profile's collective_ms
        collectives = collective_record(cfg.topology.world_size)
        if collectives is not None:
            log(f"a collective round among {cfg.topology.world_size} gloo processes: {collectives['round_ms']:.3f} ms")
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
            "fixed_ms": float(np.median(fixed)), "fixed_reps_ms": fixed, "probes": probes,
            **({"collectives": collectives} if collectives is not None else {}),
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
