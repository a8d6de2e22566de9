#!/usr/bin/env bash
# README's test command: install everything the tests need into .venv, lint with ruff, check the import contracts
# with lint-imports, then run the whole suite (arguments go to pytest) with .venv's Python.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev || exit 1
if ! .venv/bin/python -m ruff check .; then
  echo "test.sh: ruff found the problems above (settings: [tool.ruff] in pyproject.toml)" >&2
  exit 1
fi
if ! .venv/bin/lint-imports; then
  echo "test.sh: lint-imports found the broken import contracts above ([tool.importlinter] in pyproject.toml)" >&2
  exit 1
fi
# Two workers (pytest-xdist) keep both cores busy while one test waits on a browser or a server; each file stays on
# one worker (tests/conftest.py's scheduler). PLANNER_TEST_WORKERS=0 runs everything in this process.
.venv/bin/python -m pytest -q -n "${PLANNER_TEST_WORKERS:-2}" "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests - that is a failure here" >&2
  exit 1
fi
exit "$rc"
