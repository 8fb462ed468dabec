"""AmpUp Memory's MCP tools as plain functions: ``remember_memory``, ``get_episode``,
``close_memory``, ``branch_memory``, ``merge_memory``. The MCP server registers them beside
the AMP tools; each takes the memory service and the authenticated caller and returns
JSON-ready data. Errors are the usual ``AmpError`` classes, so every transport reports them
the same way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ampup_memory.auth import Caller
from ampup_memory.errors import Unauthenticated, ValidationFailed, field_error
from ampup_memory.memory.acl import MAX_ID, own_acl, require_id
from ampup_memory.memory.episode_types import NOTE_PREFIX
from ampup_memory.memory.episodes import MAX_SOURCE, WriteEpisode
from ampup_memory.memory.facts import CloseValue
from ampup_memory.memory.service import MemoryService, build
from ampup_memory.memory.snapshots import read_view

# remember_memory's `source` is a label in the episode's source, after the prefix and the
# author: this long it fits under MAX_SOURCE for every user id, so a label one user may
# send every user may, and a refusal states the label's limit, not the whole source's.
MAX_LABEL = MAX_SOURCE - len(NOTE_PREFIX) - MAX_ID - len(":")


def caller_user(caller: Caller) -> str:
    """The AmpUp user an MCP caller speaks for (the key's user, or the trusted header)."""
    if not caller.user_id:
        raise Unauthenticated("AmpUp Memory tools need a user: a key bound to one, or "
                              "X-AmpUp-User in local trust mode.")
    return require_id(caller.user_id, ["user"], "user id")


def remember_memory(svc: MemoryService, caller: Caller, *, scope: str, text: str,
                    source: str = "chat", acl: list[str] | None = None,
                    about: list[str] | None = None, occurred_at: datetime | None = None,
                    document: str | None = None, branch: str | None = None) -> dict[str, Any]:
    """Keep a note as an episode. Source ``mcp:remember_memory:<author>:<source>``; the
    note is readable by its author only unless ``acl`` says otherwise."""
    user = caller_user(caller)
    try:
        req = build(
            WriteEpisode, scope=scope, branch=branch, source=f"{NOTE_PREFIX}{user}:{source}",
            body=text, acl=own_acl(user) if acl is None else acl, about=about,
            occurred_at=occurred_at, document=document)
        # the write checks the body too (a blank one has no text to cite)
        episode_id, new, holder = svc.write_episode(user, req)
    except ValidationFailed as exc:
        exc.rename({("body",): "text"})  # the episode's body is this tool's text
        raise
    return {"id": episode_id, "commit": holder, "created": new is not None}


def get_episode(svc: MemoryService, caller: Caller, *, scope: str, id: str | None = None,
                document: str | None = None, as_of: datetime | None = None,
                branch: str | None = None, at_commit: str | None = None,
                pin: str | None = None, snapshot: str | None = None) -> dict[str, Any]:
    """An episode with its units, by id or (newest readable version) by document key;
    ``pin`` / ``snapshot`` read what that pin or snapshot holds."""
    user = caller_user(caller)
    if (id is None) == (document is None):
        raise field_error(["id"], "give exactly one of id and document")
    if id is not None and as_of is not None:  # an id names one version; it was ignored
        raise field_error(["as_of"], "as_of picks a version of a document: give it with "
                          "document, not with id")
    if id is not None:
        return svc.get_episode(user, id, read_view(svc, scope, branch, at_commit, pin,
                                                   snapshot))
    from ampup_memory.memory.api import DocumentRequest

    # POST /document's body, so its checks (the one `DocumentKey` rule) are the same
    req = build(DocumentRequest, scope=scope, document=document, as_of=as_of, branch=branch,
                at_commit=at_commit, pin=pin, snapshot=snapshot)
    view = read_view(svc, req.scope, req.branch, req.at_commit, req.pin, req.snapshot)
    return svc.document(user, req.document, view, req.as_of)


def close_memory(svc: MemoryService, caller: Caller, *, scope: str, entity: str,
                 predicate: str, reason: str, acl: list[str] | None = None,
                 branch: str | None = None, value: Any = None) -> dict[str, Any]:
    """End the current value of (entity, predicate), or of its one ``value`` when the
    attribute is many-valued; the reason is its own episode."""
    user = caller_user(caller)
    req = build(CloseValue, scope=scope, branch=branch, entity=entity, predicate=predicate,
                reason=reason, acl=acl, value=value)
    return svc.close_value(user, req)


def branch_memory(svc: MemoryService, caller: Caller, *, scope: str, name: str,
                  source: str | None = None, at_commit: str | None = None) -> dict[str, Any]:
    """Fork branch ``name`` of ``scope`` from ``source`` (default main), as POST /branches."""
    from ampup_memory.memory import branches

    user = caller_user(caller)
    try:
        req = build(branches.CreateBranch, scope=scope, name=name, at_commit=at_commit,
                    **{"from": source})
        return branches.create(svc, user, req)
    except ValidationFailed as exc:
        exc.rename({("from",): "source"})  # POST /branches' from is this tool's source
        raise


def merge_memory(svc: MemoryService, caller: Caller, *, scope: str, source: str,
                 into: str | None = None, message: str | None = None,
                 dry_run: bool = False) -> dict[str, Any]:
    """Merge branch ``source`` into ``into`` (default main), as POST /merge; a conflict is
    the same MERGE_CONFLICT error, listing the conflicts, with nothing written."""
    from ampup_memory.memory import branches

    user = caller_user(caller)
    try:
        req = build(branches.MergeRequest, scope=scope, into=into, message=message,
                    dry_run=dry_run, **{"from": source})
        return branches.merge(svc, user, req, admin=caller.admin)
    except ValidationFailed as exc:
        exc.rename({("from",): "source"})  # POST /merge's from is this tool's source
        raise

