"""`AsyncAMPClient`: the awaitable face, same calls as `AMPClient`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from ampup_memory.client._base import (
    MAX_PAGE_SIZE,
    BaseClient,
    Call,
    MemoryCell,
    Page,
    SearchPage,
    Transport,
    next_offset,
)
from ampup_memory.client.errors import AMPError

T = TypeVar("T")


class AsyncTransport(Transport):
    """Sending calls over an `httpx.AsyncClient`; shared by the async clients.

    Inside ``async with`` a client keeps one connection pool; outside, each call opens and
    closes its own (as the reference does), so a client never outlives the event loop it
    was used on.
    """

    _http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Self:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _send(self, call: Call[T]) -> T:
        try:
            if self._http is not None:
                response = await self._exchange(self._http, call)
            else:
                async with httpx.AsyncClient(timeout=self.timeout) as http:
                    response = await self._exchange(http, call)
        except httpx.HTTPError as exc:
            raise self._connection_error(exc) from exc
        return self._finish(call, response)

    async def _exchange(self, http: httpx.AsyncClient, call: Call[Any]) -> httpx.Response:
        return await http.send(self._build(http, call))


class AsyncAMPClient(BaseClient, AsyncTransport):
    """Asynchronous AMP client. Drop-in for ``amp_client.AsyncAMPClient`` 0.1.0.

    Inside ``async with`` it keeps one connection pool; outside, each call opens and closes
    its own (as the reference does), so a client never outlives the event loop it was
    used on.
    """

    # ---- the reference client's methods ----------------------------------------------

    async def remember(
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
    ) -> MemoryCell:
        """Store a memory; returns the created cell. ``content`` is text or ``{text, metadata}``."""
        return await self._send(self._remember_call(
            content, owner_id, type, importance, readable_by, owner_type=owner_type,
            metadata=metadata, writable_by=writable_by, public=public, confidence=confidence,
            decay_rate=decay_rate, session_id=session_id, provenance=provenance,
            expires_at=expires_at,
        ))

    async def recall(
        self, query: str, owner_id: str, limit: int = 5, include_stale: bool = False,
        offset: int = 0,
    ) -> list[MemoryCell]:
        """Search one owner's active (and, if asked, stale) cells; returns the cells."""
        return await self._send(self._recall_call(query, owner_id, limit, include_stale, offset))

    async def get_memory(self, memory_id: str) -> MemoryCell:
        """Read one cell (a real read: the server counts the access)."""
        return await self._send(self._get_call(memory_id))

    async def list_memories(
        self, owner_id: str | None, type: str | None = None, limit: int = 20, offset: int = 0,
        *, status: str | None = None,
    ) -> list[MemoryCell]:
        """One page of readable cells, newest first (default status active)."""
        return await self._send(self._list_call(owner_id, type, status, limit, offset))

    async def forget(self, memory_id: str) -> bool:
        """Archive, then delete: the protocol deletes only archived cells. True on 204."""
        await self._send(self._archive_call(memory_id))
        return await self._send(self._delete_call(memory_id))

    async def health(self) -> bool:
        """True when the server answers ``ok``; False (never an exception) otherwise."""
        try:
            return await self._send(self._health_call())
        except AMPError:
            return False

    # ---- beyond the reference --------------------------------------------------------

    async def update(self, memory_id: str, **fields: Any) -> MemoryCell:
        """PATCH: sub-objects deep-merge, e.g. ``update(id, scoring={"importance": 0.9})``."""
        return await self._send(self._update_call(memory_id, fields))

    async def archive(self, memory_id: str) -> MemoryCell:
        return await self._send(self._archive_call(memory_id))

    async def search(
        self,
        query: str,
        owner_id: str | None = None,
        types: Sequence[str] | None = None,
        status: str | Sequence[str] | None = None,
        include_stale: bool = False,
        limit: int = 10,
        offset: int = 0,
    ) -> SearchPage:
        """Search with every filter; returns the whole page (``results``, ``has_more``, …)."""
        return await self._send(
            self._search_call(query, owner_id, types, status, include_stale, limit, offset)
        )

    async def list_page(
        self, owner_id: str | None = None, type: str | None = None, status: str | None = None,
        limit: int = 20, offset: int = 0,
    ) -> Page:
        """Like `list_memories`, but the whole page including ``has_more``."""
        return await self._send(self._list_page_call(owner_id, type, status, limit, offset))

    async def iter_memories(
        self, owner_id: str | None = None, type: str | None = None, status: str | None = None,
        page_size: int = MAX_PAGE_SIZE,
    ) -> AsyncIterator[MemoryCell]:
        """Every readable cell matching the filters, fetched page by page."""
        offset: int | None = 0
        while offset is not None:
            page = await self.list_page(owner_id, type, status, page_size, offset)
            for cell in page["results"]:
                yield cell
            offset = next_offset(page)

    async def iter_search(
        self,
        query: str,
        owner_id: str | None = None,
        types: Sequence[str] | None = None,
        status: str | Sequence[str] | None = None,
        include_stale: bool = False,
        page_size: int = MAX_PAGE_SIZE,
    ) -> AsyncIterator[MemoryCell]:
        """Every search hit, best first, fetched page by page."""
        offset: int | None = 0
        while offset is not None:
            page = await self.search(
                query, owner_id, types, status, include_stale, page_size, offset
            )
            for cell in page["results"]:
                yield cell
            offset = next_offset(page)

    async def spec(self) -> dict[str, Any]:
        """The server's ``/spec``: version and advertised capabilities."""
        return await self._send(self._spec_call())


__all__ = ["AsyncAMPClient", "AsyncTransport"]
