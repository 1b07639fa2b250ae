"""The benchmark scripts' shared virtual environment (benches/.venv).

`ensure_venv(packages)` re-runs the calling script under the venv's
Python, creating the venv on first use and installing what it lacks (the
scripts share the venv, each installs its own packages).
"""

import importlib.util
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(HERE, ".venv")
# pip name -> import name, where they differ
MODULES = {"faiss-cpu": "faiss"}


def ensure_venv(packages):
    py = os.path.join(VENV, "bin", "python")
    if os.path.abspath(sys.executable) != os.path.abspath(py):
        if not os.path.exists(py):
            print(f"creating {VENV} ...", file=sys.stderr)
            subprocess.check_call([sys.executable, "-m", "venv", VENV])
            subprocess.check_call([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
        os.execv(py, [py] + sys.argv)
    missing = [p for p in packages if importlib.util.find_spec(MODULES.get(p, p)) is None]
    if missing:
        print(f"installing {', '.join(missing)} into {VENV} ...", file=sys.stderr)
        subprocess.check_call([py, "-m", "pip", "install", "--quiet"] + missing)
