"""`AMPClient`: the blocking face over one `httpx.Client`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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


class SyncTransport(Transport):
    """Sending calls over one blocking `httpx.Client`, opened on first use; shared by the
    sync clients. Use a client as a context manager, or call ``close()``."""

    _http: httpx.Client | None = None

    def _open(self) -> httpx.Client:
        if self._http is None or self._http.is_closed:  # usable after close(), as requests
            self._http = httpx.Client(timeout=self.timeout)
        return self._http

    def close(self) -> None:
        """Close the connection pool (a later call opens a new one)."""
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(self, call: Call[T]) -> T:
        http = self._open()
        request = self._build(http, call)
        try:
            response = http.send(request)
        except httpx.HTTPError as exc:
            raise self._connection_error(exc) from exc
        return self._finish(call, response)


class AMPClient(BaseClient, SyncTransport):
    """Synchronous AMP client. Drop-in for ``amp_client.AMPClient`` 0.1.0.

    ``AMPClient("http://127.0.0.1:8765", "agent_x", api_key=None)``: the URL may omit
    ``/amp/v1``; ``agent_id`` is sent as ``X-AMP-Agent-ID`` and ``api_key`` (when the server
    requires keys) as ``X-AMP-API-Key``. Use it as a context manager or call ``close()``.
    """

    @property
    def session(self) -> httpx.Client:
        """The HTTP session (an ``httpx.Client``), under the reference client's name, for
        calls this client does not wrap."""
        return self._open()

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
    ) -> MemoryCell:
        """Store a memory; returns the created cell. ``content`` is text or ``{text, metadata}``."""
        return self._send(self._remember_call(
            content, owner_id, type, importance, readable_by, owner_type=owner_type,
            metadata=metadata, writable_by=writable_by, public=public, confidence=confidence,
            decay_rate=decay_rate, session_id=session_id, provenance=provenance,
            expires_at=expires_at,
        ))

    def recall(
        self, query: str, owner_id: str, limit: int = 5, include_stale: bool = False,
        offset: int = 0,
    ) -> list[MemoryCell]:
        """Search one owner's active (and, if asked, stale) cells; returns the cells."""
        return self._send(self._recall_call(query, owner_id, limit, include_stale, offset))

    def get_memory(self, memory_id: str) -> MemoryCell:
        """Read one cell (a real read: the server counts the access)."""
        return self._send(self._get_call(memory_id))

    def list_memories(
        self, owner_id: str | None, type: str | None = None, limit: int = 20, offset: int = 0,
        *, status: str | None = None,
    ) -> list[MemoryCell]:
        """One page of readable cells, newest first (default status active)."""
        return self._send(self._list_call(owner_id, type, status, limit, offset))

    def forget(self, memory_id: str) -> bool:
        """Archive, then delete: the protocol deletes only archived cells. True on 204."""
        self._send(self._archive_call(memory_id))
        return self._send(self._delete_call(memory_id))

    def health(self) -> bool:
        """True when the server answers ``ok``; False (never an exception) otherwise."""
        try:
            return self._send(self._health_call())
        except AMPError:
            return False

    # ---- beyond the reference --------------------------------------------------------

    def update(self, memory_id: str, **fields: Any) -> MemoryCell:
        """PATCH: sub-objects deep-merge, e.g. ``update(id, scoring={"importance": 0.9})``."""
        return self._send(self._update_call(memory_id, fields))

    def archive(self, memory_id: str) -> MemoryCell:
        return self._send(self._archive_call(memory_id))

    def search(
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
        return self._send(
            self._search_call(query, owner_id, types, status, include_stale, limit, offset)
        )

    def list_page(
        self, owner_id: str | None = None, type: str | None = None, status: str | None = None,
        limit: int = 20, offset: int = 0,
    ) -> Page:
        """Like `list_memories`, but the whole page including ``has_more``."""
        return self._send(self._list_page_call(owner_id, type, status, limit, offset))

    def iter_memories(
        self, owner_id: str | None = None, type: str | None = None, status: str | None = None,
        page_size: int = MAX_PAGE_SIZE,
    ) -> Iterator[MemoryCell]:
        """Every readable cell matching the filters, fetched page by page."""
        offset: int | None = 0
        while offset is not None:
            page = self.list_page(owner_id, type, status, page_size, offset)
            yield from page["results"]
            offset = next_offset(page)

    def iter_search(
        self,
        query: str,
        owner_id: str | None = None,
        types: Sequence[str] | None = None,
        status: str | Sequence[str] | None = None,
        include_stale: bool = False,
        page_size: int = MAX_PAGE_SIZE,
    ) -> Iterator[MemoryCell]:
        """Every search hit, best first, fetched page by page."""
        offset: int | None = 0
        while offset is not None:
            page = self.search(query, owner_id, types, status, include_stale, page_size, offset)
            yield from page["results"]
            offset = next_offset(page)

    def spec(self) -> dict[str, Any]:
        """The server's ``/spec``: version and advertised capabilities."""
        return self._send(self._spec_call())


__all__ = ["AMPClient", "SyncTransport"]
