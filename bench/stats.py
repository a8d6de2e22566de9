"""`python -m bench.stats`: time `python -m engine stats`' measuring pass on 10^7 and 10^8 lookups.

A seeded sample (engine.stats.generate) of one 4-feature table is generated once per size into a temporary folder;
each measurement runs in its own child process, which reports its wall seconds and its peak RSS (ru_maxrss); the
parent adds the child process's CPU seconds (its start and threads included). At each size up to
engine.EXACT_MAX_LOOKUPS (10^8) the default (exact) replay and a SHARDS replay (budget a tenth of the lookups) both
run, and the largest gap between their miss-rate curves is reported (--exact-1e8: the other replay past it too).
`--against REV`: the same child of the code at git revision REV (extracted with git archive) runs its exact replay
on each sample too, in the same run, for the speedup ratio and to check that the curves are the same numbers.
Writes bench/results/stats.md with the command, the date, the niceness and the load average. Targets (issue 25):
10^8 lookups in <= 60 s with <= 1 GB RSS on 2 cores; sampled within 2 points of exact.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "stats.md"
CONFIG = {"tables": [{"name": "big", "num_embeddings": 5_000_000, "embedding_dim": 64,
                      "feature_names": ["f0", "f1", "f2", "f3"]}],
          "topology": {"world_size": 8, "local_world_size": 8, "batch_size": 512}}
LOOKUPS_PER_ROW = 0.95 * 1 + 0.90 * 3 + 0.85 * 8 + 0.95 * 20  # the generator's poolings less its empty bags


def child(config: str, sample: str, budget: int) -> None:
    """Measure in this process; print {seconds, max_rss_bytes, method, lookups, curve} as JSON."""
    import resource

    t0 = time.perf_counter()
    result = engine.workload_stats(engine.load_config(config), sample, budget=budget)
    seconds = time.perf_counter() - t0
    t = result["tables"]["big"]
    print(json.dumps({"seconds": seconds, "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "method": t["miss_ratio_method"], "lookups": t["lookups"],
                      "curve": [p["lru_miss_rate"] for p in t["miss_ratio_curve"]]}))


def _run(args: list[str], root: Path = ROOT) -> dict:
    """The child's answer, with `wall_seconds` and `cpu_seconds` of the whole child process (its start, imports
    and threads included: the same measure for this code and an older revision's)."""
    import resource

    env = dict(os.environ, PYTHONPATH=str(root))
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "bench.stats", *args], cwd=root, capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    out = json.loads(proc.stdout)
    out["wall_seconds"] = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stats")
    p.add_argument("--child", nargs=3, metavar=("CONFIG", "SAMPLE", "BUDGET"), help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="1e7,1e8", help="lookups to measure (default %(default)s)")
    p.add_argument("--exact-1e8", action="store_true",
                   help="also the other replay at the largest size (SHARDS where the default is exact)")
    p.add_argument("--against", metavar="REV", help="also run the code of this git revision (its exact replay) on "
                   "each sample, for the speedup ratio in the same run")
    p.add_argument("--no-write", action="store_true", help="print only; leave bench/results/stats.md")
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    EXACT_MAX_LOOKUPS = engine.EXACT_MAX_LOOKUPS

    sizes = [int(float(s)) for s in args.sizes.split(",")]
    rows_out, loads = [], [_load()]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        engine.write_json_file(config, CONFIG)
        old = _extract(args.against, Path(tmp) / "old") if args.against else None
        for size in sizes:
            sample = Path(tmp) / f"sample_{size}.parquet"
            t0 = time.perf_counter()
            gen = subprocess.run([sys.executable, "-m", "engine.stats.generate", str(config), "--rows",
                                  str(round(size / LOOKUPS_PER_ROW)), "--seed", "1", "--out", str(sample)],
                                 cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False,
                                 capture_output=True, text=True)
            if gen.returncode:
                raise SystemExit(gen.stderr.strip())
            gen_s = time.perf_counter() - t0
            runs = {"default": _run(["--child", str(config), str(sample), str(EXACT_MAX_LOOKUPS)])}
            loads.append(_load())
            if old is not None:
                runs[f"at {args.against}"] = _run(["--child", str(config), str(sample), str(size * 2)], old)
                loads.append(_load())
            if size <= EXACT_MAX_LOOKUPS or args.exact_1e8:
                exact = runs["default"]["method"]["method"] == "exact"
                other = ("sampled", max(1_000, size // 10)) if exact else ("exact", 2**62)
                runs[other[0]] = _run(["--child", str(config), str(sample), str(other[1])])
                loads.append(_load())
            rows_out.append((size, sample.stat().st_size, gen_s, runs))
            print(_row_text(size, runs), flush=True)
    text = _report(rows_out, loads, " ".join(["python -m bench.stats"] + (argv if argv is not None else sys.argv[1:])))
    print(text)
    if not args.no_write:
        engine.write_text_file(RESULTS, text)
    return 0


def _extract(rev: str, to: Path) -> Path:
    """The tree of git revision `rev` of this repository, written under `to` (git archive)."""
    to.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=False)
    if archive.returncode:
        raise SystemExit(f"error: --against {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(to)], input=archive.stdout, check=True)
    return to


def _gap(runs: dict) -> float | None:
    curves = {r["method"]["method"]: r["curve"] for name, r in runs.items() if not name.startswith("at ")}
    if len(curves) < 2:
        return None
    return max(abs(a - b) for a, b in zip(*curves.values()))


def _speedup(runs: dict) -> str:
    """The default run against the older revision's, when both ran: CPU and wall ratios, and whether the curves
    are the same numbers."""
    old = next((r for name, r in runs.items() if name.startswith("at ")), None)
    if old is None:
        return ""
    new = runs["default"]
    same = "identical" if old["curve"] == new["curve"] else "DIFFERENT"
    return (f"\n|  |  | speedup against {next(n for n in runs if n.startswith('at '))[3:]}: "
            f"{old['cpu_seconds'] / new['cpu_seconds']:.2f}x CPU, {old['seconds'] / new['seconds']:.2f}x wall; "
            f"curves {same} |  |  |  |")


def _row_text(size: int, runs: dict) -> str:
    parts = []
    for name, r in runs.items():
        m = r["method"]
        method = m["method"] + (f" (rate {m['sampling_rate']:.4g})" if m["method"] == "shards" else "")
        parts.append(f"| {size:.0e} | {r['lookups']:,} | {name}: {method} | {r['cpu_seconds']:.1f} | "
                     f"{r['seconds']:.1f} | {r['wall_seconds']:.1f} | {r['max_rss_bytes'] / 2**20:,.0f} |")
    gap = _gap(runs)
    return "\n".join(parts) + (f"\n|  |  | largest gap sampled vs exact: {gap * 100:.2f} points |  |  |  |  |"
                               if gap is not None else "") + _speedup(runs)


def _verdicts(rows: list) -> list[str]:
    out = []
    size, _, _, runs = max(rows, key=lambda r: r[0])
    d = runs["default"]
    if size >= 10**8:
        sec, cpu, gb = d["seconds"], d["cpu_seconds"], d["max_rss_bytes"] / 1e9
        out.append(f"- {size:.0e} lookups in <= 60 s on 2 cores: {'met' if cpu <= 60 else 'missed'} in CPU seconds "
                   f"({cpu:.1f} s of CPU, {cpu / 60 - 1:+.0%} of the target); {'met' if sec <= 60 else 'missed'} in "
                   f"wall seconds ({sec:.1f} s under the load above, at nice {os.nice(0)})")
        out.append(f"- <= 1 GB peak RSS: {'met' if gb <= 1 else 'missed'} ({gb:.2f} GB)")
    for size, _, _, runs in rows:
        gap = _gap(runs)
        if gap is not None:
            out.append(f"- sampled within 2 points of the exact replay at {size:.0e} lookups: "
                       f"{'met' if gap <= 0.02 else 'missed'} ({gap * 100:.2f} points at the worst of 16 cache sizes)")
    return out


def conditions(loads: list[str], nice: int, cores: int) -> str:
    """What the load averages say about the figures: a busy machine (1-minute load above half the cores at any
    sample) makes the seconds an upper bound; a quiet one makes them what an idle machine gives."""
    worst = max(float(text.split()[0]) for text in loads) if loads else 0.0
    at = f" at nice {nice}" if nice else ""
    if worst > cores / 2:
        return (f"The machine was busy while this ran (1-minute load up to {worst:.2f} on {cores} cores), and the "
                f"bench ran{at or ' at nice 0'}: the seconds are an upper bound of what an idle machine gives.")
    return f"The machine was quiet while this ran (1-minute load at most {worst:.2f} on {cores} cores){at}."


def _report(rows: list, loads: list[str], command: str) -> str:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# `python -m engine stats`: time and memory of the measuring pass", "",
        f"Command: `{'nice -n %d ' % os.nice(0) if os.nice(0) else ''}{command}`  ", f"Date: {now}  ",
        f"Niceness: {os.nice(0)}  ",
        f"Machine: {os.cpu_count()} cores; load average (1, 5, 15 min) before and after each run: "
        + "; ".join(loads) + ".  ", conditions(loads, os.nice(0), os.cpu_count() or 1), "",
        "Sample: one table of 5,000,000 rows fed by 4 features (2 Zipf, 2 uniform; poolings 1, 3, 8, 20; empty "
        "bags; ids beyond the table folded), seeded, Parquet; generated once per size into a temporary folder.", "",
        "| lookups (target) | lookups | replay | CPU s (child process) | wall s (in child) | wall s (with start) | "
        "peak RSS MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, _, _, runs in rows:
        lines.append(_row_text(size, runs))
    lines += ["", "Targets (issue 25), from the rows above:", ""] + _verdicts(rows)
    lines += ["", "Sample files: " + ", ".join(f"{s:.0e} lookups: {b / 2**20:,.0f} MiB, generated in {g:.0f} s"
                                               for s, b, g, _ in rows) + ".", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
