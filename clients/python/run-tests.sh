#!/usr/bin/env bash
# Runs the Python client's tests against a real `engram serve`.
#
# Creates clients/python/.venv if missing, installs the package with its test
# extras, and runs pytest. The tests build nothing: they use ENGRAM_BIN, or the
# newer of target/release/engram and target/debug/engram (run `cargo build`).
#
# If the venv cannot be created or the dependencies cannot be installed (no
# network), it prints "SKIPPED: ..." and exits 0: a missing network must not
# turn CI red. A failing test exits non-zero. Extra arguments go to pytest.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# A relative ENGRAM_BIN means relative to where this script was called from.
if [ -n "${ENGRAM_BIN:-}" ]; then
    case "$ENGRAM_BIN" in /*) ;; *) ENGRAM_BIN="$PWD/$ENGRAM_BIN" ;; esac
    export ENGRAM_BIN
fi
cd "$HERE"
PY="${PYTHON:-python3}"
VENV="$HERE/.venv"

skip() {
    echo "SKIPPED: python client tests (could not install dependencies: $1)"
    exit 0
}

# The most telling line of pip's output.
first_error() {
    local line
    line="$(echo "$1" | grep -m1 -E 'Could not|No matching|ERROR:' || true)"
    [ -n "$line" ] || line="$(echo "$1" | grep -v '^[[:space:]]*$' | tail -n 1)"
    echo "$line" | sed 's/^[[:space:]]*//'
}

command -v "$PY" >/dev/null 2>&1 || skip "no $PY on PATH"
if [ ! -x "$VENV/bin/python" ]; then
    out="$("$PY" -m venv "$VENV" 2>&1)" || { rm -rf "$VENV"; skip "python3 -m venv failed: $(echo "$out" | tail -n 1)"; }
fi
# Install (quietly) unless this exact pyproject.toml is already installed.
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    out="$("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test]" 2>&1)" \
        || skip "pip install failed: $(first_error "$out")"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi

"$VENV/bin/python" -m pytest -q "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "no python client tests were collected" >&2
    exit 1
fi
exit "$status"
