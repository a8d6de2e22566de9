"""Per-term calibration on this machine: seeded 2-rank CPU configs, each planned and dry-run with fbgemm (fresh ids
every step), recorded by `python -m db dryrun` into a SQLite store, then `python -m db calibrate --terms` on them.

  python -m bench.calibrate_terms [--per-optimizer N] [--iters K] [--seed S] [--db FILE] [--out FILE]
  python -m bench.calibrate_terms --measure-only FILE [--backend torch] ...   (on a machine without the store)
  python -m bench.calibrate_terms --from FILE [--out FILE]                      (record those and fit them here)

The first form dry-runs through `python -m db dryrun` (fbgemm). --measure-only dry-runs the same configs in this
process with the engine alone (no database: a quiet machine without the store's packages) and writes each config,
plan and result, with the machine's device name and load average, to FILE; --from records them into a store as
`db dryrun` would (db.runsink.record_result) and fits them.

The report (Markdown) gives the command, the load average, and calibrate's text: each term's value +- standard
error or why it was not fitted, and the leave-one-run-out per-rank error with the defaults and fitted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.suite import ROOT  # noqa: E402

OUT = ROOT / "bench" / "results" / "calibrate_terms.md"
FBGEMM_CPU_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")  # fbgemm has no CPU adam kernel


def config(opt: str, dims, rows, pfs, world_size: int = 2, batch_size: int = 256, **topology) -> dict:
    """A CPU config of one table per (rows, dim, pooling factor), one feature each."""
    tables = [{"name": f"t{i}", "num_embeddings": int(r), "embedding_dim": int(d), "feature_names": [f"f{i}"]}
              for i, (r, d) in enumerate(zip(rows, dims))]
    return {"tables": tables, "constraints": {f"t{i}": {"pooling_factors": [float(p)]} for i, p in enumerate(pfs)},
            "topology": {"world_size": world_size, "compute_device": "cpu", "batch_size": batch_size,
                         "optimizer": opt, **topology}}


def random_configs(seed: int = 0, per_optimizer: int = 3,
                   optimizers: tuple[str, ...] = ("sgd", "adagrad", "rowwise_adagrad", "adam")) -> list[dict]:
    """per_optimizer configs per optimizer: 3-6 tables of 1k-300k rows, dims 16-128, pooling factors 1-16."""
    rng = np.random.default_rng(seed)
    out = []
    for opt in optimizers:
        for _ in range(per_optimizer):
            k = int(rng.integers(3, 7))
            out.append(config(opt, rng.choice([16, 32, 64, 128], k), np.exp(rng.uniform(np.log(1e3), np.log(3e5), k)),
                              rng.choice([1, 2, 4, 8, 16], k)))
    return out


def record(configs: list[dict], workdir: Path, iters: int, log=print) -> list[float]:
    """Plan and dry-run each config into the store DATABASE_URL names; the load averages as each run ended."""
    import engine
    from db.__main__ import main

    loads = []
    for i, raw in enumerate(configs):
        cfg_path, plan_path = workdir / f"c{i}.json", workdir / f"c{i}.plan.json"
        cfg_path.write_text(json.dumps(raw))
        plan_path.write_text(json.dumps(engine.plan_to_dict(engine.plan(engine.parse_config(raw)))))
        t0 = time.time()
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["dryrun", str(cfg_path), "--plan", str(plan_path), "--backend", "fbgemm", "--iters",
                         str(iters), "--warmup", "3", "--json"])
        if code:
            raise SystemExit(f"dry-run of config {i} failed ({code})")
        loads.append(os.getloadavg()[0])
        log(f"[{i + 1}/{len(configs)}] {raw['topology']['optimizer']:16s} {time.time() - t0:5.1f} s, "
            f"load {loads[-1]:.1f}")
    return loads


def measure_only(configs: list[dict], iters: int, backend: str, log=print) -> list[dict]:
    """Each config planned and dry-run in this process (the engine alone), as db dryrun would record it."""
    import engine

    out = []
    for i, raw in enumerate(configs):
        cfg = engine.parse_config(raw)
        plan = engine.plan(cfg)
        t0 = time.time()
        settings = engine.DryrunSettings(backend=engine.DryrunBackend(backend), iters=iters, warmup=3)
        res = engine.run_dryrun(cfg, plan.tables, settings)
        out.append({"name": f"c{i}", "config": raw, "plan": engine.plan_to_dict(plan),
                    "result": {**res.as_dict(), "device_name": engine.cpu_name(), "load_average": os.getloadavg()[0],
                               "cpu_count": os.cpu_count(), "niceness": os.nice(0)}})
        log(f"[{i + 1}/{len(configs)}] {raw['topology']['optimizer']:16s} {time.time() - t0:5.1f} s, "
            f"load {out[-1]['result']['load_average']:.1f}")
    return out


def record_measured(items: list[dict]) -> list[float]:
    """The measure_only results stored as dry-runs of their plans in the store DATABASE_URL names."""
    import engine
    from db.models import RunKind
    from db.runsink import open_store, record_result, store_plan

    store = open_store()
    for item in items:
        cfg = engine.parse_config(item["config"])
        plan = engine.evaluate(cfg, engine.parse_plan(item["plan"], cfg), planner="file")
        token = store_plan(store, cfg, plan.tables, plan, None, item["name"], RunKind.DRYRUN)
        result = item["result"]
        record_result(store, store.create_run(token, RunKind.DRYRUN.value, result["backend"], result["device"]),
                      result)
    return [item["result"]["load_average"] for item in items]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.calibrate_terms")
    p.add_argument("--per-optimizer", type=int, default=8)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", type=Path, default=None, help="the SQLite file to record into (default: a temporary one)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--measure-only", type=Path, metavar="FILE", help="dry-run here without a store, into FILE")
    p.add_argument("--backend", choices=("fbgemm", "torch"), default="fbgemm", help="with --measure-only")
    p.add_argument("--from", dest="source", type=Path, metavar="FILE", help="record --measure-only's FILE and fit")
    args = p.parse_args(argv)
    optimizers = FBGEMM_CPU_OPTIMIZERS if args.backend == "fbgemm" else (*FBGEMM_CPU_OPTIMIZERS, "adam")
    configs = random_configs(args.seed, args.per_optimizer, optimizers)
    say = lambda s: print(s, file=sys.stderr)  # noqa: E731
    if args.measure_only:
        args.measure_only.write_text(json.dumps(measure_only(configs, args.iters, args.backend, say)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        db_file = args.db or Path(tmp) / "runs.db"
        os.environ["DATABASE_URL"] = f"sqlite:///{db_file}"
        t0 = time.time()
        if args.source:
            items = json.loads(args.source.read_text())
            configs, loads = [item["config"] for item in items], record_measured(items)
        else:
            loads = record(configs, Path(tmp), args.iters, say)
        from db.calibrate_cli import terms_text
        from db.calibration import terms_from_store
        from db.runsink import open_store

        text = terms_text(terms_from_store(open_store()))
    opts = sorted({c["topology"]["optimizer"] for c in configs})
    if args.source:
        first = items[0]["result"]
        how = (f"Measured by `python -m bench.calibrate_terms --measure-only FILE --backend {first['backend']} "
               f"--per-optimizer N --iters {first['iters']}` on {first['device_name']!r} ({first.get('cpu_count')} "
               f"cores, niceness {first.get('niceness')}), then recorded into a SQLite store and fitted here by "
               f"`python -m bench.calibrate_terms --from FILE` ({time.strftime('%Y-%m-%d')}): {len(configs)} seeded "
               f"2-rank CPU configs ({', '.join(opts)}), each planned and dry-run with {first['backend']}")
    else:
        how = (f"Made by `python -m bench.calibrate_terms --per-optimizer {args.per_optimizer} --iters {args.iters} "
               f"--seed {args.seed}` ({time.strftime('%Y-%m-%d')}, {time.time() - t0:.0f} s): {len(configs)} seeded "
               f"2-rank CPU configs ({', '.join(opts)}), each planned and dry-run with fbgemm")
    iters = items[0]["result"]["iters"] if args.source else args.iters
    head = (f"# Per-term calibration\n\n{how}, 1 thread, fresh ids every step, median of {iters} steps; "
            f"1-minute load average {min(loads):.1f}-{max(loads):.1f}"
            + ("" if args.source else f" on {os.cpu_count()} cores, this process at niceness {os.nice(0)}")
            + ". Then `python -m db calibrate --terms`:\n\n")
    import engine

    engine.write_text_file(args.out, head + "```\n" + text + "\n```\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
