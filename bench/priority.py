"""What the planning workers' lower priority buys the app server (dashboard.serve.planpool, PLANNER_WORKER_NICE).

  python -m bench.priority [--pairs 5] [--phase-s 20] [--nices 0 10] [--tables 1000] [--out FILE]

A stand-in for the app server, in this process: the real planning pool (dashboard.serve.planpool.Pool, one worker per
core), kept full with plans of a synthetic config (--tables tables, each its own key), while this process's main
thread runs an asyncio HTTP endpoint (as Streamlit's event loop answers /_stcore/health and the websockets) and
one more thread runs pure-Python work (a page's script rerunning: it holds the GIL as a page does). A probe
process of its own (nice 0) GETs the endpoint every 0.05 s. Phases alternate the workers' nice (--nices, A B A B
...; a fresh pool each phase, its workers started and warm before timing); each phase reports the endpoint's
latency (median, p99, worst), the page thread's work done per second, and the plans the pool finished.

Only this machine's processes, only 127.0.0.1. Linux puts each worker (a session leader) in an autogroup of its
own, which gets the same CPU share as the server's whole group whatever its threads' nice; the pool lowers the
autogroup's nice with the thread's (priority.lower_priority).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.load import _stat, descendants
from dashboard.serve import planpool, priority
from dashboard.tables import presets
import engine

_PROBE = r"""
import sys, time, urllib.request
url, every, until = sys.argv[1], float(sys.argv[2]), time.monotonic() + float(sys.argv[3])
while time.monotonic() < until:
    t0 = time.monotonic()
    try:
        urllib.request.urlopen(url, timeout=10).read()
        ok = 1
    except OSError:
        ok = 0
    dt = time.monotonic() - t0
    print(f"{dt:.5f} {ok}", flush=True)
    time.sleep(max(0.0, every - dt))
"""
PROBE_EVERY_S = 0.05


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain()
    writer.close()


FIRST_PLAN_CAP_S = 100.0


def _page_work(stop: threading.Event, counter: list[int]) -> None:
    """Pure-Python work in small pieces, as a page's rerun builds frames and figures (it holds the GIL)."""
    while not stop.is_set():
        sum(i * i for i in range(2_000))
        counter[0] += 1


def _feed(pool: planpool.Pool, config: str, effort: int, stop: threading.Event, done: list[int], tag: str) -> None:
    """Keep the pool full: as many plans asked as it has workers, each its own key, a new one when one ends."""
    keys = iter(range(10**9))

    def ask():
        k = next(keys)
        return pool.submit("plan", (config, effort + k, 60.0), (tag, k), "plan", f"{tag}-{k}")

    live = [ask() for _ in range(pool.size)]
    while not stop.is_set():
        for i, t in enumerate(live):
            if t.wait(0.05):
                done[0] += 1
                live[i] = ask()
    for t in live:
        t.cancel()


def phase(nice: int, config: str, effort: int, seconds: float, port: int) -> dict:
    pool = planpool.Pool(nice=nice)
    try:
        warm = [pool.submit("plan", (config, 0, 60.0), ("warm", nice, i), "plan", f"warm-{i}")
                for i in range(pool.size)]
        for t in warm:
            t.result(300)  # every worker started and has planned once
        stop, plans, work = threading.Event(), [0], [0]
        feeder = threading.Thread(target=_feed, args=(pool, config, effort, stop, plans, f"n{nice}"), daemon=True)
        page = threading.Thread(target=_page_work, args=(stop, work), daemon=True)
        feeder.start()
        time.sleep(1.0)  # the workers busy
        page.start()
        w0, t0 = work[0], time.monotonic()
        probe = subprocess.run([sys.executable, "-c", _PROBE, f"http://127.0.0.1:{port}/", str(PROBE_EVERY_S),
                                str(seconds)], capture_output=True, text=True, timeout=seconds + 120,
                               preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 0))
        elapsed = time.monotonic() - t0
        pieces = work[0] - w0
        nices = sorted({int(_stat(pid)[16]) for pid in descendants(os.getpid())})  # the workers, busy
        # the phase ends with at least one plan finished: on a loaded machine a short phase may not see one end
        # (FIRST_PLAN_CAP_S only a safety stop)
        cap = time.monotonic() + FIRST_PLAN_CAP_S
        while plans[0] == 0 and time.monotonic() < cap:
            time.sleep(0.05)
        stop.set()
        feeder.join(30)
        page.join(30)
    finally:
        pool.shutdown()
    xs = [float(line.split()[0]) for line in probe.stdout.splitlines() if line.endswith(" 1")]
    failed = sum(1 for line in probe.stdout.splitlines() if line.endswith(" 0"))
    xs.sort()
    return {"nice": nice, "worker_nices": nices, "polls": len(xs), "failed": failed,
            "median_s": statistics.median(xs), "p99_s": xs[int(0.99 * (len(xs) - 1))], "worst_s": xs[-1],
            "page_pieces_per_s": pieces / elapsed, "plans": plans[0], "seconds": elapsed,
            "load": os.getloadavg()}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.priority", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5, help="A B rounds of phases")
    p.add_argument("--phase-s", type=float, default=20.0, help="seconds the probe polls in each phase")
    p.add_argument("--nices", type=int, nargs=2, default=[0, priority.WORKER_NICE], metavar=("A", "B"))
    p.add_argument("--tables", type=int, default=1000, help="tables of the synthetic config the workers plan")
    p.add_argument("--effort", type=int, default=20_000, help="the plans' work budget (each a few seconds)")
    p.add_argument("--out", type=Path, help="a JSON file for every phase's figures")
    args = p.parse_args()
    config = json.dumps(presets.synthetic(presets.SyntheticSpec(count=args.tables)), sort_keys=True)

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(_answer, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    results: list[dict] = []

    def drive():
        try:
            for i in range(args.pairs):
                for nice in args.nices:
                    r = phase(nice, config, args.effort, args.phase_s, port)
                    results.append(r)
                    print(f"pair {i + 1} nice {nice} (workers at {r['worker_nices']}): endpoint median "
                          f"{r['median_s'] * 1000:.1f} ms, p99 {r['p99_s'] * 1000:.1f} ms, worst "
                          f"{r['worst_s'] * 1000:.0f} ms ({r['polls']} polls, {r['failed']} failed); page work "
                          f"{r['page_pieces_per_s']:.1f}/s; plans {r['plans']}; load {r['load'][0]:.2f}", flush=True)
        finally:
            loop.call_soon_threadsafe(loop.stop)

    threading.Thread(target=drive, daemon=True).start()
    loop.run_forever()  # this thread: the endpoint, as Streamlit's event loop thread is the server's main thread
    server.close()
    a, b = args.nices
    pairs = [(x, y) for x, y in zip(results[0::2], results[1::2])]
    for key in ("p99_s", "worst_s", "page_pieces_per_s", "plans"):
        ratios = sorted(y[key] / x[key] for x, y in pairs if x[key])
        if ratios:
            print(f"{key}: nice {b} / nice {a}, median of {len(ratios)} pair ratios {statistics.median(ratios):.2f} "
                  f"(range {ratios[0]:.2f}-{ratios[-1]:.2f})")
    if args.out:
        engine.write_text_file(args.out, json.dumps({"args": vars(args) | {"out": str(args.out)}, "phases": results},
                                                   indent=1))


if __name__ == "__main__":
    main()
