#!/usr/bin/env bash
# Installs what the planner needs into the project's virtual environment .venv (never the system's Python):
# the Python packages (CPU builds) and this project itself (editable, with its console commands), and with
# --dev also the test extras and the system packages the tests run for real (PostgreSQL, Chromium, Slurm, nginx).
# PYTHON names the interpreter that creates .venv (default python3). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[ "${1:-}" = "--dev" ] && dev=1
PY=${PYTHON:-python3}
VENV=.venv

# apt-get install PACKAGES as root, or through sudo; returns 1 when neither is possible.
apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || return 1
    sudo="sudo"
  fi
  echo "install.sh: apt-get install $*"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

want=$(version "$PY") || { echo "install.sh: cannot run $PY (set PYTHON to a Python 3.11 interpreter)" >&2; exit 1; }
# A .venv of another Python (PYTHON changed) or one left without pip (venv failed half-way) is made again.
if [ -x "$VENV/bin/python" ] && { [ "$(version "$VENV/bin/python")" != "$want" ] \
                                  || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; }; then
  echo "install.sh: making $VENV again (Python $want)"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "install.sh: making $VENV (Python $want)"
  if ! "$PY" -m venv "$VENV" >/dev/null 2>&1; then
    # Debian's own Python keeps venv's pip (ensurepip) in a separate package.
    rm -rf "$VENV"
    apt_install "python$want-venv" || apt_install python3-venv || {
      echo "install.sh: $PY cannot make a virtual environment: install the package python$want-venv" >&2; exit 1; }
    "$PY" -m venv "$VENV"
  fi
fi
VPY="$VENV/bin/python"

if [ "$dev" = 1 ]; then
  missing=""
  for p in postgresql chromium slurm-wlm nginx; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086
    apt_install $missing \
      || echo "install.sh: cannot install$missing without root; the tests that need them will be skipped" >&2
  fi
  requirements=requirements-dev.txt
else
  requirements=requirements.txt
fi
# -e .: the project's own packages and console commands (sharding-planner, sharding-planner-db) in .venv,
# running this checkout's code. pip's own lines (each package collected, then installed) show its progress.
echo "install.sh: pip install -r $requirements -e . into $VENV (a few minutes the first time, seconds after)"
"$VPY" -m pip install --progress-bar off -r "$requirements" -e .
echo "install.sh: done: $VENV holds the planner and its commands (sharding-planner, sharding-planner-db)"
