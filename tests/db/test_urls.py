"""Database URLs shown to people: the password hidden wherever the URL holds it, on every surface that prints a
URL (`python -m db` output and errors, the team supervisor's errors and its servers' log tails; the sidebar is
tested in tests/dashboard/test_app.py), and a URL that does not parse is one line naming the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from db.session import resolve_url
from db.store import Store, StoreError
from db.urls import scrub, url_for_people
from deploy import team
from tests.db.conftest import PasswordDatabase
from tests.db.storetest import EXAMPLES, run_cli, sample

SECRET = "TOPSECRET"

SHOWN = [  # (URL, what people see)
    ("postgresql+psycopg://planner@127.0.0.1:5441/planner?password=TOPSECRET",
     "postgresql+psycopg://planner@127.0.0.1:5441/planner?password=***"),
    ("postgresql+psycopg://planner:TOPSECRET@db/planner", "postgresql+psycopg://planner:***@db/planner"),
    ("postgresql://planner@db/p?sslmode=require&sslpassword=TOPSECRET&password=TOPSECRET&password=TOPSECRET2",
     "postgresql://planner@db/p?sslmode=require&sslpassword=***&password=***&password=***"),
    ("postgresql://planner@db/p?PASSWORD=TOPSECRET&passfile=/home/me/.pgpass",
     "postgresql://planner@db/p?PASSWORD=***&passfile=%2Fhome%2Fme%2F.pgpass"),
    ("postgresql://pl%40nner:TOP%2FSECRET@db/p", "postgresql://pl%40nner:***@db/p"),
    ("postgresql://planner@db/p?application_name=a%0Ab%1B", "postgresql://planner@db/p?application_name=a%0Ab%1B"),
    ("sqlite:////data/planner.db", "sqlite:////data/planner.db"),
    # Text that does not parse: its scheme and host at most, never the rest.
    ("postgres//planner:se/cret@dbhost/planner", "(not shown: it does not parse as a URL)"),
    ("postgresql://planner:TOP/SECRET@dbhost:5x/planner", "postgresql://dbhost/..."),
    ("postgresql://planner:TOP:SECRET@dbhost:abc/planner", "postgresql://dbhost/..."),
    ("postgresql://u:TOPSECRET@[::1", "postgresql://..."),
    ("postgresql://u:TOPSECRET@[::1]:99x/db", "postgresql://[::1]/..."),
    ("TOPSECRET", "(not shown: it does not parse as a URL)"),
]


@pytest.mark.parametrize("url, shown", SHOWN)
def test_a_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert url_for_people(url) == shown
    assert "TOP" not in shown and "cret" not in shown and shown.isprintable()


def test_a_url_shown_keeps_its_control_characters_escaped() -> None:
    url = resolve_url("postgresql://u@h/db").set(host="a\nb\x1b]0;t\x07")  # SQLAlchemy quotes all but the host
    assert url_for_people(url) == "postgresql+psycopg://u@a\\nb\\x1b]0;t\\x07/db"


def test_scrub_takes_every_form_of_the_password_out_of_a_message() -> None:
    url = "postgresql://planner:TOP/SECRET@db/p?sslpassword=OTHERSECRET"
    said = "failed for TOP/SECRET, TOP%2FSECRET and OTHERSECRET at postgresql://planner:TOP%2FSECRET@db/p"
    assert scrub(said, url) == "failed for ***, *** and *** at postgresql://planner:***@db/p"
    assert scrub("se/cret!", "postgres//planner:se/cret@dbhost/planner") == "***!"  # unparsed: userinfo as best it can


@pytest.mark.parametrize("url, says", [
    ("postgres//planner:se/cret@dbhost/planner", "error: DATABASE_URL is not a database URL (examples: "),
    ("postgres//planner:s3cr:TOPSECRET@dbhost/planner", "error: DATABASE_URL is not a database URL (examples: "),
    ("postgresql://u:TOPSECRET@h:abc/d", "error: DATABASE_URL is not a database URL: the port in postgresql://h/... "
                                         "is not a number, or an IPv6 host lacks its closing ]"),
    ("postgresql://u:TOPSECRET@[::1", "error: DATABASE_URL is not a database URL: the port in postgresql://... "),
    ("sqlite:///?mode=ro", "error: DATABASE_URL: sqlite:///?mode=ro: SQLite takes ?mode only with uri=true"),
    ("sqlite://u:TOPSECRET@host/x.db", "error: DATABASE_URL: sqlite://u:***@host/x.db: a SQLite URL names a file"),
    ("postgresql+psycopg://u@127.0.0.1:1/d?password=TOPSECRET",
     "error: cannot reach the database at postgresql+psycopg://u@127.0.0.1:1/d?password=***: "),
])
def test_a_bad_url_is_one_line_without_its_password(url: str, says: str, tmp_path: Path) -> None:
    for args in (["list"], ["show", "A" * 22], ["init"]):
        r = run_cli(url, *args)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith(says), (args, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr and "Warning" not in r.stderr
        assert SECRET not in r.stderr and "cret" not in r.stderr
    assert os.listdir(tmp_path) == []  # nothing made, here or under the URL's path
    assert not (Path.cwd() / "x.db").exists()


def _shown_at(pg: PasswordDatabase) -> str:
    return f"{pg.url}?password=***"


def test_a_password_in_the_query_authenticates_and_is_never_shown(pg_password_db: PasswordDatabase,
                                                                  tmp_path: Path) -> None:
    url = f"{pg_password_db.url}?password={pg_password_db.password}"
    shown = _shown_at(pg_password_db)
    r = run_cli(url, "init")
    assert r.returncode == 0 and r.stdout.startswith(f"database {shown}: schema "), r.stderr
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(sample()[1]))
    r = run_cli(url, "save", "--config", str(EXAMPLES / "tutorial.json"), "--plan", str(plan))
    assert r.returncode == 0 and f" to {shown}\n" in r.stdout, r.stderr
    token = r.stdout.split()[-1]
    r = run_cli(url, "show", "A" * 22)
    assert r.stderr == f"error: no plan with token {'A' * 22!r} in {shown} (see `python -m db list`)\n"
    assert Store(url).get_plan(token) is not None and repr(Store(url)) == f"Store({shown!r})"
    for out in (run_cli(url, "list"), run_cli(url, "show", token)):
        assert out.returncode == 0 and pg_password_db.password not in out.stdout + out.stderr


def test_a_wrong_password_is_refused_and_not_shown(pg_password_db: PasswordDatabase) -> None:
    wrong = "WRONG" + pg_password_db.password
    for url in (f"{pg_password_db.url}?password={wrong}",
                pg_password_db.url.replace(f"{pg_password_db.user}@", f"{pg_password_db.user}:{wrong}@")):
        r = run_cli(url, "list")
        assert r.returncode == 2 and "password authentication failed" in r.stderr, r.stderr
        assert "WRONG" not in r.stderr and len(r.stderr.splitlines()) == 1
        with pytest.raises(StoreError, match="password authentication failed") as e:
            Store(url).list_plans()
        assert "WRONG" not in str(e.value)


@pytest.mark.parametrize("url", ["postgresql://u:TOPSECRET@h:abc/d", "postgresql://u:TOPSECRET@[::1",
                                 "postgres//planner:TOPSECRET@dbhost/planner"])
def test_the_team_supervisor_says_a_bad_url_in_one_line(url: str) -> None:
    with pytest.raises(team.TeamError, match=r"^DATABASE_URL is not a database URL[ :]") as e:
        team.check_database_url(url)
    assert SECRET not in str(e.value) and "\n" not in str(e.value)


def test_the_team_supervisor_hides_the_password_in_what_its_children_wrote(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://planner@db/planner?password=TOPSECRET")
    log = tmp_path / "server-1.log"
    log.write_text("connecting to postgresql+psycopg://planner@db/planner?password=TOPSECRET\nfailed\n")
    assert team._tail(log) == "connecting to postgresql+psycopg://planner@db/planner?password=***\nfailed\n"
    bad = {**os.environ, "DATABASE_URL": "postgresql+psycopg://planner@127.0.0.1:1/planner?password=TOPSECRET"}
    with pytest.raises(team.TeamError, match="cannot reach the database at") as e:
        team.init_database(bad)
    assert SECRET not in str(e.value) and "password=***" in str(e.value)
