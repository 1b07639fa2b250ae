"""Bulk NDJSON ingest from an iterable: streamed, per-line results numbered
over the whole iterable, rejected batches, idempotent re-sends."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List

import pytest

from engram_client import Client, NotFound


def records(prefix: str, n: int) -> Iterator[Dict[str, Any]]:
    for i in range(n):
        yield {"kind": "note", "external_id": f"{prefix}-{i}", "text": f"bulk note {i}"}


def test_bulk_streams_an_iterable_over_several_requests(user: Client, uniq: str) -> None:
    pulled: List[int] = []

    def lazy() -> Iterator[Any]:
        for i, r in enumerate(records(uniq, 25)):
            pulled.append(i)
            # dicts, ready JSON text and bytes are all accepted
            yield r if i % 3 == 0 else (json.dumps(r) if i % 3 == 1 else json.dumps(r).encode())

    stream = user.bulk(lazy(), batch=5, lines_per_request=10)
    assert pulled == []  # nothing is read before iterating
    first = next(stream)
    assert first["line"] == 1 and first["outcome"] == "created"
    assert len(pulled) <= 11  # only the first request's lines were consumed
    rest = list(stream)
    out = [first, *rest]
    assert [r["line"] for r in out] == list(range(1, 26))
    assert [r["external_id"] for r in out] == [f"{uniq}-{i}" for i in range(25)]
    s = stream.summary
    assert (s["lines"], s["created"], s["duplicates"], s["rejected"]) == (25, 25, 0, 0)
    assert s["batches"] == 5 and s["requests"] == 3 and s["complete"] is True
    assert user.get(f"{uniq}-24")["text"] == "bulk note 24"

    # re-sending is idempotent by external id
    again = user.bulk(records(uniq, 25), batch=5).run()
    assert (again["created"], again["duplicates"], again["requests"]) == (0, 25, 3)


def test_a_bad_line_rejects_its_batch_and_the_stream_goes_on(user: Client, uniq: str) -> None:
    items: List[Any] = list(records(uniq, 6))
    items[3] = {"kind": "note", "text": "bad", "occurred_at": "not a time"}
    items.insert(5, "# a comment line is skipped")
    items.insert(6, "")
    out = user.bulk(items, batch=3, lines_per_request=100)  # one request
    results = out.results()
    by_line = {r["line"]: r for r in results}
    # lines 1-3 are one batch, stored; 4-6 (+ the skipped 6,7) hold the bad line
    assert all(by_line[n]["outcome"] == "created" for n in (1, 2, 3))
    assert by_line[4]["error"]["code"] == "invalid_input"
    assert by_line[5]["error"]["code"] == "batch_rejected"
    assert 6 not in by_line and 7 not in by_line  # comment and blank line
    assert by_line[8]["error"]["code"] == "batch_rejected"
    s = out.summary
    assert (s["created"], s["rejected"], s["batches_rejected"]) == (3, 3, 1)
    assert s["complete"] is True
    with pytest.raises(NotFound):
        user.get(f"{uniq}-4")


def test_bulk_refuses_multi_line_items_and_empty_input(user: Client) -> None:
    with pytest.raises(ValueError):
        user.bulk(['{"kind": "note",\n"text": "x"}']).run()
    empty = user.bulk([]).run()
    assert (empty["lines"], empty["requests"], empty["complete"]) == (0, 0, True)


def test_line_numbers_in_error_details_count_over_the_whole_iterable(
    user: Client, uniq: str
) -> None:
    items = [
        {"kind": "note", "external_id": f"{uniq}-a", "text": "a"},
        {"kind": "note", "text": "bad", "occurred_at": "not a time"},
        {"kind": "note", "external_id": f"{uniq}-b", "text": "b"},
    ]
    stream = user.bulk(items, batch=1, lines_per_request=1)
    out = {r["line"]: r for r in stream}
    assert stream.summary["requests"] == 3
    assert out[1]["outcome"] == "created" and out[3]["outcome"] == "created"
    assert out[2]["error"]["details"]["line"] == 2
    assert out[2]["error"]["details"]["field"] == "occurred_at"
    # the message is the server's, numbered within its request
    assert out[2]["error"]["message"].startswith("line 1:"), out[2]["error"]["message"]


def test_an_item_that_cannot_be_sent_ends_the_stream_after_what_was_stored(
    user: Client, uniq: str
) -> None:
    items: List[Any] = list(records(uniq, 6))
    items[4] = {"kind": "note", "text": "bad \ud800 surrogate"}
    stream = user.bulk(items, batch=2, lines_per_request=10)
    got: List[Any] = []
    with pytest.raises(ValueError, match="bulk item 5"):
        for r in stream:
            got.append(r)
    # the four lines before it were stored and reported
    assert [r["outcome"] for r in got] == ["created"] * 4
    assert stream.summary["complete"] is False
    assert user.get(f"{uniq}-3")["text"] == "bulk note 3"


def test_what_json_cannot_carry_is_refused_before_sending(user: Client, uniq: str) -> None:
    for bad in (
        {"kind": "note", "text": "x", "data": {1: "a", "1": "b"}},
        {"kind": "note", "text": "x", "data": {"v": float("nan")}},
        {"kind": "note", "text": "x", "confidence": float("inf")},
    ):
        with pytest.raises(ValueError):
            user.append([bad])


def test_a_value_nested_too_deeply_is_a_value_error(user: Client) -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        user.append([{"kind": "note", "text": "x", "data": {"v": deep}}])


def test_a_stream_that_fails_before_its_summary_keeps_what_it_reported() -> None:
    import httpx

    from engram_client import Unavailable

    body = (
        b'{"line": 1, "outcome": "created", "id": "a"}\n'
        b'{"line": 2, "outcome": "duplicate", "id": "b"}\n'
        b'{"error": {"code": "timeout", "message": "too slow", "details": {}}}\n'
    )

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        return httpx.Response(200, content=body)

    c = Client("http://engram.test/", "egk_k", transport=httpx.MockTransport(handler))
    stream = c.bulk([{"kind": "note", "text": "a"}, {"kind": "note", "text": "b"}])
    got: List[Any] = []
    with pytest.raises(Unavailable):
        for r in stream:
            got.append(r)
    assert len(got) == 2
    s = stream.summary
    assert (s["lines"], s["created"], s["duplicates"], s["complete"]) == (2, 1, 1, False)


def test_a_failed_body_reports_what_it_left_unstored_and_its_summary() -> None:
    import httpx

    from engram_client import Unavailable

    # the second request of a bulk ingest (lines 3..4 overall) whose body
    # failed after its first batch: the error line names the lines to send
    # again, and the summary after it counts the stored batch
    bodies = [
        b'{"line": 1, "outcome": "created", "id": "a"}\n'
        b'{"line": 2, "outcome": "created", "id": "b"}\n'
        b'{"summary": {"lines": 2, "created": 2, "duplicates": 0, "rejected": 0,'
        b' "batches": 1, "batches_rejected": 0, "complete": true}}\n',
        b'{"line": 1, "outcome": "created", "id": "c"}\n'
        b'{"error": {"code": "timeout", "message": "idle", "details": {}},'
        b' "not_stored": {"from_line": 2, "to_line": 2}}\n'
        b'{"summary": {"lines": 1, "created": 1, "duplicates": 0, "rejected": 0,'
        b' "batches": 1, "batches_rejected": 0, "complete": false}}\n',
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        return httpx.Response(200, content=bodies.pop(0))

    c = Client("http://engram.test/", "egk_k", transport=httpx.MockTransport(handler))
    items = [{"kind": "note", "text": t} for t in "abcd"]
    stream = c.bulk(items, batch=1, lines_per_request=2)
    got: List[Any] = []
    with pytest.raises(Unavailable) as e:
        for r in stream:
            got.append(r)
    assert [r["line"] for r in got] == [1, 2, 3]
    assert e.value.details["not_stored"] == {"from_line": 4, "to_line": 4}
    s = stream.summary
    assert (s["batches"], s["created"], s["complete"]) == (2, 3, False)


def test_items_taken_past_the_lines_a_failed_body_read_are_named_unstored() -> None:
    import httpx

    from engram_client import Unauthorized

    # a key revoked during the first batch: the server read lines 1..2 and
    # stored nothing, while the client had sent items up to the fourth
    body = (
        b'{"error": {"code": "unauthorized", "message": "revoked", "details": {}},'
        b' "not_stored": {"from_line": 1, "to_line": 2}}\n'
        b'{"summary": {"lines": 2, "created": 0, "duplicates": 0, "rejected": 0,'
        b' "batches": 0, "batches_rejected": 0, "complete": false}}\n'
    )

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        return httpx.Response(200, content=body)

    c = Client("http://engram.test/", "egk_k", transport=httpx.MockTransport(handler))
    taken: List[int] = []

    def items() -> Any:
        for i in range(10):
            taken.append(i)
            yield {"kind": "note", "text": str(i)}

    with pytest.raises(Unauthorized) as e:
        c.bulk(items(), batch=2, lines_per_request=4).run()
    assert len(taken) == 4
    assert e.value.details["not_stored"] == {"from_line": 1, "to_line": 4}


def test_a_bulk_stream_can_be_closed_early(user: Client, uniq: str) -> None:
    stream = user.bulk(records(f"{uniq}-close", 50), batch=5)
    first = next(stream)
    assert first["line"] == 1
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    # what was reported stays counted; the stream is not complete
    s = stream.summary
    assert s["lines"] >= 1 and s["created"] >= 1 and s["complete"] is False
    # a stream read to its end and closed stays complete
    done = user.bulk(records(f"{uniq}-done", 3))
    done.run()
    done.close()
    assert done.summary["complete"] is True and done.summary["lines"] == 3


def test_bulk_on_a_closed_client_is_an_engram_error() -> None:
    from engram_client import TransportError

    c = Client("http://engram.test/", "egk_k")
    c.close()
    with pytest.raises(TransportError):
        c.bulk([{"kind": "note", "text": "x"}]).run()


def test_a_result_s_numbers_are_shifted_and_its_message_is_the_server_s() -> None:
    import json

    from engram_client._api import BulkTotals

    raw = {
        "line": 1,
        "error": {
            "code": "external_id_conflict",
            "message": "line 1: external_id 'see line 3 X' is stored with other content; "
            'send a correction with "supersedes": "see line 3 X"',
            "details": {"line": 1, "external_id": "see line 3 X"},
        },
    }
    got = BulkTotals().take(json.dumps(raw).encode(), 4)
    assert got is not None
    assert got["line"] == 5
    assert got["error"]["details"]["line"] == 5
    # the message is the server's text, numbered within its request: a
    # value quoted in it (an external id naming a line) is never rewritten
    assert got["error"]["message"] == raw["error"]["message"]


def test_a_request_refused_whole_names_every_item_it_took_unstored() -> None:
    import httpx

    from engram_client import Unauthorized

    # the key revoked between two requests of one bulk ingest: the second
    # is refused before any batch, after the client took its items
    answers = [
        (
            200,
            b'{"line": 1, "outcome": "created", "id": "a"}\n'
            b'{"line": 2, "outcome": "created", "id": "b"}\n'
            b'{"summary": {"lines": 2, "created": 2, "duplicates": 0, "rejected": 0,'
            b' "batches": 1, "batches_rejected": 0, "complete": true}}\n',
        ),
        (401, b'{"error": {"code": "unauthorized", "message": "revoked", "details": {}}}'),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        status, body = answers.pop(0)
        return httpx.Response(status, content=body)

    c = Client("http://engram.test/", "egk_k", transport=httpx.MockTransport(handler))
    items = [{"kind": "note", "text": t} for t in "abcdef"]
    got: List[Any] = []
    with pytest.raises(Unauthorized) as e:
        for r in c.bulk(items, batch=2, lines_per_request=2):
            got.append(r)
    assert [r["line"] for r in got] == [1, 2]
    assert e.value.details["not_stored"] == {"from_line": 3, "to_line": 4}


def test_without_a_batch_the_server_s_default_applies() -> None:
    from engram_client._api import bulk_call, bulk_sizes

    # no `?batch`: a server whose batch_records_max is below 1000 refused
    # every bulk ingest that did not name one
    assert bulk_sizes(None, None) == (None, 2000)
    assert "batch" not in (bulk_call(None).params or {})
    assert bulk_sizes(300, None) == (300, 600)
    assert bulk_call(300).params == {"batch": "300"}
