"""The synchronous client."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Union, cast

import httpx

from . import _api
from ._api import Call, RetryPolicy, TimeLike
from .errors import EngramError, error_from_parts
from .models import (
    AppendResponse,
    BackupResponse,
    CompactResponse,
    BulkLine,
    BulkSummary,
    ContextResponse,
    CorrectResponse,
    EvalResponse,
    History,
    NewRecord,
    OpResponse,
    QueryResponse,
    RecallRequest,
    RecallResponse,
    Record,
    RecordList,
    ReviewQueue,
    Status,
    Trace,
    VerifyResponse,
)

__all__ = ["Client", "BulkStream"]


class Client:
    """A client of one ``engram serve``, acting as the principal of ``key``.

    The key alone decides the tenant and the principal: no method takes
    either. Every write returns once the server has made it durable.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:7878``.
        key: an API key (``egk_...``) from ``engram keys create``; ``None``
            reaches only the open endpoints (health, readiness, metrics,
            OpenAPI).
        timeout: seconds for connecting, and for each read and write of a
            request (the server's own deadline is 30 s by default).
        retry: the :class:`RetryPolicy` (``RetryPolicy(max_attempts=1)``
            disables retries).
        headers: extra headers for every request.
        transport: an ``httpx`` transport (e.g. ``httpx.MockTransport`` in
            tests).
        http_client: an ``httpx.Client`` to use instead of creating one
            (``base_url``, ``timeout``, ``headers`` and ``transport`` are
            then ignored; the caller closes it).
        max_answer_bytes: the longest answer body the client reads (256
            MiB by default; no Engram answer comes near it). A longer one
            raises :class:`EngramError` ``invalid_response`` as it arrives,
            before it is held whole.

    Use it as a context manager, or call :meth:`close`.

    Example::

        with Client("http://127.0.0.1:7878", key) as db:
            db.append([{"kind": "note", "text": "hello", "external_id": "n1"}])
            hits = db.recall(text="hello", k=5)["hits"]
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7878",
        key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        retry: Optional[RetryPolicy] = None,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.BaseTransport] = None,
        http_client: Optional[httpx.Client] = None,
        max_answer_bytes: int = _api.DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self.key = _api.check_key(key)
        self.retry = retry or RetryPolicy()
        self.max_answer_bytes = _api.check_max_answer_bytes(max_answer_bytes)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            headers=_api.headers(headers),
            transport=transport,
        )

    # --- plumbing -------------------------------------------------------------

    def close(self) -> None:
        """Closes the connections (unless ``http_client`` was given)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _call(self, call: Call) -> Any:
        attempt = 0
        while True:
            attempt += 1
            if self._http.is_closed:
                raise _api.closed_client_error()
            try:
                with self._http.stream(
                    call.method,
                    call.path,
                    params=call.params or None,
                    content=call.body,
                    headers=_api.request_headers(call, self.key),
                ) as resp:
                    answer = _api.AnswerReader(
                        call, resp.headers, self.max_answer_bytes, resp.status_code
                    )
                    for chunk in resp.iter_bytes():
                        answer.take(chunk)
            except httpx.InvalidURL as exc:
                # a reference or parameter no URL can carry (too long, or
                # characters a URL cannot hold): the caller's argument
                raise ValueError(_api.invalid_url_message(exc)) from exc
            except httpx.TransportError as exc:
                err: EngramError = _api.transport_error(exc, self.key)
                if self.retry.should_retry(call.retry, err, attempt):
                    self._sleep(self.retry.delay(attempt, None))
                    continue
                raise err from exc
            if resp.is_success:
                return _api.decode(call, bytes(answer.body))
            err = error_from_parts(resp.status_code, bytes(answer.body), resp.headers)
            if self.retry.should_retry(call.retry, err, attempt):
                self._sleep(self.retry.delay(attempt, err.retry_after))
                continue
            raise err

    # --- probes and documents ---------------------------------------------------

    def health(self) -> Status:
        """``GET /healthz``: ``{"status": "ok"}`` while the process is up."""
        return cast(Status, self._call(_api.probe("/healthz")))

    def ready(self) -> Status:
        """``GET /readyz``: ``{"status": "ready"}``; raises
        :class:`~engram_client.Unavailable` (503) while the server is not
        ready, and :class:`~engram_client.TransportError` once it stops
        listening (a server shutting down closes its listener first)."""
        return cast(Status, self._call(_api.probe("/readyz")))

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text (sends the key if the client
        has one, for servers with ``metrics_auth = "admin"``)."""
        return cast(str, self._call(_api.metrics()))

    def openapi(self) -> Dict[str, Any]:
        """``GET /v1/openapi.json``: the server's OpenAPI 3.1 document."""
        return cast(Dict[str, Any], self._call(_api.openapi()))

    # --- records -----------------------------------------------------------------

    def append(self, records: Iterable[NewRecord]) -> AppendResponse:
        """Appends an atomic batch (``POST /v1/records``); answered after fsync.

        Any invalid record rejects the whole batch
        (:class:`~engram_client.InvalidInput` naming ``details.item`` and
        ``details.field``). Re-sending records with the same external ids and
        content is reported as ``duplicate``. The batch is retried after a
        429, a 503 or a lost connection only when **every** record carries an
        ``external_id`` and every correction of a stored chain names the
        version it corrects as ``"supersedes": "id:<id>"`` (one naming the
        chain by external id would, re-sent after another writer's
        correction, be stored again); otherwise only after a 429 (which
        stores nothing).
        """
        return cast(AppendResponse, self._call(_api.append(records)))

    def bulk(
        self,
        records: Iterable[Union[NewRecord, str, bytes]],
        *,
        batch: Optional[int] = None,
        lines_per_request: Optional[int] = None,
    ) -> "BulkStream":
        """Bulk NDJSON ingest from an iterable (``POST /v1/records/bulk``).

        ``records`` yields record dicts, or ready JSON lines (``str`` or
        ``bytes``, one line each); it is consumed lazily and streamed as the
        request body. Returns a :class:`BulkStream`: iterate it for one
        result per line (``{"line", "id", "external_id", "outcome", "status",
        "lsn"}`` or ``{"line", "error"}``), each arriving once its batch is
        durable; then ``.summary`` holds the totals.

        The server cuts the lines into atomic batches of ``batch`` (default:
        the server's ``bulk_batch_default``, 1000 unless configured): a
        batch with an invalid line stores nothing and every line of it
        reports an error (``batch_rejected`` for the valid ones), and the
        stream goes on. ``line`` numbers count items of ``records`` from 1.

        An HTTP/1.1 client built on httpx sends a request body whole before
        it reads the answer, while the server stops reading a bulk body when
        a few batches of results wait unread. So the iterable is sent as
        consecutive requests of ``lines_per_request`` lines (default two
        batches of ``batch``, or 2,000 lines without it): memory stays
        bounded, and results arrive as each request's batches are stored (a
        request's end also ends its last batch, so give ``batch`` when a
        batch must not be cut short, or a ``lines_per_request`` that is a
        multiple of the server's batch).
        Bulk ingest is not retried; re-sending lines
        with external ids is idempotent, and the results say which lines
        were stored. A failure of the whole stream (the store failing, the
        body timing out) raises after the lines stored before it.
        """
        return BulkStream(self, records, batch, lines_per_request)

    def list(
        self,
        *,
        kind: Optional[str] = None,
        record: Optional[str] = None,
        since: Optional[TimeLike] = None,
        until: Optional[TimeLike] = None,
        include_superseded: Optional[bool] = None,
        limit: Optional[int] = None,
        after_lsn: Optional[int] = None,
    ) -> RecordList:
        """Lists records the key may read, in log order (``GET /v1/records``).

        ``record`` is a record type (``event``, ``entity``, ...); ``since`` and
        ``until`` bound the time a record *occurred* (``occurred_at``);
        ``limit`` defaults to 100 (the server allows up to its
        ``list_limit_max``, 1000 by default). A full page carries
        ``next_after_lsn``: pass it as ``after_lsn`` for the next page (it
        is ``None`` on the last one).
        """
        call = _api.list_records(kind, record, since, until, include_superseded, limit, after_lsn)
        return cast(RecordList, self._call(call))

    def get(self, ref: str) -> Record:
        """One record (``GET /v1/records/{ref}``). ``ref`` is an internal id,
        ``id:<id>``, ``ext:<external id>`` or an external id.
        Raises :class:`~engram_client.NotFound` for anything the key cannot see."""
        return cast(Record, self._call(_api.get(ref)))

    def history(self, ref: str) -> History:
        """Every version of a record's correction chain, oldest first."""
        return cast(History, self._call(_api.history(ref)))

    def trace(self, ref: str) -> Trace:
        """Lineage of a record: ``{"target", "nodes", "edges", "truncated"}``
        (``truncated``: the lineage goes on past 32 hops)."""
        return cast(Trace, self._call(_api.trace(ref)))

    # --- lifecycle ------------------------------------------------------------------

    def correct(
        self, ref: str, record: NewRecord, *, replace_access: Optional[bool] = None
    ) -> CorrectResponse:
        """Supersedes ``ref`` with ``record`` (ingest format). The correction
        keeps the old version's labels, scope and external id unless it
        gives its own; ``replace_access=True`` replaces the labels (dropping
        one needs the tenant admin). Not retried after a 503."""
        return cast(CorrectResponse, self._call(_api.correct(ref, record, replace_access)))

    def expire(self, ref: str, at: TimeLike) -> OpResponse:
        """Ends the record's validity at ``at``; afterwards it is historical."""
        return cast(OpResponse, self._call(_api.expire(ref, at)))

    def delete(self, ref: str, *, reason: Optional[str] = None) -> OpResponse:
        """Deletes the record, its versions and everything derived from them.

        They are out of every read at once; their bytes stay in the store's
        files until a compaction purges them (``compact()`` with the store
        key, or ``engram compact`` on a stopped store)."""
        return cast(OpResponse, self._call(_api.delete(ref, reason)))

    def retract(self, ref: str, *, reason: Optional[str] = None) -> OpResponse:
        """Withdraws a semantic record; its dependents go stale."""
        return cast(OpResponse, self._call(_api.retract(ref, reason)))

    def review_list(self) -> ReviewQueue:
        """The review queue (needs the reviewer role): ``{"candidates": [...]}``."""
        return cast(ReviewQueue, self._call(_api.review_list()))

    def approve(self, ref: str, *, note: Optional[str] = None) -> OpResponse:
        """Approves a review candidate (reviewer role)."""
        return cast(OpResponse, self._call(_api.review_decide(ref, "approve", note)))

    def reject(self, ref: str, *, note: Optional[str] = None) -> OpResponse:
        """Rejects a review candidate (reviewer role)."""
        return cast(OpResponse, self._call(_api.review_decide(ref, "reject", note)))

    def grant(
        self,
        *,
        grantee: Optional[str] = None,
        label: Optional[str] = None,
        role: Optional[str] = None,
    ) -> OpResponse:
        """Grants a label or a role (``reviewer``, ``admin``) to ``grantee``
        (tenant admin). Without a grantee, lifts a tenant-wide revocation."""
        return cast(OpResponse, self._call(_api.access("grant", grantee, label, role)))

    def revoke(
        self,
        *,
        grantee: Optional[str] = None,
        label: Optional[str] = None,
        role: Optional[str] = None,
    ) -> OpResponse:
        """Revokes a label or role from ``grantee``; without a grantee, the
        label for everyone in the tenant (tenant admin)."""
        return cast(OpResponse, self._call(_api.access("revoke", grantee, label, role)))

    def retention(self, retention_class: str, period: str) -> OpResponse:
        """Sets a retention class's period (``"30d"``, ``"6h"``, ``"forever"``;
        tenant admin)."""
        return cast(OpResponse, self._call(_api.retention(retention_class, period)))

    def review_rule(self, kind: str, writer: str, *, review: bool) -> OpResponse:
        """Sets whether an assertion ``kind`` (``"policy"``, ``"fact"``, ...)
        written by a ``writer`` kind (``"user"``, ``"system"``, ``"model"``)
        waits for review in the key's tenant (tenant admin; ``stats()`` lists
        the rules)."""
        return cast(OpResponse, self._call(_api.review_rule(kind, writer, review)))

    def hold(self, scope: str, *, on: bool = True) -> OpResponse:
        """Places (or with ``on=False`` lifts) a legal hold on ``scope``:
        ``tenant``, ``user:U``, ``conversation:C``, ``agent:A``,
        ``label:L`` (tenant admin)."""
        return cast(OpResponse, self._call(_api.hold(scope, on)))

    # --- reads that rank ---------------------------------------------------------------

    def recall(self, request: Optional[RecallRequest] = None, **fields: Any) -> RecallResponse:
        """Recall (``POST /v1/recall``): eligibility first, then the vector,
        lexical, recency and graph retrievers, fused.

        Give a request dict, keyword fields, or both (keywords win):
        ``text``, ``vector``, ``model``, ``mode`` (``hybrid``, ``vector``,
        ``lexical``), ``k``, ``ef``, filters ``user``, ``conversation``,
        ``agent``, ``label``, ``kind``, ``record`` (a value or a list),
        ``as_of``, ``valid_at``, ``occurred_after``, ``occurred_before``,
        ``include_historical``, ``id``, ``explain`` (adds the manifest),
        ``with_text`` (``False``: hits without text, nothing read from the log).
        """
        return cast(RecallResponse, self._call(_api.recall(request, fields)))

    def context(self, text: str, **fields: Any) -> ContextResponse:
        """Assembles the working memory for one model call
        (``POST /v1/context``): ``user``, ``conversation``, ``agent``,
        ``budget_bytes``, ``semantic_k``, ``episodic_k``, ``recent_turns``,
        ``include_historical``. ``["rendered"]`` is prompt-ready text."""
        return cast(ContextResponse, self._call(_api.context(text, fields)))

    def eval(
        self, cases: Iterable[Union[Mapping[str, Any], str, bytes]], *, k: Optional[int] = None
    ) -> EvalResponse:
        """Scores recall against cases (``engram eval`` format, no tenant or
        principal): recall@k, precision@k, MRR, forbidden-hit rate. A case
        is a dict or one JSON line (``str`` or ``bytes``), as a bulk item is."""
        return cast(EvalResponse, self._call(_api.eval_cases(cases, k)))

    def query(self, text: str, params: Optional[Mapping[str, Any]] = None) -> QueryResponse:
        """Runs a query-language statement (``POST /v1/query``, see
        docs/query-language.md) with ``$name`` parameters bound from
        ``params``; values are never spliced into the text.

        Returns ``{"columns", "rows"}`` (and ``manifest`` for ``EXPLAIN``).
        A wrong statement raises :class:`~engram_client.QueryError` with
        ``line``, ``column``, ``expected`` and ``hint``.
        """
        return cast(QueryResponse, self._call(_api.query({"query": text}, params)))

    def query_ast(
        self, ast: Mapping[str, Any], params: Optional[Mapping[str, Any]] = None
    ) -> QueryResponse:
        """Runs a statement given in its JSON form (the AST's serde form)."""
        return cast(QueryResponse, self._call(_api.query({"ast": dict(ast)}, params)))

    # --- store (store key; stats also for the tenant admin) -----------------------------

    def stats(self) -> Dict[str, Any]:
        """Statistics: of the whole store with the store key, of the key's
        tenant with a tenant admin key."""
        return cast(Dict[str, Any], self._call(_api.stats()))

    def verify(self) -> VerifyResponse:
        """Checks every log frame, and the store's state against the log (store key)."""
        return cast(VerifyResponse, self._call(_api.verify()))

    def backup(self, dest: str) -> BackupResponse:
        """Online backup into ``dest``, an absolute, missing or empty
        directory on the server's machine (store key)."""
        return cast(BackupResponse, self._call(_api.backup(dest)))

    def compact(self) -> CompactResponse:
        """Online compaction (store key): purges deleted content from the
        log and derived state while the server serves."""
        return cast(CompactResponse, self._call(_api.compact()))


class BulkStream(Iterator[BulkLine]):
    """Results of :meth:`Client.bulk`, one per input line, in order.

    Nothing is sent until iteration starts. ``summary`` holds the running
    totals (``lines``, ``created``, ``duplicates``, ``rejected``,
    ``batches``, ``batches_rejected``, ``complete``, ``requests``); it is
    final once the iteration has ended. :meth:`run` consumes the stream and
    returns the summary.
    """

    def __init__(
        self,
        client: Client,
        records: Iterable[Any],
        batch: Optional[int],
        lines_per_request: Optional[int],
    ) -> None:
        self._client = client
        self._batch, self._per = _api.bulk_sizes(batch, lines_per_request)
        self._totals = _api.BulkTotals()
        self._finished = False
        self._gen = self._run(iter(records))

    @property
    def summary(self) -> BulkSummary:
        """Totals so far."""
        return cast(BulkSummary, self._totals.summary)

    def __iter__(self) -> "BulkStream":
        return self

    def __next__(self) -> BulkLine:
        return next(self._gen)

    def run(self) -> BulkSummary:
        """Consumes the results; returns the summary."""
        for _ in self:
            pass
        return self.summary

    def results(self) -> List[BulkLine]:
        """Consumes the results and returns them all (small inputs)."""
        return [*self]

    def close(self) -> None:
        """Stops early: closes the request in flight (as leaving a loop over
        the stream does not). ``summary`` keeps what was reported."""
        self._gen.close()
        if not self._finished:
            self._totals.failed()

    def _run(self, it: Iterator[Any]) -> Iterator[BulkLine]:
        client = self._client
        if client._http.is_closed:
            raise _api.closed_client_error()
        call = _api.bulk_call(self._batch)
        offset = 0
        sentinel = object()
        while True:
            first = next(it, sentinel)
            if first is sentinel:
                self._finished = True
                return
            # items sent in this request, and taken from the iterable
            sent, taken = [0], [1]
            # An item that cannot be sent ends the body where it is: the
            # lines before it are stored and reported, then it is raised.
            bad: List[BaseException] = []

            def body(
                first: Any = first, sent: List[int] = sent, taken: List[int] = taken
            ) -> Iterator[bytes]:
                item = first
                while True:
                    try:
                        line = _api.bulk_line(item)
                    except (ValueError, TypeError) as exc:
                        bad.append(exc)
                        return
                    yield line
                    sent[0] += 1
                    if sent[0] >= self._per:
                        return
                    item = next(it, sentinel)
                    if item is sentinel:
                        return
                    taken[0] += 1

            try:
                with client._http.stream(
                    call.method,
                    call.path,
                    params=call.params,
                    content=body(),
                    headers=_api.request_headers(call, client.key),
                ) as resp:
                    if not resp.is_success:
                        self._totals.failed()
                        answer = _api.AnswerReader(
                            call, resp.headers, client.max_answer_bytes, resp.status_code
                        )
                        for chunk in resp.iter_bytes():
                            answer.take(chunk)
                        raise self._totals.refused(
                            error_from_parts(resp.status_code, bytes(answer.body), resp.headers),
                            offset,
                            taken[0],
                        )
                    lines = _api.LineReader(call, client.max_answer_bytes)
                    for chunk in resp.iter_bytes():
                        for raw in lines.take(chunk):
                            out = self._totals.take(raw, offset)
                            if out is not None:
                                yield cast(BulkLine, out)
                    for raw in lines.rest():
                        out = self._totals.take(raw, offset)
                        if out is not None:
                            yield cast(BulkLine, out)
            except httpx.InvalidURL as exc:
                # a reference or parameter no URL can carry (too long, or
                # characters a URL cannot hold): the caller's argument
                raise ValueError(_api.invalid_url_message(exc)) from exc
            except httpx.TransportError as exc:
                err = _api.transport_error(exc, self._client.key)
                raise self._totals.connection_lost(err, offset, taken[0]) from exc
            self._totals.request_ended(offset, taken[0])
            offset += sent[0]
            if bad:
                self._totals.summary["complete"] = False
                err = bad[0]
                raise type(err)(f"bulk item {offset + 1}: {err}") from err
