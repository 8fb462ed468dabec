"""Listings for browsing (the web inspector and any client): the scopes a caller can read
with counts, a scope's episodes and its entities, paged.

Visibility is decided by the one rule every read uses (``acl.may_read``), taken once per
distinct current ACL of the view (``MemoryService.readable_acls``); the read index then
counts and pages in SQL the episodes carrying an allowed ACL and the facts whose cited
episodes all do (``ReadIndex.episode_page``, ``fact_counts``, ``entity_page``), so a page
of a scope of 100k facts never loads the scope. A scope, an episode, a fact or a count the
caller may not read is never shown: a listing reveals nothing ``GET /episodes/{id}`` would
not.
"""

from __future__ import annotations

from typing import Any

from ampup_memory.errors import NotFound, field_error
from ampup_memory.memory.service import MemoryService, View

MAX_PAGE = 1000


def scopes(svc: MemoryService, user: str) -> dict[str, Any]:
    """Every scope on ``main`` where the caller may read at least one episode, with the
    episodes, fact versions and entities the caller may read there. A scope with nothing
    readable is left out, exactly as if it did not exist."""
    principal = svc.principal(user)
    out: list[dict[str, Any]] = []
    for scope in svc.tables.scopes():
        try:
            view = svc.view(str(scope))
        except NotFound as exc:  # a workspace that is gone: not listed
            if exc.code != "WORKSPACE_GONE":
                raise
            continue
        acls, count = svc.readable_acls(principal, view)
        if not count:
            continue
        facts, entities = svc.index.fact_counts(str(scope), view.segments, acls)
        out.append({"scope": str(scope), "episodes": count, "facts": facts,
                    "entities": entities})
    return {"scopes": out}


def _size(limit: int) -> int:
    return max(1, min(limit, MAX_PAGE))


def episodes(svc: MemoryService, user: str, view: View, limit: int,
             after: str | None) -> dict[str, Any]:
    """The caller's readable episodes, newest ``occurred_at`` first (then by id), a page at
    a time; ``document_versions`` counts the readable versions of the episode's document."""
    principal = svc.principal(user)
    scope = str(view.scope)
    acls, total = svc.readable_acls(principal, view)
    cursor = None
    if after is not None:
        cursor = svc.readable_episodes(principal, scope, view.segments, [after]).get(after)
        if cursor is None:  # unknown and unreadable: one answer
            raise field_error(["after"], "no such episode in this listing", "cursor_invalid")
    size = _size(limit)
    found = svc.index.episode_page(scope, view.segments, acls, size + 1, cursor)
    page = found[:size]
    versions = svc.index.document_counts(scope, view.segments, acls,
                                         {r.document for r in page if r.document})
    return {"episodes": [{**r.wire(scope), "document_versions": versions.get(r.document, 0)
                          if r.document else 0} for r in page],
            "total": total,
            "next_after": page[-1].id if len(found) > size else None}


def entities(svc: MemoryService, user: str, view: View, limit: int,
             after: str | None) -> dict[str, Any]:
    """The entities with fact versions the caller may see, by name (code point order), a
    page at a time, each with its predicates and how many versions (closures included) it
    holds. ``after`` is any entity name: the page starts at the next one."""
    acls, _ = svc.readable_acls(svc.principal(user), view)
    scope = str(view.scope)
    size = _size(limit)
    found = svc.index.entity_page(scope, view.segments, acls, size + 1, after)
    page = [{"entity": n, "predicates": sorted(per), "versions": sum(per.values())}
            for n, per in found[:size]]
    _, total = svc.index.fact_counts(scope, view.segments, acls)
    return {"entities": page, "total": total,
            "next_after": page[-1]["entity"] if len(found) > size else None}
