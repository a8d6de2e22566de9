"""The app shell: navigation, the sidebar's summary, the database it opens, and a bad DATABASE_URL."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.dashboard.conftest import APP, RUN_TIMEOUT_S
from dashboard.text import ms_text
from tests.dashboard.helpers import goto, plain, shown
from tests.db.conftest import pg_admin_url, pg_password_db  # noqa: F401 - fixtures: a server that checks a password

TEXT_KINDS = ("title", "header", "subheader", "markdown", "caption", "text", "code", "error", "warning", "info",
              "success", "exception")


def test_every_page_opens(app):
    for page, title in [("topology", "Topology"), ("plan", "Plan"), ("compare", "Compare"), ("runs", "Runs"),
                        ("save_share", "Save & share"), ("tables", "Tables & constraints")]:
        goto(app, page)
        assert app.title[0].value == title


def test_sidebar_names_the_database_and_the_plan(app, db_url, store):
    captions = [plain(c.value) for c in app.sidebar.caption]
    plan = app.session_state["ws_plan"].plan  # the first view's headline planned the tutorial
    assert "4 tables · 2 ranks · cuda" in captions and "No plan yet" not in captions
    assert f"Plan: slowest rank {ms_text(plan.max_rank_cost_ms)} by Ours (engine)" in captions
    assert f"Database: `{store.where}`" in [c.value for c in app.sidebar.caption]


def test_a_bad_database_url_is_one_line(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "nonsense://")
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S).run()
    assert not at.exception
    errors = shown(at, "error")
    assert len(errors) == 1 and errors[0].startswith("Cannot open the database: ") and "\n" not in errors[0]


def _all_text(at: AppTest) -> str:
    return "\n".join(str(e.value) for kind in TEXT_KINDS for e in getattr(at, kind))


def test_the_sidebar_shows_the_database_without_its_password(monkeypatch, request):
    pg = request.getfixturevalue("pg_password_db")  # the server refuses a login without this password
    monkeypatch.setenv("DATABASE_URL", f"{pg.url}?password={pg.password}")
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S).run()
    assert not at.exception and not shown(at, "error")
    assert f"Database: `{pg.url}?password=***`" in [c.value for c in at.sidebar.caption]
    assert pg.password not in _all_text(at)


@pytest.mark.parametrize("url, says", [
    ("postgresql://u:TOPSECRET@h:abc/d", "DATABASE_URL is not a database URL: the port in postgresql://h/... is not"),
    ("postgresql://u:TOPSECRET@[::1", "DATABASE_URL is not a database URL: the port in postgresql://... is not"),
    ("postgres//planner:TOPSECRET@dbhost/planner", "DATABASE_URL is not a database URL (examples: "),
    ("sqlite:///?mode=ro", "DATABASE_URL: sqlite:///?mode=ro: SQLite takes ?mode only with uri=true"),
])
def test_a_database_url_that_does_not_parse_is_one_line_without_its_password(monkeypatch, url, says):
    monkeypatch.setenv("DATABASE_URL", url)
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S).run()
    assert not at.exception
    errors = shown(at, "error")
    assert len(errors) == 1 and errors[0].startswith(f"Cannot open the database: {says}") and "\n" not in errors[0]
    assert "TOPSECRET" not in _all_text(at)


def test_bad_worker_settings_name_the_variable_and_start_nothing(monkeypatch):
    monkeypatch.setenv("PLANNER_WORKERS", "two")
    monkeypatch.setenv("PLANNER_JOBS", "0")
    monkeypatch.setenv("PLANNER_RUNS", "lots")
    monkeypatch.setenv("PLANNER_WORKER_NICE", "-5")
    at = AppTest.from_file(str(APP), default_timeout=RUN_TIMEOUT_S).run()
    assert not at.exception
    errors = shown(at, "error")
    assert len(errors) == 4
    assert errors[0].startswith("The server's settings: PLANNER_WORKERS='two': give a positive whole number")
    assert errors[1].startswith("The server's settings: PLANNER_JOBS='0': give a positive whole number")
    assert errors[2] == ("The server's settings: PLANNER_RUNS='lots': give a positive whole number of measuring runs "
                         "(dry-runs, validation runs) that may run at once (or leave it unset: one at a time, so runs "
                         "do not measure each other)")
    assert errors[3] == ("The server's settings: PLANNER_WORKER_NICE='-5': give a whole number from 0 (the server's "
                         "priority) to 19 (the lowest), how far below the server planning runs (or leave it unset: 10)")
    assert not at.sidebar.caption  # the app stopped before its pages and sidebar
