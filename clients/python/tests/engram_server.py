"""A real ``engram serve`` on a temporary store, for the tests.

Nothing is built here: the binary comes from ``ENGRAM_BIN``, else
``target/release/engram`` or ``target/debug/engram`` under the repository
root (or ``$CARGO_TARGET_DIR``), the newer of those that exist.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import httpx

REPO_ROOT = Path(__file__).resolve().parents[3]


def find_engram() -> Path:
    """The ``engram`` binary to test, or an error saying how to get one."""
    env = os.environ.get("ENGRAM_BIN")
    if env:
        p = Path(env)
        if not p.is_file():
            raise FileNotFoundError(f"ENGRAM_BIN={env} is not a file")
        return p
    roots = [REPO_ROOT / "target"]
    if os.environ.get("CARGO_TARGET_DIR"):
        roots.append(Path(os.environ["CARGO_TARGET_DIR"]))
    found = [r / prof / "engram" for r in roots for prof in ("release", "debug")]
    found = [p for p in found if p.is_file()]
    if not found:
        raise FileNotFoundError(
            "no engram binary: run `cargo build` (or `cargo build --release`) at the "
            f"repository root ({REPO_ROOT}), or set ENGRAM_BIN"
        )
    return max(found, key=lambda p: p.stat().st_mtime)


class EngramServer:
    """``engram --data DIR serve`` with keys made by ``engram keys create``."""

    def __init__(self, binary: Path, data: Path, embedder: Optional[str] = None) -> None:
        self.binary = binary
        self.data = data
        self.log_path = data.parent / f"{data.name}.server.log"
        self.config: Optional[Path] = None
        self.proc: Optional[subprocess.Popen] = None
        self.addr = ""
        global_args = ["--embedder", embedder] if embedder else []
        self.run(*global_args, "init")

    def run(self, *args: str) -> str:
        """``engram --data DIR args...``; its stdout, or an error with its output."""
        out = subprocess.run(
            [str(self.binary), "--data", str(self.data), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"engram {' '.join(args)} failed: {out.stdout}{out.stderr}")
        return out.stdout

    def key(self, *args: str) -> str:
        """``engram keys create args...``: the new key."""
        k = self.run("keys", "create", *args).strip()
        if not (k.startswith("egk_") and len(k) == 68):
            raise RuntimeError(f"unexpected key output: {k!r}")
        return k

    def tenant_key(self, tenant: str, principal: str, role: str, *labels: str) -> str:
        """A key acting as ``principal`` of ``tenant`` with ``role``."""
        extra: List[str] = []
        for label in labels:
            extra += ["--label", label]
        return self.key("--tenant", tenant, "--principal", principal, "--role", role, *extra)

    def with_config(self, toml: str) -> "EngramServer":
        """Uses a configuration file (``--config``) from the next start on."""
        self.config = self.data.parent / f"{self.data.name}.toml"
        self.config.write_text(toml)
        return self

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.addr}"

    def start(self, listen: str = "127.0.0.1:0", wait_s: float = 30.0) -> "EngramServer":
        """Starts the server, reads its ``listening on`` line, waits for /healthz."""
        args = [str(self.binary), "--data", str(self.data), "serve", "--listen", listen]
        if self.config:
            args += ["--config", str(self.config)]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log
        )
        log.close()
        first: Dict[str, str] = {}
        got = threading.Event()
        proc = self.proc

        def read_stdout() -> None:
            assert proc.stdout is not None
            first["line"] = proc.stdout.readline().decode("utf-8", "replace")
            got.set()
            for _ in proc.stdout:  # keep draining so the server never blocks
                pass

        threading.Thread(target=read_stdout, daemon=True).start()
        if not got.wait(wait_s):
            self.kill9()
            raise RuntimeError(f"no `listening on` line within {wait_s} s; log:\n{self.log()}")
        line = first["line"].strip()
        prefix = "listening on http://"
        if not line.startswith(prefix):
            self.kill9()
            raise RuntimeError(f"unexpected first line {line!r}; log:\n{self.log()}")
        self.addr = line[len(prefix) :]
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"/healthz did not answer within {wait_s} s")
            time.sleep(0.02)

    def kill9(self) -> None:
        """SIGKILL, and wait for the process."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def stop(self) -> int:
        """SIGTERM and wait: the exit status."""
        assert self.proc is not None
        self.proc.terminate()
        code = self.proc.wait(timeout=60)
        self.proc = None
        return code

    def log(self) -> str:
        """The server's log (JSON lines on stderr) so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
