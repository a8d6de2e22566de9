#!/usr/bin/env bash
# README's first command: install into .venv, then open the planning dashboard on the embedded default (SQLite,
# CPU). It keeps running (Ctrl-C stops it): run the tests from a second terminal.
# DATABASE_URL points it at another database; PLANNER_DATA_DIR moves the SQLite file (default ./data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python -m streamlit run dashboard/app.py --browser.gatherUsageStats false "$@"
