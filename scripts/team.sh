#!/usr/bin/env bash
# Serve a team: N app servers (default 2) on local ports and nginx in front of them on one port (default 8501),
# with sticky sessions, all on the PostgreSQL database DATABASE_URL names (required). Ctrl-C or SIGTERM stops every
# process it started. `bash scripts/team.sh --help` lists the options; docs/deploy.md says how to run it for a team.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "team.sh: no .venv yet: run bash scripts/install.sh first" >&2; exit 2; }
exec "$PY" -m deploy.team "$@"
