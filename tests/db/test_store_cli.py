"""`python -m db` as scripts run it: real subprocesses on SQLite and PostgreSQL, and the docs cover it all."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from db.__main__ import build_parser
from db.store import Store
from tests.db.storetest import EXAMPLES, REPO, run_cli, sample

TOKEN = re.compile(r"^[A-Za-z0-9_-]{22}$")


def _plan_file(tmp_path: Path, name: str = "tutorial") -> Path:
    p = tmp_path / f"{name}.plan.json"
    p.write_text(json.dumps(sample(name)[1]))
    return p


def _one_line_error(r, code: int = 2) -> str:
    assert r.returncode == code, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_init_save_list_show_export(db_url: str, tmp_path: Path) -> None:
    r = run_cli(db_url, "init")
    assert r.returncode == 0 and "schema 0001 (upgraded from empty)" in r.stdout
    assert "already up to date" in run_cli(db_url, "init").stdout

    cfg = EXAMPLES / "tutorial.json"
    r = run_cli(db_url, "save", "--config", str(cfg), "--plan", str(_plan_file(tmp_path)), "--label",
                "cli baseline", "--author", "ana")
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip().splitlines()[-1]
    assert TOKEN.match(token)

    listed = run_cli(db_url, "list")
    assert token in listed.stdout and "cli baseline" in listed.stdout and "tutorial v1" in listed.stdout
    as_json = json.loads(run_cli(db_url, "list", "--json", "--limit", "5").stdout)
    assert [p["token"] for p in as_json] == [token] and as_json[0]["author"] == "ana"

    shown = run_cli(db_url, "show", token).stdout
    assert "cli baseline" in shown and "large_table_0: table_wise" in shown and "runs (0)" in shown
    assert json.loads(run_cli(db_url, "show", token, "--json").stdout)["plan"] == sample()[1]

    exported = run_cli(db_url, "export", token)
    assert exported.returncode == 0 and json.loads(exported.stdout) == Store(db_url).export_bundle(token)
    out = tmp_path / "bundle.json"
    assert run_cli(db_url, "export", token, "--out", str(out)).stdout == ""
    assert json.loads(out.read_text()) == json.loads(exported.stdout)


def test_import_prints_the_same_token_every_time(db_url: str, tmp_path: Path,
                                                 new_db_url: Callable[[str], str]) -> None:
    source = Store(new_db_url("sqlite"))
    source.upgrade()
    token = source.save_plan(*sample(), label="from a colleague")
    bundle = tmp_path / "shared.json"
    bundle.write_text(json.dumps(source.export_bundle(token)))

    first = run_cli(db_url, "import", str(bundle))  # a fresh database: import sets up the schema
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == token
    assert run_cli(db_url, "import", "-", stdin=bundle.read_text()).stdout.strip() == token
    assert len(Store(db_url).list_plans()) == 1


def test_errors_are_one_line(db_url: str, tmp_path: Path) -> None:
    run_cli(db_url, "init")
    plan = str(_plan_file(tmp_path))
    cfg = str(EXAMPLES / "tutorial.json")
    bad_cfg = tmp_path / "bad.json"
    bad_cfg.write_text(json.dumps({"tables": [], "topology": {"world_size": 2}}))
    truncated = tmp_path / "truncated.json"
    truncated.write_text(json.dumps(sample()[1])[:200])
    future = tmp_path / "future.json"
    future.write_text(json.dumps({"bundle_version": 99}))
    cases = [
        (["save", "--config", str(tmp_path / "missing.json"), "--plan", plan], "--config: cannot read"),
        (["save", "--config", cfg, "--plan", str(truncated)], "is not valid JSON (line 1"),
        (["save", "--config", str(bad_cfg), "--plan", plan], "config: tables"),
        (["show", "A" * 22], "no plan with token 'AAAAAAAAAAAAAAAAAAAAAA'"),
        (["export", "not-a-token"], "is not a share token"),
        (["import", str(truncated)], "is not valid JSON"),
        (["import", str(future)], "bundle_version: 99 is newer than this planner reads (1)"),
    ]
    for args, message in cases:
        assert message in _one_line_error(run_cli(db_url, *args)), args
    assert Store(db_url).list_plans() == []


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert "required: --config" in _one_line_error(run_cli(url, "save", "--plan", "p.json"), code=2)
    assert "invalid choice" in _one_line_error(run_cli(url, "drop"), code=2)
    assert "invalid int value" in _one_line_error(run_cli(url, "list", "--limit", "many"), code=2)
    assert _one_line_error(run_cli("nonsense", "list")).startswith("error: DATABASE_URL is not a database URL (")


def test_bad_input_does_not_create_the_database(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    truncated = tmp_path / "bundle.json"
    truncated.write_text('{"bundle_version": 1, "token": "')
    assert "is not valid JSON" in _one_line_error(run_cli(f"sqlite:///{path}", "import", str(truncated)))
    truncated.write_text(json.dumps({"bundle_version": 1}))
    assert "bundle.token: is missing" in _one_line_error(run_cli(f"sqlite:///{path}", "import", str(truncated)))
    plan = _plan_file(tmp_path, "tutorial_row_wise")
    one_table = tmp_path / "one.json"
    one_table.write_text(json.dumps({"tables": [{"name": "t", "num_embeddings": 8, "embedding_dim": 4}],
                                     "topology": {"world_size": 2}}))
    r = run_cli(f"sqlite:///{path}", "save", "--config", str(one_table), "--plan", str(plan))
    assert "the plan does not match its config: plan." in _one_line_error(r)
    assert not path.exists()


def _options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: [opt for a in p._actions for opt in a.option_strings
                   if opt not in ("-h", "--help") and a.help != argparse.SUPPRESS]
            for name, p in sub.choices.items()}


def test_docs_cover_every_command_and_option() -> None:
    docs = (REPO / "docs" / "store.md").read_text()
    options = _options(build_parser())
    assert set(options) == {"init", "save", "list", "show", "export", "import", "validate", "dryrun",
                            "import-results", "calibrate"}
    for command, opts in options.items():
        assert f"`{command}" in docs, command
        for opt in opts:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", docs), f"{command} {opt} not in docs/store.md"
    for env in ("DATABASE_URL", "PLANNER_DATA_DIR", "TEST_DATABASE_URL", "bundle_version"):
        assert env in docs


@pytest.mark.parametrize("command", ["list", "show", "export"])
def test_reading_commands_on_a_database_without_schema(command: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    args = [command] + (["A" * 22] if command != "list" else [])
    assert "run `python -m db init` first" in _one_line_error(run_cli(url, *args))


def test_list_and_show_print_strings_from_bundles_as_one_printable_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    store = Store(url)
    store.upgrade()
    forged = "x\nFORGED_TOKEN_0000000000 2000-01-01 00:00 forged v1"
    token = store.save_plan(*sample(), label=f"{forged}\x1b]0;owned\x07\u202e", author="ana\x1b[31m\r",
                            config_name="cfg\rX\x9b")
    run_id = store.create_run(token, "validation", "gloo", "cpu")
    store.update_run(run_id, status="failed", error="boom\x1b[2J\x85next")
    listed, shown = run_cli(url, "list"), run_cli(url, "show", token)
    assert listed.returncode == 0 and shown.returncode == 0, (listed.stderr, shown.stderr)
    assert listed.stdout.splitlines()[1].endswith(
        "  x\\nFORGED_TOKEN_0000000000 2000-01-01 00:00 forged v1\\x1b]0;owned\\x07\\u202e")
    assert len(listed.stdout.splitlines()) == 2 and "cfg\\rX\\x9b v1" in listed.stdout
    # the run line shows the error's first line (\x85 ends it)
    for line in ("label        x\\nFORGED", "author       ana\\x1b[31m\\r", "config       cfg\\rX\\x9b v1",
                 f"  #{run_id} validation on gloo/cpu: failed - boom\\x1b[2J"):
        assert any(s.startswith(line) for s in shown.stdout.splitlines()), line
    for out in (listed.stdout, shown.stdout):
        assert all(c.isprintable() or c == "\n" for c in out)
