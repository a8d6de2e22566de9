"""Tables measured alone (issue 24): each table's compute as a dry-run measures it, in place of the estimate's.

The estimate prices a table from its shape and load with a handful of terms; on this VM its per-rank error is 9-15%
median held out, and ranks a planner balanced under it differ by 10-25% when run. Most of that is per table: the
sum of a rank's tables each dry-run alone names its slowest rank in 16-17 of 18 measured plans, the estimate in 13
(docs/estimator.md, "Tables measured alone"). So `python -m engine measure-tables CONFIG --out COSTS.json` dry-runs
every table alone, as the one table-wise piece of rank 0 under the config's topology (the global batch, fresh ids
every step), and a one-row table for the step's fixed time; `python -m engine plan CONFIG --table-costs COSTS.json`
sets each table's compute_scale to

    (measured ms - fixed ms) / the estimate's compute of the table alone, beside its working set

so every piece of the table, whatever its sharding, costs its share of the measured time. Tables alone do not add
up: a rank's tables evict each other's rows (on the VM measured, ranks of 2.3-3.2 MiB-a-step tables ran 1.4-1.7x
their sum alone). So measure-tables also dry-runs probe ranks (the tables dealt at random into world_size ranks),
and pressure_fit fits the config's pressure per touched row on them; each piece then costs its touched rows x that x
(how far its rank's touched working set is up a 0.5-16.5 MiB ramp, less how far its table's own is, which its
measured time holds): engine.workset.WorksetPrice, engine.estimate.pressure_alone_ms. Held out on 105 measured
plans, that takes the per-rank error from 9.3% to 4.6% median and names the slowest rank in 93 of them against 79
(bench/interplay.py; docs/estimator.md, "The tables' pressure on each other"). A file without probes (from before
them) prices no pressure: the rank's working-set term leaves measured tables out, as it did.
On CPU it also times a collective round (engine.dryrun.collectives: gloo all-to-alls among world_size processes),
which becomes the profile's collective_ms unless the profile has its own: a dry-run times kernels only, and a plan
that added a sharding type for free ran 1.24x slower in real DMP steps (docs/benchmarks.md).
The fixed step is carried once by every rank: on a CPU topology it becomes the profile's step_ms (a profile already
pricing a fixed step, from python -m db calibrate, keeps its own); comms stay the estimate's. The scale is taken
against the estimate the plan is priced with (the config's terms, without the profile's fixed costs), when the file
is read.

A file measured under another topology (world size, batch size, optimizer, device kind) or with a table of another
shape or load is refused, naming the table and the field; tables it does not list keep the estimate.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from engine import limits as L
from engine.errors import ConfigError, EngineError, one_line
from engine.estimate import perf_parts, piece_workset, pieces_of, table_load, table_workset
from engine.evaluate import evaluate, shard_arrays
from engine.fitting import nnls
from engine.config import PROFILE_FIELD
from engine.profile import BACKEND, MAX_FIXED_MS, PRESSURE_TERM, TABLE_COSTS_FIXED, TABLE_COSTS_SET
from engine.workset import pressure
from engine.types import (ComputeKernel, Config, Constraints, Device, DeviceProfile, Shard, ShardingType, TableConfig,
                          TablePlan, Topology)

FORMAT = "table-costs"
VERSION = 1
FIXED_TABLE = "fixed_step"  # the one-row table whose step is the fixed time, measured in a config of its own
FIXED_SHAPE = (1, 4)  # rows, dim
MEASURE_AGAIN = "measure again: python -m engine measure-tables CONFIG.json --out COSTS.json"
MIN_SCALE = 1.0 / L.MAX_COMPUTE_SCALE
MAX_SAID = 200  # characters of a device or backend name a note quotes
COLLECTIVES_NOTE = (
    "the collectives each sharding type adds to a step are not priced (the file has no collective round measured "
    "on this world size, and the profile has no collective_ms): in real DMP runs on the VM measured, a plan that "
    "added column_wise to table_wise ran 1.24x slower per step than TorchRec's though its kernels were 0.86x; "
    "priced at 0.47 ms a round the plan kept one type and ran 0.99x. Measure again (measure-tables on CPU times a "
    "round), fit collective_ms from validation runs (python -m db calibrate --config-out) or limit the "
    "sharding_types")
MIN_PRESSURE_ROWS = 1000.0  # probes whose rows past their tables' own pressure sum to fewer say nothing of it
MAX_REPS = 1000  # rounds a file may list per table
MAX_MS = 1e6  # a measured time in a costs file is under this (a step of over 16 minutes is no measurement)
UNDER_MAX_MS = f"under {MAX_MS:,.0f}"
ABOVE_0_MS = f"above 0 and {UNDER_MAX_MS}"
MEASURED_SOURCE = "measure-tables: "  # the start of the source of a profile apply_table_costs made
MEASURED_FIELDS = ("compute_scale", "column_exponent")  # the constraints apply_table_costs sets, per table
MIN_PIECE_PROBES = 4  # probe ranks a cost per table beyond a rank's first is fitted from (beside the pressure)
MIN_MARGIN_PROBES = 3  # probe ranks --min-gain auto needs to read the estimate's error from
MAX_AUTO_MARGIN = 0.5  # a margin of half the baseline's step would keep nearly every baseline: held there, and said


def table_record(t: TableConfig, c: Constraints) -> dict[str, Any]:
    """What a measurement of the table depends on (compared when a file is applied)."""
    return {"num_embeddings": t.num_embeddings, "embedding_dim": t.embedding_dim, "data_type": t.data_type.value,
            "pooling": t.pooling.value, "features": len(t.feature_names),
            "pooling_factors": list(c.pooling_factors) if c.pooling_factors else None,
            "num_poolings": list(c.num_poolings) if c.num_poolings else None,
            "batch_sizes": list(c.batch_sizes) if c.batch_sizes else None,
            "is_weighted": c.is_weighted, "zipf_exponent": c.zipf_exponent}


def topology_record(cfg: Config) -> dict[str, Any]:
    topo = cfg.topology
    return {"world_size": topo.world_size, "batch_size": topo.batch_size, "optimizer": topo.optimizer.value,
            "compute_device": topo.compute_device.value}


def alone(cfg: Config, name: str) -> tuple[Config, dict[str, TablePlan]]:
    """The config with only table `name` (its compute_scale 1), and the plan that puts it whole on rank 0."""
    return together(cfg, [name])


def together(cfg: Config, names: list[str]) -> tuple[Config, dict[str, TablePlan]]:
    """The config with only these tables (compute_scale 1, no placement rules), and the plan that puts them all whole
    on rank 0, priced with none of the step's fixed costs and no pressure term: their compute alone."""
    tables = tuple(cfg.table(n) for n in names)
    constraints = {n: replace(cfg.constraint(n), compute_scale=None, column_exponent=None, ranks=None, hosts=None,
                              colocate=None, apart=None) for n in names}
    topo = cfg.topology
    if topo.profile is not None:  # the table's compute alone: none of the step's fixed costs
        prof = replace(topo.profile, step_ms=0.0, collective_ms=0.0, launch_ms=0.0, piece_ms=0.0,
                       terms=tuple((k, v) for k, v in topo.profile.terms if k != PRESSURE_TERM))
        topo = replace(topo, profile=prof)
    one = replace(cfg, tables=tables, constraints=constraints, topology=topo)
    return one, {t.name: TablePlan(ShardingType.TABLE_WISE, ComputeKernel.FUSED, (0,),
                                   (Shard((0, 0), (t.num_embeddings, t.embedding_dim), 0),)) for t in tables}


def probe_groups(names: list[str], world_size: int, rng: np.random.Generator) -> list[list[str]]:
    """One round's probe ranks: the tables dealt at random into world_size ranks (a table-wise plan's ranks, as a
    planner might make them), each rank of two or more tables (one alone says nothing of the pressure)."""
    order = [names[i] for i in rng.permutation(len(names))]
    return [list(g) for g in np.array_split(np.array(order, dtype=object), max(world_size, 1)) if len(g) >= 2]


def column_width(table: TableConfig, c: Constraints) -> int | None:
    """The width of the half-width copy measure-tables dry-runs of a table that may be split by columns (a multiple
    of 4, as fbgemm's kernels want), or None: the table is too narrow, or its sharding types split no columns."""
    types = c.sharding_types
    if types is not None and not any(t.splits_columns for t in types):
        return None
    width = table.embedding_dim // 2 // 4 * 4
    return width if 4 <= width < table.embedding_dim else None


def column_alone(cfg: Config, name: str) -> tuple[Config, dict[str, TablePlan]]:
    """The table cut to its column_width, alone on rank 0 as together() puts it: what a column piece of that width
    costs alone (a column piece sees every id of the batch, as the table does)."""
    t = cfg.table(name)
    width = column_width(t, cfg.constraint(name))
    if width is None:
        raise EngineError(f"table {name!r} has no column piece to measure")
    narrow = replace(t, embedding_dim=width)
    cut = replace(cfg, tables=tuple(narrow if x.name == name else x for x in cfg.tables))
    return together(cut, [name])


def column_ratio(rec: dict[str, Any], fixed_ms: float, pairs: bool = True) -> float:
    """A half-width copy's compute over its table's, from a table record of the file (one with a "column"): the
    median over rounds of each round's pair, (copy - fixed) / (table - fixed), where both list a time per round
    (measure-tables dry-runs the copy next to its table, so a pair shares the machine's state of that moment);
    else (or with pairs False) the ratio of their medians. On a VM whose state drifts, two slow rounds of the copy
    read against the table's median made a third of a 906k-row table cost 0.69 of it (g 0.33) where its pieces
    measured 0.40-0.50."""
    col = rec["column"]
    whole, copy = rec.get("reps_ms"), col.get("reps_ms")
    if pairs and isinstance(whole, list) and isinstance(copy, list) and len(whole) == len(copy) > 0:
        return float(np.median([(c - fixed_ms) / max(w - fixed_ms, 1e-9) for w, c in zip(whole, copy)]))
    return (float(col["ms"]) - fixed_ms) / max(float(rec["ms"]) - fixed_ms, 1e-9)


def column_exponent(ratio: float, share: float) -> tuple[float, bool]:
    """(g, held): the exponent with which a piece holding `share` of the columns costs share^g of the table's compute,
    from the measured ratio of a copy of that width to the table (column_ratio); held: the ratio was outside what an
    exponent from 0 (the piece costs the whole) to MAX_COLUMN_EXPONENT (its share of the columns) gives, and was
    held to it."""
    lo, hi = share ** L.MAX_COLUMN_EXPONENT, 1.0
    held = not lo <= ratio <= hi
    return float(np.log(min(max(ratio, lo), hi)) / np.log(share)), held


def fixed_alone(cfg: Config) -> tuple[Config, dict[str, TablePlan]]:
    """A one-row, four-wide table, one id per sample, alone on rank 0: its step is the kernel call's fixed time."""
    t = TableConfig(FIXED_TABLE, FIXED_SHAPE[0], FIXED_SHAPE[1], (FIXED_TABLE,))
    return alone(replace(cfg, tables=(t,), constraints={}), FIXED_TABLE)


def alone_estimate(cfg: Config, name: str) -> tuple[float, float]:
    """(the table's compute ms alone beside its working set, the working set's ms), as the config prices it."""
    one, plan = alone(cfg, name)
    r = evaluate(one, plan, planner="file").ranks[0]
    return r.perf.fwd_compute + r.perf.bwd_compute - r.workset_ms, r.workset_ms


class ProbeFit(NamedTuple):
    """What the probe ranks measured beyond their tables alone, fitted (probe_fit)."""

    pressure_ms_per_row: float  # ms per touched row at full pressure
    piece_ms: float  # ms per table a rank holds beyond its first
    rows: list[dict[str, Any]]  # per probe, its figures

    def error(self, row: dict[str, Any]) -> float:
        """How far the fit prices a probe (one of rows, or of another fit's) from its measured time, over that time."""
        priced = self.pressure_ms_per_row * row["past_own_rows"] + self.piece_ms * (row["tables"] - 1)
        return abs(priced - row["beyond_alone_ms"]) / row["ms"]


def probe_fit(cfg: Config, data: dict[str, Any], pieces: bool = True) -> ProbeFit:
    """The tables' cost to each other from the file's probe ranks (measure-tables: random ranks of the config's
    tables, each dry-run whole), fitted by non-negative least squares on

        probe ms - fixed - sum(alone ms - fixed)  =  a x (rows x pressure(bytes) - sum(rows_t x pressure(bytes_t)))
                                                   + b x (tables - 1)

    a: ms per touched row at full pressure (engine.workset.pressure; rows and bytes: what each table whole touches in
    a step, summed over the probe); b: ms per table a rank holds beyond its first. Ranks of several tables cost more
    than their tables alone by more than their rows past the caches explain: one table split into n with the same
    ids and rows a step, timed in turns in one dry-run, took 0.05-0.12 ms more per table beyond the first with
    rowwise_adagrad, 0.03-0.24 with sgd, 0.02-1.44 with adam on the torch fallback (python -m bench.piece_count;
    docs/estimator.md, "A table beyond a rank's first"); each probe priced by a fit on the file's others, b beside a
    took the median error from 9.0% to 6.6% over 46 files of 23 configs (bench/results/table_costs_turns_pieces.md).
    a is 0 where the probes' rows past their
    own pressure sum to under MIN_PRESSURE_ROWS (the ranks stay in their tables' caches), and b 0 under
    MIN_PIECE_PROBES probes (two figures from fewer is a fit of the noise) or with pieces False (the pressure alone,
    as before the term: bench.table_costs_turns compares the two)."""
    fixed = float(data["fixed_ms"])
    own = {t.name: table_workset(t, cfg.constraint(t.name), cfg.topology) for t in cfg.tables}
    xs, ns, ys, rows = [], [], [], []
    for probe in data.get("probes", []):
        names = probe["tables"]
        b = sum(own[n][0] for n in names)
        r = sum(own[n][1] for n in names)
        x = r * float(pressure(b)) - sum(own[n][1] * float(pressure(own[n][0])) for n in names)
        y = float(probe["ms"]) - fixed - sum(float(data["tables"][n]["ms"]) - fixed for n in names)
        xs.append(x)
        ns.append(len(names) - 1.0)
        ys.append(y)
        rows.append({"tables": len(names), "bytes": b, "rows": r, "past_own_rows": x, "beyond_alone_ms": y,
                     "ms": float(probe["ms"])})
    x, n, y = np.array(xs), np.array(ns), np.array(ys)
    use_a = bool(len(x)) and float(x.sum()) >= MIN_PRESSURE_ROWS
    use_b = pieces and len(y) >= MIN_PIECE_PROBES
    cols = [c for c, on in ((x, use_a), (n, use_b)) if on]
    if not cols:
        return ProbeFit(0.0, 0.0, rows)
    got = iter(nnls(np.column_stack(cols), y))
    a = float(next(got)) if use_a else 0.0
    b = float(next(got)) if use_b else 0.0
    return ProbeFit(a, min(b, MAX_FIXED_MS), rows)


def pressure_fit(cfg: Config, data: dict[str, Any]) -> tuple[float, list[dict[str, Any]]]:
    """(probe_fit's ms per touched row at full pressure, per probe its figures)."""
    fit = probe_fit(cfg, data)
    return fit.pressure_ms_per_row, fit.rows


def _prices_pieces(cfg: Config) -> bool:
    """Whether applying a costs file to cfg prices a table beyond a rank's first (the probes' b): where the profile
    is the one measure-tables makes, not a profile of the user's, which keeps its own fixed costs. Off CPU the file
    prices neither term (its probes read as before: both terms)."""
    return cfg.topology.compute_device is not Device.CPU or without_costs(cfg).topology.profile is None


def priced_fit(cfg: Config, data: dict[str, Any]) -> ProbeFit:
    """The probe fit a plan of cfg is priced with once the file is applied: the pressure and b where measure-tables
    makes the profile, the pressure alone where a profile of the user's keeps its own fixed costs (its a then
    fitted without a b the plan would not price)."""
    return probe_fit(cfg, data, pieces=_prices_pieces(cfg))


def gain_margin(cfg: Config, data: dict[str, Any]) -> tuple[float, str]:
    """`plan --baseline --min-gain auto --table-costs COSTS.json`: the gain by which ours must beat the baseline, read
    from the file. Each probe rank is a table-wise rank of this config, measured whole on the device: the estimate
    prices it as its tables alone plus the fitted pressure and pieces (probe_fit), and is off by
    |a x past_own_rows + b x (tables - 1) - beyond_alone_ms| / ms.
    Two plans' slowest ranks each off by that median error, independently, put their ratio off by sqrt(2) x it; so
    that is the margin, and a noisy device or a config the pressure fits badly asks for a larger gain. In sample (the
    pressure is fitted on the same probes), so if anything it is small. (margin, the note saying so.)"""
    fit = priced_fit(cfg, data)
    errors = [fit.error(r) for r in fit.rows if r["ms"] > 0]
    if len(errors) < MIN_MARGIN_PROBES:
        raise EngineError(f"--min-gain auto reads the estimate's error from the probe ranks of --table-costs, and the "
                          f"file has {len(errors)} (at least {MIN_MARGIN_PROBES}); {MEASURE_AGAIN} (it deals the "
                          "tables into probe ranks each round), or give --min-gain a number")
    med = float(np.median(errors))
    margin = min(float(np.sqrt(2.0)) * med, MAX_AUTO_MARGIN)
    return margin, (f"--min-gain auto: {margin:.1%}, sqrt(2) x the estimate's {med:.1%} median error on the "
                    f"{len(errors)} probe ranks measured with the table costs (in sample"
                    + ("" if _prices_pieces(cfg) else
                       "; the pressure alone: the profile keeps its own fixed costs") + ")"
                    + (f", held to {MAX_AUTO_MARGIN:.0%}" if margin < float(np.sqrt(2.0)) * med else ""))


def rank_pieces(cfg: Config, tables: dict[str, TablePlan]) -> list[list[tuple[str, float, float, float, float, float]]]:
    """Per rank, its pieces as the pressure sees them: (table, the bytes and distinct rows the piece touches in a
    step, the same for its table whole on one rank, the piece's share of its table's estimated compute). For
    bench.interplay, which fits the pressure's shape on stored runs."""
    topo = cfg.topology
    out: list[list] = [[] for _ in range(topo.world_size)]
    for name, tp in tables.items():
        t, c = cfg.table(name), cfg.constraint(name)
        ranks, rows, cols = shard_arrays(cfg, name, tp)
        load = table_load(t, c, topo)
        b, r = piece_workset(pieces_of(t, load, topo, rows.astype(float), cols.astype(float)), topo, tp.sharding_type)
        work = perf_parts(t, load, topo, tp.sharding_type, rows.astype(float), cols.astype(float))[0].sum(axis=1)
        whole = perf_parts(t, load, topo, ShardingType.TABLE_WISE, np.array([float(t.num_embeddings)]),
                           np.array([float(t.embedding_dim)]))[0].sum()
        own = table_workset(t, c, topo)
        for k, rank in enumerate(ranks):
            out[int(rank)].append((name, float(b[k]), float(r[k]), *own, float(work[k] / whole) if whole else 0.0))
    return out


def _is_ms(value: Any, zero: bool = False) -> bool:
    """A measured time a costs file may hold: a number above 0 (or 0, where `zero`) and under MAX_MS."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and (0 <= value if zero else 0 < value) and value < MAX_MS)


def read_costs(data: Any, source: str) -> dict[str, Any]:
    """The file's content checked for shape: EngineError naming the file and what is wrong otherwise."""
    def bad(what: str) -> EngineError:
        return EngineError(f"{source}: {what}; it is not a file `python -m engine measure-tables` wrote "
                           f"({MEASURE_AGAIN})")

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise bad(f'no "format": "{FORMAT}"')
    if data.get("version") != VERSION:
        raise bad(f"version {data.get('version')!r}, this engine reads version {VERSION}")
    if not isinstance(data.get("topology"), dict) or not isinstance(data.get("tables"), dict):
        raise bad('no "topology" or "tables" object')
    fixed = data.get("fixed_ms")
    if not _is_ms(fixed, zero=True):
        raise bad(f'"fixed_ms" {fixed!r} is not a time in ms (0 or more, {UNDER_MAX_MS})')
    for name, rec in data["tables"].items():
        if not isinstance(rec, dict) or not _is_ms(rec.get("ms")):
            raise bad(f'table {name!r} has no measured "ms" ({ABOVE_0_MS})')
        col = rec.get("column")  # absent: no half-width copy measured (a narrow table, or a file from before)
        if col is not None:
            dim = col.get("dim") if isinstance(col, dict) else None
            if (not isinstance(dim, int) or isinstance(dim, bool) or not 0 < dim < L.MAX_EMBEDDING_DIM
                    or not _is_ms(col.get("ms"))):
                raise bad(f'table {name!r} has a "column" record without a "dim" and a measured "ms" ({ABOVE_0_MS})')
        for what, where in (("", rec), ('"column" ', col or {})):
            reps = where.get("reps_ms")  # absent in hand-made files: the medians are used
            if reps is not None and (not isinstance(reps, list) or not 0 < len(reps) <= MAX_REPS
                                     or not all(map(_is_ms, reps))):
                raise bad(f'table {name!r} has {what}"reps_ms" that is not a list of 1-{MAX_REPS} times '
                          f"({ABOVE_0_MS})")
    coll = data.get("collectives")  # absent in files from before it, or measured off CPU
    if coll is not None and not (isinstance(coll, dict) and _is_ms(coll.get("round_ms"), zero=True)):
        raise bad(f'"collectives" has no "round_ms" in ms (0 or more, {UNDER_MAX_MS})')
    probes = data.get("probes", [])  # absent in files from before the probes: the pressure is not priced
    if not isinstance(probes, list) or len(probes) > L.MAX_TABLES:
        raise bad('"probes" is not a list of probe ranks')
    for i, probe in enumerate(probes):
        names = probe.get("tables") if isinstance(probe, dict) else None
        if (not isinstance(names, list) or len(names) < 2 or len(set(map(str, names))) != len(names)
                or not all(isinstance(n, str) and n in data["tables"] for n in names)):
            raise bad(f"probe {i} does not list two or more distinct tables the file measured")
        if not _is_ms(probe.get("ms")):
            raise bad(f'probe {i} has no measured "ms" ({ABOVE_0_MS})')
    return data


def apply_table_costs(cfg: Config, data: Any, source: str = "the table costs") -> tuple[Config, list[str]]:
    """cfg with each table the file measured given compute_scale (the module's docstring), and the notes a plan
    carries: what was applied, from which device, and the scales' range. ConfigError/EngineError (one line) for a
    file of another topology or tables."""
    data = read_costs(data, source)
    cfg = without_costs(cfg)  # a measurement replaces an earlier one whole
    want, got = topology_record(cfg), data["topology"]
    for key, value in want.items():
        if got.get(key) != value:
            fix = (f"measure on {value} (measure-tables --device {value}), or plan for {got.get(key)}"
                   if key == "compute_device" else MEASURE_AGAIN)
            raise ConfigError(f"topology.{key}", f"{source} was measured with {key} {got.get(key)!r}, the config has "
                                                 f"{value!r}: {fix}")
    known = {t.name for t in cfg.tables}
    fixed = float(data["fixed_ms"])
    scales: dict[str, float] = {}
    exponents: dict[str, float] = {}
    clipped: list[str] = []
    held: list[str] = []
    for name, rec in data["tables"].items():
        if name not in known:
            raise ConfigError(f"tables.{name}", f"{source} measured a table {name!r} the config does not have: "
                                                f"{MEASURE_AGAIN}")
        now = table_record(cfg.table(name), cfg.constraint(name))
        for key, value in now.items():
            if rec.get(key) != value:
                raise ConfigError(f"tables.{name}.{key}", f"{source} measured it with {key} {rec.get(key)!r}, the "
                                                          f"config has {value!r}: {MEASURE_AGAIN}")
        est, _ = alone_estimate(cfg, name)
        raw = (float(rec["ms"]) - fixed) / est if est > 0 else 1.0
        s = float(np.clip(raw, MIN_SCALE, L.MAX_COMPUTE_SCALE))
        if s != raw:
            clipped.append(name)
        scales[name] = s
        col, t = rec.get("column"), cfg.table(name)
        if col is not None:
            if not col["dim"] < t.embedding_dim:
                raise ConfigError(f"tables.{name}.embedding_dim", f"{source} measured a column piece of {name!r} "
                                  f"{col['dim']} wide, not narrower than the table's {t.embedding_dim}: "
                                  f"{MEASURE_AGAIN}")
            g, out = column_exponent(column_ratio(rec, fixed), col["dim"] / t.embedding_dim)
            exponents[name] = g
            if out:
                held.append(name)
    constraints = dict(cfg.constraints)
    for name, s in scales.items():
        constraints[name] = replace(cfg.constraint(name), compute_scale=s, column_exponent=exponents.get(name))
    device, backend = _said(data.get("device_name")), _said(data.get("backend"))
    topo, step_note = _with_fixed_step(cfg.topology, fixed, device)
    notes = [step_note] if step_note else []
    topo, pressure_notes = _with_pressure(replace(cfg, topology=topo), data, device)
    if scales:
        v = np.array(list(scales.values()))
        notes.append(f"compute of {len(scales)} of {len(cfg.tables)} tables as measured alone on "
                     f"{device or 'an unrecorded device'} ({backend or '?'}, {source}): "
                     f"measured / estimated {v.min():.2f} to {v.max():.2f}, median {np.median(v):.2f}")
    if exponents:
        g = np.array(list(exponents.values()))
        notes.append(f"column pieces of {len(exponents)} tables priced from half-width copies measured alone: a "
                     f"piece with a share f of the columns costs f^g of its table, g {g.min():.2f} to {g.max():.2f}, "
                     f"median {np.median(g):.2f} (g 1: its share; never less)"
                     + (f"; g held to 0-{L.MAX_COLUMN_EXPONENT:g} for {', '.join(held[:5])}"
                        + (f" and {len(held) - 5} more" if len(held) > 5 else "") if held else ""))
    if len(scales) < len(cfg.tables):
        notes.append(f"{len(cfg.tables) - len(scales)} tables not in {source} keep the estimate")
    notes += pressure_notes
    topo, collectives_note = _with_collectives(topo, data, device)
    if collectives_note:
        notes.append(collectives_note)
    if clipped:
        notes.append(f"scale held to {MIN_SCALE:g}-{L.MAX_COMPUTE_SCALE:g} for {', '.join(clipped[:5])}"
                     + (f" and {len(clipped) - 5} more" if len(clipped) > 5 else ""))
    return replace(cfg, constraints=constraints, topology=topo), notes


def without_costs(cfg: Config) -> Config:
    """cfg as before any table costs were applied: no table's compute_scale or column_exponent, no profile where
    measure-tables made it, and in a profile of the user's no pressure term and none of the fixed costs
    measure-tables set in it (set_by_table_costs); the user's own figures stay."""
    constraints = {n: replace(c, compute_scale=None, column_exponent=None) for n, c in cfg.constraints.items()}
    prof = cfg.topology.profile
    if prof is not None:
        if prof.source.startswith(MEASURED_SOURCE):
            prof = None
        else:
            prof = replace(prof, **{k: 0.0 for k in prof.set_by_table_costs}, set_by_table_costs=(),
                           terms=tuple((k, v) for k, v in prof.terms if k != PRESSURE_TERM))
    return replace(cfg, constraints=constraints, topology=replace(cfg.topology, profile=prof))


def without_table_costs(config: dict) -> dict:
    """A config dict (parsed or not) without the table costs applied to it, as without_costs does to a Config: for
    the dashboard's "stop using the measured costs", on the workspace's dict as it stands."""
    out = dict(config)
    constraints = config.get("constraints")
    if isinstance(constraints, dict):
        out["constraints"] = {name: {k: v for k, v in c.items() if k not in MEASURED_FIELDS}
                              if isinstance(c, dict) else c for name, c in constraints.items()}
    topo = config.get("topology")
    prof = topo.get(PROFILE_FIELD) if isinstance(topo, dict) else None
    if isinstance(prof, dict):
        topo = dict(topo)
        if str(prof.get("source", "")).startswith(MEASURED_SOURCE):
            topo.pop(PROFILE_FIELD)
        else:
            topo[PROFILE_FIELD] = {**{k: v for k, v in prof.items() if k not in (PRESSURE_TERM, TABLE_COSTS_SET)},
                                   **{k: 0.0 for k in measured_fixed_costs(prof)}}
        out["topology"] = topo
    return out


def measured_fixed_costs(profile: Any) -> tuple[str, ...]:
    """The fixed costs (engine.profile.FIXED_COSTS names) a profile dict prices as measure-tables measured them: the
    nonzero ones of the profile it made, or those its set_by_table_costs names in a profile of the user's; () for
    anything else (no profile, "published", a profile without them)."""
    if not isinstance(profile, dict):
        return ()
    if str(profile.get("source", "")).startswith(MEASURED_SOURCE):
        return tuple(k for k in ("step_ms", "collective_ms", "piece_ms")
                     if isinstance(profile.get(k), (int, float)) and profile[k] > 0)
    named = profile.get(TABLE_COSTS_SET)
    return tuple(k for k in TABLE_COSTS_FIXED if isinstance(named, list) and k in named)


def _said(value: Any) -> str:
    """A name the file gives (its device, its backend), as one short line of text: data, never layout."""
    return one_line(value)[:MAX_SAID] if isinstance(value, str) else ""


def _with_fixed_step(topo: Topology, fixed: float, device_name: str | None) -> tuple[Topology, str]:
    """The topology whose profile carries the measured fixed step as every rank's step_ms (CPU, where the dry-run
    is what is planned for): each rank runs its kernels once a step, however many tables it holds. A profile that
    already prices a fixed step (python -m db calibrate) keeps its own."""
    if topo.compute_device is not Device.CPU:
        return topo, ""
    prof = topo.profile
    said = f"fixed step {fixed:.3g} ms per rank, as measured"
    if prof is None:
        made = DeviceProfile(Device.CPU, BACKEND[Device.CPU], topo.num_hosts, None, step_ms=fixed,
                             source=f"{MEASURED_SOURCE}the fixed step of a rank's kernels on "
                                    f"{device_name or 'the CPU'}; no other fixed costs measured")
        return replace(topo, profile=made), said
    if not prof.applies(topo) or prof.step_ms > 0:
        return topo, f"the profile's own fixed step kept ({prof.step_ms:.3g} ms), not the measured {fixed:.3g} ms"
    return replace(topo, profile=_set_fixed(prof, step_ms=fixed)), said


def _set_fixed(prof: DeviceProfile, **fixed: float) -> DeviceProfile:
    """A profile with fixed costs as measured; in a profile of the user's, named in set_by_table_costs, so that
    stopping the measured costs (dashboard) takes them out again and a later measurement replaces them."""
    if prof.source.startswith(MEASURED_SOURCE):
        return replace(prof, **fixed)
    return replace(prof, **fixed, set_by_table_costs=tuple(sorted({*prof.set_by_table_costs, *fixed})))


def _with_collectives(topo: Topology, data: dict[str, Any], device_name: str) -> tuple[Topology, str]:
    """The topology whose CPU profile prices a collective round as measure-tables timed it (gloo all-to-alls among
    world_size processes), where the profile prices none; a profile with its own collective_ms (db calibrate, from
    validation runs) keeps it. Without the figure, the note says what is left out."""
    prof = topo.profile
    if topo.compute_device is not Device.CPU or prof is None or not prof.applies(topo):
        return topo, ""
    if prof.collective_ms > 0:
        return topo, ""
    rec = data.get("collectives")
    if rec is None or rec.get("world_size") != topo.world_size:
        return topo, COLLECTIVES_NOTE
    ms = float(rec["round_ms"])
    said = (f"collectives priced at {ms:.3g} ms a round, as measure-tables timed gloo all-to-alls among "
            f"{topo.world_size} processes on {device_name or 'the device'}: each sharding type a plan uses adds its "
            "rounds to every rank's step")
    return replace(topo, profile=_set_fixed(prof, collective_ms=ms)), said


def _with_pressure(cfg: Config, data: dict[str, Any], device_name: str) -> tuple[Topology, list[str]]:
    """The topology whose profile prices the tables' cost to each other as the file's probe ranks measured it
    (probe_fit): the pressure term, replacing any the profile had (it is the config's own, on the device measured),
    and, where the profile is the one measure-tables made (its fixed step), a table beyond a rank's first as its
    piece_ms, with the fixed step less that, so a rank of one piece still costs the fixed step measured (a profile
    of the user's, from python -m db calibrate, keeps its own fixed costs)."""
    topo, prof = cfg.topology, cfg.topology.profile
    probes = data.get("probes", [])
    if topo.compute_device is not Device.CPU:
        return topo, ["the tables' pressure on each other is priced on CPU topologies only (the GPU estimate has no "
                      "working-set term); the probe ranks are kept in the file"] if probes else []
    if prof is None or not prof.applies(topo):
        return topo, []
    if not probes:
        return topo, ["the tables' pressure on each other is not priced: the file has no probe ranks (measured "
                      f"before they were added; {MEASURE_AGAIN})"]
    fit = priced_fit(cfg, data)  # a profile of the user's prices the pressure alone
    work = float(min(fit.pressure_ms_per_row * topo.ddr_mem_bw, L.MAX_TERM_WORK))
    terms = tuple(sorted({**dict(prof.terms), PRESSURE_TERM: work}.items()))
    where = device_name or "the device"
    notes = [f"tables' pressure on each other as {len(probes)} probe ranks measured on {where}: "
             f"{fit.pressure_ms_per_row * 1e6:.3g} ns per touched row at full pressure" if work else
             f"tables' pressure on each other not priced: {len(probes)} probe ranks on {where} measured none (their "
             "ranks stay within their tables' caches)"]
    prof = replace(prof, terms=terms)
    if len(probes) < MIN_PIECE_PROBES:
        notes.append(f"a table beyond a rank's first is not priced: {len(probes)} probe ranks, at least "
                     f"{MIN_PIECE_PROBES} fit it beside the pressure (each measure-tables round adds probe ranks: "
                     "raise --reps)")
    elif not prof.source.startswith(MEASURED_SOURCE):
        notes.append(f"the profile's own fixed costs kept (piece_ms {prof.piece_ms:.3g} ms), not the "
                     f"{probe_fit(cfg, data).piece_ms:.3g} ms per table beyond a rank's first the probe ranks "
                     "measured (the pressure fitted alone, without it)")
    else:
        over = max(fit.piece_ms - prof.step_ms, 0.0)
        prof = replace(prof, piece_ms=fit.piece_ms, step_ms=max(prof.step_ms - fit.piece_ms, 0.0))
        notes.append(f"a table beyond a rank's first priced at {fit.piece_ms:.3g} ms, as {len(probes)} probe ranks "
                     f"measured on {where} (each piece a rank holds costs that, the fixed step less it"
                     + (f"; it is over the fixed step, so a rank of one piece is priced {over:.3g} ms over its "
                        "fixed step as measured, every rank holding pieces alike)" if over > 0 else ")"))
    return replace(topo, profile=prof), notes


__all__ = ["COLLECTIVES_NOTE", "FORMAT", "VERSION", "alone", "alone_estimate", "apply_table_costs", "fixed_alone",
           "gain_margin", "measured_fixed_costs", "pressure_fit", "priced_fit", "probe_fit", "ProbeFit",
           "without_costs", "without_table_costs",
           "probe_groups", "rank_pieces", "read_costs", "table_record", "together",
           "topology_record"]
