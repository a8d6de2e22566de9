"""Gather a job's per-rank files into a ValidationResult beside the plan's estimates. A job that crashed, was
killed (out of memory, timeout, cancel) or left ranks without a file becomes status failed (or cancelled) with
a one-line error and the log's tail, never an exception.

Job scripts run this after torchrun: python -m engine.validate.results OUT_DIR --exit-code RC [--launcher K]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from engine import atomicfile
from engine.config import load_config
from engine.errors import EngineError, human_bytes
from engine.estimate import comms_bw, device_bw
from engine.evaluate import evaluate, shard_arrays
from engine.memory_parts import PARTS as MEMORY_PARTS
from engine.memory import StepMemory
from engine.planfile import load_plan
from engine.pricing import Pricing, priced_for
from engine.types import ComputeKernel, Config, MemoryParts, TablePlan
from engine.validate.types import (EMBEDDING_TIMES, LOG_TAIL_CHARS, Job, LauncherKind, RankResult, RunStatus,
                                   ValidationResult)

MEASURED_MEMORY = ("held_bytes", "step_peak_bytes", "step_peak_max_bytes", "step_start_bytes", "batch_bytes",
                   "held_weights_bytes", "held_optimizer_bytes", "held_grad_bytes", "held_cache_bytes",
                   "held_input_bytes", "held_other_bytes")  # what a rank file measures (train.measure_memory)
SIGNAL_EXIT = re.compile(r"exitcode\s*:\s*-(\d+)")  # torchrun's report of a rank killed by a signal


@dataclass(frozen=True)
class Ending:
    """How the job ended, as its launcher saw it."""

    exit_code: int | None
    cancelled: bool = False
    timed_out_s: float | None = None
    detail: str = ""  # e.g. Slurm's final state
    elapsed_s: float | None = None


def run_pricing(cfg: Config, job: Job) -> Pricing:
    """The config as the job runs it (its device and ranks per node: the estimate's topology), by the one rule
    every measurement prices with."""
    return priced_for(cfg, job.device, "validation run", local_world_size=max(1, job.nproc // job.slurm.nodes))


def estimated_held(cfg: Config, tables: dict[str, TablePlan]) -> list[dict[str, int]]:
    """Per rank, the estimate of what stays between steps by part, under the names a rank file measures them
    (estimated_held_weights_bytes, ...: engine.memory.StepMemory.held_parts)."""
    mem = StepMemory(cfg)
    for name, tp in tables.items():
        mem.add(name, tp, *shard_arrays(cfg, name, tp))
    return [{f"estimated_held_{k}": v for k, v in held.items()} for held in mem.held_by_rank()]


def estimates(cfg: Config, tables: dict[str, TablePlan]) -> tuple[list[dict], float, float]:
    """Per rank {estimated_ms, compute, comms, bytes, memory parts}, and the lookup and comms bandwidths assumed
    (bytes/ms)."""
    plan = evaluate(cfg, tables, planner="file")
    held = estimated_held(cfg, tables)
    out = []
    for r in plan.ranks:
        p = r.perf
        out.append({"estimated_ms": p.total, "estimated_compute_ms": p.fwd_compute + p.bwd_compute + p.prefetch_compute,
                    "estimated_comms_ms": p.fwd_comms + p.bwd_comms + p.input_dist_comms,
                    "estimated_bytes": r.hbm_bytes + r.ddr_bytes,
                    "memory": {**estimated_memory(r.memory), **held[r.rank]}})
    topo = cfg.topology
    return out, device_bw(topo, ComputeKernel.FUSED, 1.0), comms_bw(topo)


def estimated_memory(parts: MemoryParts | None) -> dict[str, int]:
    """A rank's estimated memory parts (engine.memory) under the result's names: estimated_held_bytes,
    estimated_peak_bytes, estimated_<part>_bytes."""
    if parts is None:
        return {}
    names = {"held_bytes": "estimated_held_bytes", "peak_bytes": "estimated_peak_bytes"}
    names.update({p: f"estimated_{p}" for p in MEMORY_PARTS})
    values = parts.as_dict()
    return {out: int(values[name]) for name, out in names.items()}


def measured_memory(data: dict) -> dict[str, int]:
    """The memory a rank file measured (engine.validate.train.measure_memory): held and step-peak bytes, by part."""
    return {k: int(v) for k, v in data.items() if k in MEASURED_MEMORY and isinstance(v, int)}


def read_ranks(job: Job) -> tuple[dict[int, dict], dict[int, str]]:
    """({rank: its result file}, {rank: its error line}) for ranks 0..nproc-1."""
    done, errors = {}, {}
    for r in range(job.nproc):
        for suffix, bucket in ((".json", done), (".error.json", errors)):
            path = job.ranks_dir / f"rank{r}{suffix}"
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            bucket[r] = data if bucket is done else str(data.get("error", "failed"))
    return done, errors


def log_tail(job: Job, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(job.log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _killed(code: int | None, tail: str) -> str | None:
    nums = [-code] if code is not None and code < 0 else [int(m) for m in SIGNAL_EXIT.findall(tail)]
    if not nums:
        return None
    what = _signal_name(nums[0])
    oom = " (the kernel's out-of-memory killer does this when memory runs out)" if nums[0] == signal.SIGKILL else ""
    return f"a rank was killed by {what}{oom}"


def error_line(job: Job, end: Ending, done: dict[int, dict], errors: dict[int, str], tail: str) -> str | None:
    """Why the run did not succeed, in one line; None when it did."""
    if end.cancelled:
        return "cancelled"
    if end.timed_out_s is not None:
        return f"timed out after {end.timed_out_s:g} s: the job was stopped (raise --timeout, or lower --iters)"
    if errors:
        r = min(errors)
        return f"rank {r}: {errors[r]}"
    missing = [r for r in range(job.nproc) if r not in done]
    if missing or end.exit_code != 0:
        why = _killed(end.exit_code, tail) or (f"the job exited with code {end.exit_code}" if end.exit_code
                                                else "the job ended")
        detail = f" (scheduler state {end.detail})" if end.detail else ""
        gone = f"; ranks {', '.join(map(str, missing))} wrote no result" if missing else ""
        return f"{why}{detail}{gone}; see the log tail"
    bad = [r for r in sorted(done) if done[r].get("mismatches")]
    if bad:
        return f"rank {bad[0]} holds other shards than the plan: {'; '.join(done[bad[0]]['mismatches'])}"
    return None


def _rank_result(r: int, data: dict, est: dict | None) -> RankResult:
    est = dict(est or {})
    memory = {**measured_memory(data), **est.pop("memory", {})}
    embedding = {k: float(data[k]) for k in EMBEDDING_TIMES if isinstance(data.get(k), (int, float))}
    return RankResult(rank=r, iteration_ms=float(data["iteration_ms"]), peak_bytes=int(data["peak_bytes"]),
                      state_bytes=int(data.get("state_bytes", 0)), shards_match=not data.get("mismatches"),
                      mismatches=tuple(data.get("mismatches", ())), memory=memory, embedding=embedding, **est)


def gather(job: Job, launcher: LauncherKind, end: Ending) -> ValidationResult:
    """The result of a finished (or stopped) job, from the files it left under job.out_dir."""
    pricing = run_pricing(load_config(str(job.config_path)), job)
    cfg = pricing.config
    tables = load_plan(str(job.plan_path), cfg)
    est, compute_bw, cbw = estimates(cfg, tables)
    done, errors = read_ranks(job)
    tail = log_tail(job)
    error = error_line(job, end, done, errors, tail)
    status = RunStatus.SUCCEEDED if error is None else RunStatus.CANCELLED if end.cancelled else RunStatus.FAILED
    ranks = tuple(_rank_result(r, done[r], est[r] if r < len(est) else None) for r in sorted(done))
    info = {k: v for k, v in (done[min(done)].get("device_info", {}) if done else {}).items()
            if isinstance(v, (str, int, float))}
    ids = done[min(done)].get("ids") if done else None
    if isinstance(ids, dict):
        info["ids"] = ids
    info.update(world_size=cfg.topology.world_size, nodes=job.slurm.nodes,
                estimate_multi_host=cfg.topology.world_size > cfg.topology.local_world_size, **pricing.fields(),
                notes=[pricing.note] if pricing.note else [])
    return ValidationResult(status=status, ranks=ranks, backend=job.backend, device=job.device, iters=job.iters,
                            warmup=job.warmup, nproc=job.nproc, launcher=launcher, error=error, log_tail=tail,
                            device_info=info, compute_bw=compute_bw, comms_bw=cbw, elapsed_s=end.elapsed_s)


def write_result(result: ValidationResult, path: Path) -> None:
    try:
        atomicfile.write_json(path, result.as_dict())
    except OSError as e:
        raise EngineError(f"cannot write the results file {str(path)!r}: {e.strerror or e}") from None


def _bytes_or_dash(n: object) -> str:
    return human_bytes(n) if isinstance(n, int) else "-"


def summary(result: ValidationResult) -> str:
    """A human-readable table of the ranks: time measured and estimated, memory held and at a step's peak,
    measured and estimated (the JSON also has the resident-set growth, peak_bytes, and every part)."""
    head = (f"Validation {result.status.value}: {result.nproc} ranks on {result.device.value} "
            f"({result.backend.value}, {result.launcher.value}), {result.iters} iterations after "
            f"{result.warmup} warm-up")
    lines = [head]
    ids = result.device_info.get("ids")
    if isinstance(ids, dict) and ids.get("source") == "sample":
        lines.append(f"ids of the sample {ids.get('file')}: {ids.get('rows_used'):,} rows in {ids.get('batches')} "
                     f"global batch(es)" + (", cycled" if ids.get("cycled") else ""))
    if result.error:
        lines.append(f"error: {result.error}")
    if result.ranks:
        lines.append(f"{'rank':>4}  {'iteration_ms':>12}  {'embedding_ms':>12}  {'estimated_ms':>12}  {'held':>11}  "
                     f"{'est. held':>11}  {'step peak':>11}  {'est. peak':>11}  shards")
    for r in result.ranks:
        est = f"{r.estimated_ms:.3f}" if r.estimated_ms is not None else "-"
        m = r.memory
        memory = "  ".join(f"{_bytes_or_dash(m.get(k)):>11}" for k in ("held_bytes", "estimated_held_bytes",
                                                                       "step_peak_bytes", "estimated_peak_bytes"))
        emb = r.embedding.get("embedding_ms")
        lines.append(f"{r.rank:>4}  {r.iteration_ms:>12.3f}  {f'{emb:.3f}' if emb is not None else '-':>12}  "
                     f"{est:>12}  {memory}  "
                     f"{'match' if r.shards_match else 'DIFFER'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.validate.results",
                                description="gather a validation job's rank files into OUT_DIR/results.json")
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--exit-code", type=int, required=True, help="torchrun's exit code")
    p.add_argument("--launcher", choices=[k.value for k in LauncherKind], default=LauncherKind.SCRIPT.value)
    p.add_argument("--out", metavar="FILE", help="where to write (default OUT_DIR/results.json)")
    args = p.parse_args(argv)
    try:
        job = Job.read_spec(Path(args.out_dir))
        result = gather(job, LauncherKind(args.launcher), Ending(args.exit_code))
        write_result(result, Path(args.out) if args.out else job.results_path)
    except (EngineError, OSError, ValueError, KeyError) as e:
        print(f"error: gathering {args.out_dir}: {e}", file=sys.stderr)
        return 2
    print(f"validation {result.status.value}; results in {args.out or job.results_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
