"""Per-term calibration on this machine: seeded 2-rank CPU configs, each planned and dry-run with fbgemm (fresh ids
every step), recorded by `python -m db dryrun` into a SQLite store, then `python -m db calibrate --terms` on them.

  python -m bench.calibrate_terms [--per-optimizer N] [--iters K] [--seed S] [--db FILE] [--out FILE]

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
    from engine.planfile import plan_to_dict

    loads = []
    for i, raw in enumerate(configs):
        cfg_path, plan_path = workdir / f"c{i}.json", workdir / f"c{i}.plan.json"
        cfg_path.write_text(json.dumps(raw))
        plan_path.write_text(json.dumps(plan_to_dict(engine.plan(engine.parse_config(raw)))))
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.calibrate_terms")
    p.add_argument("--per-optimizer", type=int, default=8)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", type=Path, default=None, help="the SQLite file to record into (default: a temporary one)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db_file = args.db or Path(tmp) / "runs.db"
        os.environ["DATABASE_URL"] = f"sqlite:///{db_file}"
        configs = random_configs(args.seed, args.per_optimizer, FBGEMM_CPU_OPTIMIZERS)
        t0 = time.time()
        loads = record(configs, Path(tmp), args.iters, lambda s: print(s, file=sys.stderr))
        from db.calibrate_cli import terms_text
        from db.calibration import terms_from_store
        from db.runsink import open_store

        text = terms_text(terms_from_store(open_store()))
    cmd = (f"python -m bench.calibrate_terms --per-optimizer {args.per_optimizer} --iters {args.iters} "
           f"--seed {args.seed}")
    head = (f"# Per-term calibration on this machine\n\nMade by `{cmd}` ({time.strftime('%Y-%m-%d')}, "
            f"{time.time() - t0:.0f} s): {len(configs)} seeded 2-rank CPU configs ({args.per_optimizer} per optimizer "
            f"fbgemm runs on CPU: {', '.join(FBGEMM_CPU_OPTIMIZERS)}), each planned and dry-run with fbgemm, "
            f"1 thread, fresh ids every step, median of {args.iters} steps; 1-minute load average "
            f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores, this process at niceness {os.nice(0)}. "
            "Then `python -m db calibrate --terms`:\n\n")
    from engine import atomicfile

    atomicfile.write_text(args.out, head + "```\n" + text + "\n```\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
