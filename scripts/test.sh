#!/usr/bin/env bash
# README's test command: install everything the tests need, then run the whole suite.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev || exit 1
${PYTHON:-python3} -m pytest -q "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests - that is a failure here" >&2
  exit 1
fi
exit "$rc"
