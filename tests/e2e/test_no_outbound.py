"""The server asks no other host anything: `streamlit run` on every interface (0.0.0.0, the start that made Streamlit
look up the machine's external IP and network address) and a planning session in a real browser, with an audit hook
(sitecustomize on PYTHONPATH, so in the server and in every Python process it starts: the planning workers) logging
each socket connect, send and name lookup. Every destination is this machine's loopback or a unix socket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import need_browser, serving

pytestmark = pytest.mark.timeout(300)
HEADLINE = ".st-key-ws_headline"
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::", "", "None"}  # 0.0.0.0 and "": binding, not asking
AUDIT = '''import json, os, sys
_LOG = os.environ.get("PLANNER_NET_AUDIT")
_ADDRESS = {"socket.connect": 1, "socket.sendto": 1, "socket.sendmsg": 1, "socket.getaddrinfo": 0,
            "socket.gethostbyname": 0, "socket.gethostbyaddr": 0, "socket.getnameinfo": 0}

def _log(**row):
    with open(_LOG, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), **row}) + "\\n")

def _hook(event, args):
    if event in _ADDRESS:
        _log(event=event, dest=args[_ADDRESS[event]] if not isinstance(args[_ADDRESS[event]], bytes) else "unix")

if _LOG:
    with open("/proc/self/cmdline", "rb") as f:
        _log(event="start", argv=f.read().decode(errors="replace").split("\\0"))
    sys.addaudithook(_hook)
'''


def _local(dest) -> bool:
    if isinstance(dest, list):  # (host, port[, flow, scope]) as JSON wrote it
        dest = dest[0]
    if not isinstance(dest, str):
        return dest is None
    return dest in LOCAL_NAMES or dest.startswith("127.") or dest.startswith("/") or dest == "unix"


def test_start_and_a_planning_session_connect_to_nothing_but_this_machine(tmp_path, monkeypatch, browser):
    need_browser()
    hook_dir = tmp_path / "audit"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(AUDIT)
    log = tmp_path / "net.jsonl"
    monkeypatch.setenv("PLANNER_NET_AUDIT", str(log))
    monkeypatch.setenv("PYTHONPATH", f"{hook_dir}:{Path(__file__).resolve().parents[2]}")
    with serving(tmp_path, f"sqlite:///{tmp_path / 'planner.db'}", "--server.address", "0.0.0.0") as url:
        page = browser.new_page()
        page.set_default_timeout(120_000)
        page.goto(url)
        page.wait_for_function("([sel]) => { const e = document.querySelector(sel);"
                               " return e !== null && e.innerText.includes('4 tables on 2 ranks'); }", arg=[HEADLINE])
        page.locator('[data-testid="stSidebar"]').get_by_role("link", name="Plan", exact=True).click()
        page.get_by_role("heading", name="Plan").wait_for()
        page.get_by_role("button", name="Plan", exact=True).click()
        page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden")
        page.get_by_text("large_table_0").first.wait_for()  # the plan's per-table detail
        page.close()

    rows = [json.loads(line) for line in log.read_text().splitlines()]
    started = [" ".join(r["argv"]) for r in rows if r["event"] == "start"]
    assert any("streamlit" in a for a in started) and any("dashboard.serve.planpool" in a for a in started), started
    outside = [r for r in rows if r["event"] != "start" and not _local(r["dest"])]
    assert not outside, f"connections or lookups beyond this machine: {outside[:10]}"
    assert "Did not auto detect external IP" not in (tmp_path / "server.log").read_text()
