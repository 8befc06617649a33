#!/usr/bin/env bash
# Installs everything the project needs into .venv, from nothing.
# Heavy downloads live in a cache outside the clone ($PLATEAU_CACHE, keyed by
# version), so a second run on the same machine is fast and a new machine
# still works from scratch. Source this file; it exports UV and puts .venv first
# on PATH.
#
# Sourced into an interactive shell, it must leave that shell as it was: it
# sets no shell option (no `set -e`: a failing command would close the
# terminal), defines no variable besides its exports, and leaves no function
# behind. Every step that can fail is checked by hand instead; a failure
# prints one `bootstrap: ...` line and makes `source` return non-zero (a
# script that sources it under `set -e`, such as tools/run-tests, stops there).
# Externals go through `command`/`builtin` so the caller's aliases and
# functions (an interactive `alias rm='rm -i'`) do not change what runs.

_plateau_bootstrap() {
    unset -f _plateau_bootstrap
    local root uv_version uv_home
    root="$(builtin cd "$(command dirname "${BASH_SOURCE[0]}")/.." && builtin pwd)" || {
        builtin echo "bootstrap: cannot find the clone from ${BASH_SOURCE[0]}" >&2
        return 1
    }
    export PLATEAU_CACHE="${PLATEAU_CACHE:-$HOME/.cache/plateau-k8s}"
    uv_version="0.13.9"
    uv_home="$PLATEAU_CACHE/uv-$uv_version"
    if [ ! -x "$uv_home/bin/uv" ]; then
        builtin echo "bootstrap: installing uv $uv_version into $uv_home" >&2
        command python3 -m pip install --quiet --disable-pip-version-check \
            --target "$uv_home.tmp" "uv==$uv_version" || {
            builtin echo "bootstrap: failed: pip could not install uv $uv_version" \
                "(needs python3 with pip, and PyPI)" >&2
            return 1
        }
        if ! { command rm -rf "$uv_home" && command mv "$uv_home.tmp" "$uv_home"; }; then
            builtin echo "bootstrap: failed: cannot move $uv_home.tmp to $uv_home" >&2
            return 1
        fi
    fi
    export UV="$uv_home/bin/uv"
    export UV_CACHE_DIR="$PLATEAU_CACHE/uv-cache"
    export UV_PYTHON_DOWNLOADS=never
    export UV_PYTHON="${UV_PYTHON:-python3.11}"
    # The spark extra too: the Spark tests run PySpark (the node image installs no extras).
    # Bytecode at install time: where PYTHONDONTWRITEBYTECODE is set (CI machines set it)
    # Python writes no .pyc, and every process compiles what it imports from source again
    # (pandas alone: 2.3 s against 0.6 s). The project's own packages likewise, once a
    # sync; a stale .pyc is never used (Python checks the source's mtime).
    "$UV" sync --directory "$root" --frozen --quiet --extra spark --compile-bytecode || {
        builtin echo "bootstrap: failed: uv sync in $root (exit $?; $UV_PYTHON is required)" >&2
        return 1
    }
    "$root/.venv/bin/python" -m compileall -q -j 0 "$root/node" "$root/operator" \
        "$root/testkit" "$root/bench" >/dev/null || {
        builtin echo "bootstrap: failed: compiling $root's own Python" >&2
        return 1
    }
    # First on PATH once: sourcing again does not stack copies.
    case "$PATH" in
    "$root/.venv/bin:"*) ;;
    *) export PATH="$root/.venv/bin:$PATH" ;;
    esac
}
_plateau_bootstrap
