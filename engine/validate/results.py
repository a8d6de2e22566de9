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
from dataclasses import dataclass, replace
from pathlib import Path

from engine.config import load_config
from engine.errors import EngineError, human_bytes
from engine.estimate import comms_bw, device_bw
from engine.evaluate import evaluate
from engine.planfile import load_plan
from engine.types import ComputeKernel, Config, TablePlan
from engine.validate.types import LOG_TAIL_CHARS, Job, LauncherKind, RankResult, RunStatus, ValidationResult

SIGNAL_EXIT = re.compile(r"exitcode\s*:\s*-(\d+)")  # torchrun's report of a rank killed by a signal


@dataclass(frozen=True)
class Ending:
    """How the job ended, as its launcher saw it."""

    exit_code: int | None
    cancelled: bool = False
    timed_out_s: float | None = None
    detail: str = ""  # e.g. Slurm's final state
    elapsed_s: float | None = None


def run_config(cfg: Config, job: Job) -> Config:
    """The config as the job runs it: the job's device and ranks per node (the estimate's topology)."""
    topo = replace(cfg.topology, compute_device=job.device, local_world_size=max(1, job.nproc // job.slurm.nodes))
    return replace(cfg, topology=topo)


def estimates(cfg: Config, tables: dict[str, TablePlan]) -> tuple[list[dict], float, float]:
    """Per rank {estimated_ms, compute, comms, bytes}, and the lookup and comms bandwidths assumed (bytes/ms)."""
    plan = evaluate(cfg, tables, planner="file")
    out = []
    for r in plan.ranks:
        p = r.perf
        out.append({"estimated_ms": p.total, "estimated_compute_ms": p.fwd_compute + p.bwd_compute + p.prefetch_compute,
                    "estimated_comms_ms": p.fwd_comms + p.bwd_comms + p.input_dist_comms,
                    "estimated_bytes": r.hbm_bytes + r.ddr_bytes})
    topo = cfg.topology
    return out, device_bw(topo, ComputeKernel.FUSED, 1.0), comms_bw(topo)


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
    est = est or {}
    return RankResult(rank=r, iteration_ms=float(data["iteration_ms"]), peak_bytes=int(data["peak_bytes"]),
                      state_bytes=int(data.get("state_bytes", 0)), shards_match=not data.get("mismatches"),
                      mismatches=tuple(data.get("mismatches", ())), **est)


def gather(job: Job, launcher: LauncherKind, end: Ending) -> ValidationResult:
    """The result of a finished (or stopped) job, from the files it left under job.out_dir."""
    cfg = run_config(load_config(str(job.config_path)), job)
    tables = load_plan(str(job.plan_path), cfg)
    est, compute_bw, cbw = estimates(cfg, tables)
    done, errors = read_ranks(job)
    tail = log_tail(job)
    error = error_line(job, end, done, errors, tail)
    status = RunStatus.SUCCEEDED if error is None else RunStatus.CANCELLED if end.cancelled else RunStatus.FAILED
    ranks = tuple(_rank_result(r, done[r], est[r] if r < len(est) else None) for r in sorted(done))
    info = {k: v for k, v in (done[min(done)].get("device_info", {}) if done else {}).items()
            if isinstance(v, (str, int, float))}
    info.update(world_size=cfg.topology.world_size, nodes=job.slurm.nodes,
                estimate_multi_host=cfg.topology.world_size > cfg.topology.local_world_size)
    return ValidationResult(status=status, ranks=ranks, backend=job.backend, device=job.device, iters=job.iters,
                            warmup=job.warmup, nproc=job.nproc, launcher=launcher, error=error, log_tail=tail,
                            device_info=info, compute_bw=compute_bw, comms_bw=cbw, elapsed_s=end.elapsed_s)


def write_result(result: ValidationResult, path: Path) -> None:
    try:
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(json.dumps(result.as_dict(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        raise EngineError(f"cannot write the results file {str(path)!r}: {e.strerror or e}") from None


def summary(result: ValidationResult) -> str:
    """A human-readable table of the ranks."""
    head = (f"Validation {result.status.value}: {result.nproc} ranks on {result.device.value} "
            f"({result.backend.value}, {result.launcher.value}), {result.iters} iterations after "
            f"{result.warmup} warm-up")
    lines = [head]
    if result.error:
        lines.append(f"error: {result.error}")
    if result.ranks:
        lines.append(f"{'rank':>4}  {'iteration_ms':>12}  {'estimated_ms':>12}  {'peak':>10}  {'state':>10}  shards")
    for r in result.ranks:
        est = f"{r.estimated_ms:.3f}" if r.estimated_ms is not None else "-"
        lines.append(f"{r.rank:>4}  {r.iteration_ms:>12.3f}  {est:>12}  {human_bytes(r.peak_bytes):>10}  "
                     f"{human_bytes(r.state_bytes):>10}  {'match' if r.shards_match else 'DIFFER'}")
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
