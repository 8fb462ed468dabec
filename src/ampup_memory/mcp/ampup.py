"""AmpUp Memory's MCP tools, on the same server as the AMP tools.

``remember_memory``, ``get_episode`` and ``close_memory`` wrap `memory.mcp_tools`;
``search_memory`` and ``query_memory`` wrap `search.mcp_tools`. Those plain functions call
the services the REST routes call, so rules (ACL visibility, quoting, closing) live there
once; this module only adapts arguments and replies. Every call acts for the AmpUp user the
transport resolves (see `ToolEnv.user`): a transport that knows no user gets a tool error,
never a default user.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, Literal

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import AfterValidator, BaseModel, Field

from ampup_memory.auth import Caller
from ampup_memory.blank import NOT_BLANK_PATTERN, not_blank
from ampup_memory.errors import ServiceUnavailable, Unauthenticated
from ampup_memory.mcp.arguments import publish
from ampup_memory.mcp.tools import NOTES, READS, TOOLSETS, WRITES, ToolContext, ToolEnv
from ampup_memory.memory import mcp_tools as memory_tools
from ampup_memory.memory.facts import Value, raw_value
from ampup_memory.search import mcp_tools as search_tools
from ampup_memory.search.rerank import Slots
from ampup_memory.search.service import SearchService
from ampup_memory.timefmt import Instant
from ampup_memory.web.body import JsonInt

# remember_memory's source: a label, checked by its own limit (the episode's source is
# longer; `MAX_LABEL`), and not blank (`mcp:remember_memory:alice:` names no origin): refused
# as other blank text is, the rule published in its schema.
NoteLabel = Annotated[str, Field(min_length=1, max_length=memory_tools.MAX_LABEL,
                                 json_schema_extra={"pattern": NOT_BLANK_PATTERN}),
                      AfterValidator(not_blank)]
NO_USER = ("AmpUp Memory tools need a user: this MCP connection names none "
           "(stdio: set AMPUP_MEMORY_MCP_USER; HTTP: X-AmpUp-User, or a key bound to a user).")


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def user_env(env: ToolEnv) -> ToolEnv:
    """The same env whose caller also carries the AmpUp user, resolved per call."""
    resolve_user = env.user

    def identity(ctx: ToolContext) -> Caller:
        if resolve_user is None:
            raise Unauthenticated(NO_USER)
        user = resolve_user(ctx)  # with keys on this checks the key, too
        try:
            caller = env.identity(ctx)
        except Unauthenticated:
            # The AmpUp tools act for the user alone; a trust-mode client that names no
            # AMP agent may still use them.
            return Caller(agent_id="", user_id=user)
        return replace(caller, user_id=user)

    return ToolEnv(runtime=env.runtime, identity=identity, user=env.user, search=env.search,
                   nul_free=True)


def register_ampup_tools(server: MCPServer[Any], env: ToolEnv) -> None:
    """AmpUp Memory's tools under the names of issues 4 and 5."""
    uenv = user_env(env)
    memory = env.runtime.memory

    def search() -> SearchService:
        if env.search is None:
            raise ServiceUnavailable("Search is not available in this process.")
        return env.search()

    async def search_slots() -> Slots | None:
        """The turns a search tool waits for (SearchService.slots). Opening search
        blocks (stdio opens it on first use), so off the loop; if it fails, None: the
        tool's own call opens it again and answers the error."""
        if env.search is None:
            return None
        try:
            svc = await anyio.to_thread.run_sync(env.search)
        except Exception:
            return None
        return svc.slots(None)

    def remember(caller: Caller, scope: str, text: str, source: str, acl: list[str] | None,
                 about: list[str] | None, occurred_at: datetime | None, document: str | None,
                 branch: str | None) -> str:
        return _json(memory_tools.remember_memory(
            memory, caller, scope=scope, text=text, source=source, acl=acl, about=about,
            occurred_at=occurred_at, document=document, branch=branch))

    def episode(caller: Caller, scope: str, id: str | None, document: str | None,
                as_of: datetime | None, branch: str | None, at_commit: str | None,
                pin: str | None, snapshot: str | None) -> str:
        return _json(memory_tools.get_episode(
            memory, caller, scope=scope, id=id, document=document, as_of=as_of,
            branch=branch, at_commit=at_commit, pin=pin, snapshot=snapshot))

    def close(caller: Caller, scope: str, entity: str, predicate: str, reason: str,
              acl: list[str] | None, branch: str | None, value: Any) -> str:
        return _json(memory_tools.close_memory(
            memory, caller, scope=scope, entity=entity, predicate=predicate, reason=reason,
            acl=acl, branch=branch, value=value))

    def fork(caller: Caller, scope: str, name: str, source: str | None,
             at_commit: str | None) -> str:
        return _json(memory_tools.branch_memory(memory, caller, scope=scope, name=name,
                                                source=source, at_commit=at_commit))

    def join(caller: Caller, scope: str, source: str, into: str | None,
             message: str | None, dry_run: bool) -> str:
        return _json(memory_tools.merge_memory(memory, caller, scope=scope, source=source,
                                               into=into, message=message, dry_run=dry_run))

    def find_facts(caller: Caller, scope: str, query: str, as_of: str | None, limit: int,
                   tz: str | None, branch: str | None, at_commit: str | None,
                   pin: str | None, snapshot: str | None) -> str:
        user = memory_tools.caller_user(caller)
        return search_tools.search_memory(search(), user, scope, query, as_of=as_of,
                                          limit=limit, tz=tz, branch=branch,
                                          at_commit=at_commit, pin=pin, snapshot=snapshot)

    def find_passages(caller: Caller, scope: str, query: str | None, find: str, limit: int,
                      tz: str | None, branch: str | None, at_commit: str | None,
                      pin: str | None, snapshot: str | None, type: str | None,  # noqa: A002
                      entity: str | None, predicate: list[str] | None,
                      where: list[dict[str, Any]] | None, select: list[str] | None,
                      order_by: list[dict[str, Any]] | None, offset: int | None,
                      as_of: str | None) -> str:
        # One parameter per tool argument, so a refused value is named as the caller sent it.
        typed = {"type": type, "entity": entity, "predicate": predicate, "where": where,
                 "select": select, "order_by": order_by, "offset": offset, "as_of": as_of}
        # What the caller gave that this find does not take goes into its request too, so
        # it is refused as POST /query refuses it, not dropped without a word.
        given = {k: v for k, v in typed.items() if v is not None}
        user = memory_tools.caller_user(caller)
        if find in ("facts", "entities"):  # the same typed query POST /query answers
            from ampup_memory.memory.query import TypedQuery
            from ampup_memory.memory.query import run as typed_query
            from ampup_memory.memory.service import build

            passages = {k: v for k, v in {"query": query, "tz": tz}.items() if v is not None}
            req = build(TypedQuery, scope=scope, find=find, limit=limit, branch=branch,
                        at_commit=at_commit, pin=pin, snapshot=snapshot, **given, **passages)
            return _json(typed_query(memory, user, req))
        return _json(search_tools.query_memory(search(), user, scope, query, find=find,
                                               limit=limit, tz=tz, branch=branch,
                                               at_commit=at_commit, pin=pin,
                                               snapshot=snapshot, other=given))

    @server.tool(annotations=NOTES)
    async def remember_memory(
        scope: str,
        text: str,
        ctx: ToolContext,
        source: NoteLabel = "chat",
        acl: list[str] | None = None,
        about: list[str] | None = None,
        occurred_at: Instant | None = None,
        document: str | None = None,
        branch: str | None = None,
    ) -> CallToolResult:
        """Keep a note in team memory `scope` (org/team) as an episode.

        Its source is `mcp:remember_memory:<you>:<source>`. Readable by you only unless
        `acl` lists readers (`user:<id>`, `group:<id>`, `role:<id>` or `*`). Replies JSON
        `{"id", "commit", "created"}`; the same note again is not stored twice.
        """
        return await uenv.reply(ctx, remember, scope, text, source, acl, about, occurred_at,
                                document, branch)

    @server.tool(annotations=READS)
    async def get_episode(
        scope: str,
        ctx: ToolContext,
        id: str | None = None,
        document: str | None = None,
        as_of: Instant | None = None,
        branch: str | None = None,
        at_commit: str | None = None,
        pin: str | None = None,
        snapshot: str | None = None,
    ) -> CallToolResult:
        """Read one episode with its numbered units, as JSON: by `id` (the ids
        search_memory lists) or, with `document`, the newest version you may read.
        `pin` (pin_…) or `snapshot` (snap_…) reads exactly what it holds."""
        return await uenv.reply(ctx, episode, scope, id, document, as_of, branch, at_commit,
                                pin, snapshot)

    @server.tool(annotations=WRITES)
    async def close_memory(
        scope: str,
        entity: str,
        predicate: str,
        reason: str,
        ctx: ToolContext,
        acl: list[str] | None = None,
        branch: str | None = None,
        # POST /close's own `Value` (text up to its limit, a number, a boolean or a money
        # object), so the input schema states what the server refuses
        value: Value | None = None,
    ) -> CallToolResult:
        """End the current value of (entity, predicate): it stops being current but stays
        in history. `reason` is kept as its own episode. For a many-valued attribute
        (schema cardinality many) `value` names the one value to end. Replies JSON."""
        # a money object as plain JSON data, which the NUL check reads as it reads a body
        return await uenv.reply(ctx, close, scope, entity, predicate, reason, acl, branch,
                                None if value is None else raw_value(value))

    @server.tool(annotations=WRITES)
    async def branch_memory(
        scope: str,
        name: str,
        ctx: ToolContext,
        source: str | None = None,
        at_commit: str | None = None,
    ) -> CallToolResult:
        """Fork branch `name` of `scope` from branch `source` (default main), at its head or
        `at_commit`. Write on it with `branch=name`; nobody sees it on main until
        `merge_memory`. Replies JSON `{"name", "base", "head", ...}`."""
        return await uenv.reply(ctx, fork, scope, name, source, at_commit)

    @server.tool(annotations=WRITES)
    async def merge_memory(
        scope: str,
        source: str,
        ctx: ToolContext,
        into: str | None = None,
        message: str | None = None,
        dry_run: bool = False,
    ) -> CallToolResult:
        """Merge branch `source` into `into` (default main), three-way per
        (entity, predicate). On a conflict nothing is written and the error lists the
        conflicts; `dry_run` reports without writing. Replies JSON `{"merged", "commit",
        "changes", ...}`."""
        return await uenv.reply(ctx, join, scope, source, into, message, dry_run)

    @server.tool(annotations=READS)
    async def search_memory(
        scope: str,
        query: str,
        ctx: ToolContext,
        as_of: str | None = None,
        limit: JsonInt = 10,
        tz: str | None = None,
        branch: str | None = None,
        at_commit: str | None = None,
        pin: str | None = None,
        snapshot: str | None = None,
    ) -> CallToolResult:
        """Search the facts of team memory `scope` you may read; the text answer.

        Facts grouped by entity, each citing `[e<n> ...]` labels, then source text no fact
        cites; the last line `episodes:` maps labels to ids for get_episode. `as_of` (RFC
        3339) reads the values current then; `tz` (IANA) places calendar words;
        `at_commit` (a ledger commit id) searches memory as that commit left it;
        `pin` (pin_…) or `snapshot` (snap_…) searches exactly what it holds.
        """
        return await uenv.reply(ctx, find_facts, scope, query, as_of, limit, tz, branch,
                                at_commit, pin, snapshot, slots=await search_slots())

    @server.tool(annotations=READS)
    async def query_memory(
        scope: str,
        ctx: ToolContext,
        query: str | None = None,
        find: Literal["passages", "facts", "entities"] = "passages",
        limit: JsonInt = 10,
        tz: str | None = None,
        branch: str | None = None,
        at_commit: str | None = None,
        pin: str | None = None,
        snapshot: str | None = None,
        type: str | None = None,  # noqa: A002 - the query language's word
        entity: str | None = None,
        predicate: list[str] | None = None,
        where: list[dict[str, Any]] | None = None,
        select: list[str] | None = None,
        order_by: list[dict[str, Any]] | None = None,
        offset: JsonInt | None = None,
        as_of: str | None = None,
    ) -> CallToolResult:
        """`find: "passages"` (default): ranked passages of the episodes you may read in
        `scope`, as JSON, for `query` (needs no extracted facts). `find: "facts"` or
        `"entities"`: a typed query over current values, as POST /query answers it: `type`
        (entity type), `entity`, `predicate` (facts), `where` [{attribute, op, value}] with
        op eq|ne|lt|lte|gt|gte|in|contains, `select`, `order_by` [{attribute, desc}],
        `offset`, `as_of`. `at_commit` reads memory as that commit left it; `pin` (pin_…)
        or `snapshot` (snap_…) as what it holds."""
        slots = await search_slots() if find == "passages" else None
        return await uenv.reply(ctx, find_passages, scope, query, find, limit, tz, branch,
                                at_commit, pin, snapshot, type, entity, predicate, where,
                                select, order_by, offset, as_of, slots=slots)

    for name, (models, texts) in ampup_arguments().items():
        # remember_memory's source is a label inside the episode's source, not the source
        publish(server, name, texts=texts, models=models,
                renames={"text": "body", "source": "from"},
                own=("source",) if name == "remember_memory" else ())


def ampup_arguments() -> dict[str, tuple[tuple[type[BaseModel], ...], dict[str, str]]]:
    """Per tool: the REST request models its service checks (their bounds and texts go
    into its input schema, `publish`) and what a model needs to know beyond them."""
    from ampup_memory.memory.api import DocumentRequest
    from ampup_memory.memory.branches import CreateBranch, MergeRequest
    from ampup_memory.memory.episodes import WriteEpisode
    from ampup_memory.memory.facts import CloseValue
    from ampup_memory.memory.query import TypedQuery
    from ampup_memory.search.service import FactSearchRequest, PassageQueryRequest

    when = "an RFC 3339 time with an offset (2025-07-01T09:30:00Z)"
    return {
        "remember_memory": ((WriteEpisode,), {
            "text": "The note to keep.",
            "source": "A short label of where the note came from (default chat); the "
                      "episode's source is mcp:remember_memory:<you>:<source>.",
            "occurred_at": f"When it happened, {when} (default now).",
        }),
        "get_episode": ((DocumentRequest,), {
            "id": "An episode id (64 hex characters), as search_memory's last line lists "
                  "them. Give id or document, not both.",
            "document": "A document key: its newest version you may read.",
            "as_of": f"With document: the version current at {when}.",
        }),
        "close_memory": ((CloseValue,), {
            "entity": "The entity whose value ends (acme, deal:42).",
            "predicate": "The attribute that ends (budget, owner).",
            "acl": "Who may read the reason: '*', 'user:<id>', 'group:<id>' or "
                   "'role:<name>' (default: the entries the closed value's episodes share).",
        }),
        "branch_memory": ((CreateBranch,), {
            "source": "The branch to fork (default main).",
            "at_commit": "Fork at this commit of source instead of its head.",
        }),
        "merge_memory": ((MergeRequest,), {
            "source": "The branch to merge in.",
            "into": "The branch merged into (default main).",
            "message": "The merge commit's message.",
            "dry_run": "Report what would merge and write nothing.",
        }),
        "search_memory": ((FactSearchRequest,), {
            "query": "What to look for: a question or keywords.",
            "as_of": f"Values current at {when} (default now).",
            "limit": "How many facts at most.",
            "tz": "IANA time zone (Europe/Berlin) for calendar words such as 'last week' "
                  "(default UTC).",
        }),
        "query_memory": ((PassageQueryRequest, TypedQuery), {
            "query": "Words to find passages for; needed for find: passages.",
            "find": "passages (default): ranked source text; facts or entities: a typed "
                    "query over current values.",
            "limit": "How many results at most (passages up to 100, facts and entities up "
                     "to 1000).",
            "where": "facts and entities: conditions [{attribute, op, value}], op one of "
                     "eq, ne, lt, lte, gt, gte, in, contains.",
            "order_by": "entities: sort by [{attribute, desc}].",
            "offset": "facts and entities: skip this many (paging).",
            "as_of": f"facts and entities: values current at {when} (default now).",
            "tz": "IANA time zone (Europe/Berlin) for calendar words such as 'last week' "
                  "(default UTC).",
        }),
    }


TOOLSETS.append(register_ampup_tools)
