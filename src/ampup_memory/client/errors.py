"""Exceptions raised by the clients (AMP and AmpUp): one class per HTTP status they use.

    AMPError                      status_code   code (the server's error.code)
    ├── AMPConnectionError        None          (no HTTP response: refused, DNS, timeout)
    ├── NotModifiedError          304           (none: a read's if_none_match still holds)
    ├── AuthenticationError       401           MISSING_AGENT_ID / MISSING_USER / UNAUTHENTICATED
    ├── AccessDeniedError         403           ACCESS_DENIED / ADMIN_DISABLED
    ├── NotFoundError             404           NOT_FOUND (AmpUp: an unknown or unreadable id)
    ├── ConflictError             409           INVALID_TRANSITION / RETENTION_WINDOW / CONFLICT
    │                                           / SESSION_ENDED / MERGE_CONFLICT / …
    ├── GoneError                 410           PIN_EXPIRED / PIN_RELEASED / SNAPSHOT_RELEASED
    ├── PreconditionFailedError   412           PRECONDITION_FAILED (if_match / if_none_match)
    ├── PayloadTooLargeError      413           CELL_TOO_LARGE / PAYLOAD_TOO_LARGE
    ├── ValidationError           422           VALIDATION_ERROR (details["errors"])
    ├── RateLimitedError          429           RATE_LIMITED (.retry_after seconds)
    └── ServerError               5xx           INTERNAL_ERROR / UNAVAILABLE

Any other non-2xx status raises a plain ``AMPError``. Every instance carries
``status_code``, ``code``, ``message``, ``details`` and the ``request`` that failed, and
``str(error)`` is ``"<code>: <message>"`` as in the reference client, so code that caught the
reference's single ``AMPError`` keeps working.
"""

from __future__ import annotations

from typing import Any

import httpx


class AMPError(Exception):
    """Base class: a failed AMP call."""

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        details: dict[str, Any] | None = None,
        *,
        code: str | None = None,
        request: httpx.Request | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.details: dict[str, Any] = details or {}
        self.request = request
        self.response = response

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait before trying again (``Retry-After``, or the
        error's ``retry_after_seconds``): a 429's, and a 503's while storage is down."""
        header = self.response.headers.get("retry-after") if self.response is not None else None
        for value in (header, self.details.get("retry_after_seconds")):
            try:
                return float(value) if value is not None else None
            except (TypeError, ValueError):
                continue
        return None


class AMPConnectionError(AMPError):
    """The request never got an HTTP answer."""


class NotModifiedError(AMPError):
    """304: a read sent ``if_none_match`` with the resource's current ``etag`` (the caller
    holds this version already); no body. Raised only when ``if_none_match`` was passed."""

    @property
    def etag(self) -> str | None:
        return self.response.headers.get("etag") if self.response is not None else None


class AuthenticationError(AMPError):
    """401: no agent id, or (keys on) a missing, wrong, expired or foreign key."""


class AccessDeniedError(AMPError):
    """403: unknown, unreadable, unwritable or deleted cell (the server will not say which)."""


class NotFoundError(AMPError):
    """404: no such route (or, for purge, no such cell)."""


class ConflictError(AMPError):
    """409: a forbidden status change or a purge inside the retention window."""


class GoneError(AMPError):
    """410 (AmpUp): a read through a pin or snapshot that no longer holds anything."""


class PreconditionFailedError(AMPError):
    """412: a write's ``if_match`` names a version that is no longer current (another
    writer got there first), or its ``if_none_match`` one that is; nothing was changed.
    Read the resource again (a new ``etag``), merge, retry."""


class PayloadTooLargeError(AMPError):
    """413: the serialized cell is over the server's max_cell_size_bytes."""


class ValidationError(AMPError):
    """422: the body or query failed validation; ``details["errors"]`` lists each field."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        found = self.details.get("errors", [])
        return found if isinstance(found, list) else []


class RateLimitedError(AMPError):
    """429: too many scoring PATCHes on one cell; retry after ``retry_after`` seconds."""


class ServerError(AMPError):
    """5xx: the server failed or is temporarily unavailable (a 503 says for how long in
    ``retry_after``)."""


_BY_STATUS: dict[int, type[AMPError]] = {
    304: NotModifiedError,
    401: AuthenticationError,
    403: AccessDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    412: PreconditionFailedError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
}


NOT_MODIFIED = "Not modified: the version you named in if_none_match is still the current one."


def error_for(response: httpx.Response) -> AMPError:
    """The exception for a non-2xx response, from the server's error envelope when present."""
    status = response.status_code
    code: str | None = None
    # A 304 has no body; another answer without one (a proxy's) is named by its status.
    message = (NOT_MODIFIED if status == 304 else
               f"HTTP error {status}: {response.text}" if response.text.strip() else
               f"HTTP error {status}")
    details: dict[str, Any] = {}
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = error.get("code") if isinstance(error.get("code"), str) else None
        if isinstance(error.get("message"), str):
            message = error["message"]
        if isinstance(error.get("details"), dict):
            details = error["details"]
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else AMPError)
    return cls(message, status, details, code=code, request=response.request, response=response)


__all__ = [
    "AMPError",
    "AMPConnectionError",
    "AuthenticationError",
    "AccessDeniedError",
    "NotFoundError",
    "ConflictError",
    "GoneError",
    "NotModifiedError",
    "PreconditionFailedError",
    "PayloadTooLargeError",
    "ValidationError",
    "RateLimitedError",
    "ServerError",
    "error_for",
]
