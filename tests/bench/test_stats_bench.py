"""bench.stats says what the load averages it recorded mean for its seconds: never a fixed sentence."""

from __future__ import annotations

from bench.stats import conditions


def test_a_busy_machine_makes_the_seconds_an_upper_bound():
    text = conditions(["0.26 1.33 2.97", "8.10 6.00 4.00"], 19, 2)
    assert text.startswith("The machine was busy") and "up to 8.10 on 2 cores" in text and "at nice 19" in text


def test_a_quiet_machine_says_so():
    text = conditions(["0.26 1.33 2.97", "0.84 1.24 2.78"], 0, 2)
    assert text == "The machine was quiet while this ran (1-minute load at most 0.84 on 2 cores)."


def test_a_small_run_against_a_revision_reports_cpu_seconds_the_gap_and_the_speedup():
    """The whole bench as run, on 2*10^5 lookups: the default, sampled and --against runs each in a child process,
    CPU seconds per child, the gap sampled vs exact, and the same curves as the revision it is run against."""
    import os
    import re
    import subprocess
    import sys

    from tests.factories import ROOT

    proc = subprocess.run([sys.executable, "-m", "bench.stats", "--sizes", "2e5", "--against", "HEAD", "--no-write"],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"\| 2e\+05 \| [\d,]+ \| default: exact \| \d+\.\d \|", out)
    assert "| at HEAD: exact |" in out and "sampled: shards" in out
    assert "largest gap sampled vs exact:" in out
    assert re.search(r"speedup against HEAD: \d+\.\d\dx CPU, \d+\.\d\dx wall; curves identical", out)
    assert "Niceness:" in out and "CPU s (child process)" in out
