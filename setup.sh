#!/usr/bin/env bash
# Sets up aiayn in ./.venv. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# Pin torch first: an open range with no torch installed would pull gigabytes of CUDA wheels.
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,vision,serve]"
