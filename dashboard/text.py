"""User text (labels, authors, table and planner names, notes, tokens, paths, messages that quote them) made
safe where it is rendered: Streamlit's markdown (`md`, `code`) and plotly's HTML-like labels (`plotly_text`).
What the person typed is what the page shows: never a link, an image, HTML, an emoji or an icon.
"""

from __future__ import annotations

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

