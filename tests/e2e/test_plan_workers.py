"""Issue 14 in a real browser on `streamlit run`: planning runs in the server's worker processes. While one user's
long plan of 1,000 tables runs (its elapsed time on the page), another user's page opens and plans at once; the
first user's newer request supersedes the long plan, whose worker process is killed, and its plan shows. A closed
session's memory goes back to the system (the janitor's sweep, in the server's log)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import idle, need_browser, new_page, serving, until
from tests.e2e.test_working_view import HEADLINE, VIEWPORT, _goto, _load_synthetic, page  # noqa: F401

pytestmark = pytest.mark.timeout(420)
SLOW_EFFORT = "1000000"  # the most the page takes: 1,000 tables plan for about 20 s at it
WAITING = re.compile(r"Planning 1,000 tables with our planner: ([0-9.]+) s")


def _workers(port: str) -> set[int]:
    """The planning workers (`python -m dashboard.serve.planpool`) whose parent is the app's server (on `port`)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            parent = Path(f"/proc/{stat[1]}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dashboard.serve.planpool" in cmd and port.encode() in parent and stat[0] != "Z":
            found.add(int(proc.name))
    return found


def _waiting_s(p) -> float:
    m = WAITING.search(p.locator('[data-testid="stMain"]').inner_text())
    return float(m.group(1)) if m else -1.0


def _set_effort(p, value: str) -> None:
    box = p.locator(".st-key-plan_effort input")
    box.fill(value)
    box.press("Enter")


def test_a_long_plan_runs_in_a_worker_stalls_no_one_and_a_newer_request_supersedes_it(page, app_url,  # noqa: F811
                                                                                      browser):
    port = app_url.rsplit(":", 1)[1]
    _load_synthetic(page, 1000)
    page.wait_for_function("([sel]) => { const e = document.querySelector(sel);"
                           " return e !== null && e.innerText.includes('1,000 tables on 8 ranks'); }", arg=[HEADLINE])
    _goto(page, "Plan")
    page.get_by_role("heading", name="Plan").wait_for()
    idle(page)
    idle_workers = _workers(port)
    assert idle_workers, "no planning worker process under the server"

    _set_effort(page, SLOW_EFFORT)
    idle(page)
    page.get_by_role("button", name="Plan", exact=True).click()
    page.get_by_text(WAITING).wait_for()  # the page waits for its worker, showing the time
    first = _waiting_s(page)
    page.wait_for_function("([re, n]) => { const m = document.querySelector('[data-testid=\"stMain\"]').innerText"
                           ".match(new RegExp(re)); return m !== null && Number(m[1]) > n + 0.5; }",
                           arg=[WAITING.pattern, first])
    busy = _workers(port)

    # Another user meanwhile: the tutorial's plan is on their screen while the first user's plan still runs.
    other = new_page(browser, VIEWPORT, 120_000)
    other.goto(app_url)
    other.wait_for_function("([sel]) => { const e = document.querySelector(sel); return e !== null &&"
                            " e.innerText.includes('4 tables on 2 ranks'); }", arg=[HEADLINE])
    assert re.search(r"Fits\s*Slowest rank", other.locator(HEADLINE).inner_text())
    assert _waiting_s(page) > first  # the long plan was still running all along
    other.context.close()

    # The first user asks again (greedy only): the long plan is superseded and its worker killed.
    _set_effort(page, "0")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.get_by_text(re.compile(r"^Planned 1,000 tables on 8 ranks in [0-9.]+ s")).wait_for()
    idle(page)
    assert page.locator('[data-testid="stMetric"]').count() > 0  # the plan's figures are on screen
    until(lambda: not busy <= _workers(port), "the superseded plan's worker to end", 15,
          shows=lambda: f"workers {sorted(busy)} then, {sorted(_workers(port))} now")
    gone = busy - _workers(port)
    assert len(gone) == 1, (busy, _workers(port))  # the long plan's worker, and only it
    assert WAITING.search(page.locator('[data-testid="stMain"]').inner_text()) is None


def test_a_closed_sessions_memory_is_given_back(tmp_path, browser):
    """The server forgets a closed browser's session after its TTL (2 s here) and the janitor sweeps then, even
    with no visitor after it (Streamlit alone would forget it at the next visitor only)."""
    need_browser()
    with serving(tmp_path, f"sqlite:///{tmp_path / 'planner.db'}", "--server.disconnectedSessionTTL", "2") as url:
        p = new_page(browser, VIEWPORT, 120_000)
        context = p.context
        p.goto(url)
        _load_synthetic(p, 1000)
        p.wait_for_function("([sel]) => { const e = document.querySelector(sel); return e !== null &&"
                            " e.innerText.includes('1,000 tables on 8 ranks'); }", arg=[HEADLINE])
        idle(p)
        log = tmp_path / "server.log"
        assert "housekeeping:" not in log.read_text()
        context.close()
        until(lambda: "housekeeping: sessions 1 -> 0" in log.read_text(), "the janitor's sweep in the server log", 90,
              shows=lambda: log.read_text()[-1500:])
        swept = [ln for ln in log.read_text().splitlines() if ln.startswith("housekeeping:")]
        assert swept and re.match(r"housekeeping: sessions 1 -> 0; collected garbage and gave \d+ MB back "
                                  r"\(resident set now \d+ MB\)$", swept[0]), swept
