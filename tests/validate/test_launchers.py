"""The slurm and script launchers for real: a 2-rank validation submitted to a real slurmctld/slurmd as an
sbatch job, and a written launch script run with bash (in a directory whose name would break a shell that
pasted it unquoted).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess

from engine.validate.launch import free_port
from engine.validate.script import portable_script
from engine.validate.slurm import sbatch_argv, slurm_script
from engine.validate.types import Job, SlurmOptions
from tests.factories import ROOT
from tests.validate.conftest import FAST, run_cli

HOSTILE = "a b $(touch PWNED) `touch PWNED2` 'q' \"d\""  # a directory name no shell may evaluate


def test_slurm_runs_the_tutorial_validation_as_an_sbatch_job(slurm_cluster, plan_files, tmp_path):
    config, plan = plan_files["tutorial"]
    out = tmp_path / "out"
    cpus = str(min(2, os.cpu_count() or 1))
    p = run_cli("validate", str(config), "--plan", str(plan), "--launcher", "slurm", "--cpus-per-task", cpus,
                "--json", *FAST, "--out-dir", str(out), "--timeout", "240", env=slurm_cluster.env)
    assert p.returncode == 0, p.stderr[-4000:] + (out / "job.log").read_text(errors="replace")[-4000:]
    data = json.loads(p.stdout)
    assert (data["status"], data["launcher"], data["shards_match"]) == ("succeeded", "slurm", True)
    assert [r["rank"] for r in data["ranks"]] == [0, 1] and all(r["iteration_ms"] > 0 for r in data["ranks"])
    assert "sbatch --parsable" in p.stderr and "done (COMPLETED, exit code 0)" in p.stderr
    # the job gathered its own results after torchrun (what a CLI that stopped following would read)
    assert json.loads((out / "results.json").read_text())["status"] == "succeeded"
    assert "srun" in (out / "job.sbatch").read_text()
    jobs = slurm_cluster.run("sacct", "-c", "-n", "-P", "-o", "JobName,State").stdout
    assert "validate-plan|COMPLETED" in jobs


def test_sbatch_refusing_the_job_is_one_line(slurm_cluster, plan_files, tmp_path):
    config, plan = plan_files["table_wise"]
    p = run_cli("validate", str(config), "--plan", str(plan), "--launcher", "slurm", "--partition", "nosuch",
                "--out-dir", str(tmp_path / "out"), env=slurm_cluster.env)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error: sbatch refused the job: ")


def test_the_launch_script_run_with_bash_writes_the_results_file(plan_files, tmp_path):
    config, plan = plan_files["row_wise"]
    out = tmp_path / HOSTILE
    results = tmp_path / HOSTILE / "res ults.json"
    p = run_cli("validate", str(config), "--plan", str(plan), "--launcher", "script", "--json", *FAST,
                "--out-dir", str(out), "--results", str(results))
    assert p.returncode == 0, p.stderr
    written = json.loads(p.stdout)
    assert written["results"] == str(results) and not results.exists()
    env = {**os.environ, "MASTER_PORT": str(free_port())}
    run = subprocess.run(["bash", written["script"]], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(results.read_text())
    assert (data["status"], data["launcher"], data["shards_match"]) == ("succeeded", "script", True)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert not list(tmp_path.rglob("PWNED*")) and not list(ROOT.glob("PWNED*"))


def test_sbatch_options_are_arguments_never_script_text(tmp_path):
    job = Job(out_dir=tmp_path / HOSTILE, nproc=4, slurm=SlurmOptions(partition="gpu; rm -rf /", nodes=2,
                                                                       time="00:05:00", cpus_per_task=8))
    argv = sbatch_argv(job, tmp_path / "job.sbatch")
    assert argv[argv.index("--partition") + 1] == "gpu; rm -rf /"
    assert argv[argv.index("--nodes") + 1] == "2" and argv[-1] == str(tmp_path / "job.sbatch")
    text = slurm_script(job)
    assert "rm -rf" not in text and "#SBATCH" not in text
    assert "--nnodes 2 --nproc-per-node 2" in text
    for script in (text, portable_script(job)):
        assert shlex.quote(str(job.config_path)) in script  # the hostile path only ever appears quoted
        check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False)
        assert check.returncode == 0, check.stderr


INJECTIONS = ("x\ntouch PWNED_NL\n#", "x\rtouch PWNED_CR", "$(touch PWNED_SUB)", "`touch PWNED_BT`",
              "'; touch PWNED_Q; '", "\"; touch PWNED_DQ; \"", "\\\ntouch PWNED_BS", "x\u2028touch PWNED_LS")


def test_scripts_run_no_command_from_any_path(tmp_path):
    """Every path a job writes into its scripts holds a newline, $(), backticks or quotes; bash runs the
    scripts with a stand-in python that records its arguments: no extra command runs, every path arrives whole."""
    calls = tmp_path / "calls"
    calls.mkdir()
    fake = tmp_path / "fake-python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\0" "$@" > "$(mktemp -p {shlex.quote(str(calls))})"\n')
    fake.chmod(0o755)
    for i, bad in enumerate(INJECTIONS):
        job = Job(out_dir=tmp_path / f"out {i} {bad}", nproc=2, python=str(fake),
                  results_file=tmp_path / f"res {i} {bad}.json", script_path=tmp_path / f"s{i}.sh")
        for text in (portable_script(job), slurm_script(job)):
            assert not any(bad in line for line in text.splitlines() if line.startswith("#"))
        script = tmp_path / f"s{i}.sh"
        script.write_text(portable_script(job))
        run = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                             check=False)
        assert run.returncode == 0, run.stderr
        argvs = [c.read_bytes().decode().split("\0")[:-1] for c in calls.iterdir()]
        assert any(str(job.results_path) in a for a in argvs)  # the results path reached the gatherer whole
        assert any(str(job.config_path) in a for a in argvs)
        for c in calls.iterdir():
            c.unlink()
    assert not list(tmp_path.rglob("PWNED*")) and not list(ROOT.glob("PWNED*"))
