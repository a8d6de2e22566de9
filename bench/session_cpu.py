"""The server's CPU per browser session (issue 14): one user opens the app, loads the synthetic preset with N
tables, plans it, changes the world size, replans, saves the plan with a label and opens its share link; the
`streamlit run` process's CPU seconds (user + system, /proc/PID/stat) for each step and for the session.

  python -m bench.session_cpu [--tables 200] [--sessions 3] [--root DIR] [--baseline DIR | --baseline-dashboard REV]
                              [--world-size 16] [--out bench/results/session_cpu.md]

The server's CPU counts its live child processes too (a pool of planning workers). Each session is a fresh
browser context (a new Streamlit session) with its own config (the preset's seed is the session's number: its plans
are planned afresh) on a server that keeps running (its caches warm from the sessions before, as a team's server
is); the first session of each server is reported apart (cold: imports, first figures). --baseline DIR serves a
second checkout too; --baseline-dashboard REV serves this checkout's working tree with dashboard/ as of git
revision REV; the sessions alternate between the two servers (A B, B A, ...). Each
step ends when the app is idle (no script run for a while, none running), so a step's CPU is all the reruns it
caused. --returning keeps one browser context per server for all its sessions (the app's scripts cached, as for a
returning user); by default each session is a first visit, and its "open" includes serving those scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.interactive import (
    CHROMIUM,
    CHROMIUM_ARGS,
    METRIC,
    PLANNED,
    UI_TIMEOUT_MS,
    VIEWPORT,
    Runs,
    _goto,
    _plan_shown,
    describe,
    load_synthetic,
    served_roots,
    serving,
)
import engine


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and of its children it has waited for (/proc/PID/stat 14-17)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and of its descendants, live or ended (a pool of planning workers counts as the
    server's: an ended worker's time is in its parent's children's time once waited for, in its own until then)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += _process_cpu(p)
        except OSError:
            continue
        todo += children.get(p, [])
    return total


ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "session_cpu.md"
STEPS = ("open", "load preset", "plan", "world size", "replan", "save", "share link")
TARGET_S = 1.0  # issue 14: server CPU for the whole session


def _load_synthetic(page, runs: Runs, count: int, seed: int) -> None:
    load_synthetic(page, runs, count, seed)


def _wait_new_metric(page, before: str) -> str:
    page.wait_for_function(
        """([sel, before]) => { const m = document.querySelector(sel);
                                return m !== null && m.innerText.trim() !== '' && m.innerText !== before; }""",
        arg=[METRIC, before], polling=100)
    return _plan_shown(page)


def session(browser, url: str, pid: int, tables: int, seed: int, world_size: int, label: str,
            context=None) -> dict:
    """One user's session (the synthetic preset with this seed: its own config, planned afresh); returns CPU
    seconds per step, the planner's seconds, and the script runs per step."""
    out: dict = {"cpu": {}, "runs": {}, "planning_seconds": []}
    own = context is None  # a fresh browser (a first visit: it fetches the app's scripts), else a returning one
    context = context or browser.new_context(viewport=VIEWPORT)
    pages = []
    try:
        page = context.new_page()
        pages.append(page)
        page.set_default_timeout(UI_TIMEOUT_MS)
        runs = Runs(page)
        mark = {"cpu": tree_cpu_seconds(pid), "t": time.perf_counter()}

        def step(name: str, pg=None, rs=None) -> None:
            (rs or runs).settle()
            now = tree_cpu_seconds(pid)
            out["cpu"][name] = round(now - mark["cpu"], 3)
            out["runs"][name] = (rs or runs).since(mark["t"])
            mark["cpu"], mark["t"] = now, time.perf_counter()

        page.goto(url)
        page.wait_for_selector('[data-testid="stDataFrame"]')
        step("open")
        _load_synthetic(page, runs, tables, seed)
        step("load preset")
        _goto(page, "Plan")
        before = _plan_shown(page)
        m = PLANNED.search(page.locator("body").inner_text())
        out["planning_seconds"].append(float(m.group(3)) if m else None)
        step("plan")
        _goto(page, "Topology")
        box = page.locator(".st-key-topology_world_size input")
        box.fill(str(world_size))
        box.press("Enter")
        page.locator('[data-testid="stSidebar"]').get_by_text(f"{tables:,} tables · {world_size} ranks").wait_for()
        step("world size")
        _goto(page, "Plan")
        _wait_new_metric(page, before)
        m = PLANNED.search(page.locator("body").inner_text())
        out["planning_seconds"].append(float(m.group(3)) if m else None)
        step("replan")
        _goto(page, "Save & share")
        page.get_by_label("Label").fill(label)
        page.get_by_role("button", name="Save plan").click()
        page.get_by_text(f"Share link of '{label}'").wait_for()  # the share box (the saved list has links too)
        link = page.locator('[data-testid="stCode"]').filter(has_text="?plan=").first
        share_url = link.inner_text().strip()
        step("save")
        shared = context.new_page()  # the link button opens a new tab: another Streamlit session
        pages.append(shared)
        shared.set_default_timeout(UI_TIMEOUT_MS)
        shared_runs = Runs(shared)
        shared.goto(share_url)
        shared.get_by_role("heading", name=label).wait_for()
        _plan_shown(shared)
        step("share link", shared, shared_runs)
    finally:
        if own:
            context.close()
        else:
            for p in pages:
                p.close()
    out["total"] = round(sum(out["cpu"].values()), 3)
    return out


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"


def markdown(results: dict[str, list[dict]], command: str, meta: dict) -> str:
    labels = list(results)
    lines = [f"Made by `{command}` on {meta['date']} ({meta['cpus']} cores, no GPU; load average "
             f"{meta['load_before']} before, {meta['load_after']} after; headless Chromium on the same cores).", "",
             f"This checkout: {meta['checkout']}." + (f" Baseline: {meta['baseline']}." if meta.get("baseline")
                                                      else ""), "",
             (f"Server CPU seconds (the `streamlit run` process and its planning workers, user + system) per "
              f"step of one {'returning user' if meta.get('returning') else 'first-visit'} session with "
              f"{meta['tables']} tables (world size changed to {meta['world_size']}); median (min-max) over the "
              f"warm sessions (each server's first session, cold, is the last column). Target: the session "
              f"<= {TARGET_S} s."), "",
             "| step | " + " | ".join(f"{lb} (warm)" for lb in labels) + " | "
             + " | ".join(f"{lb} (cold)" for lb in labels) + " |",
             "|---|" + "---|" * (2 * len(labels))]
    for name in (*STEPS, "total"):
        row = []
        for lb in labels:
            warm = [r["total"] if name == "total" else r["cpu"].get(name) for r in results[lb][1:]]
            row.append(_median([x for x in warm if x is not None]))
        for lb in labels:
            first = results[lb][0] if results[lb] else None
            v = (first["total"] if name == "total" else first["cpu"].get(name)) if first else None
            row.append(f"{v:.2f}" if v is not None else "-")
        lines.append(f"| {'**session**' if name == 'total' else name} | " + " | ".join(row) + " |")
    lines += ["", "Script runs per step (the first warm session): " + "; ".join(
                  f"{lb}: " + ", ".join(f"{k} {v}" for k, v in (results[lb][1:] or results[lb])[0]["runs"].items())
                  for lb in labels if results[lb])]
    return "\n".join(lines) + "\n"


def _sessions(browser, servers: list, results: dict, args) -> None:
    """Session i uses seed i on every server (the same work on each), alternating which server goes first."""
    contexts = {label: browser.new_context(viewport=VIEWPORT) for label, _, _ in servers} if args.returning else {}
    for i in range(args.sessions):
        for label, url, pid in (servers if i % 2 == 0 else servers[::-1]):
            r = session(browser, url, pid, args.tables, i + 1, args.world_size, f"bench session {i + 1}",
                        contexts.get(label))
            r["load1"] = os.getloadavg()[0]
            results[label].append(r)
            print(f"{label} session {i + 1}: {r['total']:.2f} s CPU " + json.dumps(r["cpu"]), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.session_cpu", description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=200)
    p.add_argument("--world-size", type=int, default=16, help="the world size the session changes to")
    p.add_argument("--sessions", type=int, default=3, help="sessions per server (the first one is cold)")
    p.add_argument("--returning", action="store_true",
                   help="every session in one browser context per server (a returning user: the app's scripts "
                        "come from the browser's cache); default: a fresh context each (a first visit)")
    p.add_argument("--root", type=Path, default=ROOT)
    base = p.add_mutually_exclusive_group()
    base.add_argument("--baseline", type=Path, help="a second checkout, served too, its sessions alternating")
    base.add_argument("--baseline-dashboard", metavar="REV",
                      help="also serve --root's working tree with dashboard/ as of git revision REV, alternating")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    from playwright.sync_api import sync_playwright

    command = " ".join(["python -m bench.session_cpu", *(shlex.quote(a) for a in (argv or sys.argv[1:]))])
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "tables": args.tables,
            "world_size": args.world_size, "returning": args.returning,
            "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    root = args.root.resolve()
    meta["checkout"] = describe(root)
    results: dict[str, list[dict]] = {}
    with ExitStack() as stack, sync_playwright() as pw:
        roots = served_roots(stack, root, args, meta)
        servers = []
        for label, served in roots:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-session-")))
            url, pid = stack.enter_context(serving(served, work))
            servers.append((label, url, pid))
            results[label] = []
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            _sessions(browser, servers, results, args)
        finally:
            browser.close()
    meta["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = markdown(results, command, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    engine.write_text_file(args.out, text)
    engine.write_text_file(args.out.with_suffix(".json"), json.dumps({"command": command, **meta, "results": results},
                                                        indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
