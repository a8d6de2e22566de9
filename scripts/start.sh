#!/usr/bin/env bash
# README's first command: install, then open the planning dashboard on the embedded default (SQLite, CPU).
# DATABASE_URL points it at another database; PLANNER_DATA_DIR moves the SQLite file (default ./data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec ${PYTHON:-python3} -m streamlit run dashboard/app.py --browser.gatherUsageStats false "$@"
