"""Every file the product writes for people or other processes, written whole or not at all.

The text goes to a temporary file in the target's folder, is flushed and synced, then renamed over the target:
on a full disk (or any other failure) the earlier file stays as it was and the temporary file is removed.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Union

PathLike = Union[str, "os.PathLike[str]"]
NEW_FILE_MODE = 0o666  # what open() asks for, less the umask: a new file reads as one written by write_text


def write_bytes(path: PathLike, data: bytes) -> None:
    """Replace `path` with `data` atomically; raises OSError, with the target's file unchanged. The new file keeps
    the target's permission bits where it exists, else gets NEW_FILE_MODE less the umask."""
    target = Path(path)
    try:
        st = os.stat(target)  # through a link: the file it names is the one replaced
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):  # /dev/stdout, a fifo: nothing to rename over
        with open(target, "wb") as f:
            f.write(data)
        return
    target = Path(os.path.realpath(target))
    keep = stat.S_IMODE(st.st_mode) if st is not None else None
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                 NEW_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            if keep is not None:
                os.fchmod(f.fileno(), keep)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    """The rename itself on disk; best effort (some file systems refuse to open or sync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: PathLike, text: str) -> None:
    """write_bytes of `text` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: PathLike, data: Any, indent: int | None = 1) -> None:
    """`data` as JSON (a final newline when indented, as people read it), written atomically."""
    write_text(path, json.dumps(data, indent=indent) + ("\n" if indent is not None else ""))
