#!/usr/bin/env bash
# Installs everything the project needs into .venv, from nothing.
# Heavy downloads live in a cache outside the clone ($PLATEAU_CACHE, keyed by
# version), so a second run on the same machine is fast and a new machine
# still works from scratch. Source this file; it exports UV and puts .venv first
# on PATH.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PLATEAU_CACHE="${PLATEAU_CACHE:-$HOME/.cache/plateau-k8s}"
UV_VERSION="0.13.9"
UV_HOME="$PLATEAU_CACHE/uv-$UV_VERSION"
if [ ! -x "$UV_HOME/bin/uv" ]; then
    echo "bootstrap: installing uv $UV_VERSION into $UV_HOME" >&2
    python3 -m pip install --quiet --disable-pip-version-check --target "$UV_HOME.tmp" "uv==$UV_VERSION"
    rm -rf "$UV_HOME" && mv "$UV_HOME.tmp" "$UV_HOME"
fi
export UV="$UV_HOME/bin/uv"
export UV_CACHE_DIR="$PLATEAU_CACHE/uv-cache"
export UV_PYTHON_DOWNLOADS=never
export UV_PYTHON="${UV_PYTHON:-python3.11}"
# The spark extra too: the Spark tests run PySpark (the node image installs no extras).
(cd "$ROOT" && "$UV" sync --frozen --quiet --extra spark)
export PATH="$ROOT/.venv/bin:$PATH"
