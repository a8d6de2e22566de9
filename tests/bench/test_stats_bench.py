"""bench.stats says what the load averages it recorded mean for its seconds: never a fixed sentence."""

from __future__ import annotations

from bench.stats import conditions


def test_a_busy_machine_makes_the_seconds_an_upper_bound():
    text = conditions(["0.26 1.33 2.97", "8.10 6.00 4.00"], 19, 2)
    assert text.startswith("The machine was busy") and "up to 8.10 on 2 cores" in text and "at nice 19" in text


def test_a_quiet_machine_says_so():
    text = conditions(["0.26 1.33 2.97", "0.84 1.24 2.78"], 0, 2)
    assert text == "The machine was quiet while this ran (1-minute load at most 0.84 on 2 cores)."
