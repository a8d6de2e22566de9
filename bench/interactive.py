"""Interactive latency of the dashboard in a real browser (issue 11): after an edit to one table of N, how long
until the new plan's headline figure (the slowest rank) is on screen: in the working view's strip above the grid
(since issue 12), and, for comparison with earlier runs, on the Plan page after going there.

  python -m bench.interactive [--tables 1000 200] [--repeats 5] [--root DIR] [--baseline DIR | --baseline-dashboard REV]
                              [--plan-input LABEL=VALUE ...] [--out bench/results/interactive.md] [--screenshots DIR]

Starts `python -m streamlit run dashboard/app.py` (of --root, default this checkout) on a free port with a fresh
SQLite database, opens it in headless Chromium (Playwright, Debian's /usr/bin/chromium) at 1440x900, loads the
seeded synthetic preset with N tables, plans it on the Plan page (auto-replan), then, --repeats times: goes to
Tables & constraints, types a new pooling factor into one table's cell of the grid (100, 200, ...: never planned
before), waits until the app is idle (as a user looks before clicking on), goes to Plan and waits until the
slowest-rank figure shows a new value. Timed from the Enter that commits the cell: the edit's run (until the
browser receives Streamlit's script_finished), plus from the click on Plan until the new figure is on screen
(the headline) and until the page's run ended (every chart drawn). Beside them: the planner's planning_seconds
(the page's progress line), the server's CPU seconds (/proc/PID/stat) and the 1-minute load average; the browser
shares the machine's cores. --baseline DIR serves a second checkout too and alternates the edits between the two
(A B, B A, ...), reporting the median of the pairs' ratios; --baseline-dashboard REV makes that second checkout
from this one (its working tree) with dashboard/ as of git revision REV: the same engine, the dashboard before.
A git checkout is served from a copy of its working tree made at the start (edits while the bench runs change
nothing served).
--plan-input sets a number input of the Plan page (by its label) after the first plan, and plans again if the
first failed.

  python -m bench.interactive --engine [--presets NAME ...] [--repeats 5] [--out-dir bench/results]

times the engine's side of the working view instead, on every table preset the dashboard offers: a one-table
edit re-planned from the plan on screen, with the tables it moves and its slowest rank against a plan from scratch
(bench/interactive_replan.py; results in bench/results/interactive_replan.md and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "interactive.md"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-quic", "--disable-sync"]
VIEWPORT = {"width": 1440, "height": 900}
TARGET_S = 1.5  # issue 11: the new plan's headline on screen within this long after an edit, at 1,000 tables
UI_TIMEOUT_MS = 120_000
START_TIMEOUT_S = 60
QUIET_S = 0.3  # no run ended for this long and none running: the app is idle
EDIT_ROW = 3  # the grid row edited (on the grid's first screen)
POOLING_FACTOR_COLUMN = "pooling factor"  # found by its header (the grid's columns moved before)
STRIP = ".st-key-ws_headline"  # the working view's headline above the grid (issue 12)
METRIC = '[data-testid="stMetricValue"]'
SIDEBAR = '[data-testid="stSidebar"]'
RUNNING = '[data-testid="stStatusWidget"]'
ERROR = '[data-testid="stAlertContentError"]'
PLANNED = re.compile(r"Planned ([\d,]+) tables? on ([\d,]+) ranks? in ([0-9.]+) s")  # '1,000 tables' ('1000' before)
SESSION = re.compile(r"([\d,]+) tables? · ([\d,]+) ranks?")
STRIP_FIGURE = re.compile(r"Slowest rank (\S+ ms)")  # the strip's figure, as the Plan page's metric shows it
FIGURES = ("strip_s", "to_headline_s", "edit_run_s", "plan_to_headline_s", "to_idle_s", "planning_seconds",
           "server_cpu_s", "load1")


@dataclass
class Edit:
    """One edit, timed from the Enter that committed the cell (seconds)."""

    value: float
    edit_run_s: float  # until the browser received the end of the Tables page's run the edit caused
    strip_s: float | None  # until the working view's strip above the grid showed the new slowest rank (issue 12)
    to_headline_s: float  # edit_run_s + from the click on Plan until a new slowest-rank figure was on screen
    plan_to_headline_s: float  # from the click on Plan until then
    to_idle_s: float  # edit_run_s + from the click on Plan until the browser received the end of the page's run
    headline: str
    planning_seconds: float | None  # the planner's own figure, from the page's progress line
    server_cpu_s: float  # the server's user + system CPU from the Enter until idle on Plan
    load1: float
    edit_runs: int  # script runs from the Enter until idle (more than one: a double rerun)
    plan_runs: int  # script runs from the click on Plan until idle


@dataclass
class Case:
    label: str  # "this checkout", or "baseline"
    root: str
    tables: int
    ranks: int = 0
    first_plan_s: float = 0.0
    edits: list[Edit] = field(default_factory=list)
    error: str = ""

    def figure(self, name: str) -> dict:
        xs = [getattr(e, name) for e in self.edits if getattr(e, name) is not None]
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else {}


# ---- the checkouts and the server ---------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def describe(root: Path) -> str:
    """The checkout's commit, and the paths that differ from it (another engineer's work in progress, ...)."""
    try:
        head = _git(root, "rev-parse", "--short", "HEAD").strip()
        dirty = [line[3:] for line in _git(root, "status", "--porcelain").splitlines() if line.strip()]
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return head + (f" with changes to {', '.join(sorted(dirty))}" if dirty else "")


def snapshot(root: Path, into: Path, dashboard_rev: str | None = None) -> Path:
    """A copy of `root`'s working tree (tracked and untracked files, not ignored ones), so that edits to the tree
    while the bench runs change nothing it serves; with `dashboard_rev`, its dashboard/ is as of that revision."""
    files = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in files:
        src = root / name
        if name and src.is_file() and not (dashboard_rev and name.startswith("dashboard/")):
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).write_bytes(src.read_bytes())
    if dashboard_rev:
        archive = subprocess.run(["git", "archive", dashboard_rev, "dashboard"], cwd=root, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _served(stack: ExitStack, root: Path, dashboard_rev: str | None = None) -> Path:
    """What is served for `root`: a snapshot of it when it is a git checkout, else the folder itself."""
    try:
        _git(root, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.CalledProcessError):
        if dashboard_rev:
            raise
        return root
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-interactive-tree-")))
    return snapshot(root, tmp, dashboard_rev)


def served_roots(stack: ExitStack, root: Path, args, meta: dict) -> list[tuple[str, Path]]:
    """This checkout and, with --baseline-dashboard REV or --baseline DIR, the baseline, each copied now (later
    edits to the tree change nothing served); the baseline is described in meta["baseline"]."""
    roots = [("this checkout", _served(stack, root))]
    if args.baseline_dashboard:
        roots.append(("baseline", _served(stack, root, args.baseline_dashboard)))
        meta["baseline"] = f"this checkout with dashboard/ as of {args.baseline_dashboard}"
    elif args.baseline:
        roots.append(("baseline", _served(stack, args.baseline.resolve())))
        meta["baseline"] = f"{args.baseline} ({describe(args.baseline.resolve())})"
    return roots


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(root: Path, work: Path, *flags: str, own_session: bool = False):
    """`streamlit run dashboard/app.py` of `root` on a free port and a fresh SQLite database; yields (url, pid).
    `flags`: more `streamlit run` options. `own_session`: the server leads a session of its own (on Linux, an
    autogroup of its own: the CPU share of the caller's session is not its)."""
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{work / 'planner.db'}", "PLANNER_DATA_DIR": str(work)}
    log_path = work / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
             "--browser.gatherUsageStats", "false", *flags], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=own_session)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not start: {log_path.read_text()[-2000:]}")
                try:
                    if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                        break
                except OSError:
                    time.sleep(0.2)
            yield url, proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- the browser --------------------------------------------------------------------------------


class Runs:
    """When the app's script runs ended, as the browser received Streamlit's `script_finished` message on the
    websocket (the page's running indicator shows only after a delay: it cannot time a short run)."""

    def __init__(self, page):
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self.page, self.finished = page, []

        def frame(payload) -> None:
            if isinstance(payload, bytes) and ForwardMsg.FromString(payload).WhichOneof("type") == "script_finished":
                self.finished.append(time.perf_counter())

        page.on("websocket", lambda ws: ws.on("framereceived", frame))

    def first_end_after(self, t: float) -> float:
        deadline = time.perf_counter() + UI_TIMEOUT_MS / 1000
        while time.perf_counter() < deadline:
            ends = [e for e in self.finished if e > t]
            if ends:
                return ends[0]
            self.page.wait_for_timeout(5)
        raise TimeoutError("the app's script run did not end")

    def settle(self) -> None:
        """Wait until no run ended for QUIET_S and none is running."""
        while True:
            last = max(self.finished, default=0.0)
            self.page.wait_for_timeout(QUIET_S * 1000)
            if max(self.finished, default=0.0) == last and self.page.locator(RUNNING).count() == 0:
                return

    def since(self, t: float) -> int:
        return sum(e > t for e in self.finished)


def _strip_after(page, runs: Runs, before: str, t0: float) -> str:
    """The working view's strip once it shows the edit's plan: its text changed, or the edit's run ended with the
    same text (a re-plan to the same figures and moves as the edit before it reads the same, word for word)."""
    deadline = t0 + UI_TIMEOUT_MS / 1000
    while time.perf_counter() < deadline:
        text = page.locator(STRIP).inner_text() if page.locator(STRIP).count() else ""
        if "Slowest rank" in text and (text != before or runs.since(t0)):
            return text
        page.wait_for_timeout(10)
    raise TimeoutError("the strip never showed the edit's plan")


def _goto(page, name: str) -> None:
    page.locator(SIDEBAR).get_by_role("link", name=name, exact=True).click()


def _headline(page) -> str:
    return page.locator(METRIC).first.inner_text()


def _planning_seconds(page) -> float | None:
    m = PLANNED.search(page.locator("body").inner_text())
    return float(m.group(3)) if m else None


def _plan_shown(page) -> str:
    """Wait for the Plan page's headline or its error; returns the headline, raises with the error."""
    page.locator(f"{METRIC}, {ERROR}").first.wait_for()
    if page.locator(ERROR).count():
        raise RuntimeError(page.locator(ERROR).first.inner_text())
    return _headline(page)


def load_synthetic(page, runs: "Runs", count: int, seed: int | None = None) -> None:
    """Load the seeded synthetic preset with `count` tables (and `seed`, when given) from the Tables page."""
    page.get_by_role("button", name="Presets").click()
    body = page.locator('[data-testid="stPopoverBody"]')
    body.locator('[data-testid="stSelectbox"]').click()
    page.get_by_role("option", name=re.compile(r"^Synthetic")).click()
    for key, value in (("tables_syn_count", count), ("tables_syn_seed", seed)):
        if value is None:
            continue
        box = page.locator(f".st-key-{key} input")
        box.fill(str(value))
        box.press("Enter")
        runs.settle()
    page.get_by_role("button", name="Load preset").click()
    # the toast (shown a few seconds: a starved browser can miss it) or the Tables tab of the new count
    page.get_by_text(re.compile(r"^Loaded preset")).or_(
        page.get_by_role("tab", name=f"Tables ({count})")).first.wait_for()
    page.keyboard.press("Escape")
    body.wait_for(state="hidden")
    page.get_by_role("tab", name=f"Tables ({count})").wait_for()


class Session:
    """One checkout's app under `streamlit run`, one browser page on it, the synthetic preset with N tables."""

    def __init__(self, stack: ExitStack, browser, case: Case, plan_inputs: dict[str, str]):
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-interactive-")))
        url, self.pid = stack.enter_context(serving(Path(case.root), work))
        self.case, self.before = case, ""
        self.page = browser.new_context(viewport=VIEWPORT).new_page()
        stack.callback(self.page.context.close)
        self.page.set_default_timeout(UI_TIMEOUT_MS)
        self.runs = Runs(self.page)
        self.page.goto(url)
        self.page.wait_for_selector('[data-testid="stDataFrame"]')
        self.runs.settle()
        self._load_synthetic(case.tables)
        t0 = time.perf_counter()
        _goto(self.page, "Plan")
        try:
            self.before = _plan_shown(self.page)
        except RuntimeError:
            if not plan_inputs:
                raise
        case.first_plan_s = time.perf_counter() - t0
        self.runs.settle()
        if plan_inputs:
            self._set_plan_inputs(plan_inputs)
        m = PLANNED.search(self.page.locator("body").inner_text()) or SESSION.search(
            self.page.locator(SIDEBAR).inner_text())  # the sidebar's "N tables · M ranks" where no progress line
        case.ranks = int(m.group(2).replace(",", "")) if m else 0

    def _load_synthetic(self, count: int) -> None:
        load_synthetic(self.page, self.runs, count)
        self.runs.settle()

    def _set_plan_inputs(self, inputs: dict[str, str]) -> None:
        for label, value in inputs.items():
            box = self.page.get_by_label(label, exact=True)
            box.fill(value)
            box.press("Enter")
            self.runs.settle()
        if not self.before:  # the first plan failed: plan again with these settings
            self.page.get_by_role("button", name="Plan", exact=True).click()
            self.before = _plan_shown(self.page)
            self.runs.settle()

    def _type_into_cell(self, row: int, column: str, value: str) -> None:
        """Open one cell of the Tables grid (its column found by its header) and type `value` (not committed)."""
        page = self.page
        grid = page.locator('[data-testid="stDataFrameResizable"]').first
        grid.locator("th").filter(has_text=column).first.wait_for(state="attached")  # the grid's hidden cells
        headers = [h.strip() for h in grid.locator("th").all_inner_texts() if h.strip()]
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 60, box["y"] + 35 + 17)  # a cell of the first data row
        page.keyboard.press("Home")
        for _ in range(row):
            page.keyboard.press("ArrowDown")
        for _ in range(headers.index(column)):
            page.keyboard.press("ArrowRight")
        page.keyboard.press("Enter")
        editor = page.locator("#portal .gdg-input")
        editor.wait_for()
        editor.fill(value)

    def edit(self, value: float) -> Edit:
        page, runs = self.page, self.runs
        _goto(page, "Tables & constraints")
        page.locator('[data-testid="stDataFrameResizable"]').first.wait_for()
        runs.settle()
        strip_before = page.locator(STRIP).inner_text() if page.locator(STRIP).count() else ""
        self._type_into_cell(EDIT_ROW, POOLING_FACTOR_COLUMN, f"{value:g}")
        load1, cpu0 = os.getloadavg()[0], cpu_seconds(self.pid)
        t0 = time.perf_counter()
        page.keyboard.press("Enter")
        strip_s, figure = None, ""
        if strip_before:  # the working view: the new slowest rank shows above the grid
            text = _strip_after(page, runs, strip_before, t0)
            strip_s = time.perf_counter() - t0
            shown = STRIP_FIGURE.search(text)
            figure = shown.group(1) if shown else ""
        edited = runs.first_end_after(t0)
        runs.settle()
        edit_runs = runs.since(t0)
        t1 = time.perf_counter()
        _goto(page, "Plan")
        # the new plan's figure: the one the strip showed (a re-plan may keep the slowest rank the same to 3
        # significant digits), else (a dashboard without the strip) any figure other than the one before
        page.wait_for_function(
            """([sel, err, before, figure]) => { if (document.querySelector(err)) return true;
                                         const m = document.querySelector(sel);
                                         if (m === null || m.innerText.trim() === '') return false;
                                         return figure ? m.innerText.includes(figure) : m.innerText !== before; }""",
            arg=[METRIC, ERROR, self.before, figure], polling="raf")
        t2 = time.perf_counter()
        after = _plan_shown(page)
        planned = runs.first_end_after(t1)
        runs.settle()
        self.before = after
        return Edit(value=value, edit_run_s=edited - t0, strip_s=strip_s, to_headline_s=(edited - t0) + (t2 - t1),
                    plan_to_headline_s=t2 - t1, to_idle_s=(edited - t0) + (planned - t1), headline=after,
                    planning_seconds=_planning_seconds(page), server_cpu_s=cpu_seconds(self.pid) - cpu0, load1=load1,
                    edit_runs=edit_runs, plan_runs=runs.since(t1))

    def shows(self) -> str:
        """What the page showed when a wait gave up: its headline strip or metric, and the page's url."""
        try:
            el = self.page.locator(STRIP if self.page.locator(STRIP).count() else METRIC).first
            return f" (at {self.page.url}, showing: {' '.join(el.inner_text(timeout=5000).split())[:300]})"
        except Exception:  # noqa: BLE001 - a page that cannot be read adds nothing
            return ""

    def screenshot(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(folder / name))


def run_cases(browser, cases: list[Case], repeats: int, plan_inputs: dict[str, str], shots: Path | None,
              log=print) -> None:
    """The cases of one table count side by side (one server each), their edits alternating A B, B A, ..."""
    with ExitStack() as stack:
        sessions = []
        for case in cases:
            try:
                sessions.append(Session(stack, browser, case, plan_inputs))
                log(f"{case.label}, {case.tables} tables: first plan {case.first_plan_s:.2f} s, slowest rank "
                    f"{sessions[-1].before}")
            except Exception as e:  # noqa: BLE001 - a case that cannot plan is reported, the others go on
                case.error = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
                log(f"{case.label}, {case.tables} tables: {case.error}")
        for i in range(repeats):
            order = sessions if i % 2 == 0 else sessions[::-1]
            for s in order:
                if s.case.error:
                    continue
                try:
                    e = s.edit(100.0 * (i + 1))  # far apart: the slowest rank's figure moves
                except Exception as exc:  # noqa: BLE001
                    s.case.error = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300] + s.shows()
                    log(f"  {s.case.label} edit {i + 1}: {s.case.error}")
                    continue
                s.case.edits.append(e)
                log(f"  {s.case.label} edit {i + 1}: headline after {e.to_headline_s:.2f} s (edit's run "
                    f"{e.edit_run_s:.2f}, Plan {e.plan_to_headline_s:.2f}), idle after {e.to_idle_s:.2f} s; runs "
                    f"{e.edit_runs}+{e.plan_runs}; planning_seconds {e.planning_seconds}; server CPU "
                    f"{e.server_cpu_s:.2f} s; load {e.load1:.2f}; {e.headline}")
        if shots is not None:
            for s in sessions:
                s.screenshot(shots, f"plan-{s.case.tables}-{'baseline' if s.case.label == 'baseline' else 'this'}.png")


# ---- the report ---------------------------------------------------------------------------------


def _span(f: dict) -> str:
    return f"{f['median']:.2f} ({f['min']:.2f}-{f['max']:.2f})" if f else "-"


def pair_ratios(a: Case, b: Case, name: str) -> dict:
    """Edit i of `a` over edit i of `b` (they alternated): median and range of the ratios."""
    xs = [getattr(x, name) / getattr(y, name) for x, y in zip(a.edits, b.edits) if getattr(y, name)]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "pairs": len(xs)} if xs else {}


def markdown(cases: list[Case], command: str, meta: dict) -> str:
    lines = [
        (f"Made by `{command}` on {meta['date']} ({meta['cpus']} cores, no GPU; load average "
         f"{meta['load_before']} before, {meta['load_after']} after; headless Chromium on the same cores as the "
         "server)."),
        "",
        f"This checkout: {meta['checkout']}." + (f" Baseline: {meta['baseline']}." if meta.get("baseline") else ""),
        "",
        (f"After an edit to one table (a new pooling factor typed into its cell of the Tables grid), seconds until "
         "the new plan's slowest-rank figure is on screen: in the working view's strip above the grid (no page "
         f"switch; issue 11's target: {TARGET_S} s at 1,000 tables), and, as measured before the working view, "
         "the edit's run plus going to the Plan page. Median (min-max) over the edits."),
        "",
        ("| checkout | tables | ranks | edits | edit to strip headline | edit then Plan to headline | edit's run | "
         "Plan to headline | edit to page idle | planning_seconds | server CPU s | load (1 min) |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        if c.error and not c.edits:
            lines.append(f"| {c.label} | {c.tables:,} | {c.ranks or '-'} | 0 | failed: {c.error} |" + "  |" * 7)
            continue
        lines.append(
            f"| {c.label} | {c.tables:,} | {c.ranks} | {len(c.edits)} | {_span(c.figure('strip_s'))} | "
            f"{_span(c.figure('to_headline_s'))} | "
            f"{_span(c.figure('edit_run_s'))} | {_span(c.figure('plan_to_headline_s'))} | "
            f"{_span(c.figure('to_idle_s'))} | {_span(c.figure('planning_seconds'))} | "
            f"{_span(c.figure('server_cpu_s'))} | {_span(c.figure('load1'))} |")
    pairs = _pairs(cases)
    if pairs:
        lines += ["", ("This checkout over the baseline, edit by edit (the two alternated, A B then B A): median "
                       "(min-max) of the ratios."), "",
                  "| tables | pairs | edit to headline | edit to page idle | server CPU s |", "|---|---|---|---|---|"]
        for n, (a, b) in pairs.items():
            r = {k: pair_ratios(a, b, k) for k in ("to_headline_s", "to_idle_s", "server_cpu_s")}
            lines.append(f"| {n:,} | {r['to_headline_s'].get('pairs', 0)} | {_span(r['to_headline_s'])} | "
                         f"{_span(r['to_idle_s'])} | {_span(r['server_cpu_s'])} |")
    lines += ["", ("Edit to headline = the edit's run (from the Enter until the browser received the end of the "
                   "Tables page's run) + from the click on Plan until the new figure was on screen; the bench "
                   "clicks once the app is idle after the edit, as a user would look first. Page idle: until the "
                   "browser received the end of the Plan page's run (charts, heatmap, downloads). "
                   "planning_seconds is the planner's own figure (the page's progress line); the engine also "
                   "scores the plan after it. Server CPU: the `streamlit run` process, from the Enter until idle.")]
    return "\n".join(lines) + "\n"


def _pairs(cases: list[Case]) -> dict[int, tuple[Case, Case]]:
    out = {}
    for a in cases:
        b = next((c for c in cases if c.label == "baseline" and c.tables == a.tables and c is not a), None)
        if a.label != "baseline" and b is not None and a.edits and b.edits:
            out[a.tables] = (a, b)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--engine"]:  # the engine's re-plan after an edit, every preset (bench/interactive_replan.py)
        from bench import interactive_replan
        return interactive_replan.main(args[1:])
    p = argparse.ArgumentParser(prog="python -m bench.interactive", description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, nargs="+", default=[1000, 200], help="table counts, one case each")
    p.add_argument("--repeats", type=int, default=5, help="edits per case")
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose dashboard is served")
    base = p.add_mutually_exclusive_group()
    base.add_argument("--baseline", type=Path,
                      help="a second checkout, served too, its edits alternating with --root's")
    base.add_argument("--baseline-dashboard", metavar="REV",
                      help="the baseline: --root's working tree with dashboard/ as of git revision REV")
    p.add_argument("--plan-input", action="append", default=[], metavar="LABEL=VALUE",
                   help="set the Plan page's number input LABEL (e.g. 'Search effort=5000') after the first plan")
    p.add_argument("--out", type=Path, default=RESULTS, help="the markdown report; the JSON goes beside it")
    p.add_argument("--screenshots", type=Path, help="a folder for each case's last screen")
    args = p.parse_args(argv)
    plan_inputs = dict(s.split("=", 1) for s in args.plan_input)
    from playwright.sync_api import sync_playwright

    command = " ".join(["python -m bench.interactive", *(shlex.quote(a) for a in (argv or sys.argv[1:]))])
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
            "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    stack = ExitStack()
    root = args.root.resolve()
    meta["checkout"] = describe(root)
    roots = served_roots(stack, root, args, meta)
    cases = []
    with stack, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for n in args.tables:
                group = [Case(label, str(root), n) for label, root in roots]
                run_cases(browser, group, args.repeats, plan_inputs, args.screenshots)
                cases += group
        finally:
            browser.close()
    meta["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = markdown(cases, command, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    engine.write_text_file(args.out, text)
    payload = {"command": command, **meta, "target_s": TARGET_S,
               "cases": [{**asdict(c), "figures": {k: c.figure(k) for k in FIGURES}} for c in cases],
               "ratios": {n: {k: pair_ratios(a, b, k) for k in ("to_headline_s", "to_idle_s", "server_cpu_s")}
                          for n, (a, b) in _pairs(cases).items()}}
    engine.write_text_file(args.out.with_suffix(".json"), json.dumps(payload, indent=1) + "\n")
    print(text)
    return 0 if all(c.edits and not c.error for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
