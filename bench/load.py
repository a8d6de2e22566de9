"""Load benchmark (issue 14, "Serve a team"): N browser sessions at once on one app server, each a user's flow.

  python -m bench.load [--sessions 1 5 10 20] [--tables 200] [--out bench/results/load.md] [--root DIR]
                       [--step-timeout 180] [--max-minutes 45] [--session-ttl 5] [--settle 30]

For each N: a fresh `streamlit run dashboard/app.py` (bench.interactive.serving: a free port on 127.0.0.1, a fresh
SQLite database) and one headless Chromium (Debian's) with N browser contexts, each driven by its own thread
(Playwright over the Chromium's DevTools port on 127.0.0.1: one Chromium, N contexts). All sessions start at once,
each: open the app, load the synthetic preset with --tables tables, go to Plan, change the world size on Topology
(session i: 16 + i ranks, so every session's replan is its own config; the first plan is the same config for all,
planned once and shared through the app's plan cache), go to Plan (the replan), save with a label on Save & share,
open the share link in a new page of its context and check it shows the saved plan.

Reported per N: each step's latency (median and worst over the sessions; a step ends when its result is on screen
and the app's runs it caused have ended), the server's CPU seconds per session, the health endpoint's latency
(polled every 0.25 s during the flows by a process of its own), the server's RSS before, at the end with the
sessions open, and after the contexts close, the plans found saved in the database under the round's labels, and
the load average. Every request goes to 127.0.0.1. The browsers share the machine's cores with the server.

Bounded in time: each browser action has --step-timeout; the whole run stops at --max-minutes (it kills the
Chromium, says so in the report, and skips the rounds left).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.interactive import (CHROMIUM, CHROMIUM_ARGS, ERROR, METRIC, ROOT, SIDEBAR, VIEWPORT, Runs, Session,
                               _git, _goto, _plan_shown, _served, describe,
                               serving)
from dashboard.serve import priority
import engine

RESULTS = ROOT / "bench" / "results" / "load.md"
SESSIONS = [1, 5, 10, 20]
STEPS = ("open", "load preset", "plan", "change world size", "replan", "save", "open share link")
FIRST_WORLD_SIZE = 16  # session i sets 16 + i ranks (the synthetic preset has 8)
WARMUP_TABLES = 10  # the warm-up session's preset: another config than the round's
HEALTH_EVERY_S = 0.25
HEALTH_TIMEOUT_S = 10.0
TARGETS = {"cpu_per_session_s": 1.0, "health_worst_s": 1.0, "rss_back_mb": 50.0}  # issue 14, on this machine
MB = 1024 * 1024
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# ---- the processes: CPU and RSS from /proc ----------------------------------------------------------


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (fields[0] is field 3, the state)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (walks every /proc/*/stat's parent id)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its children, ended and live: utime + stime + cutime + cstime
    (/proc/PID/stat fields 14-17; cutime/cstime hold the ended children it waited for) of `pid` and of every live
    descendant (a live one's own ended children are in its cutime/cstime: nothing counted twice)."""
    total = 0.0
    for p in [pid, *descendants(pid)]:
        try:
            f = _stat(p)
        except OSError:
            continue
        total += sum(int(x) for x in f[11:15]) / CLK
    return total


def rss_mb(pid: int) -> float:
    """Resident set size (/proc/PID/statm's second field), MB; 0 once the process is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / MB
    except OSError:
        return 0.0


def memory(pid: int) -> dict:
    """The server's RSS and, apart, its live descendants' (MB)."""
    kids = descendants(pid)
    return {"server_mb": round(rss_mb(pid), 1), "descendants_mb": round(sum(rss_mb(p) for p in kids), 1),
            "descendants": len(kids)}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")), "0")
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    try:
        chromium = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        chromium = "Chromium (version unknown)"
    import streamlit

    return (f"{os.cpu_count()} cores ({model}), {int(mem) / 1024 / 1024:.0f} GiB memory, no GPU; Python "
            f"{platform.python_version()}, Streamlit {streamlit.__version__}, {chromium}")


# ---- the health endpoint ------------------------------------------------------------------------


_PROBE = """
import sys, time, urllib.request
url, every, timeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
t_start = time.monotonic()
while True:
    t0 = time.monotonic()
    try:
        ok = urllib.request.urlopen(url, timeout=timeout).read() == b"ok"
    except OSError:
        ok = False
    dt = time.monotonic() - t0
    print(f"{t0 - t_start:.3f} {dt:.4f} {int(ok)}", flush=True)
    time.sleep(max(0.0, every - dt))
"""


class Health:
    """GET /_stcore/health every HEALTH_EVERY_S until stopped, from a process of its own (at nice 0, one thread):
    the bench's own process runs a Playwright thread per session, and a probe among them would wait for that
    process's GIL (held by a nice-19 thread the kernel has put aside) and count the wait as the server's. Each
    answer's latency; a failure or timeout counts as HEALTH_TIMEOUT_S, and is counted apart."""

    def __init__(self, url: str):
        self.url, self.samples, self.failures = f"{url}/_stcore/health", [], 0
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _PROBE, self.url, str(HEALTH_EVERY_S),
                                      str(HEALTH_TIMEOUT_S)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True, preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 0),
                                     start_new_session=True)  # its own autogroup, not the clients' (clients_apart)

    def finish(self) -> None:
        """Stop the probe and read its answers (a line cut short by the stop is dropped)."""
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        for line in out.splitlines():
            parts = line.split()
            if len(parts) != 3:
                continue
            at, dt, ok = float(parts[0]), float(parts[1]), parts[2] == "1"
            self.samples.append((at, dt if ok else HEALTH_TIMEOUT_S))
            self.failures += not ok

    @property
    def latencies(self) -> list[float]:
        return [dt for _, dt in self.samples]

    def figures(self) -> dict:
        xs = self.latencies
        worst = max(self.samples, key=lambda s: s[1]) if self.samples else None
        return {"polls": len(xs), "failures": self.failures, "median_s": statistics.median(xs) if xs else None,
                "p99_s": sorted(xs)[int(0.99 * (len(xs) - 1))] if xs else None,
                "worst_s": worst[1] if worst else None, "worst_at_s": worst[0] if worst else None}


def clients_apart(nice: int, stack: ExitStack) -> str:
    """This process, its Playwright drivers and Chromium stand in for browsers on other machines. On Linux every
    session is an autogroup with the same CPU share, whatever its threads' nice: the clients' session would weigh
    as much as the server's, and outweigh the server's planning workers (which run in autogroups below the
    server's). So this process leads a session of its own whose autogroup gets `nice`; the server and the health
    probe start in sessions of their own. When this process cannot start a session (a terminal's foreground job),
    the session it is in is lowered until it ends. Returns what was done, for the report."""
    if not nice:
        return ""
    me = os.getpid()
    if os.getsid(0) != me:
        try:
            os.setsid()
        except PermissionError:  # a process-group leader: lower the terminal's session, and restore it after
            try:
                before = int(Path(f"/proc/{me}/autogroup").read_text().split()[-1])
                stack.callback(priority.set_autogroup_nice, me, before)
            except (OSError, IndexError, ValueError):
                pass
    got = priority.set_autogroup_nice(me, nice)
    return f"the clients' autogroup at nice {got}" if got is not None else "the clients' autogroup not lowered"


# ---- one Chromium, a thread per browser context ---------------------------------------------------


class Chromium:
    """Debian's headless Chromium with its DevTools on a free port of 127.0.0.1 (each session's thread connects
    its own Playwright to it: Playwright's sync API is one thread's)."""

    def __init__(self, stack: ExitStack, nice: int = 0, may_renice: bool = False):
        profile = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-load-chromium-")))
        # Chromium sets its own threads' priorities (its compositor and IO threads to nice -8, others to 0): as root
        # (CAP_SYS_NICE) it can, and those threads then outrank the server they stand in as remote browsers for.
        # Without that capability it cannot go below the nice it was started at.
        self.locked = bool(nice) and not may_renice and os.geteuid() == 0 and shutil.which("setpriv") is not None
        lock = ["setpriv", "--bounding-set=-sys_nice", "--"] if self.locked else []
        self.proc = subprocess.Popen([*lock, CHROMIUM, *CHROMIUM_ARGS, "--remote-debugging-address=127.0.0.1",
                                      "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)  # its renderers inherit it
        stack.callback(self.stop)
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        self.endpoint = f"http://127.0.0.1:{port_file.read_text().split()[0]}"

    def lowest_nice(self) -> int | None:
        """The lowest nice (highest priority) among the threads of Chromium's processes now."""
        nices = []
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                tasks = list(Path(f"/proc/{pid}/task").iterdir())
            except OSError:
                continue
            for task in tasks:
                try:
                    nices.append(int(_stat(int(task.name))[16]))  # /proc/TID/stat: a thread's own
                except (OSError, IndexError, ValueError):
                    continue  # gone meanwhile
        return min(nices) if nices else None

    def stop(self) -> None:
        """Kill Chromium and its helpers (renderers, zygote: read first, they outlive a killed browser a while)."""
        if self.proc.poll() is None:
            below = descendants(self.proc.pid)
            self.proc.kill()
            for pid in below:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(timeout=30)


@dataclass
class Flow:
    """One session's flow: each step's seconds, the server's CPU seconds during each step (meaningful at N = 1
    only: the server is shared), what it saved and what its share link showed."""

    index: int
    label: str
    world_size: int
    steps: dict[str, float] = field(default_factory=dict)
    step_server_cpu_s: dict[str, float] = field(default_factory=dict)
    headline: str = ""
    share_url: str = ""
    share_ok: bool = False
    share_problem: str = ""
    error: str = ""


class User(threading.Thread):
    """One browser context on the shared Chromium, going through the flow once everyone is ready."""

    def __init__(self, flow: Flow, url: str, endpoint: str, tables: int, step_timeout_s: float, server_pid: int,
                 start: threading.Barrier, done: threading.Barrier, close: threading.Event):
        super().__init__(daemon=True)
        self.flow, self.url, self.endpoint, self.tables = flow, url, endpoint, tables
        self.timeout_ms, self.server_pid = step_timeout_s * 1000, server_pid
        self.start_line, self.done_line, self.close_now = start, done, close
        self.shots: Path | None = None  # a folder for the screen of a step that failed
        self.nice = 0  # this thread's and its Playwright driver's niceness (a client, not the server)

    def run(self) -> None:
        from playwright.sync_api import sync_playwright

        if self.nice:  # Linux: a thread's own; the driver process it starts inherits it
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)

        with sync_playwright() as pw:
            try:
                browser = pw.chromium.connect_over_cdp(self.endpoint, timeout=self.timeout_ms)
                context = browser.new_context(viewport=VIEWPORT)
                self.page = context.new_page()
                self.page.set_default_timeout(self.timeout_ms)
                self.runs = Runs(self.page)
            except Exception as e:  # noqa: BLE001 - reported in the round's figures
                self.flow.error = _one_line(e)
            self._wait(self.start_line)
            if not self.flow.error:
                try:
                    self.go()
                except Exception as e:  # noqa: BLE001
                    self.flow.error = _one_line(e)
            self._wait(self.done_line)
            self.close_now.wait()
            try:
                context.close()
                browser.close()
            except Exception:  # noqa: BLE001 - Chromium gone (the safety stop): nothing left to close
                pass

    @staticmethod
    def _wait(line: threading.Barrier) -> None:
        try:
            line.wait()
        except threading.BrokenBarrierError:
            pass

    def _step(self, name: str, action, runs: Runs | None = None) -> None:
        """Time `action` (which waits for its result on screen) until the runs it caused have ended."""
        runs = runs or self.runs
        cpu0, t0 = tree_cpu_seconds(self.server_pid), time.perf_counter()
        try:
            action()
        except Exception as e:
            if self.shots is not None:
                self.shots.mkdir(parents=True, exist_ok=True)
                runs.page.screenshot(path=str(self.shots / f"{self.flow.label.replace(' ', '-')}.png"))
            raise RuntimeError(f"{name}, after {time.perf_counter() - t0:.0f} s: {_one_line(e)}") from e
        t1 = time.perf_counter()
        runs.settle()
        ended = [e for e in runs.finished if e > t0]
        self.flow.steps[name] = max(t1, max(ended, default=t1)) - t0
        self.flow.step_server_cpu_s[name] = tree_cpu_seconds(self.server_pid) - cpu0

    def go(self) -> None:
        page, flow, n = self.page, self.flow, self.tables

        def open_app():
            page.goto(self.url)
            page.wait_for_selector('[data-testid="stDataFrame"]')
            self.runs.first_end_after(0.0)

        def plan(world_size: int):
            def action():
                _goto(page, "Plan")
                page.locator(SIDEBAR).get_by_text(f"{n:,} tables · {world_size} ranks").wait_for()
                page.get_by_text(re.compile(rf"^Plan by .* · {n:,} tables · ")).wait_for()  # the Plan page's plan
            return action

        def world_size():
            _goto(page, "Topology")
            box = page.locator(".st-key-topology_world_size input")
            box.wait_for()
            self.runs.settle()
            box.fill(str(flow.world_size))
            box.press("Enter")
            page.locator(SIDEBAR).get_by_text(f"{n:,} tables · {flow.world_size} ranks").wait_for()

        self._step("open", open_app)
        self._step("load preset", lambda: Session._load_synthetic(self, n))  # noqa: SLF001 - its page and runs
        self._step("plan", plan(8))
        self._step("change world size", world_size)
        self._step("replan", plan(flow.world_size))
        flow.headline = _plan_shown(page)  # the Plan page's run has ended: its slowest rank
        _goto(page, "Save & share")
        label = page.get_by_label("Label", exact=True)
        label.wait_for()
        self.runs.settle()
        label.fill(flow.label)
        label.press("Enter")
        self.runs.settle()

        def save():
            page.get_by_role("button", name="Save plan").click()
            page.get_by_text(f"Share link of '{flow.label}'").wait_for()
            flow.share_url = page.locator('[data-testid="stCode"]').filter(has_text="?plan=").first.inner_text()

        self._step("save", save)
        shared = page.context.new_page()
        shared.set_default_timeout(self.timeout_ms)
        shared_runs = Runs(shared)

        def open_share():
            shared.goto(flow.share_url.strip())
            shared.get_by_role("heading", name=flow.label).wait_for()
            shared.locator(f"{METRIC}, {ERROR}").first.wait_for()

        self._step("open share link", open_share, shared_runs)
        flow.share_problem = _share_problem(shared, flow.headline)
        flow.share_ok = not flow.share_problem


def _share_problem(shared, headline: str, within_s: float = 15.0) -> str:
    """'' once the shared page shows 'Read-only', no error and the saved plan's headline (a page still drawing gets
    `within_s`); else what it shows instead."""
    deadline = time.monotonic() + within_s
    while True:
        if shared.locator(ERROR).count():
            return f"an error: {_one_line(Exception(shared.locator(ERROR).first.inner_text()))}"
        shown = shared.locator(METRIC).first.inner_text()
        read_only = shared.get_by_text("Read-only").count() > 0
        if read_only and shown == headline:
            return ""
        if time.monotonic() > deadline:
            return f"headline {shown!r} (saved {headline!r}); 'Read-only' {'shown' if read_only else 'missing'}"
        shared.wait_for_timeout(250)


def _one_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


# ---- a round: N sessions at once on a fresh server ---------------------------------------------------


def saved_labels(db_url: str, labels: list[str]) -> int:
    from db.store import Store

    store = Store(db_url)
    try:
        found = {p.label for p in store.list_plans(limit=10_000)}
    finally:
        store.close()
    return sum(label in found for label in labels)


def visit(endpoint: str, url: str, timeout_s: float) -> str:
    """One more visitor: open the app in a new context, wait for its first run to end, close it. Streamlit drops
    expired disconnected sessions only on its next write to the session storage (streamlit's TTLCache: "only
    actually removed by a write, by expire(), or by eviction"): this disconnect is that write, as the next user
    of a team's server would make. Returns an error, or ''."""
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.connect_over_cdp(endpoint, timeout=timeout_s * 1000)
            context = browser.new_context(viewport=VIEWPORT)
            page = context.new_page()
            page.set_default_timeout(timeout_s * 1000)
            runs = Runs(page)
            page.goto(url)
            runs.first_end_after(0.0)
            context.close()
            browser.close()
    except Exception as e:  # noqa: BLE001 - reported beside the RSS
        return _one_line(e)
    return ""


def _settled_memory(pid: int, start_mb: float, settle_s: float) -> tuple[dict, float]:
    """Poll the server's RSS every second for up to `settle_s` after the contexts closed: stop early once back
    within the target of its start; returns the last reading and the seconds waited."""
    t0 = time.monotonic()
    while True:
        m = memory(pid)
        waited = time.monotonic() - t0
        if m["server_mb"] - start_mb <= TARGETS["rss_back_mb"] or waited >= settle_s:
            return m, waited
        time.sleep(1.0)


def warm_up(url: str, pid: int, chromium: Chromium, args, label: str) -> dict:
    """One session's flow before the round, on another config (WARMUP_TABLES tables), untimed: the server's
    imports and first-run work are done before the round's CPU and RSS are read (a team's server has served
    someone before); then its context closes and the RSS settles."""
    rss0, cpu0 = rss_mb(pid), tree_cpu_seconds(pid)
    flow = Flow(-1, label, FIRST_WORLD_SIZE - 1)
    start, done, close = threading.Barrier(1), threading.Barrier(2), threading.Event()
    tables = WARMUP_TABLES if args.tables != WARMUP_TABLES else WARMUP_TABLES + 1
    user = User(flow, url, chromium.endpoint, tables, args.step_timeout, pid, start, done, close)
    user.start()
    try:
        done.wait(timeout=args.step_timeout * (len(STEPS) + 2))
    except threading.BrokenBarrierError:
        flow.error = flow.error or "the warm-up session did not end in time"
    close.set()
    user.join(timeout=60)
    cpu = tree_cpu_seconds(pid) - cpu0
    time.sleep(args.session_ttl + 1)  # its session's state may go
    return {"tables": tables, "cpu_s": cpu, "rss_start_mb": round(rss0, 1), "rss_after_mb": round(rss_mb(pid), 1),
            "steps": flow.steps, "error": flow.error}


def run_round(root: Path, n: int, args, run_id: str, deadline: float, log=print) -> dict:
    out: dict = {"sessions": n, "tables": args.tables, "uptime_before": uptime()}
    log(f"N = {n}: {out['uptime_before']}")
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-load-{n}-")))
        db_url = f"sqlite:///{work / 'planner.db'}"
        url, pid = stack.enter_context(serving(root, work, "--server.disconnectedSessionTTL", str(args.session_ttl),
                                               own_session=True))
        chromium = Chromium(stack, args.client_nice, args.let_chromium_renice)
        if args.warmup:
            out["warmup"] = warm_up(url, pid, chromium, args, f"load {run_id} N{n} warm-up")
            w = out["warmup"]
            log(f"  warm-up session: {w['cpu_s']:.2f} s server CPU, RSS {w['rss_start_mb']} -> {w['rss_after_mb']} MB"
                + (f"; {w['error']}" if w["error"] else ""))
        flows = [Flow(i, f"load {run_id} N{n} s{i}", FIRST_WORLD_SIZE + i) for i in range(n)]
        start, done, close = threading.Barrier(n + 1), threading.Barrier(n + 1), threading.Event()
        users = [User(f, url, chromium.endpoint, args.tables, args.step_timeout, pid, start, done, close)
                 for f in flows]
        for u in users:
            u.shots, u.nice = args.screenshots, args.client_nice
        for u in users:
            u.start()
        time.sleep(2.0)  # the server idle after its start
        try:
            start.wait(timeout=max(1.0, deadline - time.monotonic()))
        except threading.BrokenBarrierError:
            pass
        out["rss_before"], cpu0, browser_cpu0 = memory(pid), tree_cpu_seconds(pid), tree_cpu_seconds(chromium.proc.pid)
        own0 = tree_cpu_seconds(os.getpid())  # this process, its Playwright drivers, the server and the Chromium
        t0 = time.monotonic()
        health = Health(url)
        health.start()
        stopped = False
        try:
            done.wait(timeout=max(1.0, deadline - time.monotonic()))
        except threading.BrokenBarrierError:
            stopped = True
        out["wall_s"] = time.monotonic() - t0
        health.finish()
        out["cpu_s"] = tree_cpu_seconds(pid) - cpu0
        out["browser_cpu_s"] = tree_cpu_seconds(chromium.proc.pid) - browser_cpu0
        out["driver_cpu_s"] = tree_cpu_seconds(os.getpid()) - own0 - out["cpu_s"] - out["browser_cpu_s"]
        out["rss_open"], out["uptime_after"] = memory(pid), uptime()
        out["chromium_lowest_nice"] = chromium.lowest_nice()
        out["health"] = health.figures()
        if stopped:
            out["safety_stop"] = (f"the whole-run cap ({args.max_minutes} min) was reached during this round: "
                                  "Chromium killed, the sessions' flows cut short")
            log(f"  safety stop: {out['safety_stop']}")
            chromium.stop()
        close.set()
        for u in users:
            u.join(timeout=60)
        time.sleep(args.session_ttl + 1)
        out["rss_closed"] = memory(pid)  # the closed sessions' state past its TTL, not yet dropped (see visit)
        out["visit"] = "" if stopped else visit(chromium.endpoint, url, args.step_timeout)
        chromium.stop()
        out["rss_after"], out["settle_s"] = _settled_memory(pid, out["rss_before"]["server_mb"], args.settle)
        out["cpu_with_close_s"] = tree_cpu_seconds(pid) - cpu0
        out["saves_expected"] = n
        out["saves_found"] = saved_labels(db_url, [f.label for f in flows])
    out["cpu_per_session_s"] = out["cpu_s"] / n
    out["shares_ok"] = sum(f.share_ok for f in flows)
    out["errors"] = [f"session {f.index}: {f.error}" for f in flows if f.error]
    if out["visit"]:
        out["errors"].append(f"the visit after the sessions closed: {out['visit']}")
    out["flows"] = [asdict(f) for f in flows]
    out["steps"] = step_figures(flows)
    log(f"  {out['wall_s']:.1f} s; server CPU {out['cpu_s']:.2f} s ({out['cpu_per_session_s']:.2f} s per session), "
        f"Chromium CPU {out['browser_cpu_s']:.1f} s; health worst {out['health']['worst_s']} s over "
        f"{out['health']['polls']} polls; RSS {out['rss_before']['server_mb']} -> {out['rss_open']['server_mb']} -> "
        f"{out['rss_after']['server_mb']} MB; saves {out['saves_found']}/{n}; share links {out['shares_ok']}/{n}; "
        f"Chromium's threads' lowest nice {out['chromium_lowest_nice']}; {out['uptime_after']}")
    for e in out["errors"]:
        log(f"  {e}")
    return out


def step_figures(flows: list[Flow]) -> dict:
    figures = {}
    for step in STEPS:
        xs = [f.steps[step] for f in flows if step in f.steps]
        figures[step] = {"median_s": statistics.median(xs), "worst_s": max(xs), "sessions": len(xs)} if xs else {}
    return figures


# ---- the report ---------------------------------------------------------------------------------


def _s(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def checks(rounds: list[dict]) -> list[str]:
    by_n = {r["sessions"]: r for r in rounds}
    lines = []
    if 1 in by_n:
        c = by_n[1]["cpu_per_session_s"]
        lines.append(f"- server CPU per session at N = 1: {c:.2f} s (target <= {TARGETS['cpu_per_session_s']:g} s): "
                     f"{'met' if c <= TARGETS['cpu_per_session_s'] else 'NOT met'}")
    if 20 in by_n and by_n[20]["health"]["worst_s"] is not None:
        w = by_n[20]["health"]["worst_s"]
        lines.append(f"- health check worst at N = 20: {w:.2f} s (target <= {TARGETS['health_worst_s']:g} s): "
                     f"{'met' if w <= TARGETS['health_worst_s'] else 'NOT met'}")
    for r in rounds:
        back = r["rss_after"]["server_mb"] - r["rss_before"]["server_mb"]
        lines.append(f"- N = {r['sessions']}: server RSS {back:+.0f} MB from its start after the contexts closed "
                     f"(target within {TARGETS['rss_back_mb']:g} MB): "
                     f"{'met' if back <= TARGETS['rss_back_mb'] else 'NOT met'}"
                     f"; saves {r['saves_found']}/{r['saves_expected']}: "
                     f"{'met' if r['saves_found'] == r['saves_expected'] else 'NOT met'}")
    return lines


def markdown(rounds: list[dict], meta: dict) -> str:
    lines = [
        f"Made by `{meta['command']}` on {meta['date']}: {meta['machine']}. Checkout: {meta['checkout']}.",
        "",
        (f"Each N: a fresh `streamlit run dashboard/app.py` (SQLite, `--server.disconnectedSessionTTL "
         f"{meta['session_ttl']}`: a closed session's state may go after {meta['session_ttl']} s instead of the "
         "default 120 s) and one headless Chromium with N browser contexts, all on this machine, all traffic to "
         "127.0.0.1; the browsers shared the cores with the server"
         + (f" (Chromium and the Playwright drivers at nice {meta['client_nice']}, the server at 0: they stand in for "
            "browsers on other machines, but still take the cores the server leaves; "
            + ("Chromium started with CAP_SYS_NICE where this runs as root (--let-chromium-renice): its compositor and "
               "IO threads raise themselves to nice -8 and outrank the server" if meta.get("chromium_may_renice") else
               "Chromium started without CAP_SYS_NICE where this runs as root, else its compositor and IO threads "
               "raise themselves to nice -8 and outrank the server")
            + (f"; {meta['clients_autogroup']}, the server and the health probe in sessions (autogroups) of their "
               "own, as are the server's planning workers" if meta.get("clients_autogroup") else "")
            + ")" if meta.get("client_nice")
            else "") + ". Each session at once: open, load the "
         f"synthetic preset ({meta['tables']} tables, 8 ranks), Plan, world size to 16 + i ranks on Topology, Plan "
         "(the replan), save with a label, open the share link in a new page. The working view plans the config "
         "as soon as it changes (the strip above the grid), so the planning is in 'load preset' and 'change "
         "world size'; Plan shows that plan. The first plan is one config for all the sessions (planned once, "
         "shared by the plan cache); each replan is a config of its own."),
        "",
    ]
    if meta.get("safety_stop"):
        lines += [f"**Safety stop:** {meta['safety_stop']}", ""]
    lines += [
        ("| N | wall s | server CPU s | per session | with close | Chromium CPU s | Playwright CPU s | health median / "
         "p99 / worst s (polls, failed) | server RSS MB before / open / closed / after a visit (waited s) | "
         "children RSS MB | saves found / expected | share links ok | errors | load average before / after |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        h = r["health"]
        load = [u.split("load average:")[-1].strip() for u in (r["uptime_before"], r["uptime_after"])]
        lines.append(
            f"| {r['sessions']} | {r['wall_s']:.1f} | {r['cpu_s']:.2f} | {r['cpu_per_session_s']:.2f} | "
            f"{r['cpu_with_close_s']:.2f} | {r['browser_cpu_s']:.1f} | {r['driver_cpu_s']:.1f} | "
            f"{_s(h['median_s'], 3)} / {_s(h.get('p99_s'))} / {_s(h['worst_s'])} "
            f"({h['polls']}, {h['failures']}) | {r['rss_before']['server_mb']:.0f} / "
            f"{r['rss_open']['server_mb']:.0f} / {r['rss_closed']['server_mb']:.0f} / "
            f"{r['rss_after']['server_mb']:.0f} ({r['settle_s']:.0f}) | {r['rss_before']['descendants_mb']:.0f} / "
            f"{r['rss_open']['descendants_mb']:.0f} / {r['rss_after']['descendants_mb']:.0f} | "
            f"{r['saves_found']} / {r['saves_expected']} | {r['shares_ok']} / {r['sessions']} | {len(r['errors'])} | "
            f"{load[0]} / {load[1]} |")
    lines += ["", "Per-step latency, seconds: median / worst over the sessions.", "",
              "| step | " + " | ".join(f"N = {r['sessions']}" for r in rounds) + " |",
              "|---|" + "---|" * len(rounds)]
    for step in STEPS:
        cells = [f"{_s(f.get('median_s'))} / {_s(f.get('worst_s'))}" if (f := r["steps"].get(step)) else "-"
                 for r in rounds]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    nices = [r for r in rounds if r.get("chromium_lowest_nice") is not None]
    if nices:
        lines += ["", "The lowest nice among Chromium's threads when the flows ended: "
                  + "; ".join(f"N = {r['sessions']}: {r['chromium_lowest_nice']}" for r in nices) + "."]
    warm = [r for r in rounds if r.get("warmup")]
    if warm:
        lines += ["", ("Before each round, untimed, one warm-up session went through the same flow on another config "
                       f"({warm[0]['warmup']['tables']} tables): the server's imports and first runs are not in the "
                       "round's figures. Its server CPU (a fresh server's first session) and the server's RSS from its "
                       "start to before the round: "
                       + "; ".join(f"N = {r['sessions']}: {r['warmup']['cpu_s']:.2f} s, "
                                   f"{r['warmup']['rss_start_mb']:.0f} -> {r['rss_before']['server_mb']:.0f} MB"
                                   for r in warm) + ".")]
    one = next((r for r in rounds if r["sessions"] == 1 and r["flows"] and r["flows"][0]["step_server_cpu_s"]), None)
    if one:
        cpu = one["flows"][0]["step_server_cpu_s"]
        lines += ["", "Server CPU seconds by step at N = 1 (the only round where a step's server CPU is its own): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()) + "."]
    lines += ["", "Against issue 14's targets on this machine:", "", *checks(rounds)]
    errors = [f"- N = {r['sessions']}, {e}" for r in rounds for e in r["errors"]]
    if errors:
        lines += ["", "Errors:", "", *errors]
    lines += ["", ("Server CPU: the `streamlit run` process's utime + stime + cutime + cstime plus every live "
                   "descendant's (/proc), from the moment all sessions started until all flows ended, over N "
                   "('with close': until after the contexts closed and the RSS settled). A step ends when its "
                   "result is on screen and the browser received the end (script_finished) of the runs it caused "
                   "(then no run for 0.3 s). 'load preset' includes the preset popover's two quiet waits (0.3 s "
                   "each). Chromium CPU: its processes'; Playwright CPU: this bench's process and its Playwright "
                   "drivers (one per session). Health: GET /_stcore/health every 0.25 s during the flows, from a "
                   "process of its own at nice 0 (not a thread of this bench's process, whose GIL the sessions' "
                   "Playwright threads hold). RSS: "
                   "'before' after the warm-up "
                   "session, 'open' when all flows ended, 'closed' the session TTL + 1 s after the contexts closed, "
                   "'after a visit' once one more visitor opened the app and left (Streamlit drops expired "
                   "disconnected sessions only at its next write to the session storage, such as that visitor's "
                   "disconnect), polled every second until back within 50 MB of 'before' or the wait ran out.")]
    return "\n".join(lines) + "\n"


def archive(stack: ExitStack, root: Path, rev: str) -> Path:
    """The files of git revision `rev` of `root`, in a temporary folder."""
    into = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-load-tree-")))
    tar = subprocess.run(["git", "archive", rev], cwd=root, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, nargs="+", default=SESSIONS,
                   help="N: browser sessions at once, a round each")
    p.add_argument("--tables", type=int, default=200, help="tables in the synthetic preset")
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose dashboard is served")
    p.add_argument("--out", type=Path, default=RESULTS, help="the markdown report; the JSON goes beside it")
    p.add_argument("--step-timeout", type=float, default=180.0, help="seconds any one browser action may take")
    p.add_argument("--max-minutes", type=float, default=45.0, help="the whole run's cap (a safety stop)")
    p.add_argument("--session-ttl", type=int, default=5,
                   help="streamlit's server.disconnectedSessionTTL for the bench (seconds; its default is 120)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="measure from a cold server (its imports and first runs in the round's figures)")
    p.add_argument("--screenshots", type=Path, help="a folder for the screen of each step that failed")
    p.add_argument("--rev", help="serve git revision REV of --root (git archive) instead of its working tree")
    p.add_argument("--client-nice", type=int, default=19, choices=range(0, 20), metavar="0-19",
                   help="niceness of Chromium and the Playwright drivers (default 19; 0: the same as the server)")
    p.add_argument("--let-chromium-renice", action="store_true",
                   help="start Chromium with CAP_SYS_NICE when this runs as root (as before 2026-11-26): its threads "
                        "then raise their own priority above the server's")
    p.add_argument("--settle", type=float, default=30.0, help="seconds to wait for the RSS after the contexts close")
    args = p.parse_args(argv)
    from playwright.sync_api import sync_playwright  # noqa: F401 - fail early without Playwright

    deadline = time.monotonic() + args.max_minutes * 60
    command = " ".join(["python -m bench.load", *(shlex.quote(a) for a in (argv or sys.argv[1:]))])
    root = args.root.resolve()
    meta = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
            "checkout": describe(root), "tables": args.tables, "session_ttl": args.session_ttl,
            "client_nice": args.client_nice, "chromium_may_renice": args.let_chromium_renice,
            "targets": TARGETS}
    print(f"{meta['machine']}; {meta['checkout']}")
    run_id = time.strftime("%H%M%S")
    rounds = []
    with ExitStack() as stack:
        meta["clients_autogroup"] = clients_apart(args.client_nice, stack)
        if args.rev:
            served = archive(stack, root, args.rev)
            meta["checkout"] = f"git revision {args.rev} ({_git(root, 'rev-parse', '--short', args.rev).strip()}) " \
                               "of the checkout, served from `git archive` (no working-tree changes)"
        else:  # a copy: edits to the tree while the bench runs change nothing served
            served = _served(stack, root)
        for n in args.sessions:
            if time.monotonic() > deadline:
                meta["safety_stop"] = (f"the whole-run cap ({args.max_minutes} min) was reached: N = "
                                       f"{', '.join(str(m) for m in args.sessions[len(rounds):])} not run")
                print(meta["safety_stop"])
                break
            rounds.append(run_round(served, n, args, run_id, deadline))
            if rounds[-1].get("safety_stop"):
                meta["safety_stop"] = rounds[-1]["safety_stop"]
                left = args.sessions[len(rounds):]
                if left:
                    meta["safety_stop"] += f"; N = {', '.join(str(m) for m in left)} not run"
                break
    text = markdown(rounds, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    engine.write_text_file(args.out, text)
    engine.write_text_file(args.out.with_suffix(".json"), json.dumps({**meta, "rounds": rounds}, indent=1) + "\n")
    print(text)
    ok = all(r["saves_found"] == r["saves_expected"] and not r["errors"] and not r.get("safety_stop") for r in rounds)
    return 0 if ok and len(rounds) == len(args.sessions) else 1


if __name__ == "__main__":
    sys.exit(main())
