"""Audit every MCP tool as an outside client would: the official MCP SDK client over
streamable HTTP (a real ``serve``) and over stdio (a real ``ampup-memory mcp``).

    PYTHONPATH=src:. python tools/mcp_audit.py [--transports http,stdio]
                                              [--backends sqlite,postgres]
                                              [--keys off,on] [--out DIR]

Per server (docs/testing.md, "The MCP audit"):

1. ``tools/list``: every input schema is valid JSON Schema (Draft 2020-12), every tool and
   every argument has a description.
2. Every argument of every tool, one at a time over a valid call: left out, null, each
   JSON type, empty, blank, NUL, control characters, right-to-left and combining marks,
   100,000 characters, numbers past int64 and ±1e308, a 10,000-item list, JSON text
   (shallow and 300 deep), an unknown extra argument; over HTTP also JSON nested 100,000
   deep, a lone surrogate, NaN, ±Infinity and 1e400 (alone, in a list, in an object),
   sent as raw JSON-RPC (the SDK client cannot send them).
   Every answer must come within the time limit, be a tool result (never a JSON-RPC
   error), carry no traceback nor the "unexpected error" answer (the tools' 500); a call
   the input schema refuses must be refused as ``Invalid request: <argument>: …`` naming
   the argument (the AMP tools coerce as the reference does: see below), a call it allows
   must not be refused by the argument check.
3. Over HTTP, as a second agent and user: another caller's AMP cell, episode, document,
   fact, run and session against missing ones, through each tool that takes the id: one
   identical answer.
4. Over HTTP, the reads (an episode by id and by document, a session, a typed query, an
   AMP cell) answer the same data as the REST route each tool wraps.

The AMP tools keep the SDK's lax argument check (the AMP reference's leniency: "10" is a
number there), so a value their schema refuses but pydantic's lax mode takes is not a
finding. Findings go to ``DIR/findings.json``; the exit code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server_process import ServerProcess, plain_client  # noqa: E402

USER, OTHER = "aud.user", "aud.other"
AGENT, OTHER_AGENT = "aud_agent", "aud_other"
QUIET = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
         "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0", "AMP_SCORING_PATCH_LIMIT": "0"}
INTERNAL = "The server hit an unexpected error"
CALL_TIMEOUT = 90.0
AMP_TOOLS = {"amp_remember", "amp_recall", "amp_forget", "amp_list_memories", "amp_get"}
MISSING = object()

# (label, value) sent in place of one argument.
EDGES: list[tuple[str, Any]] = [
    ("null", None), ("empty", ""), ("blank", " \t\n "), ("NUL", "a\x00b"),
    ("control", "\x01\x1b[31m\x7f"), ("rtl", "\u202eevil\u202c"),
    ("combining", "e" + "\u0301" * 50), ("emoji", "\U0001f600"), ("bom", "\ufeff"),
    ("100k chars", "x" * 100_000), ("true", True), ("-1", -1), ("0", 0),
    ("2**64", 2**64), ("-2**63-1", -2**63 - 1), ("1.5", 1.5), ("1e308", 1e308),
    ("-1e308", -1e308), ("object", {"a": 1}), ("empty object", {}), ("list", [1]),
    ("empty list", []), ("list of text", ["x"]), ("list of NUL", ["a\x00b"]),
    ("list of 100k chars", ["x" * 100_000]), ("10k items", ["a"] * 10_000),
    ("nested 50", json.loads("[" * 50 + "]" * 50)), ("numeric text", "10"),
    ("bool text", "true"), ("json text", '["x"]'),
    ("deep json text", "[" * 300 + "]" * 300),
]


@dataclass
class Finding:
    config: str
    kind: str
    tool: str
    argument: str
    edge: str
    detail: str


@dataclass
class Audit:
    config: str
    findings: list[Finding] = field(default_factory=list)
    calls: int = 0
    notes: dict[str, int] = field(default_factory=dict)

    def find(self, kind: str, tool: str, argument: str, edge: str, detail: str) -> None:
        self.findings.append(Finding(self.config, kind, tool, argument, edge, detail[:400]))

    def note(self, what: str) -> None:
        self.notes[what[:300]] = self.notes.get(what[:300], 0) + 1


def text_of(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


def json_types(prop: dict[str, Any]) -> set[str]:
    """The JSON types a property's schema allows (its own or its ``anyOf`` branches')."""
    branches = prop.get("anyOf", [prop])
    types: set[str] = set()
    for b in branches:
        t = b.get("type")
        types |= set(t) if isinstance(t, list) else {t} if t else {"any"}
    return types


# ---------------------------------------------------------------- connecting


@asynccontextmanager
async def http_client(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=CALL_TIMEOUT))
    async with http, Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
        yield client


@asynccontextmanager
async def stdio_client(home: Path, env: dict[str, str]) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ampup_memory.cli", "mcp"],
        env={**os.environ, "AMPUP_MEMORY_HOME": str(home), "AMP_MCP_AGENT_ID": AGENT,
             "AMPUP_MEMORY_MCP_USER": USER, **QUIET, **env})
    async with Client(params) as client:
        yield client


# ---------------------------------------------------------------- seeding


async def call(client: Client, tool: str, args: dict[str, Any]) -> CallToolResult:
    with anyio.fail_after(CALL_TIMEOUT):
        return await client.call_tool(tool, args)


async def seed(client: Client) -> dict[str, str]:
    """One record of each kind the tools take an id of, written through the tools."""
    scope = f"a{uuid.uuid4().hex[:8]}/team_1"

    async def ok(tool: str, **args: Any) -> str:
        result = await call(client, tool, args)
        if result.is_error:
            raise RuntimeError(f"seeding {tool}: {text_of(result)}")
        return text_of(result)

    cell = (await ok("amp_remember", content="Acme prefers e-mail.", owner_id=USER)
            ).removeprefix("Memory stored: ")
    episode = json.loads(await ok("remember_memory", scope=scope, text="Acme renewed.\n\n"
                                  "Budget is 40k.", document="plan"))
    await ok("branch_memory", scope=scope, name="trial")
    run = json.loads(await ok("record_run", scope=scope, task="renew acme"))["id"]
    session = json.loads(await ok("start_session", scope=scope, task="renew acme"))["id"]
    ended = json.loads(await ok("start_session", scope=scope, task="renew acme"))["id"]
    await ok("end_session", session=ended, transcript="did it", outcome="done")
    return {"scope": scope, "memory_id": cell, "episode": episode["id"],
            "commit": episode["commit"], "run": run, "session": session, "ended": ended}


def valid_calls(s: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Calls of each tool that its checks accept (or refuse only for what exists), over
    which one argument at a time is replaced: one per shape (query_memory's finds)."""
    scope = s["scope"]
    typed: dict[str, Any] = {
        "scope": scope, "type": "deal", "offset": 0, "as_of": "2025-07-01T09:30:00Z",
        "limit": 5, "branch": "main",
        "where": [{"attribute": "plan", "op": "eq", "value": "Pro"}]}
    single: dict[str, dict[str, Any]] = {
        "amp_remember": {"content": "note", "owner_id": USER, "type": "semantic",
                         "importance": 0.5, "readable_by": ["*"]},
        "amp_recall": {"query": "acme", "owner_id": USER, "limit": 5, "include_stale": False},
        "amp_forget": {"memory_id": "mem_00000000000000000000000000", "owner_id": USER},
        "amp_list_memories": {"owner_id": USER, "type": "semantic", "limit": 5},
        "amp_get": {"memory_id": s["memory_id"]},
        "remember_memory": {"scope": scope, "text": "a note", "source": "chat",
                            "acl": ["*"], "about": ["acme"],
                            "occurred_at": "2025-07-01T09:30:00Z", "document": "d1",
                            "branch": "main"},
        "get_episode": {"scope": scope, "id": s["episode"], "branch": "main"},
        "close_memory": {"scope": scope, "entity": "acme", "predicate": "plan",
                         "reason": "ended", "acl": ["*"], "branch": "main"},
        "branch_memory": {"scope": scope, "name": f"b{uuid.uuid4().hex[:6]}",
                          "source": "main"},
        "merge_memory": {"scope": scope, "source": "trial", "into": "main",
                         "message": "merge", "dry_run": True},
        "search_memory": {"scope": scope, "query": "acme budget", "limit": 5,
                          "tz": "Europe/Berlin", "branch": "main"},
        "query_memory": {"scope": scope, "query": "acme", "find": "passages", "limit": 5,
                         "branch": "main"},
        "get_advice": {"scope": scope, "task": "renew acme", "session": s["session"]},
        "record_run": {"scope": scope, "task": "t", "trace": "x", "outcome": "ok",
                       "acl": ["*"], "branch": "main"},
        "reward_run": {"run": s["run"], "reward": 0.5, "reason": "fine"},
        "start_session": {"scope": scope, "task": "t", "acl": ["*"], "branch": "main"},
        "end_session": {"session": "ses_" + "0" * 26, "transcript": "t", "outcome": "o",
                        "reward": 0.5, "reason": "r"},
        "get_session": {"session": s["session"]},
    }
    return {name: [call] for name, call in single.items()} | {"query_memory": [
        {"scope": scope, "query": "acme", "find": "passages", "limit": 5, "branch": "main"},
        {**typed, "find": "facts", "entity": "acme", "predicate": ["plan"],
         "where": [{"op": "eq", "value": "Pro"}]},
        {**typed, "find": "entities", "select": ["plan"],
         "order_by": [{"attribute": "plan", "desc": True}]}]}


# ---------------------------------------------------------------- part 1: the schemas


def check_schemas(audit: Audit, tools: list[Any]) -> None:
    for tool in tools:
        schema = tool.input_schema
        try:
            Draft202012Validator.check_schema(schema)
        except Exception as exc:  # noqa: BLE001 - any schema error is the finding
            audit.find("invalid input schema", tool.name, "-", "-", str(exc))
        if not (tool.description or "").strip():
            audit.find("no tool description", tool.name, "-", "-", "")
        for name, prop in schema.get("properties", {}).items():
            if not (prop.get("description") or "").strip():
                audit.find("no argument description", tool.name, name, "-", json.dumps(prop))


# ---------------------------------------------------------------- part 2: the arguments


def explained(tool: str, argument: str, edge: str, text: str) -> bool:
    """A refusal of a schema-valid call by a rule the tool's description states and its
    schema does not (docs/testing.md, "The MCP audit"): query_memory's arguments and
    ``limit`` depend on ``find``, as POST /query's do."""
    if tool != "query_memory":
        return False
    return text.endswith(": Extra inputs are not permitted") or (
        argument == "limit" and "less than or equal to 100" in text)


def decoded(prop: dict[str, Any], edge: str) -> bool:
    """A list or object sent as JSON text to an argument that takes no text: decoded, as
    the SDK decodes it for every tool (mcp/arguments.py `_unquoted`), so not refused."""
    return edge == "json text" and "string" not in json_types(prop)


def names_argument(text: str, argument: str) -> bool:
    return text.startswith("Invalid request") and argument in text


async def probe(audit: Audit, client: Client, tool: Any, args: dict[str, Any],
                argument: str, edge: str) -> CallToolResult | None:
    """One call; what breaks the rules is noted. None when no tool result came."""
    audit.calls += 1
    sent = {k: v for k, v in args.items() if v is not MISSING}
    try:
        result = await call(client, tool.name, sent)
    except TimeoutError:
        audit.find("hang", tool.name, argument, edge, f"no answer in {CALL_TIMEOUT} s")
        return None
    except Exception as exc:  # noqa: BLE001 - a protocol error is what is looked for
        audit.find("protocol error", tool.name, argument, edge, f"{type(exc).__name__}: {exc}")
        return None
    text = text_of(result)
    if "Traceback" in text or 'File "' in text:
        audit.find("traceback", tool.name, argument, edge, text)
    if INTERNAL in text:
        audit.find("unexpected error (500)", tool.name, argument, edge, text)
    errors = list(Draft202012Validator(
        tool.input_schema, format_checker=Draft202012Validator.FORMAT_CHECKER).iter_errors(sent))
    strict = tool.name not in AMP_TOOLS
    if errors:
        if result.is_error and not names_argument(text, argument) and argument != "-":
            # A schema-invalid value refused for something else first (another rule of the
            # service) is fine; a refusal of its argument must name it.
            if text.startswith("Invalid request"):
                audit.find("refusal names no argument", tool.name, argument, edge, text)
        elif not result.is_error and strict and not decoded(
                tool.input_schema.get("properties", {}).get(argument, {}), edge):
            audit.find("schema-invalid call accepted", tool.name, argument, edge,
                       f"{errors[0].message[:150]} -> {text[:200]}")
    elif result.is_error:
        if explained(tool.name, argument, edge, text):
            audit.note(f"{tool.name}: {argument}: {text[:160]}")
        elif "Input should be" in text or "Extra inputs" in text:
            audit.find("schema-valid call refused", tool.name, argument, edge, text)
        else:
            audit.note(f"{tool.name}: {text[:160]}")
    return result


async def arguments(audit: Audit, client: Client, tools: list[Any],
                    calls: dict[str, list[dict[str, Any]]]) -> None:
    for tool in tools:
        bases = calls.get(tool.name)
        if not bases:
            audit.find("no valid call known", tool.name, "-", "-", "the audit needs updating")
            continue
        print(f"{audit.config}: {tool.name} ({audit.calls} calls so far)", file=sys.stderr)
        await probe(audit, client, tool, {}, "-", "no arguments")
        for given in bases:
            base = {k: v for k, v in given.items() if v is not None}
            result = await probe(audit, client, tool, dict(base), "-", "valid call")
            if result is not None and result.is_error:  # the edges below test less
                audit.note(f"valid call refused: {tool.name}: {text_of(result)[:160]}")
            await probe(audit, client, tool, {**base, "zz_unknown": 1}, "zz_unknown", "extra")
            required = set(tool.input_schema.get("required", []))
            for name in tool.input_schema.get("properties", {}):
                if name in required:
                    await probe(audit, client, tool, {**base, name: MISSING}, name, "missing")
                for edge, value in EDGES:
                    await probe(audit, client, tool, {**base, name: value}, name, edge)


# Raw JSON-RPC over HTTP, for what the SDK client cannot send.
DEEP = "[" * 100_000 + "]" * 100_000
LONE = '"\\udc00x"'
# Numbers JSON has not, which the SDK's parser reads: refused as the REST bodies refuse them.
NOT_FINITE = ("NaN", "Infinity", "-Infinity", "1e400")
RAW_EDGES = [("nested 100000", DEEP), ("lone surrogate", LONE),
             *((n, n) for n in NOT_FINITE), *((f"[{n}]", f"[{n}]") for n in NOT_FINITE),
             *((f"{{a: {n}}}", f'{{"a": {n}}}') for n in NOT_FINITE)]


async def raw_http(audit: Audit, url: str, headers: dict[str, str], tools: list[Any],
                   calls: dict[str, list[dict[str, Any]]]) -> None:
    base_headers = {**headers, "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=CALL_TIMEOUT, verify=False) as http:
        init = await http.post("/mcp", headers=base_headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "mcp-audit", "version": "1"}}})
        session = init.headers.get("mcp-session-id")
        hdrs = {**base_headers, **({"mcp-session-id": session} if session else {}),
                "mcp-protocol-version": "2025-06-18"}
        await http.post("/mcp", headers=hdrs, json={
            "jsonrpc": "2.0", "method": "notifications/initialized"})
        for tool in tools:
            base = calls.get(tool.name, [{}])[0]
            for name in tool.input_schema.get("properties", {}):
                for edge, raw in RAW_EDGES:
                    rest = json.dumps({k: v for k, v in base.items() if k != name})
                    args = rest[:-1] + (", " if len(rest) > 2 else "") + \
                        f'{json.dumps(name)}: {raw}}}'
                    body = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
                            f'{{"name": {json.dumps(tool.name)}, "arguments": {args}}}}}')
                    audit.calls += 1
                    try:
                        r = await http.post("/mcp", headers=hdrs, content=body.encode())
                    except httpx.TimeoutException:
                        audit.find("hang", tool.name, name, edge, "raw HTTP")
                        continue
                    reply = r.text
                    if r.status_code >= 500 or "Traceback" in reply or INTERNAL in reply:
                        audit.find("server error", tool.name, name, edge,
                                   f"{r.status_code} {reply[:300]}")
                    elif '"code":-32700' in reply and r.status_code == 400:
                        # Not JSON the SDK's parser reads (a lone surrogate is no Unicode
                        # text): the message is refused whole before any tool runs.
                        audit.note(f"raw {edge}: 400 parse error (the SDK's transport)")
                    elif '"code":-32600' in reply and r.status_code == 422:
                        # JSON the REST bodies refuse (too deep): refused whole by the
                        # server's check before the SDK parses it, as a REST body is.
                        audit.note(f"raw {edge}: 422 refused message (jsontext)")
                    elif '"error"' in reply and '"isError"' not in reply:
                        audit.find("protocol error", tool.name, name, edge,
                                   f"{r.status_code} {reply[:300]}")
                    elif any(n in edge for n in NOT_FINITE) and '"isError":true' not in reply:
                        audit.find("a number JSON has not accepted", tool.name, name, edge,
                                   reply[:300])


# ---------------------------------------------------------------- part 3: other callers


# (tool, arguments with {id} where the id goes, the seeded id, a missing id,
#  the REST route reading the same record as the other caller)
def foreign(s: dict[str, str]) -> list[tuple[str, dict[str, Any], str, str, str]]:
    scope = s["scope"]
    return [
        ("amp_get", {"memory_id": "{id}"}, s["memory_id"], "mem_00000000000000000000000000",
         "/amp/v1/memories/{id}"),
        ("amp_forget", {"memory_id": "{id}", "owner_id": USER}, s["memory_id"],
         "mem_00000000000000000000000000", "/amp/v1/memories/{id}"),
        ("get_episode", {"scope": scope, "id": "{id}"}, s["episode"], "0" * 64,
         f"/episodes/{{id}}?scope={scope}"),
        ("get_session", {"session": "{id}"}, s["session"], "ses_" + "0" * 26,
         "/sessions/{id}"),
        ("end_session", {"session": "{id}", "transcript": "t", "outcome": "o"},
         s["session"], "ses_" + "0" * 26, "/sessions/{id}"),
        ("get_advice", {"scope": scope, "task": "t", "session": "{id}"}, s["session"],
         "ses_" + "0" * 26, "/sessions/{id}"),
        ("reward_run", {"run": "{id}", "reward": 0.5, "reason": "r"}, s["run"],
         "run_" + "0" * 26, "/runs/{id}"),
        ("reward_run", {"run": "{id}", "reward": 0.5, "reason": "r"}, s["ended"],
         "ses_" + "0" * 26, "/sessions/{id}"),
        # a document and a fact only their author reads (the fact cites the seeded note)
        ("get_episode", {"scope": scope, "document": "{id}"}, "plan", "nodoc",
         "POST /document"),
        ("close_memory", {"scope": scope, "entity": "acme", "predicate": "{id}",
                          "reason": "r"}, "plan", "nope", "POST /close"),
    ]


async def other_callers(audit: Audit, url: str, s: dict[str, str],
                        callers: dict[str, dict[str, str]]) -> None:
    headers = callers["other"]
    with plain_client(base_url=url, timeout=60, headers=callers["me"]) as mine:
        r = mine.post("/facts", json={
            "scope": s["scope"], "entity": "acme", "predicate": "plan", "value": "Pro",
            "quote": "Acme renewed", "cites": [{"episode": s["episode"], "unit": 1}]})
        if r.status_code != 201:
            raise RuntimeError(f"seeding a fact: {r.status_code} {r.text}")
    with plain_client(base_url=url, timeout=60, headers=headers) as rest:
        async with http_client(url, headers) as client:
            for tool, template, seeded, missing, route in foreign(s):
                answers = []
                for record in (seeded, missing):
                    args = {k: v.replace("{id}", record) if isinstance(v, str) else v
                            for k, v in template.items()}
                    result = await call(client, tool, args)
                    if route.startswith("POST "):  # the route takes the tool's arguments
                        r = rest.post(route.removeprefix("POST "), json=args)
                    else:
                        r = rest.get(route.replace("{id}", record))
                    answers.append((result.is_error, text_of(result), r.status_code,
                                    r.json().get("error", {}).get("message", "")))
                    audit.calls += 1
                (e1, t1, s1, m1), (e2, t2, s2, m2) = answers
                if (e1, t1) != (e2, t2):
                    audit.find("another caller's record differs from a missing one", tool,
                               json.dumps(template), "-",
                               f"theirs: {t1[:150]} | missing: {t2[:150]}")
                if (s1, m1) != (s2, m2):
                    audit.note(f"REST {route}: theirs {s1} {m1} / missing {s2} {m2}")
                if e1 and m1 and route.count("?") == 0 and m1 not in t1:
                    audit.note(f"{tool} vs REST: tool {t1[:120]!r}, REST {s1} {m1[:120]!r}")


# ---------------------------------------------------------------- part 4: the same data


def same_reads(s: dict[str, str]) -> list[tuple[str, dict[str, Any], str, dict[str, Any] | None]]:
    """(tool, arguments, REST route, its POST body): reads whose answers must be equal."""
    scope = s["scope"]
    typed = {"scope": scope, "find": "facts", "entity": "acme",
             "as_of": "2100-01-01T00:00:00Z"}
    return [
        ("get_episode", {"scope": scope, "id": s["episode"]},
         f"/episodes/{s['episode']}?scope={scope}", None),
        ("get_episode", {"scope": scope, "document": "plan"}, "/document",
         {"scope": scope, "document": "plan"}),
        ("get_session", {"session": s["ended"]}, f"/sessions/{s['ended']}", None),
        ("query_memory", typed, "/query", typed),
        ("amp_get", {"memory_id": s["memory_id"]}, f"/amp/v1/memories/{s['memory_id']}",
         None),
    ]


def comparable(data: Any) -> Any:
    """An answer without what differs between two reads of the same record: an AMP
    cell's access count and times (each read is an access)."""
    if isinstance(data, dict):
        return {k: comparable(v) for k, v in data.items()
                if k not in ("access_count", "last_accessed_at", "relevance")}
    return data


async def same_data(audit: Audit, url: str, s: dict[str, str],
                    callers: dict[str, dict[str, str]]) -> None:
    headers = callers["me"]
    with plain_client(base_url=url, timeout=60, headers=headers) as rest:
        async with http_client(url, headers) as client:
            for tool, args, route, body in same_reads(s):
                audit.calls += 1
                result = await call(client, tool, args)
                r = rest.post(route, json=body) if body is not None else rest.get(route)
                try:
                    mine = json.loads(text_of(result))
                except ValueError:
                    mine = text_of(result)
                if result.is_error or r.status_code != 200 or \
                        comparable(mine) != comparable(r.json()):
                    audit.find("tool and REST route answer differently", tool,
                               json.dumps(args), "-",
                               f"tool: {text_of(result)[:180]} | REST {r.status_code}: "
                               f"{r.text[:180]}")


# ---------------------------------------------------------------- driving


async def audit_client(audit: Audit, connect: Callable[[], Any],
                       after: Callable[[list[Any], dict[str, Any]], Awaitable[None]]
                       | None = None) -> None:
    async with connect() as client:
        tools = (await client.list_tools()).tools
        check_schemas(audit, tools)
        seeded = await seed(client)
        calls = valid_calls(seeded)
        await arguments(audit, client, tools, calls)
    if after is not None:
        await after(tools, {"seeded": seeded, "calls": calls})


def create_key(env: dict[str, str], agent: str, user: str) -> str:
    """``ampup-memory keys create``; the key is the last line it prints."""
    done = subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "keys", "create", "--agent", agent,
         "--user", user], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


async def run_config(backend: str, transport: str, keys: bool) -> Audit:
    audit = Audit(f"{backend}-{transport}-keys-{'on' if keys else 'off'}")
    started = time.monotonic()
    async with AsyncExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-audit-")))
        # The server runs this checkout's code, whatever the venv's editable install says.
        env = {**QUIET, "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        if backend == "postgres":
            from tests.pg import postgres_factory
            url = stack.enter_context(postgres_factory()).new_database("audit")
            env.update({"AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
                        "AMP_STORE_URI": url})
        callers: dict[str, dict[str, str]] = {}
        for name, agent, user in (("me", AGENT, USER), ("other", OTHER_AGENT, OTHER)):
            callers[name] = {"X-AMP-Agent-ID": agent}
            if keys:  # the key is bound to the user: it names the user
                env["AMPUP_MEMORY_HOME"] = str(home)
                callers[name]["X-AMP-API-Key"] = create_key(env, agent, user)
            else:
                callers[name]["X-AmpUp-User"] = user
        if keys:
            env.update({"AMP_REQUIRE_KEYS": "1",
                        "AMP_MCP_API_KEY": callers["me"]["X-AMP-API-Key"]})
        if transport == "http":
            server = stack.enter_context(ServerProcess(home, env=env))
            headers = callers["me"]

            async def after(tools: list[Any], state: dict[str, Any]) -> None:
                await raw_http(audit, server.url, headers, tools, state["calls"])
                await other_callers(audit, server.url, state["seeded"], callers)
                await same_data(audit, server.url, state["seeded"], callers)

            await audit_client(audit, lambda: http_client(server.url, headers), after)
        else:
            await audit_client(audit, lambda: stdio_client(home, env))
    print(f"{audit.config}: {audit.calls} calls, {len(audit.findings)} findings, "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    return audit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transports", default="http,stdio")
    parser.add_argument("--backends", default="sqlite",
                        help="sqlite,postgres (postgres starts a throwaway server)")
    parser.add_argument("--keys", default="off", help="off,on (on: AMP_REQUIRE_KEYS, "
                        "each caller a key bound to its user)")
    parser.add_argument("--out", type=Path, default=Path("mcp-audit-report"))
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    audits = [asyncio.run(run_config(b, t, k == "on"))
              for b in opts.backends.split(",") for k in opts.keys.split(",")
              for t in opts.transports.split(",")]
    findings = [asdict(f) for a in audits for f in a.findings]
    (opts.out / "findings.json").write_text(json.dumps(findings, indent=2,
                                                       ensure_ascii=False))
    (opts.out / "notes.json").write_text(json.dumps({a.config: a.notes for a in audits},
                                                    indent=2, ensure_ascii=False))
    seen: set[tuple[str, str, str]] = set()
    for f in findings:
        key = (f["kind"], f["tool"], f["argument"])
        if key not in seen:
            seen.add(key)
            print(f"{f['config']}: {f['kind']}: {f['tool']}({f['argument']}={f['edge']}): "
                  f"{f['detail'][:200]}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
