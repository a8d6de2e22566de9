"""User text (labels, authors, table and planner names, notes, tokens, paths, messages that quote them) made
safe where it is rendered: Streamlit's markdown (`md`, `code`) and plotly's HTML-like labels (`plotly_text`).
What the person typed is what the page shows: never a link, an image, HTML, an emoji or an icon. And numbers as
the pages write them, each with its unit: times (`ms_text`), rates (`rate_text`), shares (`pct_text`), long names
cut to fit (`short_name`), counts ('1 table', '4 tables': `count_text`); bytes are engine.human_bytes; in plotly
hover templates `D3_SIG`.
"""

from __future__ import annotations

import math
import re

# Every ASCII punctuation character: CommonMark lets a backslash escape each of them, and escaping all of
# them stops every markdown construct (emphasis, links, images, code, HTML, lists, tables, math with `$`,
# Streamlit's `:red[...]` directives) whatever surrounds the text.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# After parsing, Streamlit rewrites plain text, where the escapes are gone: `:smile:` (emoji), `:material_x:` and
# `:streamlit:` (icons), `->`, `--`, `>=`, `<=`, `~=` between spaces (arrows, dashes) and bare URLs and e-mail
# addresses (links). An invisible word joiner (U+2060) after a colon, inside those marks, after `www` and before
# an `@` keeps them as typed.
WORD_JOINER = "\u2060"
_TYPOGRAPHY = re.compile(r"(?<!\S)(?:<->|->|<-|--|>=|<=|~=)(?!\S)")
_JOIN = re.compile(r"(?<=:)(?=\S)|(?i:(?<=www)(?=\.))|(?<=[-.\w+])(?=@)")
_NEWLINE = re.compile(r"\r\n|\r|\n")


def md(value: object) -> str:
    """`value` as Streamlit markdown that shows exactly its text (line breaks kept)."""
    text = _TYPOGRAPHY.sub(lambda m: m.group()[0] + WORD_JOINER + m.group()[1:], str(value))
    text = _PUNCTUATION.sub(r"\\\1", _JOIN.sub(WORD_JOINER, text))
    return _NEWLINE.sub("  \n", text)


def code(value: object) -> str:
    """`value` as inline code (a path, a URL): its text exactly, in a code font."""
    text = " ".join(_NEWLINE.split(str(value))).replace(":material/", ":" + WORD_JOINER + "material/")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plotly_text(value: object) -> str:
    """`value` for a plotly title, legend, axis label or hover text: plotly reads `<b>`, `<a href>`, `<br>`
    and entities in them; escaped, they show as typed."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")



SIGNIFICANT = 3  # digits of an estimate worth reading: the cost model is not finer than that


def _sig(value: float, digits: int = SIGNIFICANT) -> str:
    """`value` to `digits` significant digits in plain decimal (never 1e-05), thousands separated."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 10 ** digits:  # whole units: 1,235 reads better than 1,230
        return f"{value:,.0f}"
    rounded = float(f"{value:.{digits}g}")
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


# sig_text as plotly (d3-format) spells it in a hover template ("%{y:,.3r}"): 3 significant digits, plain
# decimal, thousands separated.
D3_SIG = f",.{SIGNIFICANT}r"
D3_SIGNED = f"+,.{SIGNIFICANT}r"


def sig_text(value: float) -> str:
    """A number to 3 significant digits in plain decimal, thousands separated: '0.00547', '12.3', '1,235'."""
    return _sig(float(value))


def ms_text(ms: float | None) -> str:
    """A time in milliseconds, 3 significant digits and the unit: '0.00547 ms', '12.3 ms', '1,235 ms'."""
    return "n/a" if ms is None or (isinstance(ms, float) and math.isnan(ms)) else f"{_sig(float(ms))} ms"


def rate_text(per_s: float | None, unit: str = "samples/s") -> str:
    """A rate, whole and thousands separated: '45,076,415 samples/s'."""
    return "n/a" if per_s is None or math.isnan(per_s) else f"{per_s:,.0f} {unit}"


def pct_text(fraction: float | None) -> str:
    """A share (0.0123 is 1.23%), 3 significant digits: '1.23%', '0.0512%', '100%'."""
    return "n/a" if fraction is None or math.isnan(fraction) else f"{_sig(100 * float(fraction))}%"


def short_name(name: str, limit: int = 24) -> str:
    """A name cut to `limit` characters with an ellipsis in the middle, where a chart has room for its start and
    end only (the full name stays in the hover)."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2 + (limit - 1) % 2
    return f"{name[:head]}\u2026{name[len(name) - (limit - 1 - head):]}"


def count_text(n: int, what: str) -> str:
    """'1 table', '4 tables', '1,000 tables': a count with its noun in the right number."""
    return f"{n:,} {what}{'' if n == 1 else 's'}"
