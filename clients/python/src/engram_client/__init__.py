"""Python client for ``engram serve``, the HTTP server of the Engram memory
database.

- :class:`Client` (sync) and :class:`AsyncClient` (async) cover every
  endpoint of docs/server.md, plus the query language (``/v1/query``).
- The API key (``Authorization: Bearer``) decides tenant and principal;
  no method takes either.
- Failures raise :class:`EngramError` subclasses chosen by status and code.
- Requests are retried with exponential backoff and ``Retry-After`` on 429
  and 503 when that is safe (see :class:`RetryPolicy`).
- :meth:`Client.bulk` streams NDJSON ingest from an iterable and yields one
  result per line.
"""

from . import models
from ._api import NO_RETRY, Retry, RetryPolicy, __version__
from ._async import AsyncBulkStream, AsyncClient
from ._sync import BulkStream, Client
from .errors import (
    BadRequest,
    Busy,
    Conflict,
    EngramError,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    QueryError,
    ServerError,
    Timeout,
    TransportError,
    Unauthorized,
    Unavailable,
)

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "BulkStream",
    "AsyncBulkStream",
    "RetryPolicy",
    "Retry",
    "NO_RETRY",
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
    "models",
]
