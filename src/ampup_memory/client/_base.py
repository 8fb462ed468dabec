"""What the sync and async clients share: configuration, request building, response handling.

Each public operation is described once here as a ``Call`` (method, path, query, body and
the parser for its answer); `AMPClient` and `AsyncAMPClient` only send calls, so the two
faces cannot drift apart in what they put on the wire or how they read the reply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar, cast
from urllib.parse import quote

import httpx

from ampup_memory.client.errors import AMPConnectionError, AMPError, ValidationError, error_for

T = TypeVar("T")

DEFAULT_SERVER_URL = "http://127.0.0.1:8765"
API_PREFIX = "/amp/v1"
MAX_PAGE_SIZE = 100

MemoryCell = dict[str, Any]
"""A cell exactly as the server sends it (the reference client returns plain dicts too)."""


class Page(TypedDict):
    results: list[MemoryCell]
    returned: int
    has_more: bool
    offset: int
    limit: int


class SearchPage(Page):
    query: str


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP exchange: what to send and how to read a 2xx answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, str | int] | None = None
    json: Any = None


def normalize_url(url: str, prefix: str = API_PREFIX) -> str:
    """A bare host, a trailing slash or an explicit ``/amp/v1`` all mean the same server;
    the answer ends in ``prefix`` (``/amp/v1`` for AMP, nothing for the AmpUp routes)."""
    url = url.rstrip("/")
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    return url + prefix


def path_segment(value: str, name: str) -> str:
    """``value`` as one quoted path segment: an id can never walk to another route."""
    # "." and ".." survive quoting and httpx resolves them (/memories/.. is /amp/v1).
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise ValidationError(f"{name} must be a non-empty string and not a dot segment, "
                              f"got {value!r}")
    return quote(value, safe="")


def _cell_path(memory_id: str) -> str:
    return f"/memories/{path_segment(memory_id, 'memory_id')}"


def _json(response: httpx.Response) -> Any:
    return response.json()


def _cell(response: httpx.Response) -> MemoryCell:
    return cast(MemoryCell, response.json())


def _results(response: httpx.Response) -> list[MemoryCell]:
    return cast(list[MemoryCell], response.json().get("results", []))


def _page(response: httpx.Response) -> Page:
    return cast(Page, response.json())


def _search_page(response: httpx.Response) -> SearchPage:
    return cast(SearchPage, response.json())


def _no_content(response: httpx.Response) -> bool:
    return response.status_code == 204


def _healthy(response: httpx.Response) -> bool:
    body = response.json()
    return isinstance(body, dict) and body.get("status") == "ok"


def _patterns(patterns: str | Sequence[str]) -> list[str]:
    # A str is a Sequence too: list("agent_*") would be one-letter patterns, "*" among them,
    # granting every agent.
    return [patterns] if isinstance(patterns, str) else list(patterns)


def _statuses(status: str | Sequence[str] | None) -> list[str] | None:
    if status is None:
        return None
    return [status] if isinstance(status, str) else list(status)


def next_offset(page: Page) -> int | None:
    """Where the next page starts, or None after the last one."""
    if not page["has_more"] or page["returned"] == 0:
        return None
    return page["offset"] + page["returned"]


class Transport:
    """Where the server is, which headers name the caller, how a `Call` is built and how
    its answer is read: shared by every client here (AMP and AmpUp, sync and async), so
    identity, argument errors and the error envelope are handled in one place."""

    _prefix = API_PREFIX
    """What the routes' paths are relative to (the AMP face lives under ``/amp/v1``)."""

    def __init__(
        self,
        server_url: str | None = None,
        agent_id: str | None = None,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if server_url is not None and base_url is not None and server_url != base_url:
            raise ValueError("pass server_url or base_url, not both")
        self.server_url = normalize_url(server_url or base_url or DEFAULT_SERVER_URL,
                                        self._prefix)
        self.agent_id = agent_id
        self.api_key = api_key
        self.timeout = timeout
        self.extra_headers = dict(headers or {})

    @property
    def base_url(self) -> str:
        return self.server_url

    def identity_headers(self) -> dict[str, str]:
        """The headers naming this client, built in one place so no call can miss them."""
        headers = dict(self.extra_headers)
        if self.agent_id:
            headers["X-AMP-Agent-ID"] = self.agent_id
        if self.api_key:
            headers["X-AMP-API-Key"] = self.api_key
        return headers

    def _url(self, path: str) -> str:
        return self.server_url + path

    def _build(self, http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
        """The request for ``call``. Arguments that cannot go on the wire at all (NaN, a
        set, an agent id that is not ASCII) are the caller's error, raised here, before
        anything is sent, rather than as json's or httpx's own exceptions."""
        try:
            return http.build_request(call.method, self._url(call.path), params=call.params,
                                      json=call.json, headers=self.identity_headers())
        except httpx.InvalidURL as exc:
            raise AMPConnectionError(f"invalid server URL {self.server_url!r}: {exc}") from exc
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise ValidationError(f"cannot send this request: {exc}") from exc

    @staticmethod
    def _connection_error(exc: httpx.HTTPError) -> AMPConnectionError:
        try:
            request: httpx.Request | None = exc.request
        except RuntimeError:  # httpx raises when the error has no request attached
            request = None
        return AMPConnectionError(f"HTTP request failed: {exc}", request=request)

    @staticmethod
    def _finish(call: Call[T], response: httpx.Response) -> T:
        if not 200 <= response.status_code < 300:
            raise error_for(response)
        try:
            return call.parse(response)
        except ValueError as exc:  # a 2xx that is not the JSON the protocol promises
            raise AMPError(
                f"unreadable response: {exc}", response.status_code,
                request=response.request, response=response,
            ) from exc


class BaseClient(Transport):
    """The AMP face's catalogue of calls; subclasses decide how to send them."""

    # ---- the calls -------------------------------------------------------------------

    def _remember_call(
        self,
        content: str | Mapping[str, Any],
        owner_id: str,
        type: str,
        importance: float,
        readable_by: str | Sequence[str] | None,
        *,
        owner_type: str,
        metadata: Mapping[str, Any] | None,
        writable_by: str | Sequence[str] | None,
        public: bool | None,
        confidence: float | None,
        decay_rate: float | None,
        session_id: str | None,
        provenance: Mapping[str, Any] | None,
        expires_at: datetime | str | None,
    ) -> Call[MemoryCell]:
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
            when = expires_at.isoformat() if isinstance(expires_at, datetime) else expires_at
            body["lifecycle"] = {"expires_at": when}
        return Call("POST", "/memories", _cell, json=body)

    def _search_body(
        self,
        query: str,
        owner_id: str | None,
        types: Sequence[str] | None,
        status: str | Sequence[str] | None,
        include_stale: bool,
        limit: int,
        offset: int,
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

    def _recall_call(
        self, query: str, owner_id: str, limit: int, include_stale: bool, offset: int
    ) -> Call[list[MemoryCell]]:
        body = self._search_body(query, owner_id, None, None, include_stale, limit, offset)
        return Call("POST", "/memories/search", _results, json=body)

    def _search_call(
        self,
        query: str,
        owner_id: str | None,
        types: Sequence[str] | None,
        status: str | Sequence[str] | None,
        include_stale: bool,
        limit: int,
        offset: int,
    ) -> Call[SearchPage]:
        body = self._search_body(query, owner_id, types, status, include_stale, limit, offset)
        return Call("POST", "/memories/search", _search_page, json=body)

    def _list_params(
        self, owner_id: str | None, type: str | None, status: str | None, limit: int, offset: int
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

    def _list_call(
        self, owner_id: str | None, type: str | None, status: str | None, limit: int, offset: int
    ) -> Call[list[MemoryCell]]:
        params = self._list_params(owner_id, type, status, limit, offset)
        return Call("GET", "/memories", _results, params=params)

    def _list_page_call(
        self, owner_id: str | None, type: str | None, status: str | None, limit: int, offset: int
    ) -> Call[Page]:
        params = self._list_params(owner_id, type, status, limit, offset)
        return Call("GET", "/memories", _page, params=params)

    def _get_call(self, memory_id: str) -> Call[MemoryCell]:
        return Call("GET", _cell_path(memory_id), _cell)

    def _update_call(self, memory_id: str, fields: Mapping[str, Any]) -> Call[MemoryCell]:
        return Call("PATCH", _cell_path(memory_id), _cell, json=dict(fields))

    def _archive_call(self, memory_id: str) -> Call[MemoryCell]:
        return self._update_call(memory_id, {"lifecycle": {"status": "archived"}})

    def _delete_call(self, memory_id: str) -> Call[bool]:
        return Call("DELETE", _cell_path(memory_id), _no_content)

    def _health_call(self) -> Call[bool]:
        return Call("GET", "/health", _healthy)

    def _spec_call(self) -> Call[dict[str, Any]]:
        return Call("GET", "/spec", _json)


__all__ = [
    "BaseClient",
    "Call",
    "Transport",
    "DEFAULT_SERVER_URL",
    "MAX_PAGE_SIZE",
    "MemoryCell",
    "Page",
    "SearchPage",
    "next_offset",
    "normalize_url",
    "path_segment",
]
