"""examples/agent_loop.py runs against the test server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import Session

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"


def test_agent_loop_example_runs(session: Session) -> None:
    env = dict(os.environ, ENGRAM_URL=session.server.url, ENGRAM_KEY=session.keys["agent"])
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "turn 3: 'What plan am I moving to?'" in text
    assert "agent: From memory:" in text
    assert "(2 versions)" in text
    assert "billing@example.com" in text  # recall sees the correction
    assert "gone at once" in text


def test_agent_loop_example_needs_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ENGRAM_KEY"}
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "ENGRAM_KEY" in out.stderr
