"""Files the product writes are whole or not there: on a real full disk (a 64 KiB tmpfs) `python -m engine plan
--out` and `python -m db export --out` fail with one line and leave the earlier file byte for byte. Mounting needs
root: a developer without it gets a skip that says so; CI (root) runs it, and fails where the mount fails."""

from __future__ import annotations

import copy
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.db.storetest import EXAMPLES, REPO, run_cli, sample

TUTORIAL = EXAMPLES / "tutorial.json"


@pytest.fixture
def small_disk(tmp_path: Path):
    """A folder on a tmpfs of 64 KiB, unmounted after the test."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    why = "not root: mounting a 64 KiB tmpfs needs root (CI runs as root)"
    if os.geteuid() == 0:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True,
                           text=True, check=False)
        why = "" if r.returncode == 0 else f"cannot mount a 64 KiB tmpfs: {r.stderr.strip() or r.returncode}"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _fill(folder: Path) -> None:
    """Write zeros into folder/filler until the file system says it is full."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while f.write(b"\0" * 4096):
                pass
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def _engine(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def _bigger_config(tmp_path: Path, copies: int) -> Path:
    """The tutorial's tables `copies` times over (renamed): a plan file of tens of KiB."""
    cfg = json.loads(TUTORIAL.read_text())
    tables = []
    for i in range(copies):
        for t in cfg["tables"]:
            t = copy.deepcopy(t)
            t["name"] = f"{t['name']}_{i}"
            t["feature_names"] = [f"{n}_{i}" for n in t["feature_names"]]
            tables.append(t)
    cfg["tables"] = tables
    path = tmp_path / "bigger.json"
    path.write_text(json.dumps(cfg))
    return path


def test_plan_out_on_a_full_disk_leaves_the_earlier_plan_whole(small_disk: Path, tmp_path: Path) -> None:
    out = small_disk / "plan.json"
    assert _engine("plan", str(TUTORIAL), "--out", str(out)).returncode == 0
    earlier = out.read_bytes()
    assert json.loads(earlier)["plan"]
    _fill(small_disk)

    error = _one_line_error(_engine("plan", str(_bigger_config(tmp_path, 10)), "--out", str(out)))
    assert f"--out {str(out)!r}" in error and "No space left on device" in error
    assert out.read_bytes() == earlier
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "plan.json"]  # no temporary file left


def test_db_export_out_on_a_full_disk_leaves_the_earlier_bundle_whole(small_disk: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'planner.db'}"
    plan_file = tmp_path / "tutorial.plan.json"
    plan_file.write_text(json.dumps(sample()[1]))
    saved = run_cli(url, "save", "--config", str(TUTORIAL), "--plan", str(plan_file))
    assert saved.returncode == 0, saved.stderr
    token = saved.stdout.strip().splitlines()[-1]
    out = small_disk / "bundle.json"
    earlier = b'{"an": "earlier export"}\n'
    out.write_bytes(earlier)
    _fill(small_disk)

    error = _one_line_error(run_cli(url, "export", token, "--out", str(out)))
    assert "--out" in error and "No space left on device" in error
    assert out.read_bytes() == earlier
    assert sorted(p.name for p in small_disk.iterdir()) == ["bundle.json", "filler"]

    os.unlink(small_disk / "filler")  # room again: the same command writes the whole bundle
    assert run_cli(url, "export", token, "--out", str(out)).returncode == 0
    assert json.loads(out.read_text())["plan"]
