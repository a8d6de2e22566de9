"""Numbers as the pages write them (dashboard.text): times to 3 significant digits in plain decimals with their
unit, rates thousands separated, shares in percent, long names cut in the middle."""

from __future__ import annotations

import math

import pytest

from dashboard.text import ms_text, pct_text, rate_text, short_name


@pytest.mark.parametrize("ms, shown", [
    (0.005468, "0.00547 ms"),  # the tutorial's slowest rank: was "0.005468 ..." cut off at 1440 px
    (12.34, "12.3 ms"), (123.4, "123 ms"), (9.996, "10.0 ms"), (0.5, "0.500 ms"),
    (1234.5, "1,234 ms"), (0.0001234, "0.000123 ms"),  # never 1.23e-04
    (0.0, "0 ms"), (-0.00123, "-0.00123 ms"), (None, "n/a"), (math.nan, "n/a"),
])
def test_times_have_three_significant_digits_and_their_unit(ms, shown):
    assert ms_text(ms) == shown


def test_rates_are_whole_and_thousands_separated():
    assert rate_text(45076415.3) == "45,076,415 samples/s"  # the sweep's samples/s, once "45076415"
    assert rate_text(999.6, "rows/s") == "1,000 rows/s"
    assert rate_text(None) == "n/a"


def test_shares_are_percent_with_three_significant_digits():
    assert [pct_text(f) for f in (0.000123, 0.003, 0.5, 1.0, 1.2345)] == ["0.0123%", "0.300%", "50.0%", "100%",
                                                                          "123%"]
    assert pct_text(None) == "n/a"


def test_long_names_keep_their_start_and_end_within_the_limit():
    name = "a_very_long_embedding_table_name_for_user_ids_v2"
    cut = short_name(name)
    assert len(cut) == 24 and cut.startswith("a_very_long_") and cut.endswith("user_ids_v2") and "\u2026" in cut
    assert short_name("t_user", 24) == "t_user" and len(short_name(name, 9)) == 9
