#!/usr/bin/env bash
# Installs what the planner needs: Python packages (CPU builds), and with --dev also the test extras and the
# system packages the tests run for real (PostgreSQL, Chromium, Slurm). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[ "${1:-}" = "--dev" ] && dev=1
PY=${PYTHON:-python3}

if [ "$dev" = 1 ]; then
  apt_packages="postgresql chromium slurm-wlm"
  missing=""
  for p in $apt_packages; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    if [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then
      echo "install.sh: cannot install$missing without root; the tests that need them will be skipped" >&2
    else
      echo "install.sh: apt-get install$missing"
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
  fi
  "$PY" -m pip install -q -r requirements-dev.txt
else
  "$PY" -m pip install -q -r requirements.txt
fi
