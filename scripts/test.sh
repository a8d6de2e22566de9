#!/usr/bin/env bash
# README's test command: install everything the tests need into .venv, lint with ruff, then run the whole suite
# (arguments go to pytest) with .venv's Python.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev || exit 1
if ! .venv/bin/python -m ruff check .; then
  echo "test.sh: ruff found the problems above (settings: [tool.ruff] in pyproject.toml)" >&2
  exit 1
fi
.venv/bin/python -m pytest -q "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests - that is a failure here" >&2
  exit 1
fi
exit "$rc"
