"""Every endpoint of docs/server.md through the sync client, against a real
server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engram_server import REPO_ROOT

from engram_client import (
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
)


def test_probes_and_documents(anon: Client) -> None:
    assert anon.health() == {"status": "ok"}
    assert anon.ready() == {"status": "ready"}
    text = anon.metrics()
    assert "engram_up 1" in text
    assert "engram_http_requests_total" in text
    doc = anon.openapi()
    assert doc["openapi"].startswith("3.1")
    committed = json.loads((REPO_ROOT / "docs" / "openapi.json").read_text())
    # every path the committed document names is served (the binary may be newer)
    assert set(committed["paths"]) <= set(doc["paths"])


def test_append_get_list_history_trace(user: Client, uniq: str) -> None:
    ext = f"{uniq}/conv/1"
    recs = [
        {
            "kind": "user_message",
            "external_id": ext,
            "text": "checkout is slow since the deploy",
            "scope": {"user": f"u-{uniq}", "conversation": f"c-{uniq}"},
        },
        {"kind": "user_message", "external_id": f"{uniq}-n2", "text": "the provider timed out"},
    ]
    r = user.append(recs)
    assert (r["created"], r["duplicates"]) == (2, 0)
    assert [x["outcome"] for x in r["results"]] == ["created", "created"]
    assert [x["item"] for x in r["results"]] == [0, 1]
    assert all(x["lsn"] > 0 and x["status"] == "active" for x in r["results"])
    rid = r["results"][0]["id"]

    again = user.append(recs)
    assert (again["created"], again["duplicates"]) == (0, 2)
    assert again["results"][0]["id"] == rid

    # every spelling of a reference, with a `/` in the external id
    for ref in (rid, f"id:{rid}", f"ext:{ext}", ext):
        rec = user.get(ref)
        assert rec["id"] == rid, ref
        assert rec["tenant"] == "acme"
        assert rec["writer"]["principal"] == "ann"
        assert rec["text"] == "checkout is slow since the deploy"

    listed = user.list(kind="user_message", limit=1000)["records"]
    assert rid in [x["id"] for x in listed]
    assert len(user.list(kind="user_message", limit=1)["records"]) == 1
    assert user.list(kind="no-such-kind")["records"] == []
    since = user.list(since="2000-01-01T00:00:00Z", include_superseded=True, limit=2)
    assert len(since["records"]) == 2
    assert user.list(since="2100-01-01T00:00:00Z")["records"] == []

    # paging: a full page names the cursor of the next, the last names none
    user.append([{"kind": f"page-{uniq}", "text": f"p{i}"} for i in range(5)])
    seen, after = [], None
    while True:
        page = user.list(kind=f"page-{uniq}", limit=2, after_lsn=after)
        seen += [x["text"] for x in page["records"]]
        after = page["next_after_lsn"]
        if after is None:
            break
    assert seen == [f"p{i}" for i in range(5)]

    h = user.history(ext)
    assert [v["id"] for v in h["versions"]] == [rid]
    t = user.trace(ext)
    assert t["target"] == rid
    assert rid in [n.get("id") for n in t["nodes"]]


def test_correct_expire_retract_delete(user: Client, admin: Client, uniq: str) -> None:
    ext = f"{uniq}-fact"
    first = user.append([{"kind": "note", "external_id": ext, "text": "the office is in Lyon"}])
    old = first["results"][0]["id"]
    c = user.correct(ext, {"kind": "note", "text": "the office is in Paris"})
    assert c["result"]["outcome"] == "created"
    assert c["record"]["supersedes"] == old
    assert c["record"]["external_id"] == ext  # inherited
    assert [v["text"] for v in user.history(ext)["versions"]] == [
        "the office is in Lyon",
        "the office is in Paris",
    ]
    # correcting the superseded version again conflicts
    with pytest.raises(Conflict) as e:
        user.correct(old, {"kind": "note", "text": "the office is in Nantes"})
    assert e.value.status == 409

    # a derived assertion: retracted by its writer
    src = f"{uniq}-src"
    user.append([{"kind": "note", "external_id": src, "text": "provider latency p99 2s"}])
    user.append(
        [
            {
                "record": "assertion",
                "kind": "fact",
                "text": "the provider is slow",
                "sources": [src],
                "external_id": f"{uniq}-a1",
            }
        ]
    )
    op = user.retract(f"{uniq}-a1", reason="wrong")
    assert op["lsn"] > 0 and op["op_id"]

    ex = admin.expire(src, "2030-01-01T00:00:00Z")
    assert ex["lsn"] > op["lsn"]

    d = user.delete(ext, reason="user asked")
    assert len(d["affected"]) >= 2  # both versions
    with pytest.raises(NotFound) as gone:
        user.get(ext)
    with pytest.raises(NotFound) as never:
        user.get(f"{uniq}-never-existed")
    assert (gone.value.code, gone.value.message, gone.value.details) == (
        never.value.code,
        never.value.message,
        never.value.details,
    )


def test_review_approve_reject(agent: Client, reviewer: Client, user: Client, uniq: str) -> None:
    src = f"{uniq}-src"
    agent.append([{"kind": "note", "external_id": src, "text": "the customer writes in French"}])
    r = agent.append(
        [
            {
                "record": "assertion",
                "kind": "instruction",
                "text": "always answer in French",
                "sources": [src],
                "external_id": f"{uniq}-i1",
            },
            {
                "record": "assertion",
                "kind": "instruction",
                "text": "never answer at all",
                "sources": [src],
                "external_id": f"{uniq}-i2",
            },
        ]
    )
    assert [x["status"] for x in r["results"]] == ["candidate", "candidate"]
    queued = [c["external_id"] for c in reviewer.review_list()["candidates"]]
    assert f"{uniq}-i1" in queued and f"{uniq}-i2" in queued
    with pytest.raises(Forbidden):
        user.review_list()
    ok = reviewer.approve(f"{uniq}-i1", note="fine")
    assert len(ok["affected"]) == 1
    no = reviewer.reject(f"{uniq}-i2", note="harmful")
    assert len(no["affected"]) == 1
    queued = [c["external_id"] for c in reviewer.review_list()["candidates"]]
    assert f"{uniq}-i1" not in queued and f"{uniq}-i2" not in queued


def test_tenant_admin_operations(admin: Client, user: Client, uniq: str) -> None:
    label = f"secret-{uniq}"[:60]
    user.append(
        [{"kind": "note", "external_id": f"{uniq}-s", "text": "the vault code", "access": [label]}]
    )
    # ann wrote it but does not hold the label: it does not exist for her
    with pytest.raises(NotFound):
        user.get(f"{uniq}-s")
    g = admin.grant(grantee="ann", label=label)
    assert g["lsn"] > 0
    assert user.get(f"{uniq}-s")["text"] == "the vault code"
    admin.revoke(grantee="ann", label=label)
    with pytest.raises(NotFound):
        user.get(f"{uniq}-s")
    admin.grant(grantee="ann", role="reviewer")
    assert "candidates" in user.review_list()
    admin.revoke(grantee="ann", role="reviewer")
    with pytest.raises(Forbidden):
        user.review_list()

    assert admin.retention("ephemeral", "6h")["lsn"] > 0
    # (the default for that pair: no other test's records change)
    assert admin.review_rule("observation", "system", review=False)["lsn"] > 0
    rules = admin.stats()["review_rules"]
    assert {"kind": "observation", "writer": "system", "review": False} in rules
    with pytest.raises(InvalidInput):
        admin.review_rule("memo", "system", review=True)
    assert admin.hold(f"user:u-{uniq}")["lsn"] > 0
    st = admin.stats()
    assert f"user:u-{uniq}" in st["holds"]
    assert st["retention"]["ephemeral"] == "6h"
    assert admin.hold(f"user:u-{uniq}", on=False)["lsn"] > 0
    with pytest.raises(InvalidInput):
        admin.hold(f"user:u-{uniq}", on=False)
    st = admin.stats()
    assert st["tenant"] == "acme"
    assert st["records"] >= 1
    assert f"user:u-{uniq}" not in st["holds"]


def test_recall_context_eval(user: Client, uniq: str) -> None:
    u = f"u-{uniq}"
    user.append(
        [
            {
                "kind": "user_message",
                "external_id": f"{uniq}-1",
                "text": "checkout is slow since the deploy",
                "scope": {"user": u, "conversation": f"c-{uniq}"},
            },
            {
                "kind": "user_message",
                "external_id": f"{uniq}-2",
                "text": "checkout is slow for another user",
                "scope": {"user": f"{u}-else"},
            },
        ]
    )
    r = user.recall(text="checkout slow", k=5, user=u, id="q1")
    assert r["query_id"] == "q1"
    assert [h["external_id"] for h in r["hits"]] == [f"{uniq}-1"]  # the filter holds
    assert "manifest" not in r
    bare = user.recall(text="checkout slow", k=5, user=u, with_text=False)
    assert [h["external_id"] for h in bare["hits"]] == [f"{uniq}-1"]
    assert [h["score"] for h in bare["hits"]] == [h["score"] for h in r["hits"]]
    assert r["hits"][0]["text"] and bare["hits"][0]["text"] is None
    both = user.recall({"text": "checkout slow", "k": 10}, mode="lexical")
    ids = {h["external_id"] for h in both["hits"]}
    assert {f"{uniq}-1", f"{uniq}-2"} <= ids
    ex = user.recall(text="checkout", explain=True, user=u)
    assert ex["manifest"]["principal"]["id"] == "ann"

    ctx = user.context("why is checkout slow", user=u, conversation=f"c-{uniq}")
    assert ctx["context"]["principal"] == "ann"
    assert "checkout" in ctx["rendered"]

    ev = user.eval(
        [
            {"case_id": "c1", "query": "checkout slow", "relevant_ids": [f"{uniq}-1"]},
            json.dumps({"case_id": "c2", "query": "checkout slow", "relevant": [f"{uniq}-2"]}),
        ],
        k=10,
    )
    assert ev["overall"]["cases"] == 2
    assert ev["overall"]["recall_at_k"] == 1.0
    assert ev["errors"] == []


def test_store_operations(store: Client, user: Client, tmp_path: Path) -> None:
    user.append([{"kind": "note", "external_id": "store-op-1", "text": "something to back up"}])
    st = store.stats()
    assert st["tenants"]["acme"]["records"] >= 1
    v = store.verify()
    assert v["ok"] is True, v["problems"]
    assert v["frames"] > 0
    dest = tmp_path / "backup"
    b = store.backup(str(dest))
    assert b["last_lsn"] > 0 and b["records"] >= 1
    assert (dest / "ENGRAM").exists() or any(dest.iterdir())
    # online compaction purges a deleted record; the rest stays readable
    user.append([{"kind": "note", "external_id": "store-op-gone", "text": "to be purged"}])
    user.delete("store-op-gone", reason="test")
    c = store.compact()
    assert c["purged"] >= 1, c
    assert c["log_bytes_after"] <= c["log_bytes_before"], c
    assert user.get("store-op-1")["text"] == "something to back up"
    with pytest.raises(NotFound):
        user.get("store-op-gone")


def test_request_errors_carry_code_message_details(user: Client, uniq: str) -> None:
    with pytest.raises(BadRequest) as e:
        user.append([{"tenant": "globex", "kind": "note", "text": "x"}])
    assert (e.value.status, e.value.code) == (400, "session_field")
    assert e.value.request_id
    with pytest.raises(InvalidInput) as e2:
        user.append(
            [
                {"kind": "note", "text": "fine"},
                {"kind": "note", "text": "bad time", "occurred_at": "yesterday"},
            ]
        )
    assert e2.value.status == 422
    assert e2.value.details.get("item") == 1
    assert e2.value.details.get("field") == "occurred_at"
    user.append([{"kind": "note", "external_id": f"{uniq}-x", "text": "one"}])
    with pytest.raises(Conflict) as e3:
        user.append([{"kind": "note", "external_id": f"{uniq}-x", "text": "two"}])
    assert e3.value.code == "external_id_conflict"
    with pytest.raises(ValueError):
        user.append([])
