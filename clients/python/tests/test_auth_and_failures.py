"""Keys and failures: a wrong key (401), another tenant's key (404 like a
missing record), a user key on admin endpoints (403), body limits (413),
and a kill -9 of the server losing no acknowledged append."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest
from conftest import Session
from engram_server import EngramServer

from engram_client import (
    NO_RETRY,
    Client,
    EngramError,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    TransportError,
    Unauthorized,
)


def test_wrong_or_missing_key_is_401(session: Session, anon: Client) -> None:
    bad = Client(session.server.url, "egk_" + "0" * 64)
    malformed = Client(session.server.url, "not-a-key")
    try:
        for c in (bad, malformed, anon):
            with pytest.raises(Unauthorized) as e:
                c.list()
            assert (e.value.status, e.value.code) == (401, "unauthorized")
            assert e.value.message
        with pytest.raises(Unauthorized):
            bad.append([{"kind": "note", "text": "x"}])
        with pytest.raises(Unauthorized):
            bad.bulk([{"kind": "note", "text": "x"}]).run()
    finally:
        bad.close()
        malformed.close()


def test_other_tenant_sees_nothing(user: Client, other: Client, uniq: str) -> None:
    r = user.append([{"kind": "note", "external_id": f"{uniq}-mine", "text": "acme's secret plan"}])
    rid = r["results"][0]["id"]
    for ref in (rid, f"id:{rid}", f"{uniq}-mine"):
        with pytest.raises(NotFound) as theirs:
            other.get(ref)
        with pytest.raises(NotFound) as missing:
            user.get(f"{uniq}-never")
        assert theirs.value.status == 404
        assert (theirs.value.code, theirs.value.message, theirs.value.details) == (
            missing.value.code,
            missing.value.message,
            missing.value.details,
        )
    for op in (
        lambda: other.history(rid),
        lambda: other.trace(rid),
        lambda: other.delete(rid),
        lambda: other.expire(rid, "2030-01-01T00:00:00Z"),
        lambda: other.correct(rid, {"kind": "note", "text": "mine now"}),
    ):
        with pytest.raises(NotFound):
            op()
    hits = other.recall(text="acme's secret plan", k=50)["hits"]
    assert all(h["id"] != rid for h in hits)
    # still there for its owner
    assert user.get(rid)["text"] == "acme's secret plan"


def test_user_key_on_admin_endpoints_is_403(user: Client, store: Client, tmp_path: Path) -> None:
    calls: Dict[str, Callable[[], object]] = {
        "grant": lambda: user.grant(grantee="ann", label="x"),
        "revoke": lambda: user.revoke(grantee="ann", label="x"),
        "retention": lambda: user.retention("ephemeral", "1d"),
        "hold": lambda: user.hold("tenant"),
        "review_rule": lambda: user.review_rule("fact", "model", review=True),
        "stats": user.stats,
        "verify": user.verify,
        "backup": lambda: user.backup(str(tmp_path / "b")),
        "compact": user.compact,
        "review": user.review_list,
    }
    for name, call in calls.items():
        with pytest.raises(Forbidden) as e:
            call()
        assert (e.value.status, e.value.code) == (403, "forbidden"), name
    # the store key acts on the store, never inside a tenant
    with pytest.raises(Forbidden):
        store.append([{"kind": "note", "text": "x"}])


def test_body_limits_are_413(engram_bin: Path, tmp_path: Path) -> None:
    srv = EngramServer(engram_bin, tmp_path / "small")
    key = srv.tenant_key("t", "p", "user")
    srv.with_config("[limits]\nbody_bytes_max = 2048\n").start()
    try:
        with Client(srv.url, key) as c:
            with pytest.raises(PayloadTooLarge) as e:
                c.append([{"kind": "note", "external_id": "big", "text": "x" * 4096}])
            assert (e.value.status, e.value.code) == (413, "payload_too_large")
            # nothing of it was stored, a small one passes
            with pytest.raises(NotFound):
                c.get("big")
            assert c.append([{"kind": "note", "text": "small"}])["created"] == 1
    finally:
        srv.kill9()


def test_kill9_loses_no_acknowledged_append(engram_bin: Path, tmp_path: Path) -> None:
    srv = EngramServer(engram_bin, tmp_path / "kill")
    key = srv.tenant_key("t", "writer", "user")
    srv.start()
    acked: List[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    failures: List[BaseException] = []

    def writer(w: int) -> None:
        # no retries: a request cut by the kill must surface, not be re-sent
        # to a server that is gone
        with Client(srv.url, key, retry=NO_RETRY, timeout=10) as c:
            i = 0
            while not stop.is_set():
                ext = f"w{w}-{i}"
                try:
                    r = c.append([{"kind": "note", "external_id": ext, "text": f"event {ext}"}])
                except (TransportError, EngramError):
                    return
                except BaseException as e:  # pragma: no cover - reported below
                    failures.append(e)
                    return
                assert r["results"][0]["outcome"] == "created"
                with lock:
                    acked.append(ext)
                i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(acked) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    srv.kill9()  # while the writers are still sending
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not failures, failures
    assert len(acked) >= 50, f"only {len(acked)} appends acknowledged before the kill"

    srv.start()
    try:
        with Client(srv.url, key) as c:
            # one listing page (1000 records), then each one beyond it by reference
            stored = {r["external_id"] for r in c.list(limit=1000)["records"]}
            missing = [e for e in acked if e not in stored]
            missing = [e for e in missing if not _exists(c, e)]
            assert missing == [], f"{len(missing)} acknowledged appends lost: {missing[:10]}"
    finally:
        srv.kill9()


def _exists(c: Client, ref: str) -> bool:
    try:
        c.get(ref)
        return True
    except NotFound:
        return False


def test_errors_survive_pickle_and_copy(user: Client, uniq: str) -> None:
    """An error raised in a worker process reaches the parent whole (a
    process pool pickles it), and copies keep every field."""
    import copy
    import pickle

    with pytest.raises(NotFound) as caught:
        user.get(f"{uniq}-never")
    err = caught.value
    for again in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(again) is NotFound
        assert (again.status, again.code, again.message, again.details, again.request_id) == (
            err.status,
            err.code,
            err.message,
            err.details,
            err.request_id,
        )
        assert str(again) == str(err)


def test_a_reference_no_url_can_carry_is_a_value_error(user: Client) -> None:
    """A reference or parameter too long for a URL is the caller's argument:
    ValueError, as for any argument the client refuses, not an httpx error."""
    with pytest.raises(ValueError, match="cannot be sent"):
        user.get("e" * 100_000)
    with pytest.raises(ValueError, match="cannot be sent"):
        user.list(kind="k" * 70_000)
