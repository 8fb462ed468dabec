"""ASGI middleware bounding every request body (the ``max_request_bytes`` setting).

It sits in front of every route, the AMP and AmpUp faces and ``/mcp`` alike, so no handler
ever buffers more than the limit. A declared ``Content-Length`` above it is refused before
a byte of the body is read; a chunked body is counted as it streams in and refused as soon
as it passes the limit. Either way the answer is 413 ``PAYLOAD_TOO_LARGE`` in the one error
envelope (`web.errors.refusal_response`; on ``/mcp`` a JSON-RPC error); the server drops
the unread rest and the connection stays usable.

A body in a content coding (``Content-Encoding`` other than ``identity``) is 415
``UNSUPPORTED_MEDIA_TYPE`` here too, once it is read: no route decodes one; so is a body
declared in another charset than UTF-8 that holds more than ASCII (`foreign_charset`). An
``/mcp`` message is held to the REST bodies' JSON rules here (`jsontext.check_message`),
since the MCP SDK parses it.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ampup_memory.errors import (
    AmpError,
    PayloadTooLarge,
    UnsupportedMediaType,
    field_error,
    refuse_nul,
)
from ampup_memory.web import jsontext
from ampup_memory.web.errors import MCP_PATH, refusal_response

log = logging.getLogger("ampup_memory")


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        # Read the body here, counting (chunked bodies declare no length), and hand the
        # app the same messages: routes and the MCP transport read bodies whole anyway.
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away (or sent a body the HTTP layer could not read, which
                # it answered 400 itself) before its body was whole: no one is left to
                # answer and nothing complete to act on. Handed on, the app's read raised
                # ClientDisconnect, logged as an unhandled error with two tracebacks (some
                # 130 lines) for every connection a client dropped mid-body.
                log.debug("%s %s: the client went away before its body was complete",
                          scope.get("method"), scope.get("path"))
                return
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        coded = encoded(scope)
        if size and coded:
            refusal = UnsupportedMediaType(
                f"Content-Encoding {coded[:100]!r} is not read: send the body as it is "
                "(UTF-8 JSON, no Content-Encoding or identity).")
            await refusal_response(refusal, scope)(scope, receive, send)
            return

        charset = foreign_charset(scope, messages)
        if charset:
            refusal = UnsupportedMediaType(
                f"The body is declared charset={charset[:100]} and holds bytes that are not "
                "ASCII: every body is read as UTF-8 JSON (RFC 8259), where they would be "
                "other text. Send it as UTF-8 (charset=utf-8, or no charset).", coding=False)
            await refusal_response(refusal, scope)(scope, receive, send)
            return

        if size and scope["path"] == MCP_PATH and scope.get("method") == "POST":
            # The MCP SDK's parser checks neither nesting, size nor repeated keys; the REST
            # bodies' checks (`web.body.parse_body`) are made here for its messages.
            body = b"".join(m.get("body", b"") for m in messages)
            try:
                jsontext.check_message(body)
            except jsontext.JsonRefused as exc:
                refused = field_error(["body"], str(exc), "json_invalid", located=True)
                await refusal_response(refused, scope)(scope, receive, send)
                return
            if body.lstrip(b" \t\r\n").startswith(b"["):
                await refusal_response(batch_refused(), scope)(scope, receive, send)
                return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        exc = PayloadTooLarge(
            f"The request body exceeds {self.max_bytes} bytes (setting max_request_bytes); "
            "send a smaller one (split a batch).",
            code="PAYLOAD_TOO_LARGE", details={"max_bytes": self.max_bytes},
        )
        await refusal_response(exc, scope)(scope, receive, send)


def encoded(scope: Scope) -> str:
    """The request's content coding, or "" for none (no header, or ``identity``)."""
    codings = ",".join(Headers(scope=scope).getlist("content-encoding"))
    named = [c.strip() for c in codings.split(",") if c.strip()]
    return "" if all(c.lower() == "identity" for c in named) else ", ".join(named)


# Charsets whose text is its bytes read as UTF-8 (JSON on the wire is UTF-8: RFC 8259).
_UTF_8 = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})


def foreign_charset(scope: Scope, messages: list[Message]) -> str:
    """The charset the body's ``Content-Type`` declares, when reading the body as UTF-8
    could take it for other text: a charset other than UTF-8 (``latin-1``, ``utf-16``) and
    a byte outside ASCII (or a NUL, as UTF-16 has). "" otherwise: the declaration is then
    disregarded, as RFC 8259 has it (ASCII is the same text in every charset a client
    would name), and JSON sent as ``text/plain`` or with no charset is read as before."""
    declared = ""
    for param in Headers(scope=scope).get("content-type", "").split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            declared = value.strip().strip('"').strip()
    if not declared or declared.lower() in _UTF_8:
        return ""
    body = b"".join(m.get("body", b"") for m in messages)
    return declared if not body.isascii() or b"\x00" in body else ""


def batch_refused() -> AmpError:
    """A JSON-RPC batch at ``/mcp`` (an array of messages: protocol 2025-03-26 had them,
    2025-06-18 dropped them). The SDK takes none, and refused one with its parser's
    validation errors, 1,200 characters naming its classes; no published client sends one."""
    return field_error(
        ["body"], "A JSON-RPC batch is not taken: send each message in a POST of its own "
        "(MCP's protocol has no batches since 2025-06-18).", "json_invalid", located=True)


class NulGuard:
    """A 422 for U+0000 in the path or a query parameter of an AmpUp route (`refuse_nul`;
    bodies: `web.body.parse_body`), before any handler puts it into a SQL statement. The
    AMP face (``/amp/v1``) and ``/mcp`` are passed through: the AMP cell store maps NUL
    away, and MCP messages are bodies."""

    PASS = ("/amp/", "/mcp")

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not str(scope["path"]).startswith(self.PASS):
            try:
                refuse_nul(str(scope["path"]), ["path"], located=True)
                query = bytes(scope.get("query_string", b"")).decode("latin-1")
                if "%00" in query or "\x00" in query:
                    for name, value in parse_qsl(query, keep_blank_values=True,
                                                 encoding="utf-8", errors="replace"):
                        refuse_nul(name, ["query"], located=True)
                        refuse_nul(value, ["query", name], located=True)
            except AmpError as exc:
                await refusal_response(exc, scope)(scope, receive, send)
                return
        await self.app(scope, receive, send)
