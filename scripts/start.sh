#!/usr/bin/env bash
# README's first command: install into .venv, then open the planning dashboard on the embedded default (SQLite,
# CPU). It keeps running (Ctrl-C stops it): run the tests from a second terminal.
# DATABASE_URL points it at another database; PLANNER_DATA_DIR moves the SQLite file (default ./data).
# It listens on 127.0.0.1 only (the app has no login); a team opens it through scripts/team.sh (docs/deploy.md).
# PLANNER_SKIP_INSTALL=1 starts the installed .venv as it is (no pip run: offline, or a second start).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${PLANNER_SKIP_INSTALL:-}" = 1 ] || bash scripts/install.sh
address=127.0.0.1
for arg in "$@"; do
  case "$arg" in --server.address|--server.address=*) address="" ;; esac
done
if [ -n "$address" ]; then
  echo "Listening on $address only: this machine's browser (the app has no login). To open it to a team:"
  echo "bash scripts/team.sh, nginx with a login in front of the app (docs/deploy.md)."
fi
exec .venv/bin/python -m streamlit run dashboard/app.py --server.address 127.0.0.1 --browser.gatherUsageStats false "$@"
