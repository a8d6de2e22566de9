"""User text is shown as text on every page: a table, a label, an author, a token, a run's error or a planner
note that looks like markdown, HTML, a directive or math is escaped where it is rendered (dashboard.text),
so it reads as typed and makes no link, image or HTML element. tests/e2e/test_hostile_text.py checks the
same in a real browser."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

import engine
from dashboard.text import WORD_JOINER, code, md, plotly_text
from tests.dashboard.conftest import APP, RUN_TIMEOUT_S
from tests.dashboard.helpers import goto, plain, plotly_specs
from tests.factories import tutorial

EVIL = "**x** [l](http://example.com) <img src=x onerror=alert(1)> :red[r] $x$"
FORGED_TOKEN = "[x](http://example.com)![i](http://example.com/i.png)"
HOSTILE = [EVIL, FORGED_TOKEN, ":smile: :material/home: :material_home: :streamlit: :red-background[x]",
           "a -> b <- c <-> d -- e >= f <= g ~= h", "see http://e.com, www.f.com or g@h.com", "# h\n- li\n1. ol\n> q",
           "| a | b |\n|---|---|", "<b>B</b> &amp; &lt; `c` ``d`` ~~s~~ _u_ \\*", "$$x$$ \\(y\\) [^1] <!-- c -->"]
ASCII_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def _unescaped_punctuation(markdown: str) -> list[str]:
    """Punctuation in `markdown` that no backslash escapes (a backslash that is itself escaped escapes nothing)."""
    return [c for c in re.sub(r"\\.", "", markdown, flags=re.S) if c in ASCII_PUNCTUATION]


@pytest.mark.parametrize("text", HOSTILE)
def test_md_escapes_every_markdown_character_and_reads_as_typed(text):
    out = md(text)
    assert _unescaped_punctuation(out) == []
    assert plain(out) == text
    assert not re.search(r":[\w+-]+:", out.replace("\\", ""))  # no emoji or icon shortcode is left whole
    assert "\n\n" not in out  # lines stay lines of one paragraph: no heading, list, quote or code block


def test_md_breaks_what_streamlit_rewrites_after_parsing():
    assert md(":smile:") == f"\\:{WORD_JOINER}smile\\:"
    assert md("a -> b") == f"a \\-{WORD_JOINER}\\> b" and md("a->b") == "a\\-\\>b"  # only arrows between spaces
    assert WORD_JOINER in md("www.example.com") and WORD_JOINER in md("x@example.com")
    assert md("two\nlines") == "two  \nlines"


def test_code_and_plotly_text():
    assert code("sqlite:////data/p.db") == "`sqlite:////data/p.db`"
    assert code("a`b") == "``a`b``" and code("`x`") == "`` `x` ``"
    assert code(":material/home:") == f"`:{WORD_JOINER}material/home:`"
    assert plotly_text('<a href="http://example.com">A</a> &amp; <b>') == (
        '&lt;a href="http://example.com"&gt;A&lt;/a&gt; &amp;amp; &lt;b&gt;')


def _config() -> dict:
    cfg = tutorial()
    cfg["tables"][0]["name"] = EVIL
    return cfg


def _app(config: dict) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    at.session_state["ws_config"] = config
    at.run()
    assert not at.exception, at.exception
    return at


def _no_markup(source: str) -> None:
    """A markdown source with no link, image or HTML outside backslash escapes."""
    bare = re.sub(r"\\.", "", source, flags=re.S)
    assert "](" not in bare and "<" not in bare and not re.search(r"https?://|www\.", bare), source


def _literal(source: str, text: str = EVIL) -> None:
    """`text` is in a markdown source escaped, and the source makes no link, image or HTML."""
    assert md(text) in source and text in plain(source)
    _no_markup(source)


def test_tables_page_names_a_bad_table_literally(store):
    cfg = _config()
    cfg["tables"][0]["embedding_dim"] = 0
    at = _app(cfg)
    [error] = [e.value for e in at.error]
    _literal(error)
    assert f"row 1 ({EVIL!r}): dim: must be" in plain(error)


def test_plan_page_and_heatmap_name_the_table_literally(store):
    at = goto(_app(_config()), "plan")
    assert at.session_state["ws_plan"] is not None
    assert any(md(EVIL) in m.value for m in at.markdown)  # the slowest rank's heaviest tables
    for m in at.markdown:
        _no_markup(m.value)
    heat = [s for s in plotly_specs(at) if s["data"][0]["type"] == "heatmap"][0]
    assert plotly_text(EVIL) in heat["data"][0]["y"]


def test_saved_label_author_and_config_name_show_literally(app, store):
    goto(app, "plan")
    goto(app, "save_share")
    for key in ("save_label", "save_author", "save_config_name"):
        app.text_input(key=key).set_value(EVIL)
    app.button(key="save_run").click().run()
    assert not app.exception, app.exception
    token = app.session_state["ws_saved_token"]
    rec = store.get_plan(token)
    assert (rec.label, rec.author, rec.config_name) == (EVIL, EVIL, EVIL)
    assert [t.value for t in app.toast] == [f"Saved '{md(EVIL)}'."]
    _literal(next(m.value for m in app.markdown if m.value.startswith("**Share link**")))
    _literal(next(c.value for c in app.sidebar.caption if c.value.startswith("Saved as")))

    shared = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    shared.query_params["plan"] = token
    shared.run()
    assert not shared.exception, shared.exception
    assert shared.title[0].value == md(EVIL)
    caption = shared.caption[0].value
    assert caption.count(md(EVIL)) == 2 and f"config '{EVIL}' v1" in plain(caption) and plain(caption).endswith(
        f"UTC by {EVIL}")


def test_a_forged_token_is_echoed_literally(db_url):
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    at.query_params["plan"] = FORGED_TOKEN
    at.run()
    assert not at.exception, at.exception
    [error] = [e.value for e in at.error]
    _literal(error, FORGED_TOKEN)
    assert plain(error).startswith(f"No saved plan has the token '{FORGED_TOKEN}'")


def _save(store, cfg: dict, label: str, notes: list[str] | None = None) -> str:
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(cfg)))
    if notes is not None:
        plan["notes"] = notes
    return store.save_plan(cfg, plan, label=label, author=EVIL)


def test_compare_names_plans_literally(app, store):
    free = tutorial()
    rw = tutorial("row_wise")
    first = _save(store, free, EVIL)
    second = _save(store, rw, "row-wise <b>B</b>")
    app.session_state["compare_pick"] = [f"saved:{first}", f"saved:{second}"]  # not the first view's own plan
    goto(app, "compare")
    moved = app.expander[0].label
    assert md("row-wise <b>B</b>") in moved and md(EVIL) in moved
    names = [t["name"] for t in plotly_specs(app)[0]["data"]]
    assert sorted(n.split(" (")[0] for n in names) == sorted([plotly_text(EVIL), plotly_text("row-wise <b>B</b>")])


def test_run_error_and_planner_notes_show_literally(app, store):
    token = _save(store, tutorial(), "noted", notes=[EVIL])
    run_id = store.create_run(token, "dryrun", EVIL, "cpu")
    store.update_run(run_id, status="failed", error=EVIL)
    goto(app, "runs")
    [error] = [e.value for e in app.error]
    assert error.count(md(EVIL)) == 2 and plain(error).endswith(f": {EVIL}")

    shared = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S)
    shared.query_params["plan"] = token
    shared.run()
    assert not shared.exception, shared.exception
    assert f"- {md(EVIL)}" in [m.value for m in shared.markdown]  # under "Planner notes (1)"


def test_topology_device_filter_is_echoed_literally(app):
    goto(app, "topology")
    app.text_input(key="topology_calibration_device_name").set_value(EVIL).run()
    assert not app.exception, app.exception
    _literal(next(i.value for i in app.info if "whose device name" in i.value))
