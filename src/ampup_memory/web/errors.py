"""The one place errors become HTTP responses: ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.types import Scope

from ampup_memory.errors import (
    AmpError,
    ValidationFailed,
    driver_said,
    storage_down,
    storage_trouble,
)
from ampup_memory.web.answer_headers import stamp
from ampup_memory.web.body import MAX_REPORTED_ERRORS, validation_message
from ampup_memory.web.query import query_names
from ampup_memory.web.routing import serves

log = logging.getLogger("ampup_memory")

_STATUS_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHENTICATED",
    403: "ACCESS_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    412: "PRECONDITION_FAILED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "VALIDATION_ERROR",
}


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(exc: AmpError, request: Request | None = None) -> JSONResponse:
    details = exc.details
    message = exc.message
    if request is not None and isinstance(exc, ValidationFailed) and not exc.located:
        details = {**details, "errors": [
            {**e, "loc": located(request, list(e.get("loc", [])))}
            for e in details.get("errors", [])]}
    if request is not None and isinstance(exc, ValidationFailed):
        message += _not_sent_as_json(request, details.get("errors", []))
    return JSONResponse(
        envelope(exc.code, message, details), status_code=exc.status, headers=exc.headers
    )


def _not_sent_as_json(request: Request, errors: list[dict[str, Any]]) -> str:
    """A hint for a body that is not JSON and was not sent as JSON (a form post, `curl -d
    a=b`): "Invalid JSON: expected value at line 1 column 1" alone did not say that every
    body is JSON, whatever its Content-Type."""
    if not errors or errors[0].get("type") != "json_invalid" \
            or errors[0].get("loc") != ["body"]:
        return ""
    sent = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if "json" in sent:
        return ""
    return (" (every request body is a JSON object; this one was sent as "
            f"{sent[:100] or 'no Content-Type'})")


MCP_PATH = "/mcp"
# JSON-RPC's codes for a request refused (client side) and for a server failure.
_JSONRPC_REFUSED, _JSONRPC_FAILED = -32600, -32603


def refusal_response(exc: AmpError, scope: Scope) -> JSONResponse:
    """An error answered before any route or the MCP transport runs (body limit, identity,
    origin, an MCP endpoint that could not start): the envelope, as `error_response`. On
    the MCP endpoint it is a JSON-RPC error with the same status, message and headers (the
    envelope's code and details in ``data``): MCP clients show a server's text only from a
    JSON-RPC error (the SDK's client said "Server returned an error response")."""
    if scope.get("path") != MCP_PATH:
        return error_response(exc)
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
        "code": _JSONRPC_FAILED if exc.status >= 500 else _JSONRPC_REFUSED,
        "message": exc.message, "data": {"code": exc.code, "details": exc.details}}},
        status_code=exc.status, headers=exc.headers)


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def located(request: Request, loc: list[Any]) -> list[Any]:
    """A field error's ``loc`` led by the part of the request its field came from, as
    FastAPI's own request errors are (``["query", "after"]``, ``["body", "facts", 3,
    "value"]``, ``["path", "name"]``). Services name fields as the request names them and
    do not know which part held one: a path parameter of the matched route, a query
    parameter the route reads and the request carries, else the body of a method that has
    one (the query of one that has none). A query parameter the route does not read is
    not where a value came from (the AMP routes ignore one; the AmpUp routes refuse it,
    `web.query`)."""
    first = loc[0] if loc else None
    if isinstance(first, str) and first in request.path_params:
        source = "path"
    elif isinstance(first, str) and first in request.query_params \
            and first in query_names(request):
        source = "query"
    else:
        source = "body" if request.method in _BODY_METHODS else "query"
    return [source, *loc]


def _clean(value: Any) -> Any:
    # pydantic puts exception objects in ctx; keep the envelope pure JSON.
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route serves at this path. Starlette names only the first
    route's, and several routes share a path (GET and POST /memories are two routes).
    HEAD wherever GET is (`web.head`)."""
    methods = {method for method in _METHODS if serves(app, request.scope, method)}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def install(app: FastAPI) -> None:
    @app.exception_handler(AmpError)
    async def _amp(request: Request, exc: AmpError) -> JSONResponse:
        return error_response(exc, request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        found = exc.errors()
        errors = [
            {"loc": _clean(list(e.get("loc", []))), "msg": str(e.get("msg", "")),
             "type": str(e.get("type", "value_error"))}
            for e in found[:MAX_REPORTED_ERRORS]
        ]
        return JSONResponse(
            envelope("VALIDATION_ERROR", validation_message(errors, len(found)),
                     {"errors": errors}),
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "HTTP_ERROR")
        message = {404: "No such route.", 405: "Method not allowed on this route."}.get(
            exc.status_code, str(exc.detail)
        )
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(app, request))
        return JSONResponse(envelope(code, message), status_code=exc.status_code,
                            headers=headers)

    @app.exception_handler(OSError)  # pyarrow's S3 and file errors: the store is down
    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(DBAPIError)
    @app.exception_handler(sqlite3.Error)  # the AMP cell store's own SQLite: full, read-only
    async def _storage(request: Request, exc: Exception) -> JSONResponse:
        answer = storage_down(exc)
        if answer is None:
            return _internal(request, exc)
        log.warning("%s on %s %s: %s", storage_trouble(exc), request.method,
                    request.url.path, driver_said(exc)[:300])
        return error_response(answer)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return _internal(request, exc)


def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    answer = JSONResponse(
        envelope("INTERNAL_ERROR", "The server hit an unexpected error; it is logged."),
        status_code=500,
    )
    # Starlette answers an unexpected error outside every middleware, AnswerHeaders too.
    stamp(answer.headers, request.url.path, 500, False)
    return answer
