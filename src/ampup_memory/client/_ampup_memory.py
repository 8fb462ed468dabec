"""The AmpUp memory routes, once for both clients: episodes, facts, search and typed
queries, the browsing listings, the ledger, schemas, extraction, principals and status.

Each method builds its request and hands it to ``self._call`` (`AmpUpFace`): the sync
client answers the JSON, the async one a coroutine of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ampup_memory.client._ampup_face import (
    JSON,
    AmpUpFace,
    R,
    W,
    _fields,
    _names,
    _scope_path,
)
from ampup_memory.client._base import path_segment


class MemoryCalls(AmpUpFace[R, W]):
    # ---- episodes --------------------------------------------------------------------

    def remember(
        self, scope: str, text: str, *, source: str, acl: str | Sequence[str] | None = None,
        about: str | Sequence[str] | None = None, occurred_at: datetime | str | None = None,
        document: str | None = None, branch: str | None = None,
    ) -> R:
        """Write one episode (``body`` = ``text``): ``{id, commit, created}``."""
        return self._post("/episodes", _fields(
            scope=scope, source=source, body=text, acl=self._acl(acl),
            about=None if about is None else _names(about), occurred_at=occurred_at,
            document=document, branch=branch))

    def remember_batch(
        self, scope: str, episodes: Sequence[Mapping[str, Any]], *, branch: str | None = None,
    ) -> R:
        """Write several episodes (each ``{source, body, acl?, about?, occurred_at?,
        document?}``, a time as a datetime or RFC 3339 text; ``acl`` left out is
        `remember`'s default) in one commit:
        ``{commit, episodes: [{id, status}]}``. Any conflict refuses them all."""
        sent = [{**episode, "acl": self._acl(episode.get("acl"))} for episode in episodes]
        return self._post("/episodes/batch", _fields(scope=scope, episodes=sent, branch=branch))

    def set_acl(
        self, scope: str, id: str, acl: str | Sequence[str], *, branch: str | None = None,
        if_match: str | None = None,
    ) -> R:
        """Change an episode's ACL (its writer, or admin), which every version then obeys:
        ``{id, acl, commit}``. ``if_match`` (`get_episode`'s ``etag``): only over that ACL,
        else `PreconditionFailedError`; the answer has the new ``etag``."""
        return self._put(f"/episodes/{path_segment(id, 'id')}/acl",
                         _fields(scope=scope, acl=_names(acl), branch=branch),
                         if_match=if_match)

    def document(
        self, scope: str, document: str, *, as_of: datetime | str | None = None,
        branch: str | None = None, at_commit: str | None = None, pin: str | None = None,
        snapshot: str | None = None,
    ) -> R:
        """The newest version of ``document`` you may read (as of ``as_of``), as an
        episode with its units."""
        return self._post("/document", _fields(
            scope=scope, document=document, as_of=as_of, branch=branch, at_commit=at_commit,
            pin=pin, snapshot=snapshot))

    def get_episode(
        self, scope: str, id: str, *, branch: str | None = None, at_commit: str | None = None,
        pin: str | None = None, snapshot: str | None = None, if_none_match: str | None = None,
    ) -> R:
        """One episode with its body and numbered units; its ``etag`` is its ACL's version
        (for `set_acl`'s ``if_match``; ``if_none_match``: `NotModifiedError` while current)."""
        return self._get(f"/episodes/{path_segment(id, 'id')}", scope=scope, branch=branch,
                         at_commit=at_commit, pin=pin, snapshot=snapshot,
                         if_none_match=if_none_match)

    def episodes(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        after: str | None = None, at_commit: str | None = None, pin: str | None = None,
        snapshot: str | None = None,
    ) -> R:
        """One page of the episodes you may read: ``{episodes, total, next_after}``."""
        return self._get("/episodes", scope=scope, branch=branch, limit=limit, after=after,
                         at_commit=at_commit, pin=pin, snapshot=snapshot)

    def iter_episodes(
        self, scope: str, *, branch: str | None = None, at_commit: str | None = None,
        pin: str | None = None, snapshot: str | None = None, page_size: int = 1000,
    ) -> W:
        """Every episode you may read, newest first, page by page."""
        return self._listing("/episodes", "episodes", "after", scope=scope, branch=branch,
                             at_commit=at_commit, pin=pin, snapshot=snapshot, limit=page_size)

    # ---- browsing --------------------------------------------------------------------

    def scopes(self) -> R:
        """Every scope where you may read an episode on ``main``, with what you may read
        of it: ``{scopes: [{scope, episodes, facts, entities}]}``."""
        return self._get("/scopes")

    def entities(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        after: str | None = None, at_commit: str | None = None, pin: str | None = None,
        snapshot: str | None = None,
    ) -> R:
        """One page of the entities with facts you may see, by name:
        ``{entities: [{entity, predicates, versions}], total, next_after}``."""
        return self._get("/entities", scope=scope, branch=branch, limit=limit, after=after,
                         at_commit=at_commit, pin=pin, snapshot=snapshot)

    def iter_entities(
        self, scope: str, *, branch: str | None = None, at_commit: str | None = None,
        pin: str | None = None, snapshot: str | None = None, page_size: int = 1000,
    ) -> W:
        """Every entity with facts you may see, by name, page by page."""
        return self._listing("/entities", "entities", "after", scope=scope, branch=branch,
                             at_commit=at_commit, pin=pin, snapshot=snapshot, limit=page_size)

    def episode_types(self) -> R:
        """The episode types the server knows (by ``source`` prefix): ``{types}``."""
        return self._get("/episode-types")

    def ledger(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        before: str | None = None, pin: str | None = None, snapshot: str | None = None,
    ) -> R:
        """One page of the branch's commits, newest first: ``{commits, next_before}``."""
        return self._get("/ledger", scope=scope, branch=branch, limit=limit, before=before,
                         pin=pin, snapshot=snapshot)

    def iter_ledger(
        self, scope: str, *, branch: str | None = None, pin: str | None = None,
        snapshot: str | None = None, page_size: int = 1000,
    ) -> W:
        """Every commit of the branch's chain, newest first, page by page."""
        return self._listing("/ledger", "commits", "before", scope=scope, branch=branch,
                             pin=pin, snapshot=snapshot, limit=page_size)

    # ---- facts and search ------------------------------------------------------------

    def search(
        self, scope: str, query: str, *, limit: int | None = None,
        as_of: datetime | str | None = None, branch: str | None = None, tz: str | None = None,
        at_commit: str | None = None, pin: str | None = None, snapshot: str | None = None,
        rerank: bool | None = None,
    ) -> R:
        """Facts matching ``query`` and the source text no fact cites (``POST /search``)."""
        return self._post("/search", _fields(
            scope=scope, query=query, limit=limit, as_of=as_of, branch=branch, tz=tz,
            at_commit=at_commit, pin=pin, snapshot=snapshot, rerank=rerank))

    def query(
        self, scope: str, query: str | None = None, *, find: str = "passages",
        limit: int | None = None, **fields: Any,
    ) -> R:
        """``POST /query``: ranked passages (``find="passages"``, needs ``query``), or typed
        ``find="facts"`` / ``"entities"`` with ``type``, ``entity``, ``predicate``,
        ``where``, ``select``, ``order_by``, ``offset``, ``as_of`` as keyword arguments;
        both take ``branch``, ``at_commit``, ``pin``, ``snapshot``."""
        return self._post("/query", _fields(scope=scope, find=find, query=query, limit=limit,
                                            **fields))

    def facts(
        self, scope: str, entity: str, *, predicate: str | None = None,
        as_of: datetime | str | None = None, history: bool | None = None,
        branch: str | None = None, at_commit: str | None = None, pin: str | None = None,
        snapshot: str | None = None,
    ) -> R:
        """An entity's current facts (every version with ``history=True``): ``{facts}``."""
        return self._get("/facts", scope=scope, entity=entity, predicate=predicate,
                         as_of=as_of, history=history, branch=branch,
                         at_commit=at_commit, pin=pin, snapshot=snapshot)

    def add_fact(
        self, scope: str, entity: str, predicate: str, value: str | int | float | bool | JSON,
        *, quote: str, cites: Sequence[Mapping[str, Any]],
        valid_from: datetime | str | None = None, valid_to: datetime | str | None = None,
        branch: str | None = None,
    ) -> R:
        """Post one fact citing episode units (``cites=[{"episode": id, "unit": n}]``);
        ``quote`` must occur in a cited unit: ``{id, commit}``."""
        return self._post("/facts", _fields(
            scope=scope, entity=entity, predicate=predicate, value=value, quote=quote,
            cites=[dict(c) for c in cites], valid_from=valid_from, valid_to=valid_to,
            branch=branch))

    def add_facts(
        self, scope: str, facts: Sequence[Mapping[str, Any]], *, branch: str | None = None,
    ) -> R:
        """Post several facts (each shaped as `add_fact`'s body, its times datetimes or
        RFC 3339 text) in one commit:
        ``{ids, commit}``; one invalid fact refuses them all."""
        return self._post("/facts/batch", _fields(scope=scope, facts=[dict(f) for f in facts],
                                                  branch=branch))

    def close_fact(
        self, scope: str, entity: str, predicate: str, reason: str, *,
        value: str | int | float | bool | None = None, acl: str | Sequence[str] | None = None,
        branch: str | None = None,
    ) -> R:
        """End an attribute's current value (``POST /close``; ``reason`` becomes its own
        episode): ``{episode, commit, closed, fact}``. ``acl`` left out is the server's
        default (what the closed value's episodes share), not this client's user."""
        return self._post("/close", _fields(
            scope=scope, entity=entity, predicate=predicate, reason=reason, value=value,
            acl=self._optional_acl(acl), branch=branch))

    # ---- schemas and extraction ------------------------------------------------------

    def schema(
        self, scope: str, *, branch: str | None = None, at_commit: str | None = None,
        as_of: datetime | str | None = None, history: bool | None = None,
        if_none_match: str | None = None, pin: str | None = None,
        snapshot: str | None = None,
    ) -> R:
        """The scope's schema in force (``schema`` None when it has none); ``history=True``
        adds every version with its window. ``etag``: the commit that set it (None without
        a schema); ``if_none_match`` with it: `NotModifiedError` while it is in force."""
        return self._get(f"/schemas/{_scope_path(scope)}", branch=branch,
                         at_commit=at_commit, as_of=as_of, history=history,
                         pin=pin, snapshot=snapshot, if_none_match=if_none_match)

    def set_schema(
        self, scope: str, *, builtin: str | None = None, schema: Mapping[str, Any] | None = None,
        branch: str | None = None, if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> R:
        """Admin: set the scope's schema, a built-in by name or a schema body, as a commit:
        ``{scope, branch, name, version, commit, set_at, schema, changed}``. ``if_match``
        (`schema`'s ``etag``): only over that version; ``if_none_match="*"``: only where the
        branch has no schema yet; else `PreconditionFailedError`."""
        return self._put(f"/schemas/{_scope_path(scope)}", _fields(
            builtin=builtin, schema=None if schema is None else dict(schema), branch=branch),
            if_match=if_match, if_none_match=if_none_match)

    def builtin_schemas(self) -> R:
        """The built-in schemas, in full: ``{schemas}``."""
        return self._get("/schemas")

    def extraction_status(self, scope: str, *, branch: str | None = None) -> R:
        """How far extraction has read the branch (counts of what you may read)."""
        return self._get("/extraction/status", scope=scope, branch=branch)

    def extraction_set_aside(self, scope: str, *, branch: str | None = None) -> R:
        """The branch's episodes extraction set aside: ``{items}``."""
        return self._get("/extraction/set-aside", scope=scope, branch=branch)

    # ---- principals and status (admin) -----------------------------------------------

    def principal(self, user: str, *, if_none_match: str | None = None) -> R:
        """Admin: a user's ``{user, groups, roles}``, with its ``etag``."""
        return self._get(f"/principals/{path_segment(user, 'user')}",
                         if_none_match=if_none_match)

    def set_principal(
        self, user: str, *, groups: Sequence[str] = (), roles: Sequence[str] = (),
        if_match: str | None = None,
    ) -> R:
        """Admin: replace a user's groups and roles: ``{user, groups, roles}``.
        ``if_match`` (`principal`'s ``etag``): only over that version, else
        `PreconditionFailedError`."""
        return self._put(f"/principals/{path_segment(user, 'user')}",
                         {"groups": _names(groups), "roles": _names(roles)},
                         if_match=if_match)

    def status(self) -> R:
        """Admin: what the server is made of and how it is doing (``GET /status``)."""
        return self._get("/status")


__all__ = ["MemoryCalls"]
