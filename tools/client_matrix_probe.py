"""One published MCP client against a running AmpUp Memory, run by `tools/client_matrix.py`
inside that client's own virtualenv (so it imports nothing of ours, and only the standard
library besides the client).

Environment: ``KIND`` (which client API: ``sdk1-http``, ``sdk1-sse``, ``sdk1-stdio``,
``sdk2-http``, ``fastmcp``, ``agents``, ``pydantic-ai``, ``langchain``, ``llama-index``,
``mcp-use``), ``URL`` (the ``/mcp`` endpoint), ``HEADERS`` (JSON object sent on every
request), for stdio ``SERVER_PYTHON`` (the interpreter that runs ``ampup_memory.cli mcp``).
Prints one JSON object: what the client saw at each step, ``ok`` and, when it failed,
``error`` (the innermost exception's type and text, as the client's user would see it).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from importlib.metadata import version
from typing import Any

KIND = os.environ["KIND"]
URL = os.environ.get("URL", "")
HEADERS: dict[str, str] = json.loads(os.environ.get("HEADERS", "{}"))
AGENT = HEADERS.get("X-AMP-Agent-ID", "agent_matrix")
UNKNOWN = "mem_01HZZZZZZZZZZZZZZZZZZZZZZZ"

# (step, tool, arguments): a write and a read of each face, a tool error, a bad argument.
CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("amp_write", "amp_remember", {"content": "The matrix client likes green tea",
                                   "owner_id": AGENT, "readable_by": ["agent_matrix_*"]}),
    ("amp_read", "amp_recall", {"query": "green tea", "owner_id": AGENT, "limit": 3}),
    ("ampup_write", "remember_memory", {"scope": "acme/matrix",
                                        "text": "The client matrix runs on Sundays.",
                                        "acl": ["*"]}),
    ("ampup_read", "search_memory", {"scope": "acme/matrix", "query": "client matrix"}),
    ("tool_error", "amp_get", {"memory_id": UNKNOWN}),
    ("bad_argument", "amp_recall", {"query": "x", "owner_id": AGENT, "limit": 1000}),
]

out: dict[str, Any] = {"kind": KIND}


def short(value: Any, n: int = 90) -> str:
    return " ".join(str(value).split())[:n]


def result_of(result: Any) -> list[Any]:
    """[is_error, first text] of a CallToolResult of any SDK version."""
    is_error = getattr(result, "is_error", getattr(result, "isError", None))
    content = getattr(result, "content", None) or []
    return [bool(is_error), short(getattr(content[0], "text", content[0]) if content else "")]


async def calls(call: Any) -> None:
    """Run CALLS through ``call(name, args)``, which returns [is_error, text]; a client that
    raises on a tool error counts as [True, its text]."""
    for step, name, args in CALLS:
        try:
            out[step] = await call(name, dict(args))
        except Exception as exc:  # a client that raises a tool error (pydantic-ai, ...)
            out[step] = [True, short(f"{type(exc).__name__}: {exc}")]


async def sdk1(mode: str) -> None:
    from mcp import ClientSession

    async def use(read: Any, write: Any) -> None:
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["protocol"] = init.protocolVersion
            out["tools"] = len((await session.list_tools()).tools)

            async def call(name: str, args: dict[str, Any]) -> list[Any]:
                return result_of(await session.call_tool(name, args))
            await calls(call)

    if mode == "http":
        from mcp.client.streamable_http import streamablehttp_client
        async with streamablehttp_client(URL, headers=HEADERS) as (read, write, _):
            await use(read, write)
    elif mode == "sse":
        from mcp.client.sse import sse_client
        async with sse_client(URL, headers=HEADERS) as (read, write):
            await use(read, write)
    else:
        from mcp.client.stdio import StdioServerParameters, stdio_client
        params = StdioServerParameters(
            command=os.environ["SERVER_PYTHON"], args=["-m", "ampup_memory.cli", "mcp"],
            env={**os.environ, "AMP_MCP_AGENT_ID": AGENT,
                 "AMPUP_MEMORY_MCP_USER": HEADERS.get("X-AmpUp-User", "dana")})
        async with stdio_client(params) as (read, write):
            await use(read, write)


async def sdk2() -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=HEADERS) as http, Client(
            streamable_http_client(URL, http_client=http)) as client:
        out["protocol"] = client.protocol_version
        out["tools"] = len((await client.list_tools()).tools)

        async def call(name: str, args: dict[str, Any]) -> list[Any]:
            return result_of(await client.call_tool(name, args))
        await calls(call)


async def fastmcp() -> None:
    from fastmcp import Client
    from fastmcp.client.transports import StreamableHttpTransport

    async with Client(StreamableHttpTransport(URL, headers=HEADERS)) as client:
        out["tools"] = len(await client.list_tools())

        async def call(name: str, args: dict[str, Any]) -> list[Any]:
            return result_of(await client.call_tool(name, args, raise_on_error=False))
        await calls(call)


async def agents() -> None:
    from agents.mcp import MCPServerStreamableHttp
    from agents.mcp.util import MCPUtil
    from agents.strict_schema import ensure_strict_json_schema

    async with MCPServerStreamableHttp(params={"url": URL, "headers": HEADERS},
                                       name="ampup-memory") as server:
        tools = await server.list_tools()
        out["tools"] = len(tools)
        # What the Agents SDK hands a model: every tool converts; OpenAI's strict mode
        # takes each schema or the SDK falls back to a non-strict tool for it.
        not_strict = []
        for tool in tools:
            MCPUtil.to_function_tool(tool, server, True)
            schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", {})
            try:
                ensure_strict_json_schema(json.loads(json.dumps(schema)))
            except Exception:
                not_strict.append(tool.name)
        out["not_strict"] = not_strict

        async def call(name: str, args: dict[str, Any]) -> list[Any]:
            return result_of(await server.call_tool(name, args))
        await calls(call)


async def pydantic_ai() -> None:
    from pydantic_ai.mcp import MCPToolset

    toolset = MCPToolset(URL, headers=HEADERS, tool_error_behavior="failed")
    async with toolset:
        out["tools"] = len(await toolset.list_tools())

        async def call(name: str, args: dict[str, Any]) -> list[Any]:
            return [False, short(await toolset.direct_call_tool(name, args))]
        await calls(call)


async def langchain() -> None:
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient({"ampup": {"url": URL, "transport": "streamable_http",
                                             "headers": HEADERS}})
    tools = {tool.name: tool for tool in await client.get_tools()}
    out["tools"] = len(tools)
    for tool in tools.values():  # the argument schema each tool gives a model
        schema = tool.tool_call_schema  # a JSON schema, or a pydantic model made from one
        if hasattr(schema, "model_json_schema"):
            schema.model_json_schema()

    async def call(name: str, args: dict[str, Any]) -> list[Any]:
        reply = await tools[name].ainvoke(args)
        text = reply[0]["text"] if isinstance(reply, list) and reply else reply
        return [None, short(text)]  # LangChain hands the model the text either way
    await calls(call)


async def llama_index() -> None:
    from llama_index.tools.mcp import BasicMCPClient, McpToolSpec

    client = BasicMCPClient(URL, headers=HEADERS)
    tools = {tool.metadata.name: tool
             for tool in await McpToolSpec(client=client).to_tool_list_async()}
    out["tools"] = len(tools)
    for tool in tools.values():
        tool.metadata.get_parameters_dict()

    async def call(name: str, args: dict[str, Any]) -> list[Any]:
        reply = await tools[name].acall(**args)
        return result_of(reply.raw_output)
    await calls(call)


async def mcp_use() -> None:
    os.environ["MCP_USE_ANONYMIZED_TELEMETRY"] = "false"
    from mcp_use import MCPClient

    client = MCPClient.from_dict({"mcpServers": {"ampup": {"url": URL, "headers": HEADERS}}})
    try:
        session = await client.create_session("ampup")
        out["tools"] = len(await session.list_tools())

        async def call(name: str, args: dict[str, Any]) -> list[Any]:
            return result_of(await session.call_tool(name, args))
        await calls(call)
    finally:
        await client.close_all_sessions()


RUN = {"sdk1-http": lambda: sdk1("http"), "sdk1-sse": lambda: sdk1("sse"),
       "sdk1-stdio": lambda: sdk1("stdio"), "sdk2-http": sdk2, "fastmcp": fastmcp,
       "agents": agents, "pydantic-ai": pydantic_ai, "langchain": langchain,
       "llama-index": llama_index, "mcp-use": mcp_use}


def main() -> None:
    out["mcp"] = version("mcp")
    start = time.monotonic()
    try:
        asyncio.run(asyncio.wait_for(RUN[KIND](), float(os.environ.get("TIMEOUT", "90"))))
        out["ok"] = True
    except BaseException as exc:  # noqa: B036 - report whatever the client raised
        out["ok"] = False
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        out["error"] = short(f"{type(exc).__name__}: {exc}", 300) if str(exc) \
            else type(exc).__name__
    out["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
