"""What every client shares (AMP and AmpUp, sync and async): configuration, request
building, response handling.

Each public operation is described once as a ``Call`` (method, path, query, body, headers
and the parser for its answer); the sync and async transports only send calls, so the two
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


class Versioned(dict[str, Any]):
    """A JSON object answer, and the version of the resource it shows: ``etag`` is the
    answer's ``ETag`` header, None where the server sent none (a route that versions
    nothing, a writer who may not read the cell). Send it back as ``if_match=`` to write
    only over that version, or ``if_none_match=`` to read only if it changed. It is a dict,
    equal to, printed and serialized as the body alone; ``dict(answer)`` drops the tag.
    """

    etag: str | None

    def __init__(self, body: Mapping[str, Any], etag: str | None = None) -> None:
        super().__init__(body)
        self.etag = etag


def preconditions(if_match: str | None = None,
                  if_none_match: str | None = None) -> dict[str, str] | None:
    """The ``If-Match`` / ``If-None-Match`` headers of a conditional call (None: none)."""
    headers = {name: value for name, value in (("If-Match", if_match),
                                               ("If-None-Match", if_none_match))
               if value is not None}
    return headers or None


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP exchange: what to send and how to read a 2xx answer.

    ``before`` is a call sent first (`forget` archives, then deletes); ``follow``, when
    set, makes this call from ``before``'s answer (`forget` deletes only the version its
    archive wrote), else that answer is dropped. ``fallback`` turns a failure into an
    answer instead of raising it (`health`). All are followed by every transport, so an
    operation of two steps is still described once.
    """

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, str | int] | None = None
    json: Any = None
    headers: dict[str, str] | None = None
    before: Call[Any] | None = None
    follow: Callable[[Any, Call[T]], Call[T]] | None = None
    fallback: Callable[[AMPError], T] | None = None

    def after(self, first: Any) -> Call[T]:
        """This call as ``before``'s answer ``first`` makes it."""
        return self if self.follow is None else self.follow(first, self)


def wire_time(value: Any) -> Any:
    """A datetime as RFC 3339 text (``isoformat``: keep its offset; a naive one is the
    server's 422), anything else as it is."""
    return value.isoformat() if isinstance(value, datetime) else value


def wire(value: Any) -> Any:
    """``value`` as a body sends it: every datetime in it, however deep (a field, a batch's
    item, a PATCH's ``lifecycle``), as `wire_time` text, as the Node client sends a Date."""
    if isinstance(value, Mapping):
        return {name: wire(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [wire(item) for item in value]
    return wire_time(value)


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
    """The body; an object comes with the answer's ETag (`Versioned`)."""
    body = response.json()
    return Versioned(body, response.headers.get("etag")) if isinstance(body, dict) else body


def _object(response: httpx.Response) -> Versioned:
    return cast(Versioned, _json(response))


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
            headers = {**self.identity_headers(), **(call.headers or {})}
            return http.build_request(call.method, self._url(call.path), params=call.params,
                                      json=wire(call.json), headers=headers)
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
        # httpx's async timeouts carry no text: the class names what failed (ReadTimeout).
        return AMPConnectionError(f"HTTP request failed: {str(exc) or type(exc).__name__}",
                                  request=request)

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


__all__ = [
    "Call",
    "Transport",
    "DEFAULT_SERVER_URL",
    "MAX_PAGE_SIZE",
    "MemoryCell",
    "Page",
    "SearchPage",
    "Versioned",
    "next_offset",
    "normalize_url",
    "path_segment",
    "preconditions",
    "wire",
    "wire_time",
]
