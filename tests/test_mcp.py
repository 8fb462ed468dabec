"""The MCP tools, driven by the MCP SDK's own client over both transports.

stdio: a real `python -m ampup_memory.cli mcp` process per agent. HTTP: a real `serve`
process, each agent an SDK client sending its own headers. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from ampup_memory.amp.model import AGENT_PATTERN_PATTERN, MAX_POLICY_PATTERNS, MemoryType
from ampup_memory.settings import Settings, env_name
from tests.conftest import ADMIN_TOKEN
from tests.server_process import ServerProcess

TOOLS = {"amp_remember", "amp_recall", "amp_forget", "amp_list_memories", "amp_get"}
AMPUP_TOOLS = {"remember_memory", "get_episode", "close_memory", "branch_memory",
               "merge_memory", "search_memory",
               "query_memory"}  # exercised in test_mcp_ampup.py
ADVICE_TOOLS = {"record_run", "reward_run", "start_session", "end_session", "get_session",
                "get_advice"}  # exercised in test_advice_runs.py and test_advice_loop.py
STORED = re.compile(r"^Memory stored: (mem_[0-9A-HJKMNP-TV-Z]{26})$")
NO_MEMORIES = "No memories found."
ACCESS_DENIED = "Access denied."

Connect = Callable[[str], AbstractAsyncContextManager[Client]]


# ---- connecting ------------------------------------------------------------------------


def _cli(*args: str, home: Path, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", *args],
        env={**os.environ, "AMPUP_MEMORY_HOME": str(home), **(env or {})},
        capture_output=True, text=True, timeout=120,
    )


@asynccontextmanager
async def stdio_client_for(home: Path, agent: str,
                           env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ampup_memory.cli", "mcp"],
        env={**os.environ, "AMPUP_MEMORY_HOME": str(home), "AMP_MCP_AGENT_ID": agent,
             **(env or {})},
    )
    async with Client(params) as client:
        yield client


@asynccontextmanager
async def http_client_for(url: str, headers: dict[str, str], mode: str = "auto",
                          statuses: list[int] | None = None) -> AsyncIterator[Client]:
    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120),
                              event_hooks={"response": [record]})
    async with http, Client(streamable_http_client(url + "/mcp", http_client=http),
                            mode=mode) as client:
        yield client


@pytest.fixture(scope="module")
def stdio_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stdio-home")


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, stdio_home: Path) -> Connect:
    """Connect as an agent: a stdio process acting as it, or an HTTP client naming it."""
    if request.param == "stdio":
        return lambda agent: stdio_client_for(stdio_home, agent)
    server: ServerProcess = request.getfixturevalue("server")
    return lambda agent: http_client_for(server.url, {"X-AMP-Agent-ID": agent})


def text(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def ok(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert not result.is_error, text(result)
    return text(result)


async def refused(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, text(result)
    assert "Traceback" not in text(result)
    return text(result)


def mcp_refusal(response: httpx.Response) -> dict[str, Any]:
    """What /mcp answers before the MCP layer runs (no identity, a body over the limit, a
    foreign origin): a JSON-RPC error, which MCP clients show, carrying the REST envelope's
    code, message and details; returned in the envelope's shape."""
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"} and body["id"] is None, body
    error = body["error"]
    assert error["code"] == (-32603 if response.status_code >= 500 else -32600), body
    return {"code": error["data"]["code"], "message": error["message"],
            "details": error["data"]["details"]}


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside the SDK client's task-group exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


async def remember(client: Client, **args: Any) -> str:
    reply = await ok(client, "amp_remember", **args)
    match = STORED.match(reply)
    assert match, reply
    return match.group(1)


def line(cell: dict[str, Any]) -> str:
    """The reference's reply line for one cell."""
    created = cell["lifecycle"]["created_at"]
    return f"- [{cell['type']}] {cell['content']['text']} (created: {created})"


# ---- both transports -------------------------------------------------------------------


async def test_tools_have_the_reference_names_and_arguments(connect: Connect, uid: str) -> None:
    async with connect(f"agent_{uid}") as client:
        listed = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    assert set(listed) == TOOLS | AMPUP_TOOLS | ADVICE_TOOLS

    def args(tool: str) -> dict[str, Any]:
        return {name: {k: v for k, v in spec.items() if k in ("type", "default", "enum",
                                                               "minimum", "maximum")}
                for name, spec in listed[tool]["properties"].items()}

    assert listed["amp_remember"]["required"] == ["content", "owner_id"]
    remember_args = args("amp_remember")
    assert remember_args["content"] == {"type": "string"}
    assert remember_args["owner_id"] == {"type": "string"}
    assert remember_args["type"] == {"type": "string", "default": "semantic",
                                     "enum": [t.value for t in MemoryType]}
    assert remember_args["importance"] == {"type": "number", "default": 0.5,
                                           "minimum": 0.0, "maximum": 1.0}
    assert remember_args["readable_by"] == {"default": None}
    assert listed["amp_remember"]["properties"]["readable_by"]["anyOf"] == [
        {"type": "array", "items": {"type": "string", "pattern": AGENT_PATTERN_PATTERN},
         "maxItems": MAX_POLICY_PATTERNS},
        {"type": "null"}]

    assert listed["amp_recall"]["required"] == ["query", "owner_id"]
    assert args("amp_recall") == {
        "query": {"type": "string"}, "owner_id": {"type": "string"},
        "limit": {"type": "integer", "default": 5, "minimum": 1, "maximum": 100},
        "include_stale": {"type": "boolean", "default": False},
    }
    assert listed["amp_forget"]["required"] == ["memory_id", "owner_id"]
    assert set(listed["amp_forget"]["properties"]) == {"memory_id", "owner_id"}
    assert listed["amp_list_memories"]["required"] == ["owner_id"]
    list_args = args("amp_list_memories")
    assert list_args["limit"] == {"type": "integer", "default": 20, "minimum": 1,
                                  "maximum": 100}
    assert list_args["type"] == {"default": None}
    assert listed["amp_get"]["required"] == ["memory_id"]
    assert set(listed["amp_get"]["properties"]) == {"memory_id"}


async def test_amp_tool_schemas_carry_the_bounds_the_server_enforces(
        server: ServerProcess, uid: str) -> None:
    """mcp.md: every input schema carries the server's bounds (text lengths, id patterns),
    the AMP tools' too: an empty owner_id, a blank or 4097-character query, a readable_by
    entry that is no agent pattern are refused by the service, so the schema says so."""
    async with http_client_for(server.url, {"X-AMP-Agent-ID": f"agent_{uid}"}) as client:
        listed = {t.name: t.input_schema["properties"] for t in
                  (await client.list_tools()).tools}
    remember_args, recall_args = listed["amp_remember"], listed["amp_recall"]
    assert remember_args["content"]["minLength"] == 1
    assert "pattern" in remember_args["content"]  # not blank
    assert (remember_args["owner_id"]["minLength"],
            remember_args["owner_id"]["maxLength"]) == (1, 256)
    assert remember_args["readable_by"]["anyOf"][0]["items"]["pattern"] == (
        AGENT_PATTERN_PATTERN)
    assert (recall_args["query"]["minLength"], recall_args["query"]["maxLength"]) == (1, 4096)
    assert "pattern" in recall_args["query"]


async def test_remember_then_recall_and_list_in_the_reference_format(
        connect: Connect, uid: str) -> None:
    agent, owner = f"agent_{uid}", f"user_{uid}"
    async with connect(agent) as client:
        first = await remember(client, content="Prefers short emails in the morning",
                               owner_id=owner, importance=0.8)
        second = await remember(client, content="Allergic to peanuts", owner_id=owner,
                                type="episodic")
        cells = {i: json.loads(await ok(client, "amp_get", memory_id=i))
                 for i in (first, second)}
        recalled = await ok(client, "amp_recall", query="short emails morning",
                            owner_id=owner, limit=1)
        listed = await ok(client, "amp_list_memories", owner_id=owner)
        episodic = await ok(client, "amp_list_memories", owner_id=owner, type="episodic")
        nobody = await ok(client, "amp_recall", query="emails", owner_id=f"nobody_{uid}")
        empty_list = await ok(client, "amp_list_memories", owner_id=f"nobody_{uid}")

    assert cells[first]["identity"] == {"owner_id": owner, "owner_type": "user",
                                        "created_by": agent, "session_id": None}
    assert cells[first]["scoring"]["importance"] == 0.8
    assert cells[second]["type"] == "episodic"
    assert recalled == line(cells[first])
    assert listed == line(cells[second]) + "\n" + line(cells[first])  # newest first
    assert episodic == line(cells[second])
    assert nobody == NO_MEMORIES
    assert empty_list == NO_MEMORIES


async def test_forget_archives_then_deletes(connect: Connect, uid: str,
                                            request: pytest.FixtureRequest) -> None:
    agent, owner = f"agent_{uid}", f"user_{uid}"
    async with connect(agent) as client:
        memory_id = await remember(client, content="Old address: 1 Elm Street",
                                   owner_id=owner)
        kept = await remember(client, content="Likes jazz", owner_id=owner)
        # The reference's owner guard: another owner's id forgets nothing.
        assert await refused(client, "amp_forget", memory_id=kept,
                             owner_id=f"other_{uid}") == "Memory not found."
        assert await ok(client, "amp_forget", memory_id=memory_id,
                        owner_id=owner) == f"Memory {memory_id} forgotten."
        assert await refused(client, "amp_get", memory_id=memory_id) == ACCESS_DENIED
        assert await ok(client, "amp_recall", query="address Elm Street",
                        owner_id=owner) == line(
            json.loads(await ok(client, "amp_get", memory_id=kept)))
        assert await refused(client, "amp_forget", memory_id=memory_id,
                             owner_id=owner) == "Memory not found."
        assert await refused(client, "amp_forget", memory_id=f"mem_{uid}",
                             owner_id=owner) == "Memory not found."

    # Deleted, not merely archived: purge refuses it for its retention window (an
    # archived cell would be refused as INVALID_TRANSITION instead).
    if request.node.callspec.params["connect"] == "http":
        server: ServerProcess = request.getfixturevalue("server")
        r = httpx.post(f"{server.url}/amp/v1/lifecycle/purge", json={"id": memory_id},
                       headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
        assert r.status_code == 409 and r.json()["error"]["code"] == "RETENTION_WINDOW"
    else:
        done = _cli("purge", memory_id, home=request.getfixturevalue("stdio_home"))
        assert done.returncode == 2 and "RETENTION_WINDOW" in done.stderr


async def test_unreadable_and_unknown_ids_answer_alike(connect: Connect, uid: str) -> None:
    async with connect(f"agent_a_{uid}") as a:
        private = await remember(a, content="Salary expectations: high", owner_id=f"u_{uid}")
        gone = await remember(a, content="Temporary note", owner_id=f"u_{uid}")
        await ok(a, "amp_forget", memory_id=gone, owner_id=f"u_{uid}")
    async with connect(f"agent_b_{uid}") as b:
        unreadable = await refused(b, "amp_get", memory_id=private)
        unknown = await refused(b, "amp_get", memory_id="mem_01J00000000000000000000000")
        deleted = await refused(b, "amp_get", memory_id=gone)
        not_forgettable = await refused(b, "amp_forget", memory_id=private,
                                        owner_id=f"u_{uid}")
    assert unreadable == unknown == deleted == ACCESS_DENIED
    assert not_forgettable == "Memory not found."


async def test_bad_arguments_are_clear_tool_errors(connect: Connect, uid: str) -> None:
    async with connect(f"agent_{uid}") as client:
        blank = await refused(client, "amp_remember", content="   ", owner_id=f"u_{uid}")
        too_important = await refused(client, "amp_remember", content="x",
                                      owner_id=f"u_{uid}", importance=2)
        bad_type = await refused(client, "amp_list_memories", owner_id=f"u_{uid}",
                                 type="dream")
        too_many = await refused(client, "amp_recall", query="x", owner_id=f"u_{uid}",
                                 limit=1000)
        no_owner = await refused(client, "amp_remember", content="x", owner_id="")
        bad_reader = await refused(client, "amp_remember", content="x", owner_id=f"u_{uid}",
                                   readable_by=["agent_ok", "bad pattern"])
    # named as the tool names its arguments, not by the cell's fields (content.text, ...)
    assert blank == "Invalid request: content: must hold a character other than white space"
    assert no_owner == "Invalid request: owner_id: String should have at least 1 character"
    assert bad_reader.startswith("Invalid request: readable_by.1: "), bad_reader
    assert "importance" in too_important and "less than or equal to 1" in too_important
    assert "type" in bad_type and "'semantic'" in bad_type
    assert "limit" in too_many and "less than or equal to 100" in too_many


async def test_a_blank_recall_query_is_one_line_saying_what_is_wrong(
        connect: Connect, uid: str, http: httpx.Client) -> None:
    """amp_recall with a blank query said "query: Value error, query must not be blank"
    (pydantic's prefix, the field named twice); it is the one blank rule's line, as
    amp_remember's content is, and the REST route's message says the same."""
    async with connect(f"agent_{uid}") as client:
        said = {q: await refused(client, "amp_recall", query=q, owner_id=f"u_{uid}")
                for q in ("", "   ", "\u3000")}
    assert said == {
        "": "Invalid request: query: String should have at least 1 character",
        "   ": "Invalid request: query: must hold a character other than white space",
        "\u3000": "Invalid request: query: must hold a character other than white space"}
    for q in ("", "   "):
        r = http.post("/memories/search", headers={"X-AMP-Agent-ID": f"agent_{uid}"},
                      json={"query": q, "owner_id": f"u_{uid}"})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"] == said[q].replace(
            "Invalid request: query", "Request validation failed: body.query")


# ---- HTTP: one server, many agents, each request its own identity ----------------------


async def test_readable_by_shares_between_agents_over_http(server: ServerProcess,
                                                           uid: str) -> None:
    owner = f"user_{uid}"
    cs, billing, marketing = (f"agent_cs_{uid}", f"agent_billing_{uid}",
                              f"agent_marketing_{uid}")
    async with http_client_for(server.url, {"X-AMP-Agent-ID": cs}) as a:
        shared = await remember(a, content="Contact by email only, never phone",
                                owner_id=owner, readable_by=[f"agent_billing_*{uid}"])
        cell = json.loads(await ok(a, "amp_get", memory_id=shared))
    assert cell["identity"]["created_by"] == cs
    assert cell["access_policy"]["readable_by"] == [f"agent_billing_*{uid}"]

    async with http_client_for(server.url, {"X-AMP-Agent-ID": billing}) as b:
        assert await ok(b, "amp_recall", query="contact preference email",
                        owner_id=owner) == line(cell)
        assert await ok(b, "amp_list_memories", owner_id=owner) == line(cell)
        # Reading is not writing: billing may not forget it.
        assert await refused(b, "amp_forget", memory_id=shared,
                             owner_id=owner) == "Memory not found."

    async with http_client_for(server.url, {"X-AMP-Agent-ID": marketing}) as c:
        assert await ok(c, "amp_recall", query="contact preference email",
                        owner_id=owner) == NO_MEMORIES
        assert await ok(c, "amp_list_memories", owner_id=owner) == NO_MEMORIES
        assert await refused(c, "amp_get", memory_id=shared) == ACCESS_DENIED


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_identity_follows_each_request_not_the_session(server: ServerProcess,
                                                             uid: str, mode: str) -> None:
    """One MCP connection whose HTTP headers change between calls acts as each agent."""
    owner, alice, bob = f"user_{uid}", f"agent_alice_{uid}", f"agent_bob_{uid}"
    seen: list[httpx2.Request] = []

    async def record(request: httpx2.Request) -> None:
        seen.append(request)

    http = httpx2.AsyncClient(headers={"X-AMP-Agent-ID": alice}, event_hooks={"request": [record]},
                              timeout=httpx2.Timeout(30, read=120))
    async with http, Client(streamable_http_client(server.url + "/mcp", http_client=http),
                            mode=mode) as client:
        memory_id = await remember(client, content="Alice's private plan", owner_id=owner)
        assert await ok(client, "amp_recall", query="plan", owner_id=owner) != NO_MEMORIES
        as_alice = len(seen)
        http.headers["X-AMP-Agent-ID"] = bob
        assert await ok(client, "amp_recall", query="plan", owner_id=owner) == NO_MEMORIES
        assert await refused(client, "amp_get", memory_id=memory_id) == ACCESS_DENIED
        bobs = await remember(client, content="Bob's note", owner_id=owner)
        cell = json.loads(await ok(client, "amp_get", memory_id=bobs))
    assert cell["identity"]["created_by"] == bob
    posts = [r for r in seen if r.method == "POST"]
    assert {r.headers["x-amp-agent-id"] for r in seen[:as_alice]} == {alice}
    assert {r.headers["x-amp-agent-id"] for r in seen[as_alice:] if r.method == "POST"} == {bob}
    # No MCP session is kept (any server of a fleet answers any request): none is named
    assert {r.headers.get("mcp-session-id") for r in posts} == {None}


def test_mcp_without_identity_is_401_with_the_rest_message(server: ServerProcess) -> None:
    r = httpx.post(f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                   headers={"Accept": "application/json, text/event-stream"})
    assert r.status_code == 401
    assert mcp_refusal(r) == {"code": "MISSING_AGENT_ID",
                              "message": "The X-AMP-Agent-ID header is required.",
                              "details": {}}
    # a REST route keeps its envelope, with the same message
    rest = httpx.get(f"{server.url}/amp/v1/memories")
    assert rest.status_code == 401 and rest.json() == {"error": mcp_refusal(r)}


def test_get_and_delete_on_mcp_are_405_for_a_server_without_sessions(
        server: ServerProcess) -> None:
    """No MCP session is kept, so there is no server-message stream to GET and no session
    to DELETE: both are MCP's 405, at once, in the JSON-RPC error clients show. A GET was
    an event stream held open with nothing ever on it."""
    headers = {"X-AMP-Agent-ID": "agent_get", "Accept": "text/event-stream"}
    for method in ("GET", "DELETE"):
        r = httpx.request(method, f"{server.url}/mcp", headers=headers, timeout=10)
        assert r.status_code == 405, (method, r.headers)
        assert r.headers["allow"] == "POST"
        refusal = mcp_refusal(r)
        assert refusal["code"] == "METHOD_NOT_ALLOWED"
        assert refusal["message"].startswith(f"{method} /mcp is not served")


def test_a_post_without_accept_is_answered(server: ServerProcess) -> None:
    """A request with no Accept header takes any media type (RFC 9110, 12.5.1; Python's
    urllib sends none): it is answered, not 406 "Client must accept both ..."."""
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    with httpx.Client(headers={"X-AMP-Agent-ID": "agent_accept"}) as http:
        del http.headers["accept"]  # httpx's default */*
        r = http.post(f"{server.url}/mcp", json=hello)
    assert "accept" not in r.request.headers
    assert r.status_code == 200, r.text
    assert '"amp_remember"' in r.text


def test_media_types_in_any_case_are_read_as_in_lower_case(server: ServerProcess) -> None:
    """Media types are case-insensitive (RFC 9110, 8.3.1): a message sent as
    ``Application/JSON`` (which our own check let through) was the SDK's bare-text 415,
    an Accept in capitals its 406."""
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    r = httpx.post(f"{server.url}/mcp", content=json.dumps(hello), headers={
        "X-AMP-Agent-ID": "agent_case", "Content-Type": "Application/JSON; charset=UTF-8",
        "Accept": "Application/JSON, Text/Event-Stream"}, timeout=60)
    assert r.status_code == 200, r.text
    assert '"amp_remember"' in r.text


def test_a_json_rpc_batch_is_refused_saying_so(server: ServerProcess) -> None:
    """A JSON-RPC batch (an array of messages, which protocol 2025-03-26 allowed and
    2025-06-18 dropped) is refused in one line saying what to send instead; the SDK
    answered a 1,200-character dump of its parser's validation errors."""
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}]
    r = httpx.post(f"{server.url}/mcp", json=batch, headers={
        "X-AMP-Agent-ID": "agent_batch", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-03-26"}, timeout=60)
    assert r.status_code == 422, r.text
    refusal = mcp_refusal(r)
    assert refusal["code"] == "VALIDATION_ERROR"
    assert refusal["message"].startswith("A JSON-RPC batch is not taken"), refusal
    assert "Validation error" not in r.text and len(r.text) < 600


async def test_an_old_sse_transport_client_is_refused_at_once(server: ServerProcess) -> None:
    """The HTTP+SSE transport of protocol 2024-11-05 (the only HTTP one of the MCP Python
    SDK before 1.8) opens with a GET and waits for an `endpoint` event: it waited out its
    read timeout (5 minutes by default) on the empty stream; now it fails at once."""
    from mcp.client.sse import sse_client

    with anyio.fail_after(20), pytest.raises(BaseException) as refusal:
        async with sse_client(f"{server.url}/mcp", headers={"X-AMP-Agent-ID": "agent_sse"}):
            pass
    statuses = {getattr(getattr(leaf, "response", None), "status_code", None)
                for leaf in leaves(refusal.value)}
    assert 405 in statuses, leaves(refusal.value)


async def test_a_body_over_the_limit_is_a_refusal_the_sdk_client_shows(
        server: ServerProcess, uid: str) -> None:
    """The SDK's client shows a server's text only from a JSON-RPC error: a 413 in the REST
    envelope reached it as "Server returned an error response". Now the same message as
    the REST route's; the connection stays usable."""
    big = "x" * (4 * 1024 * 1024)  # the default max_request_bytes, plus the message
    async with http_client_for(server.url, {"X-AMP-Agent-ID": f"agent_{uid}"}) as client:
        with pytest.raises(MCPError) as too_big:
            await client.call_tool("amp_remember", {"content": big, "owner_id": f"u_{uid}"})
        await remember(client, content="a small note", owner_id=f"u_{uid}")
    rest = httpx.post(f"{server.url}/amp/v1/memories", headers={"X-AMP-Agent-ID": "agent_x"},
                      json={"type": "semantic", "content": {"text": big}}, timeout=60)
    assert rest.status_code == 413
    assert str(too_big.value) == rest.json()["error"]["message"]
    assert too_big.value.error.data == {"code": "PAYLOAD_TOO_LARGE",
                                        "details": rest.json()["error"]["details"]}


# ---- keys on ---------------------------------------------------------------------------


Keyed = tuple[ServerProcess, dict[str, str]]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    """A keys-required server and one key each for two agents (created with the CLI)."""
    home = tmp_path_factory.mktemp("keyed-home")
    keys = {}
    for agent in ("agent_key_a", "agent_key_b"):
        made = _cli("keys", "create", "--agent", agent, home=home)
        assert made.returncode == 0, made.stderr
        keys[agent] = made.stdout.strip().splitlines()[-1]
    with ServerProcess(home, env={"AMP_REQUIRE_KEYS": "true"}) as proc:
        yield proc, keys


def test_keys_on_mcp_without_a_valid_key_is_401(keyed: Keyed) -> None:
    server, keys = keyed
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in (
        {"X-AMP-Agent-ID": "agent_key_a"},
        {"X-AMP-Agent-ID": "agent_key_a", "X-AMP-API-Key": keys["agent_key_b"]},
        {"X-AMP-Agent-ID": "agent_key_a", "Authorization": "Bearer not-a-key"},
    ):
        r = httpx.post(f"{server.url}/mcp", json=body, headers={**accept, **headers})
        assert r.status_code == 401, headers
        assert mcp_refusal(r) == {"code": "UNAUTHENTICATED",
                                  "message": "A valid API key for this agent is required.",
                                  "details": {}}


async def test_keys_on_sdk_client_needs_its_key(keyed: Keyed,
                                                uid: str) -> None:
    server, keys = keyed
    statuses: list[int] = []
    with pytest.raises(BaseException) as refusal:  # in the SDK's task-group errors
        async with http_client_for(server.url, {"X-AMP-Agent-ID": "agent_key_a"},
                                   statuses=statuses):
            pass
    assert statuses and set(statuses) == {401}  # refused at the door, before any MCP
    # The SDK shows the server's reason (it said "Server returned an error response").
    reasons = [leaf for leaf in leaves(refusal.value) if isinstance(leaf, MCPError)]
    assert [str(r) for r in reasons] == ["A valid API key for this agent is required."]

    via_header = {"X-AMP-Agent-ID": "agent_key_a", "X-AMP-API-Key": keys["agent_key_a"]}
    via_bearer = {"X-AMP-Agent-ID": "agent_key_b",
                  "Authorization": f"Bearer {keys['agent_key_b']}"}
    async with http_client_for(server.url, via_header) as a:
        memory_id = await remember(a, content="Keyed secret", owner_id=f"user_{uid}")
        assert json.loads(await ok(a, "amp_get", memory_id=memory_id))[
            "identity"]["created_by"] == "agent_key_a"
    async with http_client_for(server.url, via_bearer) as b:
        assert await refused(b, "amp_get", memory_id=memory_id) == ACCESS_DENIED


# ---- stdio start-up --------------------------------------------------------------------


def test_stdio_refuses_to_start_without_an_agent_id(tmp_path: Path) -> None:
    done = _cli("mcp", home=tmp_path, env={"AMP_MCP_AGENT_ID": ""})
    assert done.returncode == 2
    assert "AMP_MCP_AGENT_ID is not set" in done.stderr
    assert done.stdout == ""  # stdout belongs to MCP messages


def test_stdio_refuses_to_start_for_a_user_no_request_could_be(tmp_path: Path) -> None:
    """`AMPUP_MEMORY_MCP_USER='bad user'` started, and every AmpUp tool call then refused
    ("The caller's user id is not a valid id."); the process says so once, at start."""
    done = _cli("mcp", home=tmp_path, env={"AMP_MCP_AGENT_ID": "agent_desk",
                                            "AMPUP_MEMORY_MCP_USER": "bad user"})
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("error: AMPUP_MEMORY_MCP_USER 'bad user' is not a valid user id: "
                           "letters, digits and ._@+- (max 200, starting with a letter or "
                           "digit)\n"), done.stderr
    assert done.stdout == ""


def test_stdio_names_the_setting_of_a_bad_agent_id(tmp_path: Path) -> None:
    """A stdio process has no X-AMP-Agent-ID header; the refusal named it anyway."""
    done = _cli("mcp", home=tmp_path, env={"AMP_MCP_AGENT_ID": "bad agent"})
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("error: AMP_MCP_AGENT_ID 'bad agent' is not a valid agent id: it "
                           "may hold only visible ASCII characters (no spaces, control or "
                           "non-ASCII)\n"), done.stderr
    assert done.stdout == ""


async def test_stdio_with_keys_on_needs_the_agents_key(
        keyed: Keyed, uid: str) -> None:
    server, keys = keyed
    env = {"AMP_REQUIRE_KEYS": "true"}
    refused_start = _cli("mcp", home=server.home, env={**env, "AMP_MCP_AGENT_ID": "agent_key_a"})
    assert refused_start.returncode == 2
    assert "AMP_MCP_API_KEY" in refused_start.stderr

    keyed_env = {**env, "AMP_MCP_API_KEY": keys["agent_key_a"]}
    async with stdio_client_for(server.home, "agent_key_a", keyed_env) as client:
        memory_id = await remember(client, content="Stored over stdio", owner_id=f"user_{uid}")
    # The stdio process wrote to the same store the server reads.
    r = httpx.get(f"{server.url}/amp/v1/memories/{memory_id}",
                  headers={"X-AMP-Agent-ID": "agent_key_a", "X-AMP-API-Key": keys["agent_key_a"]})
    assert r.status_code == 200 and r.json()["identity"]["created_by"] == "agent_key_a"


def test_mcp_refuses_a_foreign_host_header_on_localhost(server: ServerProcess) -> None:
    """web/origin.py guards /mcp too when serve binds to 127.0.0.1 (docs/mcp.md)."""
    r = httpx.post(f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                   headers={"Accept": "application/json, text/event-stream",
                            "X-AMP-Agent-ID": "agent_x", "Host": "evil.example"})
    assert r.status_code == 421 and mcp_refusal(r)["code"] == "MISDIRECTED_REQUEST"


# ---- docs/mcp.md stays true ------------------------------------------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "mcp.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_mcp_doc_names_the_real_tools_settings_and_command() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert set(re.findall(r"^\| `(\w+)` \|", doc, re.M)) == TOOLS | AMPUP_TOOLS | ADVICE_TOOLS
    configs = [json.loads(block) for block in _blocks("json")]
    assert len(configs) == 3
    stdio = configs[0]["mcpServers"]["ampup-memory"]
    assert stdio["command"].endswith("ampup-memory") and stdio["args"] == ["mcp"]
    env_names = {env_name(f) for f in Settings.model_fields}
    assert set(stdio["env"]) <= env_names
    assert set(re.findall(r"`((?:AMP|AMPUP)_[A-Z_]+)", doc)) <= env_names
    http = configs[1]["mcpServers"]["ampup-memory"]
    assert http["url"].endswith("/mcp") and set(http["headers"]) == {"X-AMP-Agent-ID",
                                                                       "X-AMP-API-Key"}


async def test_mcp_doc_python_example_runs(server: ServerProcess, uid: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (code,) = _blocks("python")
    code = code.replace("http://127.0.0.1:8765", server.url).replace("user_123", f"user_{uid}")
    # The snippet runs itself with asyncio.run; here a loop is already running.
    assert code.rstrip().endswith("asyncio.run(main())")
    code = code.rstrip().removesuffix("asyncio.run(main())")
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    await namespace["main"]()
    assert capsys.readouterr().out == NO_MEMORIES + "\n"
