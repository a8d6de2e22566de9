"""Cost-term benchmark: what makes one CPU rank slow, measured one factor at a time with the kernel dry-run (fbgemm,
fresh ids every step), for fitting and checking the CPU estimator's terms (docs/estimator.md, "CPU terms").

  python -m bench.cost_terms measure [--out FILE] [--iters K] [--reps N] [--only PREFIX]
  python -m bench.cost_terms fit [--data FILE] [--holdout PREFIX ...]

Each case is a set of tables all on one rank (world_size 1, table_wise, fused): the rank's touched working set
(distinct rows a step touches x row and optimizer-state bytes) and the optimizer move one at a time, the table
size, dim, pooling and skew around them. `measure` appends one JSON line per case and repetition (cases in a seeded
shuffled order, the load average beside each); `fit` prints each candidate model's error per case group.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.suite import ROOT  # noqa: E402

DATA = ROOT / "bench" / "results" / "cost_terms.jsonl"


@dataclass(frozen=True)
class Case:
    name: str  # group/detail: the group is what the case varies
    tables: tuple[tuple[int, int, float, float], ...]  # (rows, dim, pooling factor, zipf exponent)
    optimizer: str = "sgd"
    batch_size: int = 512


def cases() -> list[Case]:
    out = []
    # the touched working set: k tables whose steps touch ~all their rows, 0.1 to 40 MiB in all
    for rows in (2_000, 8_000, 30_000):
        for k in (1, 2, 4, 8, 16):
            out.append(Case(f"ws/{k}x{rows}", tuple((rows, 64, 16.0, 0.0) for _ in range(k))))
    # the working set in wide and narrow rows: as many bytes in few wide rows or many narrow ones
    for dim, rows, k in ((256, 8_000, 4), (256, 30_000, 4), (16, 30_000, 16), (16, 120_000, 16)):
        out.append(Case(f"wsdim/{dim}/{k}x{rows}", tuple((rows, dim, 16.0, 0.0) for _ in range(k))))
    # the same ids on large tables: table size at a fixed touched set
    for rows in (100_000, 1_000_000):
        for k in (1, 4):
            out.append(Case(f"size/{k}x{rows}", tuple((rows, 64, 8.0, 0.0) for _ in range(k))))
    # optimizers at small and large working sets
    for opt in ("sgd", "adagrad", "rowwise_adagrad"):
        for rows, k in ((4_000, 1), (30_000, 4), (200_000, 4)):
            out.append(Case(f"opt/{opt}/{k}x{rows}", tuple((rows, 64, 8.0, 0.0) for _ in range(k)), opt))
    # the optimizers' work per row and per column: the same rows at three widths
    for opt in ("sgd", "adagrad", "rowwise_adagrad"):
        for dim in (16, 256):
            out.append(Case(f"optdim/{opt}/{dim}", ((30_000, dim, 8.0, 0.0),) * 4, opt))
    # dims at a fixed row count
    for dim in (16, 32, 128, 256):
        out.append(Case(f"dim/{dim}", ((50_000, dim, 8.0, 0.0),) * 2))
    # pooling factors
    for pf in (1.0, 4.0, 32.0, 64.0):
        out.append(Case(f"pool/{pf:g}", ((50_000, 64, pf, 0.0),) * 2))
    # skew: Zipf ids touch fewer distinct rows
    for s in (0.8, 1.1, 1.4):
        out.append(Case(f"zipf/{s:g}", ((500_000, 64, 16.0, s),) * 4))
    # skew at three table sizes: does a skewed table's cost per id grow with its size as a uniform one's does
    for s in (0.0, 1.05):
        for dim in (32, 128):
            for rows in (20_000, 200_000, 2_000_000):
                out.append(Case(f"zipfsize/{s:g}/{dim}/{rows}", ((rows, dim, 16.0, s),)))
    # mixed ranks, as plans make them
    rng = np.random.default_rng(11)
    for i in range(10):
        k = int(rng.integers(2, 10))
        rows = np.exp(rng.uniform(np.log(1e3), np.log(1e6), k)).astype(int)
        dims = rng.choice([16, 32, 64, 128], k)
        pfs = np.round(np.exp(rng.uniform(0, np.log(30), k)), 1)
        zipf = np.where(rng.random(k) < 0.3, 1.1, 0.0)
        opt = str(rng.choice(["sgd", "adagrad", "rowwise_adagrad"]))
        out.append(Case(f"mixed/{i}", tuple((int(r), int(d), float(p), float(z))
                                             for r, d, p, z in zip(rows, dims, pfs, zipf)), opt))
    return out


def config_of(case: Case) -> dict:
    tables = [{"name": f"t{i}", "num_embeddings": r, "embedding_dim": d, "feature_names": [f"f{i}"]}
              for i, (r, d, _, _) in enumerate(case.tables)]
    constraints = {f"t{i}": {"pooling_factors": [p], **({"zipf_exponent": z} if z else {})}
                   for i, (_, _, p, z) in enumerate(case.tables)}
    return {"tables": tables, "constraints": constraints,
            "topology": {"world_size": 1, "local_world_size": 1, "compute_device": "cpu",
                         "batch_size": case.batch_size, "optimizer": case.optimizer}}


def case_config(row: dict):
    """The engine config of a measured row (its case name, tables, optimizer and batch size)."""
    import engine

    return engine.parse_config(config_of(Case(row["case"], tuple(tuple(t) for t in row["tables"]), row["optimizer"],
                                              row["batch_size"])))


def case_group(name: str) -> str:
    """What a case varies, held out together in fits: opt/adagrad, optdim/sgd, else the first part (ws, dim, ...)."""
    return name.rsplit("/", 1)[0] if name.startswith("opt") else name.split("/")[0]


def table_wise_plan(cfg) -> dict:
    import engine

    return {t.name: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (0,),
                                     (engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), 0),))
            for t in cfg.tables}


def time_steps(cfg, iters: int, seed: int) -> dict:
    """Per-step ms of rank 0's pieces under fbgemm, fresh ids every step: min, 25th percentile and median (on a
    busy machine the lower quantiles are the least disturbed by other processes taking the core)."""
    import torch

    import engine

    s = engine.DryrunSettings(iters=iters, warmup=3, seed=seed)
    steps = engine.rank_steps(cfg, engine.rank_pieces(cfg, table_wise_plan(cfg))[0], s)
    torch.set_num_threads(1)
    model = engine.fbgemm_rank()(steps, cfg.topology.optimizer, torch.device("cpu"), s.learning_rate)
    for _ in range(s.warmup):
        model.step()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        model.step()
        times.append((time.perf_counter() - t0) * 1000.0)
    return {"min_ms": min(times), "p25_ms": float(np.percentile(times, 25)), "median_ms": float(np.median(times))}


def measure(selected: list[Case], out: Path, iters: int, reps: int, log=print) -> None:
    """Time the cases in a seeded shuffled order, appending one JSON line per case and repetition to `out`; each row
    records the machine (bench.measured.machine_meta), so a fit can refuse cases timed elsewhere."""
    from bench.measured import machine_meta
    import engine

    machine = machine_meta()
    order = [(r, c) for r in range(reps) for c in selected]
    rng = np.random.default_rng(5)
    order = [order[i] for i in rng.permutation(len(order))]
    out.parent.mkdir(parents=True, exist_ok=True)
    for n, (rep, case) in enumerate(order):
        cfg = engine.parse_config(config_of(case))
        load = os.getloadavg()[0]
        t0 = time.time()
        got = time_steps(cfg, iters, rep)
        est = engine.evaluate(cfg, table_wise_plan(cfg)).ranks[0].cost_ms
        row = {"case": case.name, "rep": rep, "tables": case.tables, "optimizer": case.optimizer,
               "batch_size": case.batch_size, **got, "estimated_ms": est, "load1": load, "wall_s": time.time() - t0,
               "machine": machine}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        log(f"[{n + 1}/{len(order)}] {case.name:28s} p25 {got['p25_ms']:9.3f} ms, estimated {est:9.3f} "
            f"(load {load:.1f})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cost_terms")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, default=DATA)
    m.add_argument("--iters", type=int, default=20)
    m.add_argument("--reps", type=int, default=1)
    m.add_argument("--only", default="", help="cases whose name starts with this")
    f = sub.add_parser("fit")
    f.add_argument("--data", type=Path, default=DATA)
    f.add_argument("--out", type=Path, default=None, help="also write the report here (Markdown)")
    args = p.parse_args(argv)
    if args.cmd == "measure":
        measure([c for c in cases() if c.name.startswith(args.only)], args.out, args.iters, args.reps)
        return 0
    from bench.cost_terms_fit import report

    text = report(args.data)
    print(text)
    if args.out is not None:
        import engine

        head = (f"# CPU cost terms, fitted to kernel dry-runs\n\nMade by `python -m bench.cost_terms measure` then "
                f"`python -m bench.cost_terms fit --out {args.out.name}` ({time.strftime('%Y-%m-%d')}). Each case "
                "is a set of tables on one rank, timed with fbgemm on this machine's CPU (1 thread, fresh ids every "
                "step, the 25th percentile of 20 steps, the median over repetitions).\n\n")
        engine.write_text_file(args.out, head + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
