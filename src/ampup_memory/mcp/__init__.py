"""MCP faces of the server: the same tools over stdio (`ampup-memory mcp`) and HTTP (`/mcp`).

Importing this package imports nothing heavy: the SDK comes with `ampup_memory.mcp.tools`,
which `serve` loads at the first ``/mcp`` request (`ampup_memory.mcp.http`).
"""
