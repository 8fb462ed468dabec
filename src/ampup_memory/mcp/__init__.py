"""MCP faces of the server: the same tools over stdio (`ampup-memory mcp`) and HTTP (`/mcp`)."""

from ampup_memory.mcp.tools import TOOLSETS, IdentityResolver, ToolEnv, build_server

__all__ = ["TOOLSETS", "IdentityResolver", "ToolEnv", "build_server"]
