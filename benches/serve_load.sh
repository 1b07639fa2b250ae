#!/usr/bin/env bash
# engram serve vs Chroma under load (benches/serve_load.py). Creates
# benches/.venv with httpx, numpy, chromadb and the Python client on first use,
# then runs the benchmark with the given arguments. Needs the release binary:
# cargo build --release (honours CARGO_TARGET_DIR).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="$HERE/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
if ! "$VENV/bin/python" -c "import httpx, numpy, chromadb, engram_client" 2>/dev/null; then
    echo "installing httpx, numpy, chromadb and clients/python into $VENV ..." >&2
    "$VENV/bin/python" -m pip install --quiet httpx numpy chromadb -e "$HERE/../clients/python"
fi
exec "$VENV/bin/python" "$HERE/serve_load.py" "$@"
