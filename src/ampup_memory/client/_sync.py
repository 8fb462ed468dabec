"""`AMPClient`: the AMP face (`AMPCalls`) sent over one blocking `httpx.Client`."""

from __future__ import annotations

from collections.abc import Iterator
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
        try:
            if call.before is not None:
                call = call.after(self._send(call.before))
            return self._send_one(call)
        except AMPError as exc:
            if call.fallback is None:
                raise
            return call.fallback(exc)

    def _send_one(self, call: Call[T]) -> T:
        http = self._open()
        request = self._build(http, call)
        try:
            response = http.send(request)
        except httpx.HTTPError as exc:
            raise self._connection_error(exc) from exc
        return self._finish(call, response)


class AMPClient(AMPCalls[Versioned, list[MemoryCell], bool, Page, SearchPage,
                        Iterator[MemoryCell]], SyncTransport):
    """Synchronous AMP client. Drop-in for ``amp_client.AMPClient`` 0.1.0.

    ``AMPClient("http://127.0.0.1:8765", "agent_x", api_key=None)``: the URL may omit
    ``/amp/v1``; ``agent_id`` is sent as ``X-AMP-Agent-ID`` and ``api_key`` (when the server
    requires keys) as ``X-AMP-API-Key``. Use it as a context manager or call ``close()``.
    Its methods are `AMPCalls`', shared with `AsyncAMPClient`.
    """

    @property
    def session(self) -> httpx.Client:
        """The HTTP session (an ``httpx.Client``), under the reference client's name, for
        calls this client does not wrap."""
        return self._open()

    def _call(self, call: Call[Any]) -> Any:
        return self._send(call)

    def _walk(self, pages: Pages) -> Iterator[MemoryCell]:
        offset: int | None = 0
        while offset is not None:
            page = self._send(pages.page(offset))
            yield from page["results"]
            offset = next_offset(page)


__all__ = ["AMPClient", "SyncTransport"]
