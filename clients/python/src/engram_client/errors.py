"""Exceptions: one class per kind of failure the server reports.

Every failed request of ``engram serve`` answers with one JSON shape::

    {"error": {"code": "invalid_input", "message": "...", "details": {...}}}

:func:`error_from_response` turns it into an :class:`EngramError` subclass
chosen by the status (and, for 503 and query-language errors, the code).
Catch :class:`EngramError` for everything, or a subclass for one case.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "EngramError",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "PayloadTooLarge",
    "InvalidInput",
    "QueryError",
    "Busy",
    "Unavailable",
    "Timeout",
    "ServerError",
    "TransportError",
    "error_from_response",
    "parse_retry_after",
]


class EngramError(Exception):
    """A request the server (or the network) did not carry out.

    Attributes:
        status: HTTP status (``0`` when no answer arrived: see
            :class:`TransportError`).
        code: the server's stable error code (``invalid_input``,
            ``not_found``, ``busy``, ...).
        message: what is wrong, naming the item, line or field at fault.
        details: structured context (``item``, ``line``, ``column``,
            ``field``, limits); an empty dict when there is none.
        request_id: the server's ``x-request-id`` for this request, to find
            it in the server log.
        retry_after: seconds from a ``Retry-After`` header, if any.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Optional[Mapping[str, Any]] = None,
        *,
        request_id: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: Dict[str, Any] = dict(details or {})
        self.request_id = request_id
        self.retry_after = retry_after

    def __reduce__(self) -> Any:
        # Rebuilt from its fields (pickle, copy, process pools): the default
        # would call __init__ with the message alone.
        return (
            _rebuild,
            (
                type(self),
                self.status,
                self.code,
                self.message,
                self.details,
                self.request_id,
                self.retry_after,
            ),
        )


def _rebuild(
    cls: Any,
    status: int,
    code: str,
    message: str,
    details: Dict[str, Any],
    request_id: Optional[str],
    retry_after: Optional[float],
) -> "EngramError":
    return cls(status, code, message, details, request_id=request_id, retry_after=retry_after)


class BadRequest(EngramError):
    """400: malformed JSON, a wrong shape, an unknown parameter, or a body
    naming ``tenant``/``principal`` (code ``session_field``). Fix the request."""


class Unauthorized(EngramError):
    """401: no key, a malformed header, an unknown or revoked key."""


class Forbidden(EngramError):
    """403: the authorization matrix refuses this key's principal."""


class NotFound(EngramError):
    """404: no such record visible to the key. A missing record, one of
    another tenant and one hidden by a label are indistinguishable."""


class Conflict(EngramError):
    """409: the request conflicts with stored state (``external_id_conflict``,
    ``already_superseded``, ``invalid_state``)."""


class PayloadTooLarge(EngramError):
    """413: the body is over the server's limit."""


class InvalidInput(EngramError):
    """422: a field of a well-formed request is invalid (``invalid_input``,
    ``limit_exceeded``, ``ambiguous_reference``)."""


class QueryError(BadRequest, InvalidInput):
    """A query-language error (code ``query_error``): the statement or its
    parameters are wrong. It is both a :class:`BadRequest` and an
    :class:`InvalidInput`, whichever status the server uses for it.

    ``details`` holds ``line``, ``column``, ``expected`` and ``hint``, also
    available as attributes. Retrying the same statement fails the same way.
    """

    @property
    def line(self) -> Optional[int]:
        """1-based line of the statement at fault."""
        return self.details.get("line")

    @property
    def column(self) -> Optional[int]:
        """1-based column (in characters) at fault."""
        return self.details.get("column")

    @property
    def expected(self) -> Any:
        """What would have been valid there (a list of tokens), if known."""
        return self.details.get("expected")

    @property
    def hint(self) -> Optional[str]:
        """A suggestion, when the parser can tell."""
        return self.details.get("hint")


class Busy(EngramError):
    """429: a server queue is full; nothing was done. Retry after
    ``retry_after`` seconds (the client does so itself, see
    :class:`~engram_client.RetryPolicy`)."""


class Unavailable(EngramError):
    """503 ``unavailable``: the store is closing or storage failed."""


class Timeout(Unavailable):
    """503 ``timeout``: the request passed the server's deadline. A write
    may or may not have been stored: re-send it with external ids."""


class ServerError(EngramError):
    """500 (``internal``) or another unexpected status: a server bug or
    undecodable data; the detail is in the server log under ``request_id``."""


class TransportError(EngramError):
    """No HTTP answer: the connection was refused, reset or timed out
    (``status`` 0, ``code`` ``transport``). The original ``httpx`` exception
    is ``__cause__``."""


_BY_STATUS: Dict[int, Type[EngramError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidInput,
    429: Busy,
    503: Unavailable,
}


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        import datetime as _dt
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(value)
        now = _dt.datetime.now(when.tzinfo or _dt.timezone.utc)
        return max(0.0, (when - now).total_seconds())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def error_class(status: int, code: str) -> Type[EngramError]:
    """The exception class for a status and an error code."""
    if code == "query_error":
        return QueryError
    if code in ("no_route", "method_not_allowed"):
        # Not a missing record: the client's base URL (or the server's
        # version) does not have this endpoint.
        return EngramError
    if status == 503 and code == "timeout":
        return Timeout
    if status == 404 and code == "http_404":
        # A 404 without Engram's error body: a proxy or another service at
        # the base URL, not a missing record.
        return EngramError
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls
    if status >= 500:
        return ServerError
    return EngramError


def error_from_parts(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
) -> EngramError:
    """Builds the exception for a failed answer from its status, body and
    headers (any mapping with case-insensitive ``get`` works, e.g.
    ``httpx.Headers``). A body that is not the error shape (a proxy's page)
    still gives an exception, with code ``http_<status>``."""
    code, message, details = f"http_{status}", "", {}
    try:
        doc = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, RecursionError):  # UnicodeDecodeError, JSONDecodeError, nesting
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        code = text_field(err.get("code"), code)
        message = text_field(err.get("message"), "")
        d = err.get("details")
        details = d if isinstance(d, dict) else {}
    else:
        message = body[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    cls = error_class(status, code)
    return cls(
        status,
        code,
        message,
        details,
        request_id=headers.get("x-request-id"),
        retry_after=parse_retry_after(headers.get("retry-after")),
    )


def text_field(value: object, default: str) -> str:
    """An error body's ``code`` or ``message``: a non-empty string, else
    ``default`` (a body that puts anything else there is not Engram's)."""
    return value if isinstance(value, str) and value else default


def error_from_response(response: Any) -> EngramError:
    """The exception for a failed ``httpx.Response`` (its body already read)."""
    return error_from_parts(response.status_code, response.content, response.headers)
