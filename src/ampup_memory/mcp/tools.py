"""The MCP tools, built once for every transport.

`build_server(runtime, identity)` returns one `MCPServer` carrying every registered
toolset. The transports differ only in how they answer "who is calling?": stdio acts as
one configured agent, HTTP as the agent each request's own headers name (see
`ampup_memory.mcp.http`). Tools never decide access themselves: they call `AmpService`,
whose rules (read, write, lifecycle) live in one place each.

The AMP tools keep the reference server's names, arguments and reply strings, so an agent
configured for the reference works unchanged. Where the reference printed a Python
``datetime``, ``created`` here is the wire's RFC 3339 spelling.

Later toolsets (the AmpUp memory tools) register through `TOOLSETS`: a toolset is a
function that adds tools to the server given a `ToolEnv`.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from ampup_memory.amp.model import (
    MAX_PAGE_SIZE,
    Content,
    CreateIdentity,
    CreatePolicy,
    CreateScoring,
    ListQuery,
    SearchRequest,
    Status,
)
from ampup_memory.amp.service import AmpService
from ampup_memory.auth import Caller
from ampup_memory.errors import (
    AccessDenied,
    AmpError,
    NotFound,
    ValidationFailed,
    driver_said,
    field_error,
    refuse_nul,
    storage_down,
    storage_trouble,
)
from ampup_memory.mcp.arguments import publish
from ampup_memory.web import jsontext
from ampup_memory.web.body import validation_errors

if TYPE_CHECKING:
    from ampup_memory.runtime import Runtime
    from ampup_memory.search.rerank import Slots
    from ampup_memory.search.service import SearchService

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger("ampup_memory")

SERVER_NAME = "ampup-memory"
NO_MEMORIES = "No memories found."
INTERNAL = "The server hit an unexpected error; it is logged."
NOT_FOUND = "Memory not found."  # the reference's amp_forget answer for every refusal
ARCHIVE = json.dumps({"lifecycle": {"status": Status.archived.value}}).encode("utf-8")

ToolContext = Context[Any, Any]

# What a tool does to memory, for clients that let read-only tools run without asking
# (MCP tool annotations; a tool that is not read-only is destructive unless it says not).
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
NOTES = WRITES.model_copy(update={"idempotent_hint": True})  # the same note is stored once
DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)
IdentityResolver = Callable[[ToolContext], Caller]
"""Who is calling in this request; raises `Unauthenticated` when nobody valid is."""
UserResolver = Callable[[ToolContext], str]
"""The AmpUp user this request speaks for; raises `Unauthenticated` when none is known."""
SearchProvider = Callable[[], "SearchService"]
"""The search service; may open it on first use, raises `ServiceUnavailable` without one."""

# The values of `MemoryType`, spelled out so the schema shows a plain enum (a test pins it).
MemoryTypeArg = Literal["episodic", "semantic", "procedural"]
ImportanceArg = Annotated[float, Field(ge=0.0, le=1.0)]
LimitArg = Annotated[int, Field(ge=1, le=MAX_PAGE_SIZE)]


def error_text(exc: AmpError) -> str:
    """An `AmpError` as the one line a model reads: its message, plus the fields at fault."""
    if isinstance(exc, ValidationFailed):
        problems = [
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}"
            for e in exc.details.get("errors", [])
        ]
        if problems:
            return "Invalid request: " + "; ".join(problems)
    retry = exc.headers.get("Retry-After")
    if retry is not None:
        return f"{exc.message} (Retry after {retry} s.)"
    if exc.code == "MERGE_CONFLICT":  # the agent needs what clashed to resolve it
        return f"{exc.message} Conflicts: " + "; ".join(
            _conflict(c) for c in exc.details.get("conflicts", []))
    return exc.message


def _conflict(c: dict[str, Any]) -> str:
    """One merge conflict (`details.conflicts` of MERGE_CONFLICT) on one line."""
    what = (f"episode {c['episode']} {c['field']}" if "episode" in c
            else f"{c['entity']} {c['predicate']}")
    sides = ", ".join(f"{side} {json.dumps(c[side])}" for side in ("base", "ours", "theirs"))
    return f"{what}: {sides}"


@dataclass(frozen=True)
class ToolEnv:
    """What a toolset needs: the opened runtime and the transport's identity resolvers
    (the AMP agent; the AmpUp user, when the transport can name one) and search."""

    runtime: Runtime
    identity: IdentityResolver
    user: UserResolver | None = None
    search: SearchProvider | None = None
    nul_free: bool = False
    """Refuse U+0000 in every argument, as the REST body parser does for the AmpUp routes
    (their tables cannot hold it); AMP cells may hold it, so the AMP tools leave it."""

    async def reply(self, ctx: ToolContext, op: Callable[..., str], *args: Any,
                    slots: Slots | None = None) -> CallToolResult:
        """Run ``op(caller, *args)`` off the event loop (store and embedder block), in its
        turn of ``slots`` when given (a reranked search: SearchService.slots; a full line
        is refused, a call cancelled while it waits is not run), and turn its text, or
        its `AmpError`, into the tool's result. The caller is resolved per call,
        so over HTTP each request acts as the agent it names. ``op``'s parameters after
        the caller carry the tool's argument names (they name a refused one)."""

        def work() -> str:
            caller = self.identity(ctx)  # identity first, as on the REST routes
            names = list(inspect.signature(op).parameters)[1:]
            for name, value in zip(names, args, strict=True):
                if self.nul_free:
                    refuse_nul(value, [name])
                _json_numbers(value, name)
            return op(caller, *args)

        try:
            if slots is None:
                text = await anyio.to_thread.run_sync(work)
            else:
                async with slots.turn():
                    text = await anyio.to_thread.run_sync(work)
        except AmpError as exc:
            return _text(error_text(exc), error=True)
        except Exception as exc:  # the HTTP faces' rule (web/errors.py), as a tool error
            answer = storage_down(exc)
            if answer is None:
                log.error("unhandled error in an MCP tool call", exc_info=exc)
                return _text(INTERNAL, error=True)
            log.warning("%s in an MCP tool call: %s", storage_trouble(exc),
                        driver_said(exc)[:300])
            return _text(error_text(answer), error=True)
        return _text(text)


def _json_numbers(value: Any, name: str) -> None:
    """NaN, Infinity or 1e400 in an argument, which the SDK's JSON parser reads (JSON has
    none of them), refused as the REST bodies refuse them (`jsontext.loads`: a NaN in a
    typed query's condition matched nothing where POST /query refuses it); and JSON nested
    deeper than a REST body may be."""
    if isinstance(value, float | list | dict):
        try:
            jsontext.loads(json.dumps(value), name)
        except jsontext.JsonRefused as exc:
            raise field_error([name], str(exc), "json_invalid") from None


def _text(text: str, error: bool = False) -> CallToolResult:
    # Built here rather than by raising ToolError, which the SDK would prefix with
    # "Error executing tool …": the reply strings stay exactly the reference's.
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)


Toolset = Callable[[MCPServer[Any], ToolEnv], None]


def _model(model: type[M], **values: Any) -> M:
    """Build a request model from tool arguments; a bad value is a 422 like on the wire."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise validation_errors(exc, prefix=()) from None


def _lines(cells: Iterable[dict[str, Any]]) -> str:
    lines = [
        f"- [{c['type']}] {c['content']['text']} (created: {c['lifecycle']['created_at']})"
        for c in cells
    ]
    return "\n".join(lines) if lines else NO_MEMORIES


# Where amp_remember's arguments sit in the cell it writes.
CELL_ARGUMENTS: dict[tuple[str, ...], str] = {
    ("content", "text"): "content", ("identity", "owner_id"): "owner_id",
    ("scoring", "importance"): "importance", ("access_policy", "readable_by"): "readable_by"}


@dataclass(frozen=True)
class AmpOps:
    """The AMP tools' work, transport-free: each takes the caller and returns the reply."""

    amp: AmpService

    def remember(self, caller: Caller, content: str, owner_id: str, type: str,
                 importance: float, readable_by: list[str] | None) -> str:
        body: dict[str, Any] = {
            "type": type,
            "content": {"text": content, "metadata": {}},
            "identity": {"owner_id": owner_id, "owner_type": "user"},
            "scoring": {"importance": importance},
        }
        if readable_by is not None:
            body["access_policy"] = {"readable_by": readable_by}
        try:
            cell = self.amp.create(caller.agent_id, json.dumps(body).encode("utf-8"))
        except ValidationFailed as exc:
            exc.rename(CELL_ARGUMENTS)
            raise
        return f"Memory stored: {cell.id}"

    def recall(self, caller: Caller, query: str, owner_id: str, limit: int,
               include_stale: bool) -> str:
        req = _model(SearchRequest, query=query, owner_id=owner_id, limit=limit,
                     include_stale=include_stale)
        return _lines(self.amp.search(caller.agent_id, req)["results"])

    def forget(self, caller: Caller, memory_id: str, owner_id: str) -> str:
        try:
            # The owner check is the reference's guard against forgetting the wrong
            # owner's cell; reading the owner needs the read rule, as any read does.
            cell = self.amp.peek(memory_id, caller.agent_id)
            if cell.identity.owner_id != owner_id:
                raise AccessDenied()
            self.amp.patch(memory_id, caller.agent_id, ARCHIVE)
            self.amp.delete(memory_id, caller.agent_id)
        except AccessDenied:
            # Unknown, unreadable, unwritable, deleted or another owner's: one answer.
            raise NotFound(NOT_FOUND) from None
        return f"Memory {memory_id} forgotten."

    def list_memories(self, caller: Caller, owner_id: str, type: str | None,
                      limit: int) -> str:
        query = _model(ListQuery, owner_id=owner_id, type=type, limit=limit)
        return _lines(self.amp.list_cells(caller.agent_id, query)["results"])

    def get(self, caller: Caller, memory_id: str) -> str:
        cell = self.amp.get(memory_id, caller.agent_id)
        return json.dumps(cell.wire(), indent=2, ensure_ascii=False)


def register_amp_tools(server: MCPServer[Any], env: ToolEnv) -> None:
    """The AMP v0.1 tools, under the reference server's names and arguments."""
    ops = AmpOps(env.runtime.amp)

    @server.tool(annotations=WRITES)
    async def amp_remember(
        content: str,
        owner_id: str,
        ctx: ToolContext,
        type: MemoryTypeArg = "semantic",
        importance: ImportanceArg = 0.5,
        readable_by: list[str] | None = None,
    ) -> CallToolResult:
        """Remember a piece of information (create a memory cell owned by owner_id).

        readable_by lists agent-id patterns (`*` is a wildcard) that may read it besides
        you and the owner. Replies `Memory stored: <id>`.
        """
        return await env.reply(ctx, ops.remember, content, owner_id, type, importance,
                               readable_by)

    @server.tool(annotations=READS)
    async def amp_recall(
        query: str,
        owner_id: str,
        ctx: ToolContext,
        limit: LimitArg = 5,
        include_stale: bool = False,
    ) -> CallToolResult:
        """Search owner_id's memories you may read, best match first.

        One line per memory: `- [<type>] <text> (created: <time>)`.
        """
        return await env.reply(ctx, ops.recall, query, owner_id, limit, include_stale)

    @server.tool(annotations=DELETES)
    async def amp_forget(memory_id: str, owner_id: str, ctx: ToolContext) -> CallToolResult:
        """Forget a memory of owner_id: archive it, then delete it."""
        return await env.reply(ctx, ops.forget, memory_id, owner_id)

    @server.tool(annotations=READS)
    async def amp_list_memories(
        owner_id: str,
        ctx: ToolContext,
        type: MemoryTypeArg | None = None,
        limit: LimitArg = 20,
    ) -> CallToolResult:
        """List owner_id's active memories you may read, newest first (no search)."""
        return await env.reply(ctx, ops.list_memories, owner_id, type, limit)

    @server.tool(annotations=READS)
    async def amp_get(memory_id: str, ctx: ToolContext) -> CallToolResult:
        """Read one memory cell by id, as AMP JSON. Counts as an access (resets decay)."""
        return await env.reply(ctx, ops.get, memory_id)

    for name, texts in AMP_ARGUMENTS.items():
        publish(server, name, texts=texts, strict=False, models=AMP_MODELS.get(name, ()),
                renames={"content": "text"})


AMP_ARGUMENTS: dict[str, dict[str, str]] = {
    "amp_remember": {
        "content": "The text to remember.",
        "owner_id": "The user the memory is about and belongs to (user_123).",
        "type": "episodic (an event), semantic (a fact) or procedural (how to do something).",
        "importance": "0 (trivial) to 1 (critical).",
        "readable_by": "Agent-id patterns ('*' is a wildcard: agent_billing_*) that may read "
                       "it besides you and the owner.",
    },
    "amp_recall": {
        "query": "What to look for, in words.",
        "owner_id": "Whose memories to search.",
        "limit": "How many memories at most.",
        "include_stale": "Also return memories whose relevance has decayed.",
    },
    "amp_forget": {
        "memory_id": "The memory's id (mem_…).",
        "owner_id": "Its owner: a guard against forgetting another owner's memory.",
    },
    "amp_list_memories": {
        "owner_id": "Whose memories to list.",
        "type": "Only memories of this type.",
        "limit": "How many memories at most.",
    },
    "amp_get": {"memory_id": "The memory's id (mem_…)."},
}
"""The AMP tools' argument descriptions (`publish`)."""

# The REST models behind each AMP tool, whose bounds its input schema states (the service
# checks them: an empty `owner_id`, a blank `query` or `content`, a `readable_by` pattern).
AMP_MODELS: dict[str, tuple[type[BaseModel], ...]] = {
    "amp_remember": (Content, CreateIdentity, CreateScoring, CreatePolicy),
    "amp_recall": (SearchRequest,),
    "amp_list_memories": (ListQuery,),
}


INSTRUCTIONS = (
    "Shared long-term memory. amp_* tools: AMP v0.1 memory cells, private to you and their "
    "owner unless you name readers in readable_by. remember_memory, search_memory, "
    "query_memory, get_episode, close_memory, branch_memory, merge_memory: AmpUp Memory's "
    "team memory (episodes and cited facts per org/team scope), read under its ACLs. "
    "Learning from your work: call start_session when a conversation starts and get_advice "
    "with the task and that session before substantive work (it answers the steps that "
    "worked for this kind of task, or null); end_session with a short transcript and the "
    "outcome when the conversation ends; get_session reads it back (its reward, and the "
    "judge's verdict once judged). Work outside a session: record_run, then reward_run "
    "once its outcome is known."
)
"""What a client reads at connection: which tools do what, and the advice loop's order
(the seed's learning loop), which no single tool's description can say."""

TOOLSETS: list[Toolset] = [register_amp_tools]
"""Every toolset `build_server` registers; `ampup_memory.mcp.ampup` and `.advice` append theirs."""


def build_server(runtime: Runtime, identity: IdentityResolver,
                 toolsets: Iterable[Toolset] | None = None, *,
                 user: UserResolver | None = None,
                 search: SearchProvider | None = None) -> MCPServer[Any]:
    """One MCP server with every toolset, acting as whoever `identity` says."""
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME,
        version="0.1.0",
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    if toolsets is None:
        # AmpUp's and the advice toolsets append themselves to TOOLSETS when imported.
        from ampup_memory.mcp import advice, ampup  # noqa: F401
        toolsets = TOOLSETS
    env = ToolEnv(runtime=runtime, identity=identity, user=user, search=search)
    for register in toolsets:
        register(server, env)
    return server
