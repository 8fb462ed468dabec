"""`AsyncAMPClient`: the AMP face (`AMPCalls`, the same methods as `AMPClient`) sent over
an `httpx.AsyncClient`, each answering a coroutine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from ampup_memory.client._amp import AMPCalls, Pages
from ampup_memory.client._base import (
    Call,
    MemoryCell,
    Page,
    SearchPage,
    Transport,
    Versioned,
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
            if call.before is not None:
                call = call.after(await self._send(call.before))
            return await self._send_one(call)
        except AMPError as exc:
            if call.fallback is None:
                raise
            return call.fallback(exc)

    async def _send_one(self, call: Call[T]) -> T:
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


class AsyncAMPClient(AMPCalls[Coroutine[Any, Any, Versioned],
                              Coroutine[Any, Any, list[MemoryCell]],
                              Coroutine[Any, Any, bool], Coroutine[Any, Any, Page],
                              Coroutine[Any, Any, SearchPage], AsyncIterator[MemoryCell]],
                     AsyncTransport):
    """Asynchronous AMP client. Drop-in for ``amp_client.AsyncAMPClient`` 0.1.0: the
    methods of `AMPClient` (the very same definitions, `AMPCalls`), each answering a
    coroutine, the ``iter_*`` walkers async iterators (``async for``).

    Inside ``async with`` it keeps one connection pool; outside, each call opens and closes
    its own (as the reference does), so a client never outlives the event loop it was
    used on. An argument that cannot be sent raises `ValidationError` when the method is
    called (an id that is no path segment) or when it is awaited (a value JSON cannot
    hold); either way nothing is sent.
    """

    def _call(self, call: Call[Any]) -> Coroutine[Any, Any, Any]:
        return self._send(call)

    async def _walk(self, pages: Pages) -> AsyncIterator[MemoryCell]:
        offset: int | None = 0
        while offset is not None:
            page = await self._send(pages.page(offset))
            for cell in page["results"]:
                yield cell
            offset = next_offset(page)


__all__ = ["AsyncAMPClient", "AsyncTransport"]
