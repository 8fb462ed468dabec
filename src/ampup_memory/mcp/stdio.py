"""The MCP tools over stdio, for desktop agents: one process, one agent.

The process opens the store itself (the same store `serve` uses) and acts as
``AMP_MCP_AGENT_ID``, as the reference does. When keys are required it must also hold
that agent's key (``AMP_MCP_API_KEY``), checked at start (a bad key stops it there) and
again on every tool call, with the same rule as HTTP: a key revoked or expired while
the process runs refuses the next call, as it does on the REST routes.
AmpUp Memory's tools act for a user: the key's bound user when keys are required, else
``AMPUP_MEMORY_MCP_USER`` — the same rule as the REST routes, fed from settings instead of
headers. Without one those tools refuse each call; the AMP tools still work.
Nothing but MCP messages may reach stdout.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ampup_memory.auth import AGENT_HEADER, KEY_HEADER, USER_HEADER, Caller
from ampup_memory.errors import ConfigurationError, Unauthenticated
from ampup_memory.mcp.tools import IdentityResolver, ToolContext, UserResolver, build_server
from ampup_memory.memory.api import memory_user

if TYPE_CHECKING:
    from ampup_memory.runtime import Runtime
    from ampup_memory.search.index.base import SearchIndex
    from ampup_memory.search.service import SearchService

NO_STDIO_USER = ("AmpUp Memory tools need a user: set AMPUP_MEMORY_MCP_USER (or pass "
                 "--mcp-user-id) to the user this MCP server acts for.")


def stdio_headers(runtime: Runtime) -> dict[str, str]:
    """The settings as the headers an HTTP caller would send."""
    settings = runtime.settings
    agent = (settings.mcp_agent_id or "").strip()
    if not agent:
        raise ConfigurationError(
            "AMP_MCP_AGENT_ID is not set: the stdio MCP server needs the agent id it acts as "
            "(set AMP_MCP_AGENT_ID or pass --mcp-agent-id)."
        )
    headers = {AGENT_HEADER: agent}
    if settings.mcp_api_key:
        headers[KEY_HEADER] = settings.mcp_api_key
    if settings.mcp_user_id:
        headers[USER_HEADER] = settings.mcp_user_id
    return headers


def stdio_caller(runtime: Runtime) -> Caller:
    """The configured agent, verified like an HTTP caller; raises on a missing id or bad key."""
    return runtime.auth.caller(stdio_headers(runtime))


def settings_identity(runtime: Runtime) -> IdentityResolver:
    """The configured agent, verified again per call: the key store is the source of truth
    for revocation and expiry, and a desktop process may run for days."""
    headers = stdio_headers(runtime)

    def resolve(ctx: ToolContext) -> Caller:
        return runtime.auth.caller(headers)

    return resolve


def settings_user(runtime: Runtime) -> UserResolver:
    """The AmpUp user by `memory_user`, the REST routes' rule, over the settings' headers."""
    headers = stdio_headers(runtime)

    def resolve(ctx: ToolContext) -> str:
        if not runtime.auth.require_keys and USER_HEADER not in headers:
            raise Unauthenticated(NO_STDIO_USER)
        return memory_user(runtime.auth, headers)

    return resolve


class LazySearch:
    """The search index, opened on the first search call: AMP-only sessions never pay
    for loading the embedding model into the index."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._opened: tuple[SearchService, SearchIndex] | None = None

    def __call__(self) -> SearchService:
        with self._lock:
            if self._opened is None:
                from ampup_memory.search.api import open_search

                self._opened = open_search(self.runtime)
            return self._opened[0]

    def close(self) -> None:
        with self._lock:
            if self._opened is not None:
                self._opened[1].close()
                self._opened = None


async def serve_stdio(runtime: Runtime) -> None:
    search = LazySearch(runtime)
    try:
        server = build_server(runtime, settings_identity(runtime), user=settings_user(runtime),
                              search=search)
        await server.run_stdio_async()
    finally:
        search.close()
