"""Tables to read (pure): a frame's numbers as text with their unit and 3 significant digits (dashboard.text), by
the unit its column name carries: times (' ms'), differences signed, binary sizes from MiB columns, percentages
and ratios. The numeric frame stays for charts and sorting; a page shows this copy."""

from __future__ import annotations

import math

import pandas as pd

import engine
from dashboard.text import ms_text, sig_text

MIB = 1024**2


def _number(v: object) -> float | None:
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _signed(text: str, x: float, signed: bool) -> str:
    return f"+{text}" if signed and x > 0 else text


def ms_cell(v: object, signed: bool = False) -> str:
    x = _number(v)
    return "" if x is None else _signed(ms_text(x), x, signed)


def mib_cell(v: object, signed: bool = False) -> str:
    """A size given in MiB, in binary units ('1.25 MiB', '3.00 GiB')."""
    x = _number(v)
    return "" if x is None else _signed(engine.human_bytes(x * MIB), x, signed)


def pct_cell(v: object) -> str:
    x = _number(v)
    return "" if x is None else f"{x:+.1f}%"


def ratio_cell(v: object) -> str:
    x = _number(v)
    return "" if x is None else f"{sig_text(x)}x"


def readable(frame: pd.DataFrame, ratios: tuple[str, ...] = ()) -> pd.DataFrame:
    """A copy with ' ms' columns as times, 'MiB' columns as sizes (both signed where the name is a difference,
    'B - A ...'), '%' columns as signed percentages, and the `ratios` and '/ est.' columns as 'N.NNx'."""
    out = frame.copy()
    for c in out.columns:
        name = str(c)
        signed = " - " in name
        if name in ratios or name.endswith("/ est."):
            out[c] = [ratio_cell(v) for v in out[c]]
        elif name.endswith("%"):
            out[c] = [pct_cell(v) for v in out[c]]
        elif name.endswith(" ms"):
            out[c] = [ms_cell(v, signed) for v in out[c]]
        elif name.endswith("MiB"):
            out[c] = [mib_cell(v, signed) for v in out[c]]
    return out


__all__ = ["mib_cell", "ms_cell", "pct_cell", "ratio_cell", "readable"]


# A grid column as wide as its longest text (st.column_config width, in px): the grids draw 14 px Source Sans, where
# the characters of these cells (digits, '_', lower case) measure 5.4-6.9 px on average (Chromium, measureText), with
# 8 px of padding each side.
CHAR_PX = 7.2
CELL_PAD_PX = 2 * 8 + 2
MIN_COLUMN_PX = 50
MAX_COLUMN_PX = 320


def column_px(frame: pd.DataFrame, column: str, shown: object = str, max_px: int = MAX_COLUMN_PX) -> int:
    """The width in px that shows every cell of `column` (as `shown` writes each value) and its header whole, within
    MIN_COLUMN_PX..max_px."""
    longest = max([len(str(column)), *(len(shown(v)) for v in frame[column] if v is not None)])
    return int(min(max_px, max(MIN_COLUMN_PX, math.ceil(longest * CHAR_PX + CELL_PAD_PX))))
