"""Typed shapes of requests and answers (``TypedDict``: plain JSON dicts).

They describe the wire format of ``engram serve`` (docs/server.md,
docs/ingest.md, docs/openapi.json) for type checkers and editors; at run
time every value is the ``dict`` the server sent, so fields the server adds
later are kept rather than dropped. Request dicts are ``total=False``: only
what you set is sent.

Records are in the ingest format without ``tenant`` (the API key decides
the tenant and the principal; a body naming either is refused).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, List, Optional, TypedDict, Union

__all__ = [
    "Scope",
    "Embedding",
    "Writer",
    "NewRecord",
    "Record",
    "ItemResult",
    "AppendResponse",
    "BulkLine",
    "BulkSummary",
    "RecordList",
    "History",
    "Trace",
    "CorrectResponse",
    "OpResponse",
    "ReviewQueue",
    "RecallRequest",
    "Hit",
    "RecallResponse",
    "ContextRequest",
    "ContextResponse",
    "EvalCase",
    "EvalResponse",
    "VerifyResponse",
    "BackupResponse",
    "CompactResponse",
    "QueryResponse",
    "Status",
    "JSON",
    "Time",
]

JSON = Union[None, bool, int, float, str, List[Any], Dict[str, Any]]
"""Any JSON value."""

Time = Union[str, _dt.datetime, _dt.date]
"""A time in a request: an RFC 3339 string, a ``datetime`` (naive means
UTC; sent to the millisecond) or a ``date``. Answers carry strings."""


class Scope(TypedDict, total=False):
    """Who and what a record is about."""

    user: str
    conversation: str
    agent: str
    labels: List[str]


class Embedding(TypedDict):
    """A client-computed vector in the space of ``model``."""

    model: str
    vector: List[float]


class Writer(TypedDict, total=False):
    """Who wrote a record (honoured from the tenant admin only)."""

    principal: str
    kind: str


class NewRecord(TypedDict, total=False):
    """A record to append, in the ingest format (docs/ingest.md), no tenant.

    Events need ``kind`` and ``text`` and/or ``data``; assertions and
    summaries need ``sources``. Give ``external_id`` to make re-sending
    idempotent (and appends retryable).
    """

    record: str
    kind: str
    external_id: str
    scope: Scope
    occurred_at: Time
    valid_from: Time
    valid_until: Time
    last_verified_at: Time
    text: str
    data: JSON
    retention_class: str
    access: List[str]
    writer: Writer
    supersedes: str
    embedding: Embedding
    embeddings: List[Embedding]
    sources: List[str]
    derivation: Dict[str, Any]
    confidence: float
    entity_type: str
    name: str
    aliases: List[str]
    subject: str
    predicate: str
    object: JSON
    generator: str
    replace_access: bool


class Record(TypedDict, total=False):
    """A stored record as the server shows it (more fields may be present)."""

    id: str
    tenant: str
    external_id: Optional[str]
    record: str
    kind: str
    scope: Scope
    historical: bool
    occurred_at: str
    ingested_at: str
    text: Optional[str]
    data: JSON
    access: List[str]
    effective_access: List[str]
    writer: Writer
    supersedes: Optional[str]
    superseded_by: Optional[str]
    sources: List[str]
    status: str
    valid_from: Optional[str]
    valid_until: Optional[str]
    retention_class: str
    lsn: int


class ItemResult(TypedDict, total=False):
    """The outcome of one record of an append."""

    item: int
    id: str
    external_id: Optional[str]
    outcome: str
    """``created`` or ``duplicate``."""
    status: str
    """``active``, or ``candidate`` when the record waits for review."""
    lsn: int
    notes: List[str]


class AppendResponse(TypedDict):
    """What an append stored; every record is durable when this arrives."""

    created: int
    duplicates: int
    results: List[ItemResult]


class BulkLine(TypedDict, total=False):
    """One result line of a bulk ingest: a stored record, or ``error``.

    ``line`` is 1-based over the whole iterable given to ``bulk``.
    """

    line: int
    id: str
    external_id: Optional[str]
    outcome: str
    status: str
    lsn: int
    notes: List[str]
    error: Dict[str, Any]


class BulkSummary(TypedDict, total=False):
    """Totals of a bulk ingest."""

    lines: int
    created: int
    duplicates: int
    rejected: int
    batches: int
    batches_rejected: int
    complete: bool
    requests: int
    """HTTP requests the client used (see ``Client.bulk``)."""


class RecordList(TypedDict):
    """Records the key may read, in log order; ``next_after_lsn``: the
    ``after_lsn`` of the next page (``None`` on the last one)."""

    records: List[Record]
    next_after_lsn: Optional[int]


class History(TypedDict):
    """Every version of a correction chain, oldest first."""

    versions: List[Record]


class Trace(TypedDict, total=False):
    """Lineage of a record: up to its events, down to its derivatives."""

    target: str
    nodes: List[Dict[str, Any]]
    edges: List[Dict[str, Any]]
    truncated: bool


class CorrectResponse(TypedDict):
    """A correction's append result and the new version (``None`` when it
    carries a label the key does not hold: it is stored all the same)."""

    result: ItemResult
    record: Optional[Record]


class _OpResponseBase(TypedDict):
    op_id: str
    lsn: int
    affected: List[str]


class OpResponse(_OpResponseBase, total=False):
    """What a lifecycle operation did (itself a durable log record).
    ``note``: what it did not change that the caller may expect it to (a
    revoke from a principal whose API key still carries the label)."""

    note: str


class ReviewQueue(TypedDict):
    """Review candidates the key may read, oldest first."""

    candidates: List[Record]


class RecallRequest(TypedDict, total=False):
    """One recall request (a line of ``engram recall --queries``)."""

    text: str
    vector: List[float]
    model: str
    mode: str
    """``hybrid`` (default), ``vector`` or ``lexical``."""
    k: int
    ef: int
    user: Union[str, List[str]]
    conversation: Union[str, List[str]]
    agent: Union[str, List[str]]
    label: Union[str, List[str]]
    kind: Union[str, List[str]]
    record: Union[str, List[str]]
    as_of: Time
    valid_at: Time
    include_historical: bool
    occurred_after: Time
    occurred_before: Time
    id: Any
    explain: bool
    with_text: bool
    weights: Dict[str, float]


class Hit(TypedDict, total=False):
    """One recall hit, best first."""

    rank: int
    id: str
    external_id: Optional[str]
    score: float
    record: str
    kind: str
    status: str
    occurred_at: str
    historical: bool
    text: Optional[str]
    #: Present (``True``) when the text was asked for but left out: the hits
    #: before this one already carry 16 MiB of text (read it by id).
    text_omitted: bool
    found_by: List[List[Any]]
    ranks: List[Dict[str, Any]]


class RecallResponse(TypedDict, total=False):
    """Hits, and with ``explain`` the manifest."""

    query_id: Optional[str]
    hits: List[Hit]
    manifest: Dict[str, Any]


class ContextRequest(TypedDict, total=False):
    """A context-assembly request."""

    text: str
    user: str
    conversation: str
    agent: str
    budget_bytes: int
    semantic_k: int
    episodic_k: int
    recent_turns: int
    include_historical: bool


class ContextResponse(TypedDict):
    """The working memory for one model call, structured and rendered."""

    context: Dict[str, Any]
    rendered: str


class EvalCase(TypedDict, total=False):
    """One evaluation case (``engram eval`` format, no tenant/principal)."""

    case_id: str
    query: str
    text: str
    vector: List[float]
    model: str
    scope: Dict[str, str]
    as_of: Time
    valid_at: Time
    relevant_ids: List[str]
    forbidden_ids: List[str]
    mode: str
    k: int
    kind: Union[str, List[str]]
    slice: Union[str, List[str]]


class EvalResponse(TypedDict):
    """Evaluation results: means overall and per slice, per case, errors."""

    overall: Dict[str, Any]
    slices: Dict[str, Any]
    cases: List[Dict[str, Any]]
    errors: List[str]


class VerifyResponse(TypedDict):
    """What verify found on the open store."""

    ok: bool
    frames: int
    records: int
    problems: List[str]


class BackupResponse(TypedDict):
    """What an online backup wrote."""

    last_lsn: int
    created_at_ms: int
    records: int
    purged: int


class CompactResponse(TypedDict):
    """What an online compaction did."""

    purged: int
    retention_deleted: int
    held: int
    segments_rewritten: int
    log_bytes_before: int
    log_bytes_after: int


class QueryResponse(TypedDict, total=False):
    """The answer to a query-language statement: ``columns`` in order, one
    dict per row, and for ``EXPLAIN`` the manifest; ``truncated`` (``TRACE``
    only, present when true) says the lineage goes on past 32 hops."""

    columns: List[str]
    rows: List[Dict[str, Any]]
    manifest: Dict[str, Any]
    statement: str
    truncated: bool


class Status(TypedDict):
    """Liveness (``ok``) or readiness (``ready``)."""

    status: str
