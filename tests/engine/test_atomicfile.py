"""engine.atomicfile on real files: the new file keeps the target's permission bits, a link's file is the one
replaced, a device is written in place, and a failed write leaves the old file and no temporary file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine import atomicfile


def test_replaces_the_file_and_keeps_its_permission_bits(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old")
    target.chmod(0o640)
    atomicfile.write_json(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1} and target.read_text().endswith("}\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_a_new_file_gets_the_umask_mode_as_open_would(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        atomicfile.write_text(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640  # not mkstemp's 0600


def test_through_a_link_the_linked_file_is_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomicfile.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_device_is_written_in_place() -> None:
    atomicfile.write_text("/dev/null", "anything")  # no temporary file in /dev, no rename over the device
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomicfile.write_json(target, {"not json": object()})  # fails before any byte is written
    with pytest.raises(UnicodeEncodeError):
        atomicfile.write_text(target, "\ud800")
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        atomicfile.write_text(tmp_path / "folder", "x")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "plan.json"]
