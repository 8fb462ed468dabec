"""The MCP tools over streamable HTTP at ``/mcp``, inside the FastAPI app.

Identity is per HTTP request, not per MCP session: every request to ``/mcp`` is
authenticated with `Authenticator.caller` (the REST routes' rule: ``X-AMP-Agent-ID``, plus
its key when keys are on), and every tool call acts as the agent its own request names.
One server therefore serves many agents, each with its own access rights. A request that
fails authentication never reaches the MCP layer: it gets the REST API's 401 envelope.
In trust mode a request naming only an AmpUp user (``X-AmpUp-User``) is let in too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ampup_memory.auth import USER_HEADER, Authenticator, Caller
from ampup_memory.errors import AmpError, Unauthenticated
from ampup_memory.mcp.tools import IdentityResolver, ToolContext, UserResolver, build_server
from ampup_memory.memory.api import memory_user
from ampup_memory.web.errors import error_response

if TYPE_CHECKING:
    from ampup_memory.runtime import Runtime
    from ampup_memory.search.service import SearchService

MCP_PATH = "/mcp"


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def header_identity(auth: Authenticator) -> IdentityResolver:
    """The caller named by the HTTP request that carried this MCP message."""

    def resolve(ctx: ToolContext) -> Caller:
        headers = ctx.headers
        if headers is None:  # only HTTP requests reach this server; fail closed anyway
            raise Unauthenticated("This MCP request carries no HTTP headers.")
        return auth.caller(_lowered(headers))

    return resolve


def header_user(auth: Authenticator) -> UserResolver:
    """The AmpUp user of this HTTP request, by the REST routes' own rule (`memory_user`)."""

    def resolve(ctx: ToolContext) -> str:
        headers = ctx.headers
        if headers is None:
            raise Unauthenticated("This MCP request carries no HTTP headers.")
        return memory_user(auth, _lowered(headers))

    return resolve


class AuthGate:
    """ASGI wrapper: the REST API's identity check (and 401 envelope) in front of MCP."""

    def __init__(self, auth: Authenticator, app: ASGIApp) -> None:
        self.auth = auth
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = _lowered(Headers(scope=scope))
            try:
                # A key lookup may touch the store: keep it off the event loop.
                await anyio.to_thread.run_sync(self.admit, headers)
            except AmpError as exc:
                await error_response(exc)(scope, receive, send)
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


def mount(app: FastAPI, runtime: Runtime,
          search: SearchService | None = None) -> MCPServer[Any]:
    """Serve the MCP tools at ``/mcp``; the session manager runs in the app's lifespan."""
    server = build_server(runtime, header_identity(runtime.auth),
                          user=header_user(runtime.auth),
                          search=None if search is None else (lambda: search))
    # Builds the session manager (with the SDK's DNS-rebinding guard when bound to
    # localhost); the Starlette app it returns is not used: we route to the manager.
    server.streamable_http_app(streamable_http_path=MCP_PATH, host=runtime.settings.host)
    manager = server.session_manager
    gate = AuthGate(runtime.auth, manager.handle_request)
    app.router.routes.append(Route(MCP_PATH, endpoint=gate, include_in_schema=False))
    app.state.lifespan_hooks.append(manager.run)
    app.state.mcp = server
    return server
