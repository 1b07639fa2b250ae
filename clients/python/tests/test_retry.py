"""Retries, backoff and error mapping, against an ``httpx.MockTransport``
(no server): which calls are retried after 429, 503 and lost connections,
``Retry-After``, exponential delays, and the exception per status."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Iterator, List, Optional

import anyio

import httpx
import pytest

from engram_client import (
    AsyncClient,
    BadRequest,
    Busy,
    Client,
    Conflict,
    EngramError,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    QueryError,
    RetryPolicy,
    ServerError,
    Timeout,
    TransportError,
    Unauthorized,
    Unavailable,
    _api,
)

FAST = RetryPolicy(max_attempts=4, base_delay=0.1, max_delay=5.0, jitter=False)


def error(
    status: int, code: str, retry_after: Optional[str] = None, **details: Any
) -> httpx.Response:
    headers = {"x-request-id": "req-1"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    body = {"error": {"code": code, "message": f"{code} happened", "details": details}}
    return httpx.Response(status, json=body, headers=headers)


class Script:
    """Answers requests from a list of responses (or exceptions), in order,
    and records what was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: List[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def client(script: Script, policy: RetryPolicy = FAST) -> tuple:
    slept: List[float] = []
    c = Client(
        "http://engram.test", "egk_" + "1" * 64, retry=policy, transport=httpx.MockTransport(script)
    )
    c._sleep = slept.append  # type: ignore[method-assign]
    return c, slept


OK_APPEND = httpx.Response(200, json={"created": 1, "duplicates": 0, "results": []})


def test_429_is_retried_honouring_retry_after() -> None:
    s = Script(error(429, "busy", "1"), error(429, "busy", "2"), OK_APPEND)
    c, slept = client(s)
    r = c.append([{"kind": "note", "text": "no external id"}])
    assert r["created"] == 1
    assert len(s.requests) == 3
    assert slept == [1.0, 2.0]
    # every attempt carried the key and the same body
    assert all(q.headers["authorization"] == "Bearer egk_" + "1" * 64 for q in s.requests)
    assert len({q.content for q in s.requests}) == 1


def test_backoff_is_exponential_and_gives_up_with_the_last_error() -> None:
    s = Script(*[error(429, "busy") for _ in range(4)])
    c, slept = client(s)
    with pytest.raises(Busy) as e:
        c.recall(text="x")
    assert len(s.requests) == 4
    assert slept == [0.1, 0.2, 0.4]
    assert e.value.status == 429 and e.value.code == "busy"
    assert e.value.request_id == "req-1"


def test_retry_after_is_capped_and_jitter_stays_within_bounds() -> None:
    p = RetryPolicy(base_delay=1.0, max_delay=3.0, jitter=True)
    assert p.delay(1, 60.0) == 3.0
    for attempt in (1, 2, 3, 4):
        d = p.delay(attempt, None)
        full = min(3.0, 2 ** (attempt - 1))
        assert full / 2 <= d <= full


def test_503_retried_for_appends_with_external_ids_only() -> None:
    s = Script(error(503, "timeout", "1"), OK_APPEND)
    c, slept = client(s)
    c.append(
        [
            {"kind": "note", "text": "a", "external_id": "e1"},
            {"kind": "note", "text": "b", "external_id": "e2"},
        ]
    )
    assert len(s.requests) == 2 and slept == [1.0]

    s = Script(error(503, "timeout", "1"), OK_APPEND)
    c, slept = client(s)
    with pytest.raises(Timeout) as e:
        c.append(
            [{"kind": "note", "text": "a", "external_id": "e1"}, {"kind": "note", "text": "b"}]
        )
    assert len(s.requests) == 1 and slept == []
    assert isinstance(e.value, Unavailable)


def test_503_not_retried_for_two_corrections_of_one_stored_chain() -> None:
    # sent again, the first correction would correct the second's version
    twice = [
        {"kind": "pref", "text": "B", "external_id": "r1", "supersedes": "r1"},
        {"kind": "pref", "text": "C", "external_id": "r1", "supersedes": "r1"},
    ]
    s = Script(error(503, "timeout", "1"), OK_APPEND)
    c, slept = client(s)
    with pytest.raises(Timeout):
        c.append(twice)
    assert len(s.requests) == 1 and slept == []
    # nor one correction naming its chain by external id: sent again after
    # another writer's correction, it would correct that one
    s = Script(error(503, "timeout", "1"), OK_APPEND)
    c, slept = client(s)
    with pytest.raises(Timeout):
        c.append(twice[:1])
    assert len(s.requests) == 1 and slept == []
    # a correction naming the version it corrects, or a chain the batch
    # creates, is re-sent (found again, it is a duplicate)
    version = "01KBX3Q0M5V4J8ZT7W2N6R9C1D"
    for batch in (
        [dict(twice[0], supersedes="id:" + version)],
        [{"kind": "pref", "text": "A", "external_id": "r1"}] + twice,
    ):
        s = Script(error(503, "timeout", "1"), OK_APPEND)
        c, slept = client(s)
        c.append(batch)
        assert len(s.requests) == 2, batch
    # an id without `id:` is also read as an external id (a chain whose
    # external ids are ULIDs): not re-sent
    for not_a_version in (version, version.lower(), "ext:" + version):
        s = Script(error(503, "timeout", "1"), OK_APPEND)
        c, slept = client(s)
        with pytest.raises(Timeout):
            c.append([dict(twice[0], supersedes=not_a_version)])
        assert len(s.requests) == 1, not_a_version


def test_503_not_retried_for_other_writes_but_429_is() -> None:
    for call in (
        lambda c: c.delete("x"),
        lambda c: c.correct("x", {"kind": "note", "text": "y"}),
        lambda c: c.grant(grantee="a", label="l"),
        lambda c: c.backup("/tmp/b"),
    ):
        s = Script(error(503, "unavailable"))
        c, _ = client(s)
        with pytest.raises(Unavailable):
            call(c)
        assert len(s.requests) == 1
        op = httpx.Response(200, json={"op_id": "o", "lsn": 1, "affected": []})
        s = Script(error(429, "busy", "0"), op)
        c, _ = client(s)
        call(c)
        assert len(s.requests) == 2


def test_reads_retry_503_and_lost_connections() -> None:
    rec = httpx.Response(200, json={"id": "r1"})
    s = Script(error(503, "unavailable"), httpx.ReadError("reset"), rec)
    c, slept = client(s)
    assert c.get("r1") == {"id": "r1"}
    assert len(s.requests) == 3 and slept == [0.1, 0.2]


def test_lost_connection_after_sending_a_write_is_not_retried() -> None:
    s = Script(httpx.ReadError("reset"))
    c, _ = client(s)
    with pytest.raises(TransportError) as e:
        c.delete("x")
    assert e.value.status == 0 and e.value.code == "transport"
    assert isinstance(e.value.__cause__, httpx.ReadError)
    # a connection that never opened sent nothing: retried for any call
    op = httpx.Response(200, json={"op_id": "o", "lsn": 1, "affected": []})
    s = Script(httpx.ConnectError("refused"), op)
    c, _ = client(s)
    assert c.delete("x")["lsn"] == 1


def test_no_retry_policy() -> None:
    s = Script(error(429, "busy", "0"))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    with pytest.raises(Busy):
        c.list()
    assert len(s.requests) == 1


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (400, "invalid_json", BadRequest),
        (400, "session_field", BadRequest),
        (401, "unauthorized", Unauthorized),
        (403, "forbidden", Forbidden),
        (404, "not_found", NotFound),
        (409, "external_id_conflict", Conflict),
        (413, "payload_too_large", PayloadTooLarge),
        (422, "invalid_input", InvalidInput),
        (429, "busy", Busy),
        (503, "timeout", Timeout),
        (503, "unavailable", Unavailable),
        (500, "internal", ServerError),
    ],
)
def test_each_status_has_its_exception(status: int, code: str, cls: type) -> None:
    s = Script(error(status, code, item=2, field="kind"))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    with pytest.raises(cls) as e:
        c.list()
    assert type(e.value) is cls
    assert isinstance(e.value, EngramError)
    assert (e.value.status, e.value.code) == (status, code)
    assert e.value.message == f"{code} happened"
    assert e.value.details == {"item": 2, "field": "kind"}


def test_query_errors_expose_position_and_hint() -> None:
    s = Script(
        error(
            400,
            "query_error",
            line=4,
            column=1,
            expected=["RETURN", "`;`"],
            hint="WHERE goes before LIMIT",
        )
    )
    c, _ = client(s)
    with pytest.raises(QueryError) as e:
        c.query("FIND ANY LIMIT 5\nWHERE kind = 'note'")
    assert isinstance(e.value, BadRequest) and isinstance(e.value, InvalidInput)
    assert (e.value.line, e.value.column) == (4, 1)
    assert e.value.expected == ["RETURN", "`;`"]
    assert e.value.hint == "WHERE goes before LIMIT"
    assert len(s.requests) == 1  # never retried
    body = json.loads(s.requests[0].content)
    assert body == {"query": "FIND ANY LIMIT 5\nWHERE kind = 'note'"}


def test_requests_on_the_wire() -> None:
    seen: List[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path == "/metrics":
            return httpx.Response(200, text="engram_up 1\n")
        return httpx.Response(200, json={})

    c = Client("http://engram.test/", "egk_k", transport=httpx.MockTransport(handler))
    c.get("conv_993/17")
    c.delete("ext:a b/c", reason="user asked")
    c.list(kind="note", include_superseded=True, limit=5)
    c.query("FIND ANY WHERE scope.user = $u", params={"u": "user_18"})
    c.query_ast({"body": {"statement": "find"}}, params={"q": [0.1]})
    c.eval([{"case_id": "a", "query": "x"}], k=3)
    c.health()
    c.openapi()
    assert c.metrics() == "engram_up 1\n"
    paths = [r.url.raw_path.decode() for r in seen]
    assert paths[0] == "/v1/records/conv_993%2F17"
    assert paths[1] == "/v1/records/ext:a%20b%2Fc?reason=user+asked"
    assert paths[2] == "/v1/records?kind=note&include_superseded=true&limit=5"
    assert json.loads(seen[3].content) == {
        "query": "FIND ANY WHERE scope.user = $u",
        "params": {"u": "user_18"},
    }
    assert json.loads(seen[4].content) == {
        "ast": {"body": {"statement": "find"}},
        "params": {"q": [0.1]},
    }
    assert seen[5].headers["content-type"] == "application/x-ndjson"
    assert seen[5].content == b'{"case_id":"a","query":"x"}\n'
    # the open probes and documents carry no key; everything else does
    assert "authorization" not in seen[6].headers and "authorization" not in seen[7].headers
    assert all(r.headers["authorization"] == "Bearer egk_k" for r in seen[:6])
    # tenant and principal are never something a client can send
    with pytest.raises(ValueError):
        Client("http://x", "k", headers={"X-Tenant": "globex"})


def test_time_and_reference_helpers() -> None:
    import datetime as dt

    assert _api.time_str(dt.datetime(2025, 3, 8, 10, 14, 21)) == "2025-03-08T10:14:21Z"
    # to the millisecond, the precision Engram keeps (a finer bound is refused)
    assert (
        _api.time_str(dt.datetime(2025, 3, 8, 10, 14, 21, 123456)) == "2025-03-08T10:14:21.123Z"
    )
    # the lower end of a range (both ends included) is rounded up, so the
    # millisecond range keeps exactly the times the datetime range keeps
    fine = dt.datetime(2025, 3, 8, 10, 14, 21, 123456)
    assert _api.time_str(fine, lower_bound=True) == "2025-03-08T10:14:21.124Z"
    assert (
        _api.time_str(dt.datetime(2025, 3, 8, 10, 14, 59, 999001), lower_bound=True)
        == "2025-03-08T10:15:00Z"
    )
    with pytest.raises(ValueError):
        _api.time_str(dt.datetime(9999, 12, 31, 23, 59, 59, 999500), lower_bound=True)
    exact = dt.datetime(2025, 3, 8, 10, 14, 21, 123000)
    assert _api.time_str(exact, lower_bound=True) == "2025-03-08T10:14:21.123Z"
    listing = _api.list_records(None, None, fine, fine, None, None, None)
    assert listing.params["since"] == "2025-03-08T10:14:21.124Z"
    assert listing.params["until"] == "2025-03-08T10:14:21.123Z"
    body = json.loads(
        _api.recall(None, {"text": "x", "occurred_after": fine, "occurred_before": fine}).body
    )
    assert body["occurred_after"] == "2025-03-08T10:14:21.124Z"
    assert body["occurred_before"] == "2025-03-08T10:14:21.123Z"
    assert _api.time_str(dt.date(2025, 3, 8)) == "2025-03-08T00:00:00Z"
    tz = dt.timezone(dt.timedelta(hours=2))
    assert _api.time_str(dt.datetime(2025, 3, 8, 12, tzinfo=tz)) == "2025-03-08T12:00:00+02:00"
    assert _api.ref_path("id:01J/x") == "id:01J%2Fx"
    with pytest.raises(ValueError):
        _api.ref_path("")


@pytest.mark.anyio
async def test_async_client_retries_too() -> None:
    calls: List[int] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            return error(429, "busy", "0")
        return httpx.Response(200, json={"query_id": None, "hits": []})

    slept: List[float] = []
    async with AsyncClient(
        "http://engram.test", "egk_k", retry=FAST, transport=httpx.MockTransport(handler)
    ) as c:

        async def fake_sleep(s: float) -> None:
            slept.append(s)

        c._sleep = fake_sleep  # type: ignore[method-assign]
        assert (await c.recall(text="x"))["hits"] == []
    assert len(calls) == 3 and slept == [0.0, 0.0]


@pytest.mark.parametrize("code,status", [("no_route", 404), ("method_not_allowed", 405)])
def test_a_missing_endpoint_is_not_a_missing_record(code: str, status: int) -> None:
    s = Script(error(status, code))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    with pytest.raises(EngramError) as e:
        c.get("n1")
    assert type(e.value) is EngramError
    assert not isinstance(e.value, NotFound)
    assert e.value.code == code


def test_an_answer_that_is_not_engrams_raises_an_engram_error() -> None:
    s = Script(httpx.Response(200, content=b"<html>a web page</html>"))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    with pytest.raises(EngramError) as e:
        c.get("n1")
    assert e.value.code == "invalid_response"
    # a bulk ingest too, whose answer is read line by line
    for page in (b"<html>a web page</html>", b"[1, 2]", b'{"ok": true}', b'{"foo": 1}\n'):
        s = Script(httpx.Response(200, content=page))
        c, _ = client(s, RetryPolicy(max_attempts=1))
        stream = c.bulk([{"kind": "note", "text": "x"}])
        with pytest.raises(EngramError) as e:
            stream.run()
        assert e.value.code == "invalid_response", page
        assert stream.summary["complete"] is False


def test_dot_references_stay_one_path_segment() -> None:
    assert _api.ref_path(".") == "%2E"
    assert _api.ref_path("..") == "%2E%2E"
    assert _api.ref_path("a.b/c") == "a.b%2Fc"
    answer = {"id": "01J0000000000000000000000A", "external_id": ".."}
    s = Script(httpx.Response(200, json=answer))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    c.get("..")
    assert s.requests[0].url.raw_path.endswith(b"/v1/records/%2E%2E")


def test_datetimes_inside_a_body_are_sent_as_rfc3339() -> None:
    import datetime as dt

    s = Script(OK_APPEND)
    c, _ = client(s, RetryPolicy(max_attempts=1))
    c.append([{"kind": "note", "text": "x", "occurred_at": dt.datetime(2025, 1, 1, 12, 30)}])
    sent = json.loads(s.requests[0].content)
    assert sent[0]["occurred_at"].startswith("2025-01-01T12:30:00")


def test_a_key_read_with_its_newline_works_and_a_bad_one_is_refused_without_echo() -> None:
    seen: List[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"status": "ok"})

    secret = "egk_" + "ab" * 32
    c = Client("http://engram.test", secret + "\n", transport=httpx.MockTransport(handler))
    c.stats()
    assert seen[0].headers["authorization"] == f"Bearer {secret}"
    with pytest.raises(ValueError) as e:
        Client("http://engram.test", secret[:10] + " " + secret[10:])
    assert secret[:20] not in str(e.value)


def test_a_transport_error_never_carries_the_key_and_a_local_one_is_not_retried() -> None:
    secret = "egk_" + "cd" * 32
    calls: List[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.LocalProtocolError(f"Illegal header value b'Bearer {secret}'")

    c = Client("http://engram.test", secret, retry=FAST, transport=httpx.MockTransport(handler))
    slept: List[float] = []
    c._sleep = slept.append  # type: ignore[method-assign]
    with pytest.raises(TransportError) as e:
        c.stats()
    assert secret not in str(e.value) and "redacted" in str(e.value)
    assert len(calls) == 1 and slept == []


def test_a_404_that_is_not_engrams_is_not_a_missing_record() -> None:
    s = Script(httpx.Response(404, content=b"<!DOCTYPE HTML><title>404</title>"))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    with pytest.raises(EngramError) as e:
        c.get("n1")
    assert not isinstance(e.value, NotFound)
    assert e.value.code == "http_404"


def test_a_probe_answers_at_once_and_is_never_retried() -> None:
    script = Script(error(503, "unavailable"), httpx.Response(200, json={"status": "ready"}))
    c = Client("http://engram.test/", transport=httpx.MockTransport(script), retry=FAST)
    with pytest.raises(Unavailable):
        c.ready()
    assert len(script.requests) == 1


def test_a_closed_client_and_an_empty_answer_are_engram_errors() -> None:
    script = Script(httpx.Response(200, content=b""))
    c = Client("http://engram.test/", "egk_k", transport=httpx.MockTransport(script), retry=FAST)
    with pytest.raises(EngramError) as e:
        c.get("x")
    assert e.value.code == "invalid_response"
    c.close()
    with pytest.raises(TransportError) as e2:
        c.get("x")
    assert "closed" in str(e2.value)
    assert len(script.requests) == 1


HOSTILE_ANSWERS = [
    # (status, body): none of them an Engram server's
    (200, b"[" * 100_000 + b"]" * 100_000),  # nested past the decoder's depth
    (400, b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    (200, b"null"),
    (200, b"[1, 2, 3]"),
    (200, b'"a string"'),
]


@pytest.mark.parametrize("status,body", HOSTILE_ANSWERS)
def test_a_hostile_answer_is_an_engram_error_sync_and_async(status: int, body: bytes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    c = Client("http://engram.test", "egk_k", retry=FAST, transport=httpx.MockTransport(handler))
    for call in (lambda: c.get("x"), lambda: c.health(), lambda: c.delete("x")):
        with pytest.raises(EngramError):
            call()

    async def run() -> None:
        a = AsyncClient(
            "http://engram.test",
            "egk_k",
            retry=FAST,
            transport=httpx.MockTransport(handler),
        )
        with pytest.raises(EngramError):
            await a.get("x")

    anyio.run(run)


def test_an_error_body_of_the_wrong_types_keeps_the_status_code() -> None:
    body = json.dumps({"error": {"code": {"a": 1}, "message": ["m"]}}).encode()
    s = Script(httpx.Response(422, content=body))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    with pytest.raises(EngramError) as e:
        c.get("x")
    assert e.value.code == "http_422" and e.value.status == 422


def test_an_answer_past_max_answer_bytes_is_refused_as_it_arrives() -> None:
    chunks_sent: List[int] = []

    def endless() -> Iterator[bytes]:
        # a JSON string that never ends, with no Content-Length
        yield b'"'
        for _ in range(200):  # (ends, so a client without the cap fails, not hangs)
            chunks_sent.append(1)
            yield b"x" * 65536

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    limit = 1 << 20
    c = Client(
        "http://engram.test",
        "egk_k",
        retry=FAST,
        transport=httpx.MockTransport(handler),
        max_answer_bytes=limit,
    )
    with pytest.raises(EngramError) as e:
        c.get("x")
    assert e.value.code == "invalid_response" and "max_answer_bytes" in str(e.value)
    # it stopped reading at the limit, not at the end of the answer
    assert len(chunks_sent) <= limit // 65536 + 2
    # a declared length past the limit is refused before its body is read
    big = httpx.Response(200, content=b"{}", headers={"content-length": str(limit + 1)})
    c2, _ = client(Script(big), RetryPolicy(max_attempts=1))
    c2.max_answer_bytes = limit
    with pytest.raises(EngramError) as e:
        c2.get("x")
    assert "max_answer_bytes" in str(e.value)
    with pytest.raises(ValueError):
        Client("http://engram.test", "egk_k", max_answer_bytes=0)


@pytest.mark.parametrize(
    "lines",
    [
        b'{"line":"abc","outcome":"created"}\n',
        b'{"line":null}\n',
        b'{"line":true,"outcome":"created"}\n',
        b'{"line":1,"outcome":"created","error":"boom"}\n',
        b'{"summary":[]}\n',
        b'{"summary":{"lines":"x"}}\n',
        b'{"error":"boom"}\n',
        b'{"summary":{"lines":1,"complete":true}}\n{"summary":{"lines":1,"complete":true}}\n',
    ],
)
def test_a_bulk_answer_of_the_wrong_shape_is_invalid_response(lines: bytes) -> None:
    s = Script(httpx.Response(200, content=lines))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    stream = c.bulk([{"kind": "note", "text": "x"}])
    with pytest.raises(EngramError) as e:
        stream.run()
    assert e.value.code == "invalid_response", lines
    assert stream.summary["complete"] is False


def test_an_eval_case_is_one_line_as_a_bulk_item_is() -> None:
    s = Script(httpx.Response(200, json={"cases": []}))
    c, _ = client(s, RetryPolicy(max_attempts=1))
    with pytest.raises(ValueError):
        c.eval(['{"case_id":"a","text":"x"}\n{"case_id":"b","text":"y"}'])
    assert s.requests == []
    c.eval([b'{"case_id":"a","text":"x"}', {"case_id": "b", "text": "y"}])
    assert s.requests[0].content == b'{"case_id":"a","text":"x"}\n{"case_id":"b","text":"y"}\n'


def test_a_bulk_answer_line_past_max_answer_bytes_is_refused_as_it_arrives() -> None:
    sent: List[int] = []

    def endless() -> Iterator[bytes]:
        yield b'{"line": 1, "outcome": "created", "id": "'
        for _ in range(200):  # (ends, so a client without the cap fails, not hangs)
            sent.append(1)
            yield b"x" * 65536

    limit = 1 << 20
    c = Client(
        "http://engram.test",
        "egk_k",
        retry=FAST,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=endless())),
        max_answer_bytes=limit,
    )
    stream = c.bulk([{"kind": "note", "text": "x"}])
    with pytest.raises(EngramError) as e:
        stream.run()
    assert e.value.code == "invalid_response" and "max_answer_bytes" in str(e.value)
    assert len(sent) <= limit // 65536 + 2


def test_bulk_lines_split_across_chunks_are_read_whole() -> None:
    body = (
        b'{"line": 1, "outcome": "created", "id": "a"}\n'
        b'{"line": 2, "outcome": "duplicate", "id": "b"}\r\n'
        b'{"summary": {"lines": 2, "created": 1, "duplicates": 1, "rejected": 0,'
        b' "batches": 1, "batches_rejected": 0, "complete": true}}'
    )

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(body), 7):
            yield body[i : i + 7]

    c = Client(
        "http://engram.test",
        "egk_k",
        retry=FAST,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=pieces())),
    )
    stream = c.bulk([{"kind": "note", "text": "x"}, {"kind": "note", "text": "y"}])
    lines = list(stream)
    assert [ln["outcome"] for ln in lines] == ["created", "duplicate"]
    assert stream.summary["created"] == 1 and stream.summary["complete"] is True


def test_an_error_answer_past_max_answer_bytes_keeps_its_status() -> None:
    big = httpx.Response(503, content=b"{}", headers={"content-length": str(10 << 20)})
    c, _ = client(Script(big), RetryPolicy(max_attempts=1))
    c.max_answer_bytes = 1 << 20
    with pytest.raises(EngramError) as e:
        c.get("x")
    assert e.value.status == 503 and e.value.code == "invalid_response"


def _lost_after_two_results(request: httpx.Request) -> httpx.Response:
    """Reads the whole body, reports its first two lines, then the
    connection is lost (a server killed mid-answer)."""
    request.read()

    def lines() -> Iterator[bytes]:
        yield b'{"line": 1, "outcome": "created", "id": "a"}\n'
        yield b'{"line": 2, "outcome": "created", "id": "b"}\n'
        raise httpx.ReadError("connection reset")

    return httpx.Response(200, content=lines())


def test_a_bulk_request_whose_connection_is_lost_names_the_items_unconfirmed() -> None:
    items = [{"kind": "note", "external_id": f"n{i}", "text": "x"} for i in range(5)]
    c = Client(
        "http://engram.test",
        "egk_k",
        retry=FAST,
        transport=httpx.MockTransport(_lost_after_two_results),
    )
    stream = c.bulk(items)
    seen = []
    with pytest.raises(TransportError) as e:
        for r in stream:
            seen.append(r["line"])
    assert seen == [1, 2]
    assert e.value.details["unconfirmed"] == {"from_line": 3, "to_line": 5}
    s = stream.summary
    assert (s["lines"], s["created"], s["requests"], s["complete"]) == (2, 2, 1, False)

    # a later request that failed with no answer (the mock transport reads
    # a body before its handler runs): the items it took, and only those,
    # are named; the rest are still in the iterable
    ok = (
        b'{"line": 1, "outcome": "created", "id": "a"}\n'
        b'{"line": 2, "outcome": "created", "id": "b"}\n'
        b'{"summary": {"lines": 2, "created": 2, "duplicates": 0, "rejected": 0,'
        b' "batches": 1, "batches_rejected": 0, "complete": true}}\n'
    )
    answers: List[Any] = [httpx.Response(200, content=ok), httpx.ConnectError("refused")]

    def handler(request: httpx.Request) -> httpx.Response:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        request.read()
        return a

    left = iter(items)
    c = Client("http://engram.test", "egk_k", retry=FAST, transport=httpx.MockTransport(handler))
    stream = c.bulk(left, lines_per_request=2)
    with pytest.raises(TransportError) as e:
        stream.run()
    assert e.value.details["unconfirmed"] == {"from_line": 3, "to_line": 4}
    assert e.value.details["connect"] is True
    assert [r["external_id"] for r in left] == ["n4"]
    assert (stream.summary["lines"], stream.summary["requests"]) == (2, 2)


def test_the_async_bulk_names_the_items_unconfirmed_too() -> None:
    async def lost(request: httpx.Request) -> httpx.Response:
        await request.aread()

        async def lines() -> AsyncIterator[bytes]:
            yield b'{"line": 1, "outcome": "created", "id": "a"}\n'
            yield b'{"line": 2, "outcome": "created", "id": "b"}\n'
            raise httpx.ReadError("connection reset")

        return httpx.Response(200, content=lines())

    async def run() -> None:
        async with AsyncClient(
            "http://engram.test", "egk_k", retry=FAST, transport=httpx.MockTransport(lost)
        ) as a:
            stream = a.bulk([{"kind": "note", "external_id": f"n{i}", "text": "x"} for i in range(4)])
            with pytest.raises(TransportError) as e:
                await stream.run()
            assert e.value.details["unconfirmed"] == {"from_line": 3, "to_line": 4}
            assert stream.summary["requests"] == 1

    anyio.run(run)


def test_a_bulk_answer_that_ends_before_its_summary_names_the_items_unconfirmed() -> None:
    def cut(request: httpx.Request) -> httpx.Response:
        request.read()
        return httpx.Response(200, content=b'{"line": 1, "outcome": "created", "id": "a"}\n')

    c = Client("http://engram.test", "egk_k", retry=FAST, transport=httpx.MockTransport(cut))
    stream = c.bulk([{"kind": "note", "external_id": f"n{i}", "text": "x"} for i in range(3)])
    with pytest.raises(TransportError) as e:
        stream.run()
    assert "before its summary" in str(e.value)
    assert e.value.details["unconfirmed"] == {"from_line": 2, "to_line": 3}
    assert stream.summary["complete"] is False
