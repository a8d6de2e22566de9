"""`bash scripts/start.sh`, the single-user start, as a person runs it (the install step skipped: .venv is there):
it listens on 127.0.0.1 only, the kernel's own table of listening sockets says so, and it prints the URL and how to
open the app to a team."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 90
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_on(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} write them) of the sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == LISTEN:
                found.add(address)
    return found


def _wait_healthy(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"start.sh did not serve in {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net/tcp")
def test_start_sh_listens_on_loopback_only_and_says_how_to_open_it_to_a_team(tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "start.log"
    env = {**os.environ, "PLANNER_SKIP_INSTALL": "1", "PLANNER_DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "scripts/start.sh", "--server.port", str(port), "--server.headless", "true",
                                 "--server.fileWatcherType", "none"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_healthy(proc, port, log)
            addresses = _listening_on(port)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # bash exec'd into the server, which ends its workers
            proc.wait(timeout=60)
    assert addresses == {"0100007F"}, f"listening on {addresses} (hex), not 127.0.0.1 alone"
    text = log.read_text()
    assert f"URL: http://localhost:{port}" in text
    assert "Listening on 127.0.0.1 only" in text and "scripts/team.sh" in text and "docs/deploy.md" in text
    assert "External URL" not in text and "Network URL" not in text
