"""Tables measured alone, in the workspace (pure): a `python -m engine measure-tables` file applied to the config
as `python -m engine plan --table-costs` applies it (engine.apply_table_costs: each table's compute_scale, the
measured fixed step and the probes' pressure in the CPU profile), and taken off again (engine.without_table_costs).
The file is data: it is read as JSON only, its scales and pressure are recomputed from its measured times against
the config (never taken from it), and anything wrong with it is one line naming the field and the fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import engine

MAX_BYTES = 16 * 2**20  # a costs file of 100,000 tables is about 40 MiB; here, configs up to tens of thousands
COMMAND = "python -m engine measure-tables CONFIG.json --out COSTS.json"
REPS = (1, 9)  # the rounds a measurement from the page may take (measure-tables' --reps)
PROGRESS_LINE = re.compile(r"^\[(\d+)/(\d+)\] ")  # measure-tables --progress: "[round/rounds] ..."


@dataclass(frozen=True)
class Applied:
    config: dict | None  # the workspace config with the costs, or None when the file was refused
    notes: tuple[str, ...] = ()
    problem: str = ""  # one line: why the file was refused


def apply(config: dict, data: bytes, name: str) -> Applied:
    """The config with the file's measured costs applied; a refused file gives its problem and no config."""
    label = engine.one_line(name)[:100] or "the file"
    if len(data) > MAX_BYTES:
        return Applied(None, problem=f"{label} is {engine.human_bytes(len(data))}; files up to "
                                     f"{engine.human_bytes(MAX_BYTES)} are taken here: plan it with `python -m engine "
                                     f"plan CONFIG.json --table-costs COSTS.json`")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        why = engine.one_line(str(e))[:120]
        return Applied(None, problem=f"{label} is not JSON ({why}): upload the file {COMMAND} wrote")
    try:
        cfg = engine.parse_config(engine.without_table_costs(config))
        priced, notes = engine.apply_table_costs(cfg, raw, label)
    except (engine.ConfigError, engine.EngineError) as e:
        return Applied(None, problem=engine.one_line(str(e))[:400])
    return Applied(engine.config_to_dict(priced), tuple(notes))


FIXED_WORDS = {"step_ms": "the fixed step", "collective_ms": "the collective round",
               "piece_ms": "the cost per table piece"}


def in_use_text(config: dict) -> str:
    """The Topology page's line while measured costs are in use: how many tables, and which of the profile's figures
    are the file's (the rest are the user's own profile's, or not priced)."""
    n, total = in_use(config), len(config.get("tables") or [])
    topo = config.get("topology")
    prof = topo.get(engine.PROFILE_FIELD) if isinstance(topo, dict) else None
    fixed = engine.measured_fixed_costs(prof)
    measured = [FIXED_WORDS[k] for k in fixed]
    if isinstance(prof, dict) and prof.get(engine.PRESSURE_TERM):
        measured.append("the tables' pressure on each other")
    said = (f"; as the file measured them: {', '.join(measured[:-1])}{' and ' if len(measured) > 1 else ''}"
            f"{measured[-1]}" if measured else "")
    own = ("; your profile's own fixed step kept" if isinstance(prof, dict) and "step_ms" not in fixed
           and (prof.get("step_ms") or 0) > 0 else "")
    return (f"In use: {n:,} of {total:,} tables priced as measured alone on the device{said}{own} "
            "(docs/estimator.md, \"Tables measured alone\").")


def in_use(config: dict) -> int:
    """How many tables of the config carry a measured compute_scale."""
    return sum(1 for c in (config.get("constraints") or {}).values()
               if isinstance(c, dict) and c.get("compute_scale") is not None)


def measure_args(config_path: Path, out_path: Path, reps: int) -> list[str]:
    """Python's arguments that measure the config's tables on this machine's CPU (a list: never a shell line)."""
    if not REPS[0] <= reps <= REPS[1]:
        raise ValueError(f"reps must be from {REPS[0]} to {REPS[1]}, got {reps}")
    return ["-m", "engine", "measure-tables", str(config_path), "--device", "cpu", "--reps", str(reps),
            "--out", str(out_path), "--progress"]


def dry_runs(n_tables: int, world_size: int, reps: int, columns: int = 0) -> int:
    """The dry-runs measure-tables makes: per round every table alone, the fixed step's table, the half-width copies
    of the `columns` tables that may be split by columns (column_copies), and the probe ranks (the tables dealt into
    world_size ranks, those of two or more tables: engine.table_costs.probe_groups)."""
    w = max(world_size, 1)
    base, extra = divmod(n_tables, w)
    probes = sum(1 for k in range(w) if base + (1 if k < extra else 0) >= 2)
    return reps * (n_tables + 1 + columns + probes)


def column_copies(config: dict) -> int:
    """How many of the config's tables measure-tables also dry-runs at half width (engine.column_width): 0 for a
    config that does not parse (the page says what is wrong when it is run)."""
    try:
        cfg = engine.parse_config(engine.without_table_costs(config))
    except engine.ConfigError:
        return 0
    return sum(1 for t in cfg.tables if engine.column_width(t, cfg.constraint(t.name)) is not None)


def progress(stderr: str) -> tuple[int, str]:
    """(dry-runs done, the newest of them: "round 1 of 3, 2/5 t1: 2.000 ms") from what measure-tables --progress
    wrote so far; a line still being written (no newline yet) is not counted."""
    done, last = 0, ""
    for line in stderr.splitlines(keepends=True):
        m = PROGRESS_LINE.match(line)
        if line.endswith("\n") and m:
            done, last = done + 1, f"round {m[1]} of {m[2]}, {line[m.end():].strip()}"
    return done, last


__all__ = ["Applied", "COMMAND", "MAX_BYTES", "REPS", "apply", "column_copies", "dry_runs", "in_use", "in_use_text",
           "measure_args",
           "progress"]
