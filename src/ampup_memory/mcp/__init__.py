"""MCP faces of the server: the same tools over stdio (`ampup-memory mcp`) and HTTP (`/mcp`)."""

from ampup_memory.mcp.tools import TOOLSETS, IdentityResolver, ToolEnv, build_server

# Registers AmpUp Memory's toolset in TOOLSETS, after the AMP tools.
from ampup_memory.mcp import ampup as _ampup  # noqa: E402,F401  isort: skip
from ampup_memory.mcp import advice as _advice  # noqa: E402,F401  isort: skip

__all__ = ["TOOLSETS", "IdentityResolver", "ToolEnv", "build_server"]
