"""The error hierarchy. Every error the server returns is one of these.

    AmpError                      status  code
    ├── Unauthenticated            401    MISSING_AGENT_ID / UNAUTHENTICATED
    ├── AccessDenied               403    ACCESS_DENIED
    ├── AdminRequired              403    ACCESS_DENIED (an admin route, no valid credential)
    ├── NotYours                   403    ACCESS_DENIED (seen, but another's to change)
    ├── AdminDisabled              403    ADMIN_DISABLED
    ├── NotFound                   404    NOT_FOUND
    ├── MethodNotAllowed           405    METHOD_NOT_ALLOWED
    ├── Conflict                   409    INVALID_TRANSITION / RETENTION_WINDOW / CONFLICT
    ├── Gone                       410    PIN_EXPIRED / PIN_RELEASED / SNAPSHOT_RELEASED
    ├── PreconditionFailed         412    PRECONDITION_FAILED (If-Match / If-None-Match)
    ├── PayloadTooLarge            413    CELL_TOO_LARGE / PAYLOAD_TOO_LARGE (web/limits.py)
    ├── UnsupportedMediaType       415    UNSUPPORTED_MEDIA_TYPE (a Content-Encoding: web/limits.py)
    ├── ValidationFailed           422    VALIDATION_ERROR
    ├── RateLimited                429    RATE_LIMITED
    ├── ServiceUnavailable         503    UNAVAILABLE
    │   └── Overloaded             503    UNAVAILABLE (a full waiting line; Retry-After)
    └── InsufficientStorage        507    INSUFFICIENT_STORAGE (a disk or database full)

`ampup_memory.web.errors` renders them as ``{"error": {"code", "message", "details"}}``;
nothing else builds an error body.
"""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Mapping
from typing import Any


class AmpError(Exception):
    status: int = 500
    code: str = "INTERNAL_ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = details or {}
        self.headers: dict[str, str] = headers or {}


class Unauthenticated(AmpError):
    status = 401
    code = "UNAUTHENTICATED"


class AccessDenied(AmpError):
    """One body for "does not exist", "may not read" and "deleted": never a probe."""

    status = 403
    code = "ACCESS_DENIED"

    def __init__(self) -> None:
        super().__init__("Access denied.")


class AdminRequired(AmpError):
    """An admin route called without a valid admin credential while one is configured.
    Which routes are admin is public (docs/api.md), so the message says what to send; a
    cell's 403 stays the one body of `AccessDenied`."""

    status = 403
    code = "ACCESS_DENIED"

    def __init__(self) -> None:
        super().__init__(
            "This route needs an admin credential: X-AMP-Admin-Token (the server's "
            "AMP_ADMIN_TOKEN), or the key of an admin agent (keys create --admin) with its "
            "X-AMP-Agent-ID.")


class NotYours(AmpError):
    """403 for what the caller may see but is another's to change: a pin, snapshot or
    branch another user made (each shows its creator), an episode another wrote (the
    ledger shows the author). The message says whose it is. Never for what the caller may
    not see: that is the one body of `AccessDenied` (AMP) or a 404 (AmpUp)."""

    status = 403
    code = "ACCESS_DENIED"


class ForbiddenOrigin(AmpError):
    """A browser request from a page of another site (its ``Origin``)."""

    status = 403
    code = "FORBIDDEN_ORIGIN"


class MisdirectedRequest(AmpError):
    """A ``Host`` the server does not answer to (DNS rebinding: web/origin.py)."""

    status = 421
    code = "MISDIRECTED_REQUEST"


class AdminDisabled(AmpError):
    status = 403
    code = "ADMIN_DISABLED"


class NotFound(AmpError):
    status = 404
    code = "NOT_FOUND"


class MethodNotAllowed(AmpError):
    status = 405
    code = "METHOD_NOT_ALLOWED"


class Conflict(AmpError):
    status = 409
    code = "CONFLICT"


class InvalidTransition(Conflict):
    code = "INVALID_TRANSITION"


class RetentionWindow(Conflict):
    code = "RETENTION_WINDOW"


class Gone(AmpError):
    """Something that existed and no longer answers (an expired or released pin)."""

    status = 410
    code = "GONE"


class PreconditionFailed(AmpError):
    """A conditional write whose If-Match or If-None-Match does not hold (web/conditional.py):
    another writer got there first; nothing changed."""

    status = 412
    code = "PRECONDITION_FAILED"


class PayloadTooLarge(AmpError):
    status = 413
    code = "CELL_TOO_LARGE"


class UnsupportedMediaType(AmpError):
    """A body in a content coding the server does not decode (``Content-Encoding: gzip``):
    read as it is, it would be JSON gone wrong, or, labelled but plain, stored as if the
    label were not there. ``Accept-Encoding`` names what is read (RFC 9110, 15.5.16). Also
    a body declared in a charset other than UTF-8 that holds anything but ASCII: read as
    UTF-8 it would be other text (web/limits.py)."""

    status = 415
    code = "UNSUPPORTED_MEDIA_TYPE"

    def __init__(self, message: str, *, coding: bool = True) -> None:
        """``coding``: refused for its content coding (else for its charset)."""
        super().__init__(message, headers={"Accept-Encoding": "identity"} if coding else None)


class ValidationFailed(AmpError):
    """``details.errors = [{loc, msg, type}]``. ``located``: each ``loc`` already starts
    with where its field came from (``body``, ``query``, ``path``), as pydantic's request
    errors do; otherwise it names the field as the request names it (``["after"]``,
    ``["facts", 3, "value"]``) and `web.errors` adds the source, the one place that knows
    which part of the HTTP request held it (MCP tools and the CLI show it as it is)."""

    status = 422
    code = "VALIDATION_ERROR"

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None, *,
                 located: bool = False) -> None:
        super().__init__(message, details={"errors": errors or []})
        self.located = located

    def rename(self, names: Mapping[tuple[str, ...], str]) -> None:
        """Name each field at fault as the caller named it, where a face fills a request
        field from an argument of another name (an MCP tool's ``text`` is the episode's
        ``body``; amp_remember's ``owner_id`` is ``identity.owner_id``): ``names`` maps a
        field's path to the argument. A located ``loc`` loses its source (``body``): the
        argument is not in an HTTP request."""
        for err in self.details["errors"]:
            loc = err["loc"][1:] if self.located else err["loc"]
            for path, arg in names.items():
                if tuple(loc[:len(path)]) == path:
                    err["loc"] = [arg, *loc[len(path):]]
                    break


class RateLimited(AmpError):
    status = 429
    code = "RATE_LIMITED"


class ServiceUnavailable(AmpError):
    status = 503
    code = "UNAVAILABLE"


class Overloaded(ServiceUnavailable):
    """More work than a bounded waiting line of this process holds (reranked searches past
    AMPUP_MEMORY_RERANK_QUEUE): refused at once, with ``Retry-After``, rather than queued
    without end. The wire is the other "try again shortly" answers' (503 UNAVAILABLE);
    429 stays a caller's own budget (RateLimited)."""

    def __init__(self, message: str, retry_after: int, **details: Any) -> None:
        super().__init__(message, details={"retry_after_seconds": retry_after, **details},
                         headers={"Retry-After": str(retry_after)})


class InsufficientStorage(AmpError):
    """A disk (the home, the warehouse) or a database out of space: nothing is wrong with
    the request, and waiting a few seconds will not help until an operator frees space."""

    status = 507
    code = "INSUFFICIENT_STORAGE"


STORAGE_RETRY_AFTER_SECONDS = 5


def storage_full() -> InsufficientStorage:
    """The answer to a store that ran out of space mid-request (:func:`disk_full`). No
    ``Retry-After``: space comes back when an operator frees it, and the server needs no
    restart then."""
    return InsufficientStorage(
        "The server's storage is full; free space on it (the server needs no restart). A "
        "write that got this answer may or may not have landed: writing the same episode "
        "again is safe.")


def storage_unavailable() -> ServiceUnavailable:
    """The answer to a storage engine that failed mid-request (an S3-compatible store down,
    refusing or timing out, a warehouse disk gone): pyarrow and pyiceberg raise those as
    ``OSError``. Nothing a reader may not see is named; the cause goes to the log."""
    return ServiceUnavailable(
        "The table storage (Iceberg warehouse) did not answer; try again shortly. A write "
        "that got this answer may or may not have landed: writing the same episode again "
        "is safe.", headers={"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)})


def database_unavailable() -> ServiceUnavailable:
    """The answer to a database failing mid-request: PostgreSQL down, restarting,
    unreachable or timing out (psycopg's ``OperationalError``, also as SQLAlchemy wraps
    it), or an embedded SQLite file the server cannot write or read (:func:`sqlite_failed`).
    The cause goes to the log."""
    return ServiceUnavailable(
        "A database of the server (catalog, index or cell store) did not answer or could "
        "not write; try again shortly. A write that got this answer may or may not have "
        "landed: writing the same episode again is safe.",
        headers={"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)})


# SQLite's primary result codes for a file the server cannot use (not a statement's fault):
# SQLITE_BUSY (5: still locked after the busy timeout), SQLITE_READONLY (8), SQLITE_IOERR
# (10), SQLITE_FULL (13), SQLITE_CANTOPEN (14).
_SQLITE_FULL = 13
_SQLITE_UNUSABLE = {5, 8, 10, _SQLITE_FULL, 14}


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own error inside SQLAlchemy's wrapper (``.orig``), or ``exc``."""
    return getattr(exc, "orig", None) or exc


def _sqlite_code(exc: BaseException) -> int | None:
    """SQLite's primary result code of ``exc`` (or of the driver error SQLAlchemy wraps),
    None for any other error. sqlite3 is looked up, not imported, as the drivers are."""
    sqlite3 = sys.modules.get("sqlite3")
    inner = _driver_error(exc)
    if sqlite3 is None or not isinstance(inner, sqlite3.Error):
        return None
    code = getattr(inner, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF  # an extended code's low byte


def sqlite_failed(exc: BaseException) -> bool:
    """Whether ``exc`` says an embedded SQLite file cannot be used (locked past the busy
    timeout, read-only, an I/O error, full, cannot be opened): the file's trouble, not a
    statement's (a bug stays a 500)."""
    return _sqlite_code(exc) in _SQLITE_UNUSABLE


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says a store ran out of space: ``ENOSPC``/``EDQUOT`` from a file
    (pyarrow's too), SQLite's ``SQLITE_FULL``, PostgreSQL's ``disk_full`` (53100), also as
    SQLAlchemy wraps them, or the 507 a store already made of one (the PostgreSQL cell
    store answers its own)."""
    if isinstance(exc, InsufficientStorage):
        return True
    inner = _driver_error(exc)
    if isinstance(inner, OSError):
        return inner.errno in (errno.ENOSPC, errno.EDQUOT)
    if _sqlite_code(exc) == _SQLITE_FULL:
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(inner, psycopg.errors.DiskFull)


def database_down(exc: BaseException) -> bool:
    """Whether ``exc`` says the PostgreSQL catalog or index is unavailable (down,
    restarting, unreachable, timing out): psycopg's ``OperationalError`` — also as
    SQLAlchemy wraps it, or a connection SQLAlchemy found dead. A SQLite error, or a
    statement PostgreSQL refused, is not (a bug stays a 500). The drivers are looked up,
    not imported: an error of theirs means they are loaded, and the CLI starts fast."""
    psycopg, sa_exc = sys.modules.get("psycopg"), sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.DBAPIError):
        return bool(exc.connection_invalidated) or (
            psycopg is not None and isinstance(exc.orig, psycopg.OperationalError))
    return psycopg is not None and isinstance(exc, psycopg.OperationalError)


def storage_down(exc: BaseException) -> AmpError | None:
    """The one rule for "a storage engine failed, this is no bug": the answer ``exc`` gets
    (the 507 :func:`storage_full` when :func:`disk_full`; else the 503
    :func:`storage_unavailable` for an ``OSError`` of the table storage, or
    :func:`database_unavailable` when :func:`database_down` or :func:`sqlite_failed`), or
    None for anything else (a bug stays one). The HTTP faces, the MCP tools, the
    background timers and the CLI all ask this."""
    if disk_full(exc):
        return storage_full()
    if isinstance(exc, OSError):
        return storage_unavailable()
    if database_down(exc) or sqlite_failed(exc):
        return database_unavailable()
    return None


def storage_trouble(exc: BaseException) -> str:
    """How a log line or the CLI's ``error:`` line names a failure :func:`storage_down`
    answers: "disk full", "storage error" (the table storage) or "database error"."""
    if disk_full(exc):
        return "disk full"
    return "storage error" if isinstance(exc, OSError) else "database error"


def driver_said(exc: BaseException) -> str:
    """A storage failure in the driver's own words, on one line: for SQLAlchemy's wrapper,
    the driver error it wraps, without its ``(psycopg.OperationalError)`` tag and its
    ``(Background on this error at: https://sqlalche.me/…)`` link."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


def pgvector_fix(exc: BaseException) -> str:
    """What to do, for a PostgreSQL error about the ``vector`` extension (not installed, or
    the role may not create it); "" for any other error. One wording for the cell store,
    the search index and ``doctor``."""
    if "vector" not in str(exc):
        return ""
    return (" The database needs the pgvector extension: CREATE EXTENSION vector (once, as"
            " a role allowed to create extensions).")


class ConfigurationError(Exception):
    """A setting that cannot work; raised at start-up so the server never half-starts."""


def field_error(loc: list[str | int], msg: str, type_: str = "value_error", *,
                located: bool = False) -> ValidationFailed:
    """A 422 for one field, in the same ``details.errors`` shape pydantic produces.
    ``located``: ``loc`` starts with the request part (see `ValidationFailed`)."""
    return ValidationFailed(msg, [{"loc": loc, "msg": msg, "type": type_}], located=located)


NUL_MESSAGE = "text may not contain the NUL character (U+0000)"


def refuse_nul(value: Any, loc: list[str | int], *, located: bool = False) -> None:
    """A 422 at ``loc`` for U+0000 anywhere in ``value`` (a string, or JSON-like dicts and
    lists, keys too). PostgreSQL's text cannot hold it: a row carrying one would fail in
    the read index after its commit landed, and stall its scope."""
    if isinstance(value, str):
        if "\x00" in value:
            raise field_error(loc, NUL_MESSAGE, "string_nul", located=located)
    elif isinstance(value, dict):
        for key, item in value.items():
            refuse_nul(key, loc, located=located)
            refuse_nul(item, [*loc, str(key)], located=located)
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            refuse_nul(item, [*loc, n], located=located)


SURROGATE_MESSAGE = ("text may not contain a lone surrogate (U+D800 to U+DFFF): no UTF-8 "
                     "holds one; escape a character outside the BMP as a pair")
_SURROGATE = re.compile("[\ud800-\udfff]")


def refuse_surrogate(value: str, loc: list[str | int], *, located: bool = False) -> None:
    """A 422 at ``loc`` for a lone surrogate in ``value``. A request's JSON cannot carry
    one (its parser refuses ``"\\ud800"``), but JSON inside an episode body, read by
    Python's parser, and an MCP tool's text can: stored, the text could not be written as
    UTF-8, so the read index failed on it after its commit landed and the episode's read
    was a 500."""
    if _SURROGATE.search(value):
        raise field_error(loc, SURROGATE_MESSAGE, "string_surrogate", located=located)

