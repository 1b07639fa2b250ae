"""The query language over ``POST /v1/query``: the six acceptance examples
of docs/query-language.md on a small fixture, EXPLAIN's manifest, the JSON
form, parameters, and a query-language error's position and hint.

Skipped when the server under test does not serve ``/v1/query`` yet (its
OpenAPI document has no such path).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List

import pytest
from conftest import Session

from engram_client import Client, InvalidInput, QueryError

EXAMPLES: Dict[str, str] = {
    "1_user_billing_as_of": """
        FIND ANY
        WHERE scope.user = 'user_18' OR record = entity
        AS OF now
        SIMILAR TO 'billing issue' AS sem
        MATCH 'billing issue' AS kw
        EXPAND FROM sem, kw HOPS 2 AS graph
        LIMIT 20
        RETURN id, record, kind, text, score, ranks""",
    "2_preferences_by_keyword": """
        FIND assertions KIND 'preference'
        WHERE ingested_at >= 2025-03-01
        MATCH 'diet'""",
    "3_summaries_by_vector": """
        FIND summaries
        WHERE scope.label = 'apollo' OR scope.conversation = 'apollo'
        VALID AT now
        SIMILAR TO $qvec MODEL 'text-embedding-3-small' MIN 0.35""",
    "4_claim_with_sources": """
        FIND assertions
        SIMILAR TO 'Acme renews in Q3' AS sem
        MATCH 'Acme renews in Q3' AS kw
        WITH SOURCES DEPTH 3
        LIMIT 5
        RETURN id, text, score, sources""",
    "5_trace_derivatives": "TRACE 'evt_9f2' DERIVATIVES DEPTH 5 INCLUDE SUPERSEDED",
    "6_outage_graph": """
        FIND ANY
        WHERE record = entity OR occurred_at >= now - 7d
        SIMILAR TO 'database outage postmortem' TOP 20 AS outage
        EXPAND FROM outage HOPS 1 VIA ('mentions', 'assigned_to', 'reported_by') AS graph
        WEIGHTS (outage = 1.0, graph = 1.5)
        RETURN id, record, kind, text, score, ranks""",
}

RETURNS: Dict[str, List[str]] = {
    "1_user_billing_as_of": ["id", "record", "kind", "text", "score", "ranks"],
    "4_claim_with_sources": ["id", "text", "score", "sources"],
    "6_outage_graph": ["id", "record", "kind", "text", "score", "ranks"],
}

QVEC = [0.5, 0.5, 0.5, 0.5]


def fixture_records() -> List[Dict[str, Any]]:
    """Events, entities, relations, assertions and a summary covering the
    six examples (tenant ``lang``)."""
    return [
        {
            "external_id": "evt_9f2",
            "kind": "user_message",
            "text": "my billing issue: charged twice",
            "scope": {"user": "user_18", "conversation": "c1"},
        },
        {
            "external_id": "evt_diet",
            "kind": "user_message",
            "text": "I follow a vegetarian diet",
            "scope": {"user": "user_18"},
        },
        {"external_id": "evt_renew", "kind": "document", "text": "Acme renews in Q3 per the CRM"},
        {
            "external_id": "evt_outage",
            "kind": "observation",
            "text": "database outage postmortem: primary failed over",
        },
        {"record": "entity", "entity_type": "person", "name": "Dana", "external_id": "ent/dana"},
        {
            "record": "entity",
            "entity_type": "service",
            "name": "billing",
            "aliases": ["billing issue"],
            "external_id": "ent/billing",
        },
        {
            "record": "relation",
            "subject": "ent/dana",
            "predicate": "assigned_to",
            "object": "ent/billing",
            "external_id": "rel/1",
        },
        {
            "record": "assertion",
            "kind": "preference",
            "text": "prefers a vegetarian diet",
            "sources": ["evt_diet"],
            "external_id": "as/diet",
        },
        {
            "record": "assertion",
            "kind": "fact",
            "text": "Acme renews in Q3",
            "sources": ["evt_renew"],
            "external_id": "as/renew",
        },
        {
            "record": "summary",
            "text": "billing issue summary: double charge refunded",
            "sources": ["evt_9f2"],
            "generator": "episode-summary@1",
            "external_id": "sum/billing",
        },
    ]


@pytest.fixture(scope="module")
def lang(session: Session) -> Iterator[Client]:
    """A tenant admin client of tenant ``lang`` holding the fixture; skips
    when the server has no /v1/query."""
    c = Client(session.server.url, session.server.tenant_key("lang", "root", "admin"))
    if "/v1/query" not in c.openapi().get("paths", {}):
        c.close()
        pytest.skip("the server under test has no /v1/query yet (its OpenAPI document lacks it)")
    for rec in fixture_records():  # one by one: later records cite earlier ones
        c.append([rec])
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def apollo(session: Session, lang: Client) -> Iterator[Client]:
    """Tenant ``lang2`` with a summary in the ``text-embedding-3-small`` space."""
    c = Client(session.server.url, session.server.tenant_key("lang2", "root", "admin"))
    c.append(
        [
            {
                "external_id": "e1",
                "kind": "note",
                "text": "apollo kickoff notes",
                "scope": {"conversation": "apollo"},
            }
        ]
    )
    c.append(
        [
            {
                "record": "summary",
                "text": "apollo project summary",
                "sources": ["e1"],
                "generator": "g@1",
                "external_id": "s1",
                "scope": {"labels": ["apollo"]},
                "embedding": {"model": "text-embedding-3-small", "vector": QVEC},
            }
        ]
    )
    try:
        yield c
    finally:
        c.close()


def check_shape(r: Dict[str, Any]) -> None:
    assert isinstance(r["columns"], list) and all(isinstance(c, str) for c in r["columns"])
    assert isinstance(r["rows"], list)
    for row in r["rows"]:
        assert isinstance(row, dict) and set(row) <= set(r["columns"]), row


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_acceptance_examples(name: str, lang: Client, apollo: Client) -> None:
    if name.startswith("3_"):
        r = apollo.query(EXAMPLES[name], params={"qvec": QVEC})
        check_shape(r)
        assert [row["id"] for row in r["rows"]] == [apollo.get("s1")["id"]]
        return
    r = lang.query(EXAMPLES[name])
    check_shape(r)
    assert "manifest" not in r
    if name in RETURNS:
        assert r["columns"] == RETURNS[name]
    assert r["rows"], f"{name} found nothing"
    if name.startswith("5_"):
        assert "depth" in r["columns"]
        ids = {row["external_id"] for row in r["rows"]}
        assert "sum/billing" in ids
    if name.startswith("2_"):
        assert [row["external_id"] for row in r["rows"]] == ["as/diet"]
    if name.startswith("4_"):
        assert r["rows"][0]["text"] == "Acme renews in Q3"


def test_explain_returns_the_manifest(lang: Client) -> None:
    r = lang.query("EXPLAIN FIND ANY MATCH $q LIMIT 3", params={"q": "billing"})
    check_shape(r)
    assert isinstance(r.get("manifest"), dict) and r["manifest"]


def test_json_form_with_parameters(apollo: Client) -> None:
    ast = {
        "body": {
            "statement": "find",
            "targets": ["summary"],
            "filter": {
                "expr": "or",
                "items": [
                    {"expr": "text", "field": "scope.label", "values": ["apollo"]},
                    {"expr": "text", "field": "scope.conversation", "values": ["apollo"]},
                ],
            },
            "valid_at": {"time": "now"},
            "retrievers": [
                {
                    "retriever": "similar",
                    "query": {"param": "qvec"},
                    "model": "text-embedding-3-small",
                    "min": 0.35,
                }
            ],
        }
    }
    r = apollo.query_ast(ast, params={"qvec": QVEC})
    check_shape(r)
    assert len(r["rows"]) == 1


def test_a_wrong_statement_says_where_and_what(lang: Client) -> None:
    with pytest.raises(QueryError) as e:
        lang.query("FIND ANY\nLIMIT 5\nWHERE kind = 'note'")
    err = e.value
    assert err.code == "query_error"
    assert (err.line, err.column) == (3, 1)
    assert err.expected
    assert "WHERE" in (err.hint or "") or "WHERE" in err.message
    with pytest.raises(QueryError) as unbound:
        lang.query("FIND ANY MATCH $missing")
    assert unbound.value.line == 1


def test_a_time_parameter_finer_than_a_millisecond_is_refused_not_cut(lang: Client) -> None:
    # a parameter may be either end of a range: cut, `occurred_at < $t`
    # left out records that occurred before t (the server refuses the same
    # bound written as a string)
    import datetime as dt

    t = dt.datetime(2024, 2, 29, 12, 0, 0, 123500, tzinfo=dt.timezone.utc)
    with pytest.raises(InvalidInput) as e:
        lang.query("FIND ANY WHERE occurred_at < $t", params={"t": t})
    assert "$t" in str(e.value) and "millisecond" in str(e.value), str(e.value)
    # to the millisecond, it is taken
    whole = t.replace(microsecond=123000)
    lang.query("FIND ANY WHERE occurred_at < $t", params={"t": whole})
