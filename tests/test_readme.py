"""README's first screen is about using the product (issue 28 item 17): the two set-up commands and what the
dashboard does; the benchmarks' long tables live in docs/benchmarks.md, which README links, with a summary."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_SCREEN_LINES = 45  # about what a 1280x720 browser or a terminal shows of a rendered README before scrolling
BENCHMARKS = ("Our planner vs TorchRec's", "Production scale", "An edit in the browser", "Capacity sweep",
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
