"""README's three field tables, written from the declarations in engine.fields.

    python -m engine.field_tables --markdown   # print them
    python -m engine.field_tables --readme     # rewrite them in README.md (tests/engine/test_fields.py checks them)
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any, Optional

from engine.fields import (CONSTRAINT, CUSTOM_TOPOLOGY_FIELD, GROUP_FIELD, PROFILE_FIELD, RANK_DEVICES_FIELD, TABLE,
                           TOPOLOGY, WORKLOAD_FIELD, Field)


# ---- README's tables ------------------------------------------------------------------------------------------


def _number(v: Any) -> str:
    if isinstance(v, float) and v >= 1000 and math.log10(v).is_integer():
        return f"10^{int(math.log10(v))}"
    if isinstance(v, int) and v >= 2**20 and (v & (v - 1)) == 0:
        return f"2^{v.bit_length() - 1}"
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def range_text(f: Field) -> str:
    if f.range_text is not None:
        return f.range_text
    if f.lo_open:
        return f"above {_number(f.lo)}, at most {_number(f.hi)}" + f.range_note
    return f"{_number(f.lo)} to {_number(f.hi)}" + f.range_note


def markdown_table(fields: tuple[Field, ...]) -> str:
    lines = ["| field | default | range | meaning |", "|---|---|---|---|"]
    for f in fields:
        cells = (f"`{f.name}`", f.default_text, range_text(f), f.meaning)
        lines.append("|" + "|".join(f" {c} " if c else " " for c in cells) + "|")
    return "\n".join(lines)


# README's three tables, each between a marker line and its end.
README_TABLES = {"tables": TABLE, "constraints": CONSTRAINT,
                 "topology": (*TOPOLOGY, PROFILE_FIELD, CUSTOM_TOPOLOGY_FIELD, RANK_DEVICES_FIELD, GROUP_FIELD)}
# printed by --markdown after README's tables; README has no place for it yet (docs/stats.md describes the block)
OTHER_TABLES = {"workload": (WORKLOAD_FIELD,)}
_MARK = "<!-- field table {} (python -m engine.field_tables --readme writes it from engine/fields.py) -->"
_END = "<!-- end of field table -->"


def markdown() -> str:
    tables = {**README_TABLES, **OTHER_TABLES}
    return "\n\n".join(f"{_MARK.format(k)}\n{markdown_table(v)}\n{_END}" for k, v in tables.items())


def readme_with_tables(text: str) -> str:
    """README's text with its three field tables as the declarations write them."""
    for key, fields in README_TABLES.items():
        pattern = re.compile(re.escape(_MARK.format(key)) + r"\n.*?\n" + re.escape(_END), re.S)
        if not pattern.search(text):
            raise ValueError(f"README has no field table {key!r} (a line {_MARK.format(key)})")
        text = pattern.sub(lambda _m: f"{_MARK.format(key)}\n{markdown_table(fields)}\n{_END}", text, count=1)
    return text


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.field_tables", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--markdown", action="store_true", help="print README's field tables")
    g.add_argument("--readme", nargs="?", const="README.md", metavar="PATH", help="rewrite them in README.md")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown())
        return 0
    path = Path(args.readme)
    text = path.read_text(encoding="utf-8")
    new = readme_with_tables(text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    print(f"{path}: field tables {'rewritten' if new != text else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
