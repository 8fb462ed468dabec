"""The MCP tools over streamable HTTP at ``/mcp``, inside the FastAPI app.

Identity is per HTTP request, not per MCP session: every request to ``/mcp`` is
authenticated with `Authenticator.caller` (the REST routes' rule: ``X-AMP-Agent-ID``, plus
its key when keys are on), and every tool call acts as the agent its own request names.
One server therefore serves many agents, each with its own access rights. A request that
fails authentication never reaches the MCP layer: it gets a JSON-RPC error carrying the
REST API's 401 message (`web.errors.refusal_response`).
In trust mode a request naming only an AmpUp user (``X-AmpUp-User``) is let in too.

The MCP SDK is imported, and the tools built, at the first request to ``/mcp``, not at
start: importing it is about 40 % of a server's start-up CPU (1.7 of 4.4 s), which every
``serve`` paid even when no MCP client ever came. The session manager then runs in the
app's lifespan as before; the first MCP request waits for it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ampup_memory.auth import USER_HEADER, Authenticator, Caller, header_map
from ampup_memory.errors import (
    AmpError,
    MethodNotAllowed,
    ServiceUnavailable,
    Unauthenticated,
    UnsupportedMediaType,
)
from ampup_memory.memory.api import memory_user
from ampup_memory.web.errors import MCP_PATH, refusal_response

if TYPE_CHECKING:  # the SDK itself is imported at the first /mcp request (see above)
    from ampup_memory.mcp.tools import IdentityResolver, ToolContext, UserResolver
    from ampup_memory.runtime import Runtime
    from ampup_memory.search.service import SearchService

log = logging.getLogger("ampup_memory")


def header_identity(auth: Authenticator) -> IdentityResolver:
    """The caller named by the HTTP request that carried this MCP message."""

    def resolve(ctx: ToolContext) -> Caller:
        headers = ctx.headers
        if headers is None:  # only HTTP requests reach this server; fail closed anyway
            raise Unauthenticated("This MCP request carries no HTTP headers.")
        return auth.caller(header_map(headers))

    return resolve


def header_user(auth: Authenticator) -> UserResolver:
    """The AmpUp user of this HTTP request, by the REST routes' own rule (`memory_user`)."""

    def resolve(ctx: ToolContext) -> str:
        headers = ctx.headers
        if headers is None:
            raise Unauthenticated("This MCP request carries no HTTP headers.")
        return memory_user(auth, header_map(headers))

    return resolve


class AuthGate:
    """ASGI wrapper: the REST API's identity check (and 401 envelope) in front of MCP."""

    def __init__(self, auth: Authenticator, app: ASGIApp) -> None:
        self.auth = auth
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                headers = header_map(Headers(scope=scope))
                # A key lookup may touch the store: keep it off the event loop.
                await anyio.to_thread.run_sync(self.admit, headers)
                if scope["method"] == "POST":
                    json_only(headers.get("content-type", ""))
                    scope = as_the_sdk_reads(scope)
                else:
                    post_only(scope["method"])
            except AmpError as exc:
                await refusal_response(exc, scope)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def admit(self, headers: dict[str, str]) -> None:
        """Let in a request that names an AMP agent or, in trust mode, an AmpUp user.

        An AmpUp-only client (``X-AmpUp-User`` alone) may use the AmpUp tools; its AMP
        tool calls are then refused one by one, because they have no agent to act as.
        With keys on the key is the only way in, as on the REST routes."""
        try:
            self.auth.caller(headers)
        except Unauthenticated:
            if self.auth.require_keys or not headers.get(USER_HEADER, "").strip():
                raise
            memory_user(self.auth, headers)  # a malformed user id is 401 here, too


def json_only(content_type: str) -> None:
    """A POST to ``/mcp`` is a JSON-RPC message sent as ``application/json``, as MCP's
    transport has it: anything else is a 415 in the JSON-RPC error the other refusals
    use. The SDK answered it 400 with the bare text "Invalid Content-Type header" and no
    Content-Type, a body no MCP client shows."""
    media = content_type.split(";")[0].strip().lower()
    if media != "application/json":
        raise UnsupportedMediaType(
            f"POST /mcp takes a JSON-RPC message as Content-Type: application/json; this "
            f"one was sent as {media[:100] or 'no Content-Type'}.", coding=False)


def as_the_sdk_reads(scope: Scope) -> Scope:
    """``scope`` with its Content-Type and Accept as the SDK compares them: it matches
    ``application/json`` and ``text/event-stream`` letter for letter, though media types
    are case-insensitive (RFC 9110, 8.3.1), so ``Application/JSON``, which `json_only`
    lets through, was its bare 415. A request without an Accept header takes any media
    type (12.5.1; Python's ``urllib`` sends none): it is given the Accept MCP's transport
    asks clients to send, where the SDK refused it 406 "Client must accept both
    application/json and text/event-stream". An Accept naming other types still gets the
    SDK's 406."""
    headers: list[tuple[bytes, bytes]] = []
    accept = False
    for name, value in scope["headers"]:
        if name in (b"content-type", b"accept"):
            accept = accept or name == b"accept"
            value = value.lower()
        headers.append((name, value))
    if not accept:
        headers.append((b"accept", b"application/json, text/event-stream"))
    return {**scope, "headers": headers}


def post_only(method: str) -> None:
    """Every MCP message comes as a POST: with no MCP session kept, ``GET /mcp`` has no
    stream of server messages to offer and ``DELETE /mcp`` no session to end, so both are
    the 405 MCP's transport allows for them (clients then go on with POSTs alone). The SDK
    held a GET open as an event stream on which nothing ever came: the old HTTP+SSE
    clients (MCP Python SDK before 1.8) waited there for an ``endpoint`` event until their
    read timeout (5 minutes), and every TypeScript client kept one idle connection open."""
    raise MethodNotAllowed(
        f"{method} /mcp is not served: this server keeps no MCP session, so it offers no "
        "event stream (GET) and has no session to end (DELETE). Send each JSON-RPC message "
        "as a POST (MCP's streamable HTTP transport); the older HTTP+SSE transport is not "
        "served.", headers={"Allow": "POST"})


class LazyMCP:
    """The ``/mcp`` endpoint: builds the tools and starts the SDK's session manager at the
    first request, inside the app's lifespan (`lifespan`), then hands every request to it."""

    def __init__(self, runtime: Runtime, search: SearchService | None) -> None:
        self.runtime = runtime
        self.search = search
        self.handle: ASGIApp | None = None
        self.failure: BaseException | None = None
        self._wanted: anyio.Event | None = None
        self._ready: anyio.Event | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        # The manager's task group must be entered and left by one task: that task lives
        # here, for as long as the app serves, and waits to be asked.
        self._wanted, self._ready = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._serve_when_wanted)
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    async def _serve_when_wanted(self) -> None:
        assert self._wanted is not None and self._ready is not None
        await self._wanted.wait()
        try:
            server = await anyio.to_thread.run_sync(self._build)
            manager = server.session_manager
            async with manager.run():
                self.handle = manager.handle_request
                self._ready.set()
                await anyio.sleep_forever()
        except Exception as exc:  # logged once; every request then gets a clear 503
            self.failure = exc
            log.exception("the MCP endpoint could not start")
        finally:
            self._ready.set()

    def _build(self) -> Any:
        from mcp.server.transport_security import TransportSecuritySettings

        from ampup_memory.mcp.tools import build_server

        rt, search = self.runtime, self.search
        server = build_server(rt, header_identity(rt.auth), user=header_user(rt.auth),
                              search=None if search is None else (lambda: search))
        # Builds the session manager; the Starlette app it returns is not used: we route to
        # the manager. The SDK's own Host/Origin guard is off: web/origin.py's OriginGuard
        # already ran on this request, and the SDK's lists (loopback only, http only) would
        # refuse what AMPUP_MEMORY_ALLOWED_HOSTS / _ORIGINS allow on every other route.
        # Stateless: no MCP session is kept between requests. Sessions lived in this
        # process's memory, so behind a round-robin balancer a handshake-era client's next
        # request, sent to another server with the first's Mcp-Session-Id, was 404
        # "Session not found" (docs/deployment.md promises no sticky sessions). Nothing
        # here needs one: identity is per request, and no tool asks the client anything.
        server.streamable_http_app(
            streamable_http_path=MCP_PATH, host=rt.settings.host, stateless_http=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        return server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.handle is None:
            if self._wanted is None or self._ready is None:
                raise RuntimeError("the /mcp endpoint is served only inside the app's lifespan")
            self._wanted.set()
            await self._ready.wait()
        if self.handle is None:
            await refusal_response(ServiceUnavailable(
                "The MCP endpoint could not start; the server's log says why."), scope)(
                    scope, receive, send)
            return
        await self.handle(scope, receive, send)


def mount(app: FastAPI, runtime: Runtime, search: SearchService | None = None) -> LazyMCP:
    """Serve the MCP tools at ``/mcp``, behind the REST routes' identity check."""
    endpoint = LazyMCP(runtime, search)
    gate = AuthGate(runtime.auth, endpoint)
    app.router.routes.append(Route(MCP_PATH, endpoint=gate, include_in_schema=False))
    app.state.lifespan_hooks.append(endpoint.lifespan)
    return endpoint
