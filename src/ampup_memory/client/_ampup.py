"""`AmpUpClient` and `AsyncAmpUpClient`: the AmpUp face (the server's root, beside
``/amp/v1``), blocking and awaitable.

Same transports and errors as the AMP clients (`SyncTransport`, `AsyncTransport`,
`error_for`). Every method is written once (`MemoryCalls`, `AdviceCalls`, `VersionCalls`);
the two classes here only say how a call is sent and a listing walked, so they have exactly
the same methods. Every method answers the server's JSON body as a dict (a `Versioned`:
its ``etag`` is the answer's ETag, for ``if_match=``); the ``iter_*`` methods walk a
listing's pages and yield its items.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any

from ampup_memory.client._ampup_advice import AdviceCalls
from ampup_memory.client._ampup_face import JSON, Listing, R, W
from ampup_memory.client._ampup_memory import MemoryCalls
from ampup_memory.client._ampup_versions import VersionCalls
from ampup_memory.client._async import AsyncTransport
from ampup_memory.client._base import Call, Versioned
from ampup_memory.client._sync import SyncTransport


class AmpUpCalls(MemoryCalls[R, W], AdviceCalls[R, W], VersionCalls[R, W]):
    """Every AmpUp method, for a client that says how to send a call."""


class AmpUpClient(AmpUpCalls[Versioned, Iterator[JSON]], SyncTransport):
    """Synchronous client of the AmpUp routes (the server's root, beside ``/amp/v1``).

    ``AmpUpClient("http://127.0.0.1:8765", user="ana")``: keys off, ``user`` is sent as
    ``X-AmpUp-User``. Keys on, pass the key and its agent (``agent_id=..., api_key=...``);
    the server takes the caller from the key's user (a ``user`` naming anyone else is a 401,
    `AuthenticationError`: give the key's user or none). ``user``
    is also the default ACL of the episodes you `remember` (``["user:<user>"]``: only
    you); without it, pass ``acl`` there. ``admin_token`` (sent as ``X-AMP-Admin-Token``)
    is for the admin routes (schemas, principals, procedure sources, status) when no admin
    key is used. Use it as a context manager or call ``close()`` (which closes the
    connections; `close_fact` closes a fact's value).
    """

    def _call(self, call: Call[Versioned]) -> Versioned:
        return self._send(call)

    def _walk(self, listing: Listing) -> Iterator[JSON]:
        position: str | None = None
        while True:
            page = self._send(listing.page(position))
            yield from page[listing.items]
            position = listing.after(page)
            if position is None:
                return


class AsyncAmpUpClient(AmpUpCalls[Coroutine[Any, Any, Versioned], AsyncIterator[JSON]],
                       AsyncTransport):
    """Asynchronous client of the AmpUp routes: `AmpUpClient`'s constructor and methods,
    each answering a coroutine (``await client.remember(...)``), the ``iter_*`` walkers
    async iterators (``async for``). Use ``async with`` (one connection pool) or call
    ``await client.aclose()``; outside ``async with`` each call opens its own connection.
    An argument that cannot be sent raises `ValidationError` when the method is called (an
    id that is no path segment, a missing ``acl``) or when it is awaited (a value JSON
    cannot hold); either way nothing is sent.
    """

    def _call(self, call: Call[Versioned]) -> Coroutine[Any, Any, Versioned]:
        return self._send(call)

    async def _walk(self, listing: Listing) -> AsyncIterator[JSON]:
        position: str | None = None
        while True:
            page = await self._send(listing.page(position))
            for item in page[listing.items]:
                yield item
            position = listing.after(page)
            if position is None:
                return


__all__ = ["AmpUpClient", "AsyncAmpUpClient"]
