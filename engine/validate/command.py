"""`python -m engine validate`: a validation run from the command line (engine.cli.EXTRA_COMMAND_MODULES; torch
is imported only when a run needs it). `python -m db validate` reuses add_validate_arguments and run_validate
with a sink that records the run: the engine never imports db.

Bad input prints one line and exits 2; a run that fails exits 1 (its result still printed), a cancelled one 130.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine.cliutil import one_line_errors
from engine.config import load_config
from engine.errors import EngineError
from engine.evaluate import evaluate
from engine.planfile import load_plan
from engine.pricing import Pricing, priced_for
from engine.types import ComputeKernel, Config, Device, Optimizer, Plan, PoolingType, ShardingType, TablePlan
from engine.widths import runs_fused
from engine.validate.types import (
    DEFAULT_ITERS,
    DEFAULT_PG_TIMEOUT_S,
    DEFAULT_SEED,
    DEFAULT_WARMUP,
    Backend,
    Job,
    LauncherKind,
    RunStatus,
    SlurmOptions,
    ValidationResult,
)

if TYPE_CHECKING:
    from engine.validate.launch import JobState, Launcher
    from engine.validate.run import Sink

EXIT_USAGE, EXIT_FAILED, EXIT_CANCELLED = 2, 1, 130
EXIT_CODES = {RunStatus.SUCCEEDED: 0, RunStatus.FAILED: EXIT_FAILED, RunStatus.CANCELLED: EXIT_CANCELLED}
MOVED_FLAGS = ("--database-url", "--plan-token")  # recording runs moved to `python -m db validate`

# (cfg, tables, estimates, job) -> what receives the run's status, log and result (and is polled for a cancel)
SinkFactory = Callable[[Config, dict[str, TablePlan], Plan, Job], "Sink"]
# (cfg, tables, estimates, job) -> fields added to what a script launcher prints, e.g. {"plan_token", "import"}
ScriptNotes = Callable[[Config, dict[str, TablePlan], Plan, Job], dict[str, str]]


def resolve_backend(backend: str | None, device: str | None) -> Backend:
    """--backend and --device agree: gloo runs on cpu, nccl on cuda; either one alone picks the other."""
    if backend is None:
        return Backend.NCCL if device == Device.CUDA.value else Backend.GLOO
    b = Backend(backend)
    if device is not None and b.device.value != device:
        raise EngineError(f"--backend {b.value} runs on --device {b.device.value}, not {device}; "
                          f"use --backend {'nccl' if device == 'cuda' else 'gloo'} for {device}")
    return b


def check_runnable(cfg: Config, tables: dict[str, TablePlan], backend: Backend) -> None:
    """What the worker would only find out after launching, said before: one line naming the field."""
    if cfg.topology.sharding_group_size is not None and cfg.topology.sharding_group_size < cfg.topology.world_size:
        raise EngineError("topology.sharding_group_size: validation runs DistributedModelParallel over the whole "
                          "world, and a 2D plan needs TorchRec's DMPCollection (CUDA only); validate one group: "
                          "leave sharding_group_size out and set world_size to the group's size")
    for i, t in enumerate(cfg.tables):
        if t.pooling is PoolingType.NONE:
            raise EngineError(f"tables[{i}].pooling: validation runs an EmbeddingBagCollection, which needs sum or "
                              f"mean pooling; table {t.name!r} has none")
    if backend.device is Device.CPU:
        for name, tp in tables.items():
            if tp.compute_kernel not in (ComputeKernel.FUSED, ComputeKernel.DENSE):
                raise EngineError(f"plan.{name}.compute_kernel: {tp.compute_kernel.value} runs on cuda only; "
                                  "validate with --device cuda, or plan the config for cpu")
    for name, tp in tables.items():
        bad = next((s.sizes[1] for s in tp.shards or () if s.sizes[0] and not runs_fused(s.sizes[1])), None)
        if tp.compute_kernel is not ComputeKernel.DENSE and bad is not None:
            raise EngineError(f"plan.{name}.compute_kernel: {tp.compute_kernel.value} needs piece widths that are "
                              f"multiples of 4 (fbgemm), and table {name!r} has a {bad}-column piece; plan it "
                              "data_parallel (python -m engine plan does), or make its embedding_dim a multiple of 4")
    sharded = [n for n, tp in tables.items() if tp.sharding_type is not ShardingType.DATA_PARALLEL]
    if backend.device is Device.CPU and cfg.topology.optimizer is Optimizer.ADAM and sharded:
        raise EngineError("topology.optimizer: fbgemm has no CPU kernel for adam (tables "
                          f"{', '.join(sharded[:3])}); validate on cuda, or use sgd, adagrad or rowwise_adagrad")


def check_hosts(cfg: Config, tables: dict[str, TablePlan], per_node: int) -> None:
    """grid_shard pieces span one host's ranks, and TorchRec takes the host's size from the launch
    (LOCAL_WORLD_SIZE): a run with another number of ranks per node would run other groups than the plan's."""
    lw = cfg.topology.local_world_size
    grid = next((n for n, tp in tables.items() if tp.sharding_type is ShardingType.GRID_SHARD), None)
    if grid is not None and per_node != lw:
        raise EngineError(f"plan.{grid}.sharding_type: grid_shard row-splits each piece over a host of "
                          f"topology.local_world_size {lw} ranks, but this run puts {per_node} ranks on each node; "
                          f"launch {lw} ranks per node (--launcher slurm or script with --nodes "
                          f"{cfg.topology.world_size // lw}), or plan with local_world_size {per_node}")


def check_args(args: argparse.Namespace, cfg: Config) -> int:
    """The number of ranks to launch; raises EngineError for flags that cannot work."""
    world = cfg.topology.world_size
    nproc = world if args.nproc is None else args.nproc
    if nproc < 1:
        raise EngineError(f"--nproc must be >= 1, got {nproc}")
    if nproc != world and not args.unchecked_nproc:
        raise EngineError(f"--nproc {nproc}: the plan is for topology.world_size {world}; use --nproc {world}")
    checks = ((args.iters >= 1, f"--iters must be >= 1, got {args.iters}"),
              (args.warmup >= 0, f"--warmup must be >= 0, got {args.warmup}"),
              (args.timeout is None or args.timeout > 0, f"--timeout must be > 0 seconds, got {args.timeout}"),
              (args.pg_timeout >= 1, f"--pg-timeout must be >= 1 second, got {args.pg_timeout}"),
              (args.nodes >= 1 and nproc % args.nodes == 0,
               f"--nodes {args.nodes} must divide --nproc {nproc} (each node runs nproc / nodes ranks)"))
    for ok, message in checks:
        if not ok:
            raise EngineError(message)
    if args.nodes > 1 and LauncherKind(args.launcher) is LauncherKind.LOCAL:
        raise EngineError(f"--nodes {args.nodes}: the local launcher runs on this machine only; "
                          "use --launcher slurm or --launcher script")
    check_results_path(args.results, LauncherKind(args.launcher))
    return nproc


def check_results_path(results: str | None, kind: LauncherKind) -> None:
    """--results names a file this run can write (said before a run, not after it ended and was recorded)."""
    if results is None:
        return
    path = Path(results)
    if path.is_dir():
        raise EngineError(f"--results {results!r}: that is a directory; give a file in it, e.g. "
                          f"{str(path / 'results.json')!r}")
    if kind is LauncherKind.LOCAL and not path.absolute().parent.is_dir():
        raise EngineError(f"--results {results!r}: the folder {str(path.absolute().parent)!r} does not exist; "
                          "create it or give a file in an existing folder")


def check_sample(cfg: Config, args: argparse.Namespace) -> None:
    """--ids: read and check the rows the ranks will replay (what each rank reads again), before anything starts:
    a bad sample is one line naming the feature and row (engine.stats.sample.SampleError)."""
    from engine.dryrun.sample_ids import load_sample_batches
    from engine.validate.batches import MAX_DISTINCT_BATCHES

    sample = load_sample_batches(cfg, args.ids, args.warmup + args.iters, MAX_DISTINCT_BATCHES)
    i = sample.ids_block()
    say(f"ids from the sample {i['file']}: {i['rows_used']:,} rows, {i['batches']} global batch(es)"
        + (", cycled" if i["cycled"] else ""))


def check_local_cuda(nproc: int) -> None:
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < nproc:
        raise EngineError(f"--device cuda: this machine has {have} CUDA devices and the job needs {nproc} "
                          "(one per rank); use --device cpu, or --launcher slurm")


def make_job(args: argparse.Namespace, nproc: int, backend: Backend, kind: LauncherKind) -> Job:
    if args.out_dir:
        out_dir = Path(args.out_dir).resolve()
    elif kind is LauncherKind.LOCAL:
        out_dir = Path(tempfile.mkdtemp(prefix="validate-"))
    else:  # the ranks of a cluster job write here too: a directory the nodes share
        out_dir = (Path("validate-runs") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    slurm = SlurmOptions(partition=args.partition, nodes=args.nodes, time=args.time,
                         cpus_per_task=args.cpus_per_task, gpus_per_node=args.gpus_per_node, account=args.account,
                         job_name=args.job_name)
    return Job(out_dir=out_dir, nproc=nproc, backend=backend, iters=args.iters, warmup=args.warmup, seed=args.seed,
               pg_timeout_s=args.pg_timeout, python=args.python or sys.executable, slurm=slurm,
               script_path=Path(args.script_path).resolve() if args.script_path else None,
               results_file=Path(args.results).resolve() if args.results else None,
               ids=str(Path(args.ids).resolve()) if args.ids else None)


def say(text: str) -> None:
    """A progress line on stderr (stdout holds the result)."""
    print(f"validate: {text}", file=sys.stderr, flush=True)


def cmd_validate(args: argparse.Namespace) -> int:
    return run_validate(args)


def run_validate(args: argparse.Namespace, sink_factory: SinkFactory | None = None,
                 script_notes: ScriptNotes | None = None) -> int:
    """Check, stage, launch and follow (or write the script for) the run the validate flags describe; returns
    the exit code. sink_factory and script_notes let a caller (db) record the run; raises EngineError."""
    cfg = load_config(args.config)
    tables = load_plan(args.plan, cfg)
    backend = resolve_backend(args.backend, args.device)
    kind = LauncherKind(args.launcher)
    nproc = check_args(args, cfg)
    check_runnable(cfg, tables, backend)
    if args.ids:
        check_sample(cfg, args)
    if kind is LauncherKind.LOCAL and backend is Backend.NCCL:
        check_local_cuda(nproc)
    check_hosts(cfg, tables, max(1, nproc // args.nodes))
    pricing = priced_for(cfg, backend.device, "validation run", local_world_size=max(1, nproc // args.nodes))
    if pricing.note:
        say(pricing.note)
    from engine.validate.launchers import make_launcher
    from engine.validate.run import NullSink, stage

    job = make_job(args, nproc, backend, kind)
    stage(job, args.config, args.plan)
    launcher = make_launcher(kind)
    launcher.prepare(job)
    estimates = evaluate(cfg, tables, planner="file")
    if not launcher.follows:
        notes = script_notes(cfg, tables, estimates, job) if script_notes else {}
        return _script_written(args, job, launcher, {**pricing.fields(), **notes})
    sink = sink_factory(cfg, tables, estimates, job) if sink_factory else NullSink()
    return _run_and_report(args, job, launcher, PricedSink(sink, pricing, job.results_path), pricing)


def with_pricing(result: ValidationResult, pricing: Pricing) -> ValidationResult:
    """The result saying which device its estimates are for (gather prices for the job's device, as
    engine.pricing does), with the pricing note among its notes."""
    notes = [pricing.note] if pricing.note else []
    return replace(result, device_info={**result.device_info, **pricing.fields(), "notes": notes})


class PricedSink:
    """The caller's sink, handed results that say which device they are priced for, once the results file is
    written: a run whose file cannot be written raises EngineError, recorded as failed, never as its status."""

    def __init__(self, inner: Sink, pricing: Pricing, results_path: Path):
        self.inner, self.pricing, self.results_path = inner, pricing, results_path
        self.status, self.log, self.fail = inner.status, inner.log, inner.fail
        self.cancel_requested = inner.cancel_requested

    def finish(self, result: ValidationResult) -> None:
        from engine.validate.results import write_result

        priced = with_pricing(result, self.pricing)
        write_result(priced, self.results_path)
        self.inner.finish(priced)


def _script_written(args: argparse.Namespace, job: Job, launcher: Launcher, notes: dict[str, str]) -> int:
    run = launcher.how_to_run()
    out = {"script": str(launcher.path), "run": run, "results": str(job.results_path), "plan_token": None, **notes}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"Wrote {launcher.path}\nRun it with: {run}\nIt writes {job.results_path}")
        if out.get("import"):
            print(f"Then store the results: {out['import']}")
    return 0


def _report_state(state: JobState) -> None:
    detail = [state.detail] if state.detail else []
    if state.exit_code is not None:
        detail.append(f"exit code {state.exit_code}")
    say(state.phase.value + (f" ({', '.join(detail)})" if detail else ""))


def _run_and_report(args: argparse.Namespace, job: Job, launcher: Launcher, sink: Sink, pricing: Pricing) -> int:
    from engine.validate.results import summary
    from engine.validate.run import follow

    say(f"{job.nproc} ranks, {job.backend.value} on {job.device.value}; out-dir {job.out_dir}")
    say(f"$ {launcher.command_line()}")
    try:
        result = follow(launcher, job, args.timeout, sink, on_state=_report_state)
    except EngineError as e:
        sink.fail(str(e))
        raise
    result = with_pricing(result, pricing)  # as the sink wrote it to job.results_path
    print(json.dumps(result.as_dict(), indent=1) if args.json else "\n".join([summary(result), *pricing.lines()]))
    if result.error:
        print(f"error: validation {result.status.value}: {result.error} (log: {job.log_path})", file=sys.stderr)
    return EXIT_CODES[result.status]


def _moved_flags(extras: list[str]) -> str | None:
    moved = [a for a in extras if a.split("=", 1)[0] in MOVED_FLAGS]
    if moved:
        return (f"{moved[0].split('=', 1)[0]}: the engine does not record runs; use python -m db validate "
                "(the same flags, on the database DATABASE_URL names)")
    return None


def _slurm_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("slurm and script launchers")
    g.add_argument("--nodes", type=int, default=1, help="nodes; each runs nproc / nodes ranks (default 1)")
    g.add_argument("--partition", help="sbatch --partition")
    g.add_argument("--time", help="sbatch --time, e.g. 00:10:00 (Slurm ends the job after it)")
    g.add_argument("--cpus-per-task", type=int, metavar="N",
                   help="sbatch --cpus-per-task: cores for each node's torchrun (give one per rank at least)")
    g.add_argument("--gpus-per-node", type=int, metavar="N", help="sbatch --gpus-per-node")
    g.add_argument("--account", help="sbatch --account")
    g.add_argument("--job-name", default=SlurmOptions.job_name, help="sbatch --job-name (default %(default)s)")
    g.add_argument("--script-path", metavar="FILE",
                   help="where to write the sbatch or launch script (default OUT_DIR/job.sbatch or launch.sh)")
    g.add_argument("--python", metavar="PATH", help="the interpreter the ranks run (default: this one)")


def add_validate_arguments(p: argparse.ArgumentParser) -> None:
    """CONFIG.json, --plan and every flag of a validation run (what run_validate reads)."""
    p.add_argument("config", metavar="CONFIG.json")
    p.add_argument("--plan", required=True, metavar="PLAN.json", help="the plan to run (python -m engine plan --out)")
    p.add_argument("--nproc", type=int, help="ranks to launch; must equal the plan's world size (the default)")
    p.add_argument("--unchecked-nproc", action="store_true", help=argparse.SUPPRESS)  # tests: a job that fails
    p.add_argument("--backend", choices=[b.value for b in Backend], help="gloo (cpu, the default) or nccl (cuda)")
    p.add_argument("--device", choices=[d.value for d in Device], help="cpu (gloo) or cuda (nccl)")
    p.add_argument("--iters", type=int, default=DEFAULT_ITERS, help="timed iterations (default %(default)s)")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed iterations first (default %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the synthetic batches (default %(default)s)")
    p.add_argument("--ids", metavar="SAMPLE",
                   help="replay a sample's ids (.parquet, .csv or .npz) instead of synthetic ones: world_size x "
                        "batch_size rows per step in order, each rank its batch_size rows; cycled when it runs out")
    p.add_argument("--launcher", choices=[k.value for k in LauncherKind], default=LauncherKind.LOCAL.value,
                   help="local: torchrun here; slurm: sbatch; script: write a launch script (default %(default)s)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop the job after it has run this long and record it failed")
    p.add_argument("--pg-timeout", type=int, default=DEFAULT_PG_TIMEOUT_S, metavar="SECONDS",
                   help="a collective fails after this long when a peer is gone (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--results", metavar="FILE", help="write the result JSON here (default OUT_DIR/results.json)")
    p.add_argument("--out-dir", metavar="DIR",
                   help="scripts, log, per-rank files (default: a temp dir; ./validate-runs/<time> for clusters)")
    _slurm_flags(p)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("validate", help="run the plan on real processes (torchrun) and measure each rank")
    add_validate_arguments(p)
    p.set_defaults(func=cmd_validate)
    one_line_errors(p, "validate", _moved_flags)


__all__ = ["EXIT_CODES", "ScriptNotes", "SinkFactory", "add_validate_arguments", "cmd_validate", "register",
           "resolve_backend", "run_validate", "say"]
