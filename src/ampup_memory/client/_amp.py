"""The AMP face (``/amp/v1``), once for `AMPClient` and `AsyncAMPClient`.

Every method is written once, here, as a body that builds a `Call` and hands it to
``self._call``: the sync client's ``_call`` sends it and answers the result, the async
client's answers a coroutine of it (as the AmpUp clients do, `AmpUpFace`). A method's
route, arguments and parsing exist once, so the two clients cannot drift apart.

AMP answers come in several shapes, so the class is generic over each (a type checker has
no "R of T"): ``Obj`` a JSON object (`Versioned`), ``Cells`` a list of cells, ``Flag`` a
bool, ``PageR`` a `Page`, ``SearchR`` a `SearchPage` (each itself, or a coroutine of it),
and ``Items`` what a walker answers (an iterator or an async iterator of cells).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from ampup_memory.client._base import (
    MAX_PAGE_SIZE,
    Call,
    MemoryCell,
    Page,
    SearchPage,
    Transport,
    Versioned,
    _cell_path,
    _healthy,
    _no_content,
    _object,
    _page,
    _patterns,
    _results,
    _search_page,
    _statuses,
    preconditions,
)
from ampup_memory.client.errors import AMPError, ValidationError

Obj = TypeVar("Obj")
Cells = TypeVar("Cells")
Flag = TypeVar("Flag")
PageR = TypeVar("PageR")
SearchR = TypeVar("SearchR")
Items = TypeVar("Items")


@dataclass(frozen=True)
class Pages:
    """An offset-paged listing: ``page(offset)`` is the call for the page at ``offset``;
    the walk ends after a page without ``has_more`` or without results (`next_offset`)."""

    page: Callable[[int], Call[Page]]


def _unhealthy(error: AMPError) -> bool:
    return False


def _search_body(
    query: str, owner_id: str | None, types: Sequence[str] | None,
    status: str | Sequence[str] | None, include_stale: bool, limit: int, offset: int,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "query": query, "include_stale": include_stale, "limit": limit, "offset": offset,
    }
    if owner_id is not None:
        body["owner_id"] = owner_id
    if types is not None:
        body["types"] = [types] if isinstance(types, str) else list(types)
    statuses = _statuses(status)
    if statuses is not None:
        body["status"] = statuses
    return body


def _list_params(
    owner_id: str | None, type: str | None, status: str | None, limit: int, offset: int,
) -> dict[str, str | int]:
    params: dict[str, str | int] = {"limit": limit, "offset": offset}
    for name, value in (("owner_id", owner_id), ("type", type), ("status", status)):
        if value is None:
            continue
        # A list would go out as repeated parameters, of which the server keeps the
        # last: a silently different listing. (search takes several types and statuses.)
        if not isinstance(value, str):
            raise ValidationError(f"a listing takes one {name}, got {value!r}")
        params[name] = value
    return params


def _update_call(memory_id: str, fields: Mapping[str, Any],
                 if_match: str | None) -> Call[Versioned]:
    return Call("PATCH", _cell_path(memory_id), _object, json=dict(fields),
                headers=preconditions(if_match=if_match))


def _delete_what_was_archived(archived: Versioned, delete: Call[bool]) -> Call[bool]:
    """`forget`'s delete, conditional on the version its archive wrote (when it has one)."""
    if archived.etag is None:
        return delete
    return replace(delete, headers={**(delete.headers or {}), "If-Match": archived.etag})


def _archive_call(memory_id: str, if_match: str | None) -> Call[Versioned]:
    return _update_call(memory_id, {"lifecycle": {"status": "archived"}}, if_match)


class AMPCalls(Transport, Generic[Obj, Cells, Flag, PageR, SearchR, Items]):
    """Every AMP method, for a client that says how a call is sent (``_call``) and how a
    listing is walked (``_walk``)."""

    @overload
    def _call(self, call: Call[Versioned]) -> Obj: ...
    @overload
    def _call(self, call: Call[list[MemoryCell]]) -> Cells: ...
    @overload
    def _call(self, call: Call[bool]) -> Flag: ...
    @overload
    def _call(self, call: Call[SearchPage]) -> SearchR: ...
    @overload
    def _call(self, call: Call[Page]) -> PageR: ...
    def _call(self, call: Call[Any]) -> Any:
        raise NotImplementedError

    def _walk(self, pages: Pages) -> Items:
        raise NotImplementedError

    # ---- the reference client's methods ----------------------------------------------

    def remember(
        self,
        content: str | Mapping[str, Any],
        owner_id: str,
        type: str = "semantic",
        importance: float = 0.5,
        readable_by: str | Sequence[str] | None = None,
        *,
        owner_type: str = "user",
        metadata: Mapping[str, Any] | None = None,
        writable_by: str | Sequence[str] | None = None,
        public: bool | None = None,
        confidence: float | None = None,
        decay_rate: float | None = None,
        session_id: str | None = None,
        provenance: Mapping[str, Any] | None = None,
        expires_at: datetime | str | None = None,
    ) -> Obj:
        """Store a memory; returns the created cell. ``content`` is text or ``{text, metadata}``."""
        if isinstance(content, Mapping):
            body_content: dict[str, Any] = dict(content)
            if metadata is not None:
                body_content["metadata"] = dict(metadata)
        else:  # text, or anything else as its string (as the reference does)
            body_content = {"text": str(content), "metadata": dict(metadata or {})}
        identity: dict[str, Any] = {"owner_id": owner_id, "owner_type": owner_type}
        if session_id is not None:
            identity["session_id"] = session_id
        scoring: dict[str, Any] = {"importance": importance}
        if confidence is not None:
            scoring["confidence"] = confidence
        if decay_rate is not None:
            scoring["decay_rate"] = decay_rate
        body: dict[str, Any] = {
            "type": type, "content": body_content, "identity": identity, "scoring": scoring,
        }
        policy: dict[str, Any] = {}
        if readable_by is not None:
            policy["readable_by"] = _patterns(readable_by)
        if writable_by is not None:
            policy["writable_by"] = _patterns(writable_by)
        if public is not None:
            policy["public"] = public
        if policy:
            body["access_policy"] = policy
        if provenance is not None:
            body["provenance"] = dict(provenance)
        if expires_at is not None:
            body["lifecycle"] = {"expires_at": expires_at}  # a datetime: `wire` sends it
        return self._call(Call("POST", "/memories", _object, json=body))

    def recall(
        self, query: str, owner_id: str, limit: int = 5, include_stale: bool = False,
        offset: int = 0,
    ) -> Cells:
        """Search one owner's active (and, if asked, stale) cells; returns the cells."""
        body = _search_body(query, owner_id, None, None, include_stale, limit, offset)
        return self._call(Call("POST", "/memories/search", _results, json=body))

    def get_memory(self, memory_id: str, *, if_none_match: str | None = None) -> Obj:
        """Read one cell (a real read: the server counts the access), with its ``etag``.
        ``if_none_match=<etag>``: `NotModifiedError` (304) while the cell is still that
        version."""
        return self._call(Call("GET", _cell_path(memory_id), _object,
                               headers=preconditions(if_none_match=if_none_match)))

    def list_memories(
        self, owner_id: str | None, type: str | None = None, limit: int = 20, offset: int = 0,
        *, status: str | None = None,
    ) -> Cells:
        """One page of readable cells, newest first (default status active)."""
        params = _list_params(owner_id, type, status, limit, offset)
        return self._call(Call("GET", "/memories", _results, params=params))

    def forget(self, memory_id: str, *, if_match: str | None = None) -> Flag:
        """Archive, then delete: the protocol deletes only archived cells. True on 204.
        ``if_match``: only if the cell is still that version, else
        `PreconditionFailedError`: the archive is sent with it, and the delete with the
        version the archive wrote, so a write landing between the two is not deleted over
        (also `PreconditionFailedError`, the cell left archived)."""
        return self._call(Call("DELETE", _cell_path(memory_id), _no_content,
                               before=_archive_call(memory_id, if_match),
                               follow=None if if_match is None else _delete_what_was_archived))

    def health(self) -> Flag:
        """True when the server answers ``ok``; False (never an exception) otherwise."""
        return self._call(Call("GET", "/health", _healthy, fallback=_unhealthy))

    # ---- beyond the reference --------------------------------------------------------

    def update(self, memory_id: str, *, if_match: str | None = None, **fields: Any) -> Obj:
        """PATCH: sub-objects deep-merge, e.g. ``update(id, scoring={"importance": 0.9})``.
        ``if_match``: only over that version (a cell's ``etag``), else
        `PreconditionFailedError` and nothing changes; the answer has the new ``etag``."""
        return self._call(_update_call(memory_id, fields, if_match))

    def archive(self, memory_id: str, *, if_match: str | None = None) -> Obj:
        """PATCH the status to archived (``if_match`` as for `update`)."""
        return self._call(_archive_call(memory_id, if_match))

    def search(
        self,
        query: str,
        owner_id: str | None = None,
        types: Sequence[str] | None = None,
        status: str | Sequence[str] | None = None,
        include_stale: bool = False,
        limit: int = 10,
        offset: int = 0,
    ) -> SearchR:
        """Search with every filter; returns the whole page (``results``, ``has_more``, …)."""
        body = _search_body(query, owner_id, types, status, include_stale, limit, offset)
        return self._call(Call("POST", "/memories/search", _search_page, json=body))

    def list_page(
        self, owner_id: str | None = None, type: str | None = None, status: str | None = None,
        limit: int = 20, offset: int = 0,
    ) -> PageR:
        """Like `list_memories`, but the whole page including ``has_more``."""
        params = _list_params(owner_id, type, status, limit, offset)
        return self._call(Call("GET", "/memories", _page, params=params))

    def iter_memories(
        self, owner_id: str | None = None, type: str | None = None, status: str | None = None,
        page_size: int = MAX_PAGE_SIZE,
    ) -> Items:
        """Every readable cell matching the filters, fetched page by page."""
        return self._walk(Pages(lambda offset: Call(
            "GET", "/memories", _page,
            params=_list_params(owner_id, type, status, page_size, offset))))

    def iter_search(
        self,
        query: str,
        owner_id: str | None = None,
        types: Sequence[str] | None = None,
        status: str | Sequence[str] | None = None,
        include_stale: bool = False,
        page_size: int = MAX_PAGE_SIZE,
    ) -> Items:
        """Every search hit, best first, fetched page by page."""
        return self._walk(Pages(lambda offset: Call(
            "POST", "/memories/search", _page,
            json=_search_body(query, owner_id, types, status, include_stale, page_size,
                              offset))))

    def spec(self) -> Obj:
        """The server's ``/spec``: version and advertised capabilities."""
        return self._call(Call("GET", "/spec", _object))


__all__ = ["AMPCalls", "Pages"]
