#!/usr/bin/env bash
# Installs the Python package from this checkout, offline, into build/venv: a virtual environment
# over Debian's Python and its packages (numpy, pandas, tqdm, pytest, installed by
# scripts/install-deps.sh). pip builds the native module with the release build (setup.py).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 -m venv --system-site-packages build/venv
build/venv/bin/python -m pip install --no-build-isolation --no-index --quiet .
build/venv/bin/python -c 'import tensormorph; print("tensormorph", tensormorph.__version__, "in build/venv")'
