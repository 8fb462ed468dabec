"""The MCP tools over stdio, for desktop agents: one process, one agent.

The process opens the store itself (the same store `serve` uses) and acts as
``AMP_MCP_AGENT_ID``, as the reference does. When keys are required it must also hold
that agent's key (``AMP_MCP_API_KEY``), checked once at start with the same rule as HTTP.
Nothing but MCP messages may reach stdout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ampup_memory.auth import AGENT_HEADER, KEY_HEADER, Caller
from ampup_memory.errors import ConfigurationError
from ampup_memory.mcp.tools import IdentityResolver, ToolContext, build_server

if TYPE_CHECKING:
    from ampup_memory.server import Runtime


def stdio_caller(runtime: Runtime) -> Caller:
    """The configured agent, verified like an HTTP caller; raises on a missing id or bad key."""
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
    return runtime.auth.caller(headers)


def fixed_identity(caller: Caller) -> IdentityResolver:
    def resolve(ctx: ToolContext) -> Caller:
        return caller

    return resolve


async def serve_stdio(runtime: Runtime, caller: Caller) -> None:
    await build_server(runtime, fixed_identity(caller)).run_stdio_async()
