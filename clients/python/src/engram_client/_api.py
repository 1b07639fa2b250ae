"""What the sync and async clients share: how each endpoint's request is
built, which requests may be retried, the retry policy, and the bulk
ingest line handling. No I/O happens here.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, NoReturn, Optional, Tuple, Union
from urllib.parse import quote

from .errors import EngramError, TransportError, error_class, text_field

__version__ = "0.1.0"

USER_AGENT = f"engram-client-python/{__version__}"

DEFAULT_BULK_BATCH = 1000
"""Lines per atomic batch a request's size is reckoned in when ``batch`` is
not given (the server's ``bulk_batch_default``, 1000 unless configured:
the client asks for no batch size then)."""

BULK_BATCHES_PER_REQUEST = 2
"""Batches sent in one bulk HTTP request (see ``Client.bulk``)."""

TimeLike = Union[str, _dt.datetime, _dt.date]


class Retry(enum.Enum):
    """Which failures a request may be retried after."""

    IDEMPOTENT = "idempotent"
    """Reads, and appends whose records all carry an external id: retried
    after 429, 503 and lost connections."""
    BUSY_ONLY = "busy_only"
    """Other writes: retried only when the server certainly did nothing
    (429 ``busy``, or a connection that could not be opened)."""
    NEVER = "never"
    """Never retried (a streamed body cannot be sent twice)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, honouring ``Retry-After``.

    A failed attempt ``n`` (1-based) waits ``min(max_delay, base_delay *
    2 ** (n - 1))``, scaled by a random factor in ``[0.5, 1]`` (``jitter``),
    or the server's ``Retry-After`` (capped at ``max_delay``) when it sent
    one. At most ``max_attempts`` attempts in all; ``max_attempts=1``
    disables retries.

    What is retried (see :class:`Retry`): 429 ``busy`` for every request
    but a bulk ingest and the ``/healthz`` and ``/readyz`` probes, since the
    server refuses it before doing anything; 503 (``timeout``,
    ``unavailable``) and lost connections only for idempotent requests:
    reads, and appends whose records all carry an ``external_id`` (the
    server stores a re-sent record once and reports it as ``duplicate``)
    and that correct a stored chain only by naming the version corrected
    as ``id:<id>``. Other appends and lifecycle
    operations are not re-sent after a 503 or a dropped connection: the
    first attempt may have been stored. Bulk ingest is never retried by
    the client.
    """

    max_attempts: int = 4
    base_delay: float = 0.1
    max_delay: float = 5.0
    jitter: bool = True
    retry_statuses: Tuple[int, ...] = (429, 503)

    def delay(self, attempt: int, retry_after: Optional[float]) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        if retry_after is not None:
            return max(0.0, min(self.max_delay, retry_after))
        d = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        if self.jitter:
            d *= random.uniform(0.5, 1.0)
        return d

    def should_retry(self, kind: Retry, err: EngramError, attempt: int) -> bool:
        """Whether to try again after ``err`` ended attempt ``attempt``."""
        if attempt >= self.max_attempts or kind is Retry.NEVER:
            return False
        if isinstance(err, TransportError):
            if err.details.get("local"):
                return False
            connect = bool(err.details.get("connect"))
            return connect or kind is Retry.IDEMPOTENT
        if err.status not in self.retry_statuses:
            return False
        if err.status == 429:
            return True
        return kind is Retry.IDEMPOTENT


NO_RETRY = RetryPolicy(max_attempts=1)
"""A policy that never retries."""


@dataclass
class Call:
    """One HTTP request to make: everything but the connection."""

    method: str
    path: str
    retry: Retry
    params: Dict[str, str] = field(default_factory=dict)
    body: Optional[bytes] = None
    content_type: Optional[str] = None
    auth: bool = True
    answer: str = "json"
    """``json`` or ``text``."""


def _json_default(o: Any) -> Any:
    # times anywhere in a body (a record's occurred_at, an eval case's
    # as_of) are sent as RFC 3339, like the methods' own time arguments
    if isinstance(o, (_dt.datetime, _dt.date)):
        return time_str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def _check_keys(obj: Any) -> None:
    """Refuses a dict key that is not a string: ``json`` would turn ``1`` into
    ``"1"`` silently (and ``{1: a, "1": b}`` into a repeated key, which the
    server refuses)."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, Mapping):
            for k, v in o.items():
                if not isinstance(k, str):
                    raise ValueError(
                        f"JSON object keys must be strings, not {type(k).__name__} ({k!r})"
                    )
                stack.append(v)
        elif isinstance(o, (list, tuple)):
            stack.extend(o)


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON; ``datetime`` and ``date`` values as RFC 3339.

    Raises ``ValueError`` for what JSON cannot carry, before anything is
    sent: NaN and infinities, a dict key that is not a string, and a
    string with a lone surrogate (not UTF-8)."""
    _check_keys(obj)
    try:
        text = json.dumps(
            obj,
            ensure_ascii=False,
            separators=(",", ":"),
            default=_json_default,
            allow_nan=False,
        )
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"a string is not valid UTF-8 (a lone surrogate?): {exc}") from None
    except RecursionError:
        raise ValueError(
            "a value is nested too deeply for JSON (the server reads at most 128 levels)"
        ) from None


def ref_path(ref: str) -> str:
    """A record reference as one path segment: ``/`` and everything but
    unreserved characters and ``:`` percent-encoded."""
    if not isinstance(ref, str) or not ref:
        raise ValueError("a record reference must be a non-empty string")
    if ref in (".", ".."):
        # a dot segment would be resolved away by the URL layer
        return ref.replace(".", "%2E")
    return quote(ref, safe=":")


def time_str(t: TimeLike, *, lower_bound: bool = False) -> str:
    """RFC 3339 text for a time. A naive ``datetime`` is taken as UTC; a
    ``date`` is midnight UTC; a string is sent as given. A ``datetime`` is
    sent to the millisecond, the precision Engram keeps (the server refuses
    a bound with a finer fraction): cut, or for the lower end of a range
    (``lower_bound``; both ends are included) rounded up, so that a range
    keeps exactly the millisecond times the ``datetime`` range keeps."""
    if isinstance(t, str):
        return t
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        sub_ms = t.microsecond % 1000
        if lower_bound and sub_ms:
            try:
                t = t + _dt.timedelta(microseconds=1000 - sub_ms)
            except OverflowError:
                raise ValueError(
                    f"{t.isoformat()} rounded up to the millisecond is past year 9999"
                ) from None
        spec = "seconds" if t.microsecond == 0 else "milliseconds"
        return t.isoformat(timespec=spec).replace("+00:00", "Z")
    if isinstance(t, _dt.date):
        return t.isoformat() + "T00:00:00Z"
    raise TypeError(f"expected an RFC 3339 string, a datetime or a date, got {type(t).__name__}")


def _params(**kw: Any) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for k, v in kw.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, (_dt.date, _dt.datetime)):
            out[k] = time_str(v)
        else:
            out[k] = str(v)
    return out


def _json_call(method: str, path: str, body: Any, retry: Retry, **params: Any) -> Call:
    return Call(
        method,
        path,
        retry,
        params=_params(**params),
        body=None if body is None else dumps(body),
        content_type=None if body is None else "application/json",
    )


def _drop_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# --- records ---------------------------------------------------------------


# A reference that can only name a version by its internal id: ``id:``
# then the id. (Bare, the same 26 characters are also read as an external
# id when no record has that internal id: a chain named by external id.)
_VERSION_REF = re.compile(r"id:.*", re.DOTALL)


def _safe_to_resend(items: List[Any]) -> bool:
    """Whether sending ``items`` again after a first attempt that may have
    been stored stores nothing new: every record has an external id (a
    re-sent record is a ``duplicate``), and every correction of a chain
    the batch did not create names the version it corrects by its internal
    id, as ``id:<id>``. A correction naming a chain by its external id corrects the
    version current when it arrives: sent again after another writer's
    correction, it would correct that one and be stored a second time
    (and sent again within one batch, the first of two corrections would
    correct the second's version). Naming the version, a re-sent
    correction finds it corrected by the same content: a ``duplicate``."""
    created = set()
    for r in items:
        if not isinstance(r, Mapping) or not r.get("external_id"):
            return False
        e = str(r["external_id"])
        target = r.get("supersedes")
        if target is None:
            created.add(e)
        elif str(target) not in created and not _VERSION_REF.fullmatch(str(target)):
            return False
    return True


def append(records: Iterable[Mapping[str, Any]]) -> Call:
    """``POST /v1/records``: retried like a read only when sending it again
    stores nothing new (:func:`_safe_to_resend`)."""
    items = list(records)
    if not items:
        raise ValueError("append needs at least one record")
    safe = _safe_to_resend(items)
    return _json_call("POST", "/v1/records", items, Retry.IDEMPOTENT if safe else Retry.BUSY_ONLY)


def list_records(
    kind: Optional[str],
    record: Optional[str],
    since: Optional[TimeLike],
    until: Optional[TimeLike],
    include_superseded: Optional[bool],
    limit: Optional[int],
    after_lsn: Optional[int] = None,
) -> Call:
    """``GET /v1/records``."""
    return _json_call(
        "GET",
        "/v1/records",
        None,
        Retry.IDEMPOTENT,
        kind=kind,
        record=record,
        since=None if since is None else time_str(since, lower_bound=True),
        until=None if until is None else time_str(until),
        include_superseded=include_superseded,
        limit=limit,
        after_lsn=after_lsn,
    )


def get(ref: str) -> Call:
    """``GET /v1/records/{ref}``."""
    return _json_call("GET", f"/v1/records/{ref_path(ref)}", None, Retry.IDEMPOTENT)


def history(ref: str) -> Call:
    """``GET /v1/records/{ref}/history``."""
    return _json_call("GET", f"/v1/records/{ref_path(ref)}/history", None, Retry.IDEMPOTENT)


def trace(ref: str) -> Call:
    """``GET /v1/records/{ref}/trace``."""
    return _json_call("GET", f"/v1/records/{ref_path(ref)}/trace", None, Retry.IDEMPOTENT)


# --- lifecycle -------------------------------------------------------------


def correct(ref: str, record: Mapping[str, Any], replace_access: Optional[bool]) -> Call:
    """``POST /v1/records/{ref}/correct``."""
    body = dict(record)
    if replace_access is not None:
        body["replace_access"] = replace_access
    return _json_call("POST", f"/v1/records/{ref_path(ref)}/correct", body, Retry.BUSY_ONLY)


def expire(ref: str, at: TimeLike) -> Call:
    """``POST /v1/records/{ref}/expire``."""
    return _json_call(
        "POST", f"/v1/records/{ref_path(ref)}/expire", {"at": time_str(at)}, Retry.BUSY_ONLY
    )


def delete(ref: str, reason: Optional[str]) -> Call:
    """``DELETE /v1/records/{ref}``."""
    return _json_call(
        "DELETE", f"/v1/records/{ref_path(ref)}", None, Retry.BUSY_ONLY, reason=reason
    )


def retract(ref: str, reason: Optional[str]) -> Call:
    """``POST /v1/records/{ref}/retract``."""
    return _json_call(
        "POST",
        f"/v1/records/{ref_path(ref)}/retract",
        _drop_none({"reason": reason}),
        Retry.BUSY_ONLY,
    )


def review_list() -> Call:
    """``GET /v1/review``."""
    return _json_call("GET", "/v1/review", None, Retry.IDEMPOTENT)


def review_decide(ref: str, decision: str, note: Optional[str]) -> Call:
    """``POST /v1/review/{ref}/approve`` or ``.../reject``."""
    return _json_call(
        "POST",
        f"/v1/review/{ref_path(ref)}/{decision}",
        _drop_none({"note": note}),
        Retry.BUSY_ONLY,
    )


def access(op: str, grantee: Optional[str], label: Optional[str], role: Optional[str]) -> Call:
    """``POST /v1/access/grant`` or ``/v1/access/revoke``."""
    if label is None and role is None:
        raise ValueError(f"{op} needs a label or a role")
    body = _drop_none({"grantee": grantee, "label": label, "role": role})
    return _json_call("POST", f"/v1/access/{op}", body, Retry.BUSY_ONLY)


def retention(retention_class: str, period: str) -> Call:
    """``POST /v1/retention``."""
    body = {"class": retention_class, "period": period}
    return _json_call("POST", "/v1/retention", body, Retry.BUSY_ONLY)


def review_rule(kind: str, writer: str, review: bool) -> Call:
    """``POST /v1/review/rules``."""
    body = {"kind": kind, "writer": writer, "review": review}
    return _json_call("POST", "/v1/review/rules", body, Retry.BUSY_ONLY)


def hold(scope: str, on: bool) -> Call:
    """``POST /v1/holds``."""
    return _json_call("POST", "/v1/holds", {"scope": scope, "on": on}, Retry.BUSY_ONLY)


# --- reads that rank ---------------------------------------------------------


def recall(request: Optional[Mapping[str, Any]], fields: Mapping[str, Any]) -> Call:
    """``POST /v1/recall``: a request dict and/or keyword fields."""
    body = dict(request or {})
    body.update(_drop_none(fields))
    for k in ("as_of", "valid_at", "occurred_after", "occurred_before"):
        if k in body and not isinstance(body[k], str):
            body[k] = time_str(body[k], lower_bound=k == "occurred_after")
    if "text" not in body and "vector" not in body:
        raise ValueError("recall needs text and/or a vector")
    return _json_call("POST", "/v1/recall", body, Retry.IDEMPOTENT)


def context(text: str, fields: Mapping[str, Any]) -> Call:
    """``POST /v1/context``."""
    body: Dict[str, Any] = {"text": text}
    body.update(_drop_none(fields))
    return _json_call("POST", "/v1/context", body, Retry.IDEMPOTENT)


def eval_cases(cases: Iterable[Union[Mapping[str, Any], str, bytes]], k: Optional[int]) -> Call:
    """``POST /v1/eval``: the cases as NDJSON."""
    # (a case is one line, as a bulk item is: a str or bytes holding two
    # would send two cases)
    lines = [ndjson_line(c, "an eval case") for c in cases]
    if not lines:
        raise ValueError("eval needs at least one case")
    body = b"".join(lines)
    return Call(
        "POST",
        "/v1/eval",
        Retry.IDEMPOTENT,
        params=_params(k=k),
        body=body,
        content_type="application/x-ndjson",
    )


def _exact_time(v: Any) -> Any:
    """A query parameter as sent: a ``datetime`` finer than the millisecond
    keeps its whole fraction (a parameter may be either end of a range, so
    neither cutting nor rounding keeps what it selects: the server then
    refuses it as it refuses such a string, naming the parameter); lists
    and tuples likewise, element by element; anything else as it is."""
    if isinstance(v, _dt.datetime) and v.microsecond % 1000:
        if v.tzinfo is None:
            v = v.replace(tzinfo=_dt.timezone.utc)
        return v.isoformat(timespec="microseconds").replace("+00:00", "Z")
    if isinstance(v, (list, tuple)):
        return [_exact_time(x) for x in v]
    return v


def query(body: Dict[str, Any], params: Optional[Mapping[str, Any]]) -> Call:
    """``POST /v1/query`` with ``query`` text or an ``ast``, and parameters."""
    if params:
        body["params"] = {k: _exact_time(v) for k, v in params.items()}
    return _json_call("POST", "/v1/query", body, Retry.IDEMPOTENT)


# --- store -------------------------------------------------------------------


def stats() -> Call:
    """``GET /v1/stats``."""
    return _json_call("GET", "/v1/stats", None, Retry.IDEMPOTENT)


def verify() -> Call:
    """``GET /v1/verify``."""
    return _json_call("GET", "/v1/verify", None, Retry.IDEMPOTENT)


def backup(dest: str) -> Call:
    """``POST /v1/backup``: not retried after a 503 (the destination would
    no longer be empty)."""
    return _json_call("POST", "/v1/backup", {"dest": dest}, Retry.BUSY_ONLY)


def compact() -> Call:
    """``POST /v1/compact``: retried only while the server is busy."""
    return _json_call("POST", "/v1/compact", None, Retry.BUSY_ONLY)


def probe(path: str) -> Call:
    """``/healthz``, ``/readyz``: no key, and never retried: a probe says
    how the server is now (a 503 from ``/readyz`` is the answer, raised at
    once as ``Unavailable``, not something to wait out)."""
    return Call("GET", path, Retry.NEVER, auth=False)


def metrics() -> Call:
    """``GET /metrics`` (Prometheus text); the key is sent when the client
    has one, for servers with ``metrics_auth = "admin"``."""
    return Call("GET", "/metrics", Retry.IDEMPOTENT, answer="text")


def openapi() -> Call:
    """``GET /v1/openapi.json``."""
    return Call("GET", "/v1/openapi.json", Retry.IDEMPOTENT, auth=False)


# --- bulk --------------------------------------------------------------------

_CODE_STATUS = {
    "invalid_json": 400,
    "bad_request": 400,
    "session_field": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "external_id_conflict": 409,
    "already_superseded": 409,
    "invalid_state": 409,
    "payload_too_large": 413,
    "invalid_input": 422,
    "limit_exceeded": 422,
    "ambiguous_reference": 422,
    "busy": 429,
    "internal": 500,
    "timeout": 503,
    "unavailable": 503,
}


def stream_error(err: Mapping[str, Any]) -> EngramError:
    """The exception for an ``{"error": ...}`` line that ends a bulk stream
    (a failure of the body or of the store, not of one line)."""
    code = text_field(err.get("code"), "internal")
    status = _CODE_STATUS.get(code, 500)
    details = err.get("details")
    return error_class(status, code)(
        status, code, text_field(err.get("message"), ""), details if isinstance(details, dict) else {}
    )


def bulk_line(item: Any) -> bytes:
    """One NDJSON line (with its newline) for a bulk item: a record dict, or
    a JSON line as ``str``/``bytes`` (it may not contain a newline)."""
    return ndjson_line(item, "a bulk item")


def ndjson_line(item: Any, what: str) -> bytes:
    """One NDJSON line (with its newline) for ``item``: a dict, or a JSON
    line as ``str``/``bytes`` (it may not contain a newline)."""
    if isinstance(item, Mapping):
        return dumps(item) + b"\n"
    if isinstance(item, str):
        item = item.encode("utf-8")
    if isinstance(item, (bytes, bytearray)):
        b = bytes(item).rstrip(b"\r\n")
        if b"\n" in b:
            raise ValueError(f"{what} must be one line: it contains a newline")
        return b + b"\n"
    raise TypeError(f"{what} must be a dict, str or bytes, not {type(item).__name__}")


def bulk_call(batch: Optional[int]) -> Call:
    """``POST /v1/records/bulk?batch=N`` (the body is streamed separately;
    without ``batch``, the server's ``bulk_batch_default`` applies)."""
    return Call(
        "POST",
        "/v1/records/bulk",
        Retry.NEVER,
        params=_params(batch=batch),
        content_type="application/x-ndjson",
    )


class BulkTotals:
    """Adds up the summaries of the requests of one bulk ingest and
    renumbers result lines over the whole iterable."""

    def __init__(self) -> None:
        self.summary: Dict[str, Any] = {
            "lines": 0,
            "created": 0,
            "duplicates": 0,
            "rejected": 0,
            "batches": 0,
            "batches_rejected": 0,
            "complete": True,
            "requests": 0,
        }
        self._summaries_seen = 0
        # the error line that ended the current request's stream, raised
        # once its summary (which still follows it) has been read
        self._stream_error: Optional[EngramError] = None
        # the current request's result lines, until its summary (which is
        # authoritative) arrives: what a stream that failed before its
        # summary had already reported
        self._pending = {"lines": 0, "created": 0, "duplicates": 0, "rejected": 0}
        # result lines of the current request (its lines reported so far)
        self._request_results = 0

    def failed(self) -> None:
        """The current request's stream ended without its summary: its
        result lines so far are the totals it reported."""
        for k, v in self._pending.items():
            self.summary[k] += v
            self._pending[k] = 0
        self.summary["complete"] = False

    def take(self, raw: bytes, offset: int) -> Optional[Dict[str, Any]]:
        """Handles one response line of a request whose first line is
        ``offset + 1`` overall: returns a result line to yield, ``None`` for
        a summary; raises the error of a failed stream."""
        raw = raw.strip()
        if not raw:
            return None
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError, JSONDecodeError, nesting
            obj = e
        if not isinstance(obj, dict) or not ({"summary", "line", "error"} & obj.keys()):
            # another service on that address (a proxy's page, say): the
            # same error every other call raises for such an answer
            self.not_engram(
                obj
                if isinstance(obj, Exception)
                else "not a JSON object"
                if not isinstance(obj, dict)
                else "no summary, line or error"
            )
        if "summary" in obj:
            s = obj["summary"]
            counts = ("lines", "created", "duplicates", "rejected", "batches", "batches_rejected")
            if not isinstance(s, dict) or not all(_count(s.get(k, 0)) for k in counts):
                self.not_engram("a summary that is not an object of counts")
            if self._summaries_seen >= self.summary["requests"] + 1:
                self.not_engram("a second summary line")
            for k in counts:
                self.summary[k] += s.get(k, 0)
            self.summary["complete"] = self.summary["complete"] and s.get("complete") is True
            self._summaries_seen += 1
            self._pending = dict.fromkeys(self._pending, 0)
            return None
        if "line" in obj:
            if not _count(obj["line"]) or not isinstance(obj.get("error", {}), dict):
                self.not_engram("a result line without a line number, or with an error not an object")
            self._pending["lines"] += 1
            self._request_results += 1
            outcome = obj.get("outcome")
            if outcome == "created":
                self._pending["created"] += 1
            elif outcome == "duplicate":
                self._pending["duplicates"] += 1
            elif "error" in obj:
                self._pending["rejected"] += 1
            obj["line"] += offset
            err = obj.get("error")
            details = err.get("details") if isinstance(err, dict) else None
            if isinstance(details, dict) and offset:
                for k in ("line", "culprit_line", "first_line", "last_line"):
                    if isinstance(details.get(k), int):
                        details[k] += offset
            # (the message stays the server's text, its lines counted within
            # its request: rewriting numbers in it could not tell the
            # server's words from a value quoted in them, an external id
            # reading "it's line 2")
            return obj
        if "error" in obj:
            if not isinstance(obj["error"], dict):
                self.not_engram("an error that is not an object")
            # The body failed: what it left unstored (renumbered over the
            # whole iterable) goes in the error's details, raised at the
            # end of the request, after the summary that follows.
            err = stream_error(obj["error"])
            unstored = obj.get("not_stored")
            if isinstance(unstored, dict):
                err.details["not_stored"] = {
                    k: v + offset if isinstance(v, int) else v for k, v in unstored.items()
                }
            self.summary["complete"] = False
            self._stream_error = err
            return None
        return None  # (unreachable: one of the three keys is there)

    def not_engram(self, why: object) -> NoReturn:
        """Ends the stream on a line no Engram server sends."""
        self.failed()
        raise EngramError(
            200,
            "invalid_response",
            f"a line of the answer to POST /v1/records/bulk is not an Engram answer "
            f"({why}); is the client's URL an Engram server's?",
        )

    def refused(self, err: EngramError, offset: int, taken: int) -> EngramError:
        """The current request (first item ``offset + 1``, ``taken`` items
        from the iterable) was answered with an error status: refused whole
        before any batch (a stored batch would have started a 200 stream),
        so every item it took is in ``err.details["not_stored"]``: send them
        again, then the rest of the iterable."""
        self.summary["requests"] += 1
        self._request_results = 0
        if taken > 0:
            err.details["not_stored"] = {"from_line": offset + 1, "to_line": offset + taken}
        return err

    def connection_lost(self, err: EngramError, offset: int, taken: int) -> EngramError:
        """The current request, whose first item is ``offset + 1`` overall
        and which took ``taken`` items from the iterable, ended with no
        answer (the connection lost or never made): its reported lines are
        the totals, and ``err.details["unconfirmed"]`` names the items taken
        whose outcome was never reported (stored or not: send them again;
        with external ids, what was stored is a ``duplicate``)."""
        self.failed()
        self.summary["requests"] += 1
        self._unconfirmed(err, offset, taken)
        # (what a failed body's error line had said it left unstored)
        stream_err, self._stream_error = self._stream_error, None
        if stream_err is not None and "not_stored" in stream_err.details:
            err.details["not_stored"] = stream_err.details["not_stored"]
        return err

    def _unconfirmed(self, err: EngramError, offset: int, taken: int) -> None:
        """Names in ``err`` the items of the current request whose outcome
        was not reported (see :meth:`connection_lost`)."""
        reported, self._request_results = self._request_results, 0
        if taken > reported:
            err.details["unconfirmed"] = {
                "from_line": offset + reported + 1,
                "to_line": offset + taken,
            }

    def request_ended(self, offset: int, taken: int) -> None:
        """Checks that the request (first item ``offset + 1``, ``taken``
        items) ended its stream with its summary; raises the error that
        ended it, if one did."""
        self.summary["requests"] += 1
        err, self._stream_error = self._stream_error, None
        if self._summaries_seen != self.summary["requests"]:
            self.failed()
            if err is None:
                err = TransportError(
                    0, "transport", "the bulk response ended before its summary line", {}
                )
            self._unconfirmed(err, offset, taken)
            raise err
        self._request_results = 0
        if err is not None:
            # The items this request took after the lines the server read
            # were never read by it, so never stored: the range to send
            # again reaches the last one (it named the server's lines only,
            # and the client had already read on).
            unstored = err.details.get("not_stored")
            if (
                isinstance(unstored, dict)
                and isinstance(unstored.get("to_line"), int)
                and unstored["to_line"] < offset + taken
            ):
                unstored["to_line"] = offset + taken
            raise err


def _count(v: object) -> bool:
    """Whether ``v`` is a count an answer may hold (an int, not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def bulk_sizes(
    batch: Optional[int], lines_per_request: Optional[int]
) -> Tuple[Optional[int], int]:
    """The batch to ask for (``None``: the server's default), and the lines
    to send per HTTP request."""
    if batch is not None and int(batch) < 1:
        raise ValueError("batch must be at least 1")
    b = None if batch is None else int(batch)
    per = (
        (b or DEFAULT_BULK_BATCH) * BULK_BATCHES_PER_REQUEST
        if lines_per_request is None
        else int(lines_per_request)
    )
    if per < 1:
        raise ValueError("lines_per_request must be at least 1")
    return b, per


def headers(extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """Default headers of a client: user agent and accepted type, plus
    ``extra`` (which may not try to name a tenant or principal)."""
    h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    for k, v in (extra or {}).items():
        if k.lower() in ("authorization", "x-tenant", "x-principal"):
            raise ValueError(f"{k}: the key is given as `key`; tenant and principal come from it")
        h[k] = v
    return h


def request_headers(call: Call, key: Optional[str]) -> Dict[str, str]:
    """Per-request headers: the key as a bearer token (not for the open
    probes and documents), and the body's content type."""
    h: Dict[str, str] = {}
    if call.auth and key:
        h["Authorization"] = f"Bearer {key}"
    if call.content_type:
        h["Content-Type"] = call.content_type
    return h


def check_key(key: Optional[str]) -> Optional[str]:
    """The API key as it is sent: surrounding whitespace (a key read from a
    file with its newline) dropped. A key that an HTTP header cannot carry
    raises ``ValueError``, which never repeats the key (it is a secret)."""
    if key is None:
        return None
    k = key.strip()
    if not k or any(not 33 <= ord(c) <= 126 for c in k):
        raise ValueError(
            "the API key is empty or holds characters an HTTP header cannot carry "
            "(a key is egk_ and 64 hex digits, as `engram keys create` prints it)"
        )
    return k


def invalid_url_message(exc: Exception) -> str:
    """Why a request could not be made into a URL (``httpx.InvalidURL``)."""
    return (
        f"the request cannot be sent: {exc} (a reference or query parameter is "
        "too long, or holds characters a URL cannot carry)"
    )


def transport_error(exc: Exception, key: Optional[str] = None) -> TransportError:
    """Wraps an ``httpx.TransportError``; ``details.connect`` tells whether
    the connection was never opened (so nothing was sent), ``details.local``
    whether the request could not even be written (never worth a retry).
    The key never appears in the message."""
    import httpx

    connect = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
    local = isinstance(exc, httpx.LocalProtocolError)
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if key:
        message = message.replace(key, "egk_<redacted>")
    return TransportError(0, "transport", message, {"connect": connect, "local": local})


def closed_client_error() -> TransportError:
    """A request on a client that was closed (``close()``, or after its
    ``with`` block): nothing was sent."""
    return TransportError(
        0,
        "transport",
        "the client is closed (after close() or its with block): make a new one",
        {"connect": True, "local": True},
    )


def decode(call: Call, content: bytes) -> Any:
    """The answer of a successful request. An answer that is not what an
    Engram server sends (another service on that address) raises an
    :class:`EngramError` with code ``invalid_response``."""
    try:
        if call.answer == "text":
            return content.decode("utf-8")
        # (every Engram answer has a body: an empty one is not Engram's)
        doc = json.loads(content)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError, JSONDecodeError, nesting
        raise not_engram(call, str(e) or type(e).__name__) from e
    if not isinstance(doc, dict):
        # every JSON answer of the API is an object (docs/openapi.json)
        raise not_engram(call, f"a JSON {type(doc).__name__}, not an object")
    return doc


def not_engram(call: Call, why: str) -> EngramError:
    """The error for an answer to ``call`` that no Engram server sends."""
    return EngramError(
        200,
        "invalid_response",
        f"the answer to {call.method} {call.path} is not an Engram answer ({why}); "
        "is the client's URL an Engram server's?",
    )


def too_large(call: Call, limit: int, status: int = 200) -> EngramError:
    """The error for an answer to ``call`` longer than ``max_answer_bytes``
    (``status``: the answer's)."""
    return EngramError(
        status,
        "invalid_response",
        f"the answer to {call.method} {call.path} is longer than max_answer_bytes "
        f"({limit} bytes); no Engram answer is that large (its pages and hits are "
        "budgeted to 16 MiB of text): is the client's URL an Engram server's? "
        "(raise max_answer_bytes if it is)",
    )


class AnswerReader:
    """Collects an answer's body, refusing one longer than ``limit`` bytes
    before it is held whole (a hostile or mistaken server cannot make the
    client allocate what it sends)."""

    def __init__(
        self, call: Call, headers: Mapping[str, str], limit: int, status: int = 200
    ) -> None:
        self.call, self.limit, self.status = call, limit, status
        self.body = bytearray()
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large(call, limit, status)

    def take(self, chunk: bytes) -> None:
        self.body += chunk
        if len(self.body) > self.limit:
            raise too_large(self.call, self.limit, self.status)


class LineReader:
    """Splits a streamed answer (bulk's NDJSON) into lines as it arrives,
    refusing a line longer than ``limit`` bytes before it is held whole
    (the stream itself may be as long as the request was)."""

    def __init__(self, call: Call, limit: int) -> None:
        self.call, self.limit = call, limit
        self.partial = bytearray()

    def take(self, chunk: bytes) -> List[bytes]:
        """The lines ``chunk`` completes (without their newline)."""
        if b"\n" not in chunk:
            self.partial += chunk
            self._check()
            return []
        parts = chunk.split(b"\n")
        self.partial += parts[0]
        self._check()
        lines = [bytes(self.partial)] + parts[1:-1]
        self.partial = bytearray(parts[-1])
        return lines

    def rest(self) -> List[bytes]:
        """The last line, when the stream did not end with a newline."""
        return [bytes(self.partial)] if self.partial else []

    def _check(self) -> None:
        if len(self.partial) > self.limit:
            raise too_large(self.call, self.limit)


DEFAULT_MAX_ANSWER_BYTES = 256 * 1024 * 1024


def check_max_answer_bytes(limit: int) -> int:
    """``max_answer_bytes`` as given to a client, checked."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"max_answer_bytes must be a positive int, not {limit!r}")
    return limit
