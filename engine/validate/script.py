"""Job scripts: bash that runs torchrun on every node, then gathers the ranks' files into results.json.

`script` writes a portable one (node rank and master address from the environment) for any scheduler; the
Slurm launcher writes one whose torchrun runs under srun. Every argument is shlex-quoted and no comment holds
user text: no path or name is ever pasted into the shell unquoted.
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

from engine import atomicfile
from engine.errors import EngineError
from engine.validate.launch import ROOT, JobState, Phase
from engine.validate.types import Job, LauncherKind

RDZV_BASE_PORT = 29500


def q(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def torchrun_args(job: Job) -> list[str]:
    """torchrun flags that do not depend on where it runs: nodes, ranks per node, the worker and its flags."""
    per_node = job.nproc // job.slurm.nodes
    return ["-m", "torch.distributed.run", "--nnodes", str(job.slurm.nodes), "--nproc-per-node", str(per_node)]


def header(job: Job, what: str) -> list[str]:
    """Comments hold no user text (a newline in a path would end the comment); paths appear only quoted."""
    return [
        "#!/usr/bin/env bash",
        f"# {what}: validation run on {int(job.nproc)} ranks ({job.backend.value}),",
        "# written by `python -m engine validate`. The results file is the --out argument of the last command.",
        "set -uo pipefail",
        f"cd {shlex.quote(str(ROOT))}",
        f"export PYTHONPATH={shlex.quote(str(ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
        "export PYTHONUNBUFFERED=1",
        f"mkdir -p {shlex.quote(str(job.ranks_dir))}",
    ]


def gather_lines(job: Job, launcher: LauncherKind, guard: str = "") -> list[str]:
    """After torchrun: write results.json from the ranks' files (on the first node only, when guarded)."""
    cmd = q([job.python, "-m", "engine.validate.results", str(job.out_dir), "--launcher", launcher.value,
             "--out", str(job.results_path)]) + ' --exit-code "$rc"'
    if guard:
        return [f"if {guard}; then", f"  {cmd}", "fi", 'exit "$rc"']
    return [cmd, 'exit "$rc"']


def portable_script(job: Job) -> str:
    """For any scheduler: run it on each node with NODE_RANK and MASTER_ADDR set (one node: just `bash` it)."""
    worker = q(job.worker_args())
    lines = header(job, "Launch script") + [
        "# On several nodes: set NODE_RANK (0..nodes-1), MASTER_ADDR (node 0's address) and MASTER_PORT on each.",
        f"torchrun_cmd=({q([job.python, *torchrun_args(job)])} \\",
        ('  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-127.0.0.1}"'
         f' --master-port "${{MASTER_PORT:-{RDZV_BASE_PORT}}}" \\'),
        f"  {worker})",
        f'"${{torchrun_cmd[@]}}" 2>&1 | tee -a {shlex.quote(str(job.log_path))}',
        "rc=${PIPESTATUS[0]}",
        *gather_lines(job, LauncherKind.SCRIPT, guard='[ "${NODE_RANK:-0}" = 0 ]'),
    ]
    return "\n".join(lines) + "\n"


def write_script(path: Path, text: str) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomicfile.write_text(path, text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP)
    except OSError as e:
        raise EngineError(f"cannot write the launch script {str(path)!r}: {e.strerror or e}") from None
    return path


class ScriptLauncher:
    """Writes the launch script and says how to run it; it does not run or follow anything itself."""

    kind = LauncherKind.SCRIPT
    follows = False
    poll_interval_s = 1.0

    def __init__(self) -> None:
        self.path: Path | None = None

    def prepare(self, job: Job) -> Path:
        self.path = write_script(job.script_path or job.out_dir / "launch.sh", portable_script(job))
        return self.path

    def command_line(self) -> str:
        return self.how_to_run()

    def how_to_run(self) -> str:
        return f"bash {shlex.quote(str(self.path))}"

    def start(self) -> None:
        raise EngineError(f"--launcher script only writes the script: run it with {self.how_to_run()}")

    def poll(self) -> JobState:
        return JobState(Phase.QUEUED, detail="written, not started")

    def cancel(self) -> None:
        return None

    def wait(self, timeout_s: float | None = None) -> JobState | None:
        return None


__all__ = ["ScriptLauncher", "gather_lines", "header", "portable_script", "q", "torchrun_args", "write_script"]
