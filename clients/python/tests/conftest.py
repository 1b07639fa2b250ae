"""Fixtures: one ``engram serve`` for the session, with a key per role.

Keys of the session server (tenant ``acme`` unless said otherwise):
``admin`` (tenant admin ``boss``), ``user`` (``ann``), ``reviewer``
(``rev``), ``agent`` (``bot``), ``other`` (admin of tenant ``globex``),
``store`` (the store key). The store uses the built-in ``hash`` embedder
(lexical feature hashing) so that recall by text has vectors.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from engram_server import EngramServer, find_engram  # noqa: E402

from engram_client import Client  # noqa: E402


@dataclass
class Session:
    """The session server and its keys."""

    server: EngramServer
    keys: Dict[str, str]

    def client(self, who: str, **kw: object) -> Client:
        """A client acting with the key of ``who`` (``None``-safe for probes)."""
        return Client(self.server.url, self.keys.get(who), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def engram_bin() -> Path:
    """The binary under test (see engram_server.find_engram)."""
    try:
        return find_engram()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def session(engram_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """A server on a fresh store, with keys for every role."""
    data = tmp_path_factory.mktemp("engram") / "store"
    srv = EngramServer(engram_bin, data, embedder="hash")
    keys = {
        "admin": srv.tenant_key("acme", "boss", "admin"),
        "user": srv.tenant_key("acme", "ann", "user"),
        "reviewer": srv.tenant_key("acme", "rev", "reviewer"),
        "agent": srv.tenant_key("acme", "bot", "agent"),
        "other": srv.tenant_key("globex", "gus", "admin"),
        "store": srv.key("--admin"),
    }
    srv.start()
    try:
        yield Session(srv, keys)
    finally:
        srv.kill9()


def _client(session: Session, who: str) -> Iterator[Client]:
    c = session.client(who)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def admin(session: Session) -> Iterator[Client]:
    """Tenant admin of ``acme``."""
    yield from _client(session, "admin")


@pytest.fixture
def user(session: Session) -> Iterator[Client]:
    """A plain user (``ann``) of ``acme``."""
    yield from _client(session, "user")


@pytest.fixture
def reviewer(session: Session) -> Iterator[Client]:
    """A reviewer (``rev``) of ``acme``."""
    yield from _client(session, "reviewer")


@pytest.fixture
def agent(session: Session) -> Iterator[Client]:
    """An agent (``bot``) of ``acme``: its instructions wait for review."""
    yield from _client(session, "agent")


@pytest.fixture
def other(session: Session) -> Iterator[Client]:
    """The admin of another tenant (``globex``)."""
    yield from _client(session, "other")


@pytest.fixture
def store(session: Session) -> Iterator[Client]:
    """The store key (operator)."""
    yield from _client(session, "store")


@pytest.fixture
def anon(session: Session) -> Iterator[Client]:
    """No key at all."""
    yield from _client(session, "nobody")


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio."""
    return "asyncio"


_counter = [0]


@pytest.fixture
def uniq(request: pytest.FixtureRequest) -> str:
    """A prefix unique to the test, for external ids in the shared store."""
    _counter[0] += 1
    return f"{request.node.name[:40]}-{_counter[0]}"
