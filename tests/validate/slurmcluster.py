"""A real single-node Slurm for the tests: slurmctld + slurmd from Debian's slurm-wlm, run by hand (no systemd)
with every file in a temp dir, auth/none, free ports. Recipe: ../shared/reference/slurm-single-node.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from engine.validate.launch import free_port

START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 10

CONF = """ClusterName=test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/slurmd-%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ReturnToService=2
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=batch_sched_delay=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/log/jobcomp.txt
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
{node} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def missing() -> str | None:
    """Why a Slurm cannot be started here, or None."""
    tools = ("slurmctld", "slurmd", "sbatch", "squeue", "sacct", "scancel", "sinfo", "scontrol")
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return f"Slurm's {', '.join(absent)} not installed (apt-get install slurm-wlm)"
    if os.geteuid() != 0:
        return "the test Slurm runs its daemons as root (SlurmUser=root)"
    return None


def node_line() -> str:
    """This machine's NodeName line (slurmd -C), renamed to localhost at 127.0.0.1."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True, timeout=30).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
    return re.sub(r"^NodeName=\S+", "NodeName=localhost NodeAddr=127.0.0.1", line)


@dataclass
class Cluster:
    dir: Path
    conf: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=30, check=False)

    def state(self) -> str:
        return self.run("sinfo", "-h", "-N", "-o", "%T").stdout.strip()


def start(d: Path) -> Cluster:
    for sub in ("state", "spool", "run", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    conf = d / "slurm.conf"
    conf.write_text(CONF.format(d=d, ctld_port=free_port(), d_port=free_port(), node=node_line()))
    cluster = Cluster(d, conf)
    subprocess.run(["slurmctld", "-f", str(conf)], env=cluster.env, check=True, timeout=30)
    subprocess.run(["slurmd", "-f", str(conf), "-N", "localhost"], env=cluster.env, check=True, timeout=30)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if cluster.state() == "idle":
            return cluster
        time.sleep(0.1)
    log = (d / "log" / "slurmctld.log").read_text(errors="replace")[-2000:]
    stop(cluster)
    raise RuntimeError(f"the test Slurm did not become idle in {START_TIMEOUT_S}s (state {cluster.state()!r}):\n{log}")


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop(cluster: Cluster) -> None:
    """Cancel every job, TERM both daemons by their pidfiles, KILL them if they linger."""
    jobs = cluster.run("squeue", "-h", "-o", "%i").stdout.split()
    if jobs:
        cluster.run("scancel", *jobs)
    pids = [p for p in (_pid(f) for f in (cluster.dir / "run").glob("*.pid")) if p]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
