"""Listings for browsing (the web inspector and any client): the scopes a caller can read
with counts, a scope's episodes and its entities, paged.

Each one decides visibility through the reads every other route uses
(``MemoryService.readable_episodes`` for episodes, ``MemoryService.visible_facts`` for
facts, both on ``acl.may_read``): a scope, an episode, a fact or a count the caller may not
read is never shown, so a listing reveals nothing ``GET /episodes/{id}`` would not.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ampup_memory.errors import NotFound, field_error
from ampup_memory.memory.episodes import EpisodeRecord
from ampup_memory.memory.service import MemoryService, View

MAX_PAGE = 1000


def _readable(svc: MemoryService, user: str, view: View) -> dict[str, EpisodeRecord]:
    scope = str(view.scope)
    ids = svc.index.episodes_in(scope, view.segments)
    return svc.readable_episodes(svc.principal(user), scope, view.segments, ids)


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
        episodes = _readable(svc, user, view)
        if not episodes:
            continue
        facts = svc.visible_facts(principal, view, None, None)
        out.append({"scope": str(scope), "episodes": len(episodes),
                    "facts": sum(len(v) for v in facts.values()),
                    "entities": len({entity for entity, _ in facts})})
    return {"scopes": out}


def _page_after(keys: list[str], after: str | None, limit: int,
                what: str) -> tuple[int, int]:
    """The slice [start, end) of a sorted listing that follows the cursor ``after``."""
    start = 0
    if after is not None:
        try:
            start = keys.index(after) + 1
        except ValueError:  # unknown and unreadable: one answer
            raise field_error(["after"], f"no such {what} in this listing",
                              "cursor_invalid") from None
    return start, min(len(keys), start + max(1, min(limit, MAX_PAGE)))


def episodes(svc: MemoryService, user: str, view: View, limit: int,
             after: str | None) -> dict[str, Any]:
    """The caller's readable episodes, newest ``occurred_at`` first (then by id), a page at
    a time; ``document_versions`` counts the readable versions of the episode's document."""
    found = sorted(_readable(svc, user, view).values(),
                   key=lambda r: (-r.occurred_at.timestamp(), r.id))
    versions = Counter(r.document for r in found if r.document)
    start, end = _page_after([r.id for r in found], after, limit, "episode")
    page = [{**r.wire(str(view.scope)),
             "document_versions": versions[r.document] if r.document else 0}
            for r in found[start:end]]
    return {"episodes": page, "total": len(found),
            "next_after": page[-1]["id"] if page and end < len(found) else None}


def entities(svc: MemoryService, user: str, view: View, limit: int,
             after: str | None) -> dict[str, Any]:
    """The entities with fact versions the caller may see, by name, a page at a time, each
    with its predicates and how many versions (closures included) it holds."""
    groups = svc.visible_facts(svc.principal(user), view, None, None)
    per: dict[str, dict[str, int]] = {}
    for (entity, predicate), rows in groups.items():
        per.setdefault(entity, {})[predicate] = len(rows)
    names = sorted(per)
    start, end = _page_after(names, after, limit, "entity")
    page = [{"entity": n, "predicates": sorted(per[n]), "versions": sum(per[n].values())}
            for n in names[start:end]]
    return {"entities": page, "total": len(names),
            "next_after": page[-1]["entity"] if page and end < len(names) else None}
