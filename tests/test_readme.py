"""README's first screen is about using the product (issue 28 item 17): the two set-up commands and what the
dashboard does; the benchmarks' long tables live in docs/benchmarks.md, which README links, with a summary."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIRST_SCREEN_LINES = 45  # about what a 1280x720 browser or a terminal shows of a rendered README before scrolling
BENCHMARKS = ("Our planner vs TorchRec's", "Production scale", "The new options against TorchRec's planner",
              "An edit in the browser", "Capacity sweep",
              "Plans under a profile's fixed costs", "Estimated vs measured step time", "Measured quality")


def _readme() -> list[str]:
    return (ROOT / "README.md").read_text(encoding="utf-8").splitlines()


def test_the_first_screen_sets_up_and_shows_the_dashboard():
    first = _readme()[:FIRST_SCREEN_LINES]
    assert "bash scripts/start.sh" in "\n".join(first) and "bash scripts/test.sh" in "\n".join(first)
    assert "## The dashboard" in first
    assert not any(line.startswith("|") for line in first)  # no table on it


def test_the_benchmark_tables_moved_to_docs_with_a_link_and_a_summary():
    readme = _readme()
    tables = [line for line in readme if line.startswith("|") and not line.startswith("| `")]
    # what tables are left: the CLI's command list and the generated field tables (python -m engine.field_tables)
    assert {line for line in tables if not line.startswith("|---")} <= {"| command | options |",
                                                                         "| field | default | range | meaning |"}
    assert not any(line.startswith("## Benchmark:") for line in readme)
    assert any("docs/benchmarks.md" in line for line in readme[readme.index("## Benchmarks"):])
    docs = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines()
    headings = [line[3:] for line in docs if line.startswith("## ")]
    assert [next((h for h in headings if h.startswith(name)), None) for name in BENCHMARKS] == headings
    assert sum(line.startswith("| ") for line in docs) > 40  # the tables themselves


WRITES = re.compile(r"(?:--out|--config-out|--apply)\s+([\w.-]+\.\w+)|>\s*([\w.-]+\.\w+)|open\('([\w.-]+)', 'w'\)")


def _commands() -> list[str]:
    """The lines of README's command blocks (fenced bash)."""
    lines, inside = [], False
    for line in _readme():
        if line.startswith("```"):
            inside = line.strip() == "```bash" if not inside else False
        elif inside:
            lines.append(line)
    return lines


def test_what_the_readmes_commands_write_in_the_checkout_is_ignored_by_git():
    """Issue 28 item 16: README's commands write plan.json, saved.json, calibrated.json, ... in the checkout; each is
    in .gitignore (so `git status` stays clean after following README), as git itself reads it."""
    written = sorted({next(g for g in m.groups() if g) for line in _commands() for m in WRITES.finditer(line)})
    assert {"plan.json", "changed.json", "saved.json", "bundle.json", "calibrated.json"} <= set(written), written
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", *written], cwd=ROOT, capture_output=True, text=True, check=False)
    missing = set(written) - set(ignored.stdout.split())
    assert not missing, f"not in .gitignore: {sorted(missing)}"


def test_changed_json_is_made_before_it_is_used_and_the_test_time_is_said():
    """Issue 28 item 16: the re-plan example's changed.json comes from a command given before it, and README says how
    long the tests take."""
    commands = _commands()
    made = next(i for i, line in enumerate(commands) if "open('changed.json', 'w')" in line)
    used = next(i for i, line in enumerate(commands) if "replan changed.json" in line)
    assert made < used
    assert re.search(r"the tests take about \d+ minutes", "\n".join(_readme()[:FIRST_SCREEN_LINES]))


def test_the_install_says_what_it_does_while_it_does_it():
    """Issue 28 item 16: the install was two silent minutes (pip -q): each step says a line before it starts, and
    pip shows its own progress."""
    script = (ROOT / "scripts" / "install.sh").read_text(encoding="utf-8").splitlines()
    steps = [i for i, line in enumerate(script) if re.search(r"-m pip install|-m venv|apt-get install -y", line)]
    assert steps
    for i in steps:
        before = "\n".join(script[max(0, i - 6):i])
        assert "echo \"install.sh: " in before, f"no line said before: {script[i].strip()}"
        assert " -q " not in script[i].replace("-qq", ""), f"silent: {script[i].strip()}"
