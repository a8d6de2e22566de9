"""Slurm: an sbatch script whose body runs torchrun on every node under srun (c10d rendezvous on the first
node), submitted with `sbatch --parsable`, followed with squeue (then sacct -c once squeue forgets the job),
cancelled with scancel. sbatch options travel as arguments to sbatch, never as text inside the script.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from engine.errors import EngineError
from engine.validate.launch import JobState, Phase, job_env, wait_for
from engine.validate.script import RDZV_BASE_PORT, gather_lines, header, q, torchrun_args, write_script
from engine.validate.types import Job, LauncherKind

COMMAND_TIMEOUT_S = 30
PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
# Final states: COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE


def slurm_script(job: Job) -> str:
    worker = q(job.worker_args())
    lines = header(job, "sbatch script") + [
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f'rdzv_port=$(( {RDZV_BASE_PORT} + SLURM_JOB_ID % 2000 ))',
        "srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\",
        f"  {q([job.python, *torchrun_args(job)])} \\",
        '  --rdzv-backend c10d --rdzv-endpoint "$head_node:$rdzv_port" --rdzv-id "$SLURM_JOB_ID" \\',
        f"  {worker}",
        "rc=$?",
        *gather_lines(job, LauncherKind.SLURM),
    ]
    return "\n".join(lines) + "\n"


def sbatch_argv(job: Job, script: Path) -> list[str]:
    s = job.slurm
    argv = ["sbatch", "--parsable", "--job-name", s.job_name, "--nodes", str(s.nodes), "--ntasks-per-node", "1",
            "--output", str(job.log_path), "--open-mode", "append"]
    options = (("--partition", s.partition), ("--time", s.time), ("--account", s.account),
               ("--cpus-per-task", s.cpus_per_task), ("--gpus-per-node", s.gpus_per_node))
    for flag, value in options:
        if value is not None:
            argv += [flag, str(value)]
    return argv + [str(script)]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    if shutil.which(argv[0]) is None:
        raise EngineError(f"--launcher slurm: {argv[0]} is not on PATH; install Slurm's client commands here, "
                          "or write a script with --launcher script")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=job_env(),
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{argv[0]} did not answer in {COMMAND_TIMEOUT_S} s: is slurmctld up?") from None


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


class SlurmLauncher:
    kind = LauncherKind.SLURM
    follows = True
    poll_interval_s = 1.0  # each poll is a squeue call to slurmctld

    def __init__(self) -> None:
        self.job: Job | None = None
        self.script: Path | None = None
        self.job_id: str | None = None
        self.argv: list[str] = []

    def prepare(self, job: Job) -> Path:
        self.job = job
        self.script = write_script(job.script_path or job.out_dir / "job.sbatch", slurm_script(job))
        self.argv = sbatch_argv(job, self.script)
        return self.script

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def start(self) -> None:
        if self.job is None:
            raise EngineError("SlurmLauncher.start() before prepare()")
        self.job.ranks_dir.mkdir(parents=True, exist_ok=True)
        done = _run(self.argv)
        job_id = _first_line(done.stdout).split(";")[0]
        if done.returncode != 0 or not job_id.isdigit():
            why = _first_line(done.stderr) or _first_line(done.stdout) or f"exit code {done.returncode}"
            raise EngineError(f"sbatch refused the job: {why}")
        self.job_id = job_id

    def _state(self) -> str:
        """Slurm's state word for the job: squeue while it remembers the job, then sacct -c."""
        out = _run(["squeue", "-h", "-t", "all", "-j", str(self.job_id), "-o", "%T"])
        state = _first_line(out.stdout) if out.returncode == 0 else ""
        if not state:
            acct = _run(["sacct", "-c", "-n", "-P", "-j", str(self.job_id), "-o", "State"])
            state = _first_line(acct.stdout).split()[0] if acct.returncode == 0 and acct.stdout.strip() else ""
        return state.upper()

    def exit_code(self) -> int | None:
        """The batch script's exit code (scontrol, then sacct -c): ExitCode=rc:signal; a signal is -signal."""
        out = _run(["scontrol", "-o", "show", "job", str(self.job_id)])
        field = next((w.split("=", 1)[1] for w in out.stdout.split() if w.startswith("ExitCode=")), "")
        if not field:
            acct = _run(["sacct", "-c", "-n", "-P", "-j", str(self.job_id), "-o", "ExitCode"])
            field = _first_line(acct.stdout)
        try:
            code, sig = (int(x) for x in field.split(":"))
        except ValueError:
            return None
        return -sig if sig else code

    def poll(self) -> JobState:
        if self.job_id is None:
            return JobState(Phase.QUEUED)
        state = self._state()
        if not state or state in PENDING:
            return JobState(Phase.QUEUED, detail=state or "UNKNOWN")
        if state in RUNNING:
            return JobState(Phase.RUNNING, detail=state)
        code = self.exit_code()
        if code is None or (code == 0 and state != "COMPLETED"):
            code = 1
        return JobState(Phase.DONE, code, detail=state)

    def cancel(self) -> None:
        if self.job_id is not None:
            _run(["scancel", str(self.job_id)])

    def wait(self, timeout_s: float | None = None) -> JobState | None:
        return wait_for(self, timeout_s)


__all__ = ["SlurmLauncher", "sbatch_argv", "slurm_script"]
