"""What `AmpUpClient` and `AsyncAmpUpClient` share: the caller's identity, how arguments
become a request, and how a listing is paged.

Every AmpUp method is written once, in the ``_ampup_*`` modules, as a body that builds a
`Call` and hands it to ``self._call``; the sync client's ``_call`` sends it and answers
the JSON, the async client's answers a coroutine of it. So a method's route, arguments and
parsing exist once, and the two clients cannot drift apart: ``R`` is what a method
answers (a `Versioned` JSON object, or a coroutine of it) and ``W`` what a walker answers
(an iterator or an async iterator of items).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ampup_memory.client._base import (
    Call,
    Transport,
    Versioned,
    _json,
    path_segment,
    preconditions,
    wire_time,
)
from ampup_memory.client.errors import ValidationError

JSON = dict[str, Any]
R = TypeVar("R")
W = TypeVar("W")

ADMIN_TOKEN_HEADER = "X-AMP-Admin-Token"


def _fields(**fields: Any) -> JSON:
    """The fields given: one left as None is left out, so the server's default applies
    (and a field the route does not take is its 422, not a silent drop here). A datetime
    goes out as RFC 3339 text (`wire`)."""
    return {name: value for name, value in fields.items() if value is not None}


def _names(names: str | Sequence[str]) -> list[str]:
    # A str is a Sequence too: list("user:ana") would be one-letter entries.
    return [names] if isinstance(names, str) else list(names)


def _params(**fields: Any) -> dict[str, str | int]:
    params: dict[str, str | int] = {}
    for name, value in _fields(**fields).items():
        params[name] = ("true" if value else "false") if isinstance(value, bool) else (
            wire_time(value))
    return params


def _segments(value: str, name: str) -> str:
    """A name that may hold ``/`` separators (a branch) as path segments, each quoted."""
    parts = value.split("/") if isinstance(value, str) else [value]
    return "/".join(path_segment(part, name) for part in parts)


def _scope_path(scope: str) -> str:
    """``org/team`` as the two segments of ``/schemas/{org}/{team}``."""
    parts = scope.split("/") if isinstance(scope, str) else []
    if len(parts) != 2:
        raise ValidationError(f"scope must be org/team, got {scope!r}")
    return "/".join(path_segment(part, "scope") for part in parts)


@dataclass(frozen=True)
class Listing:
    """A cursor-paged listing: the answer's ``next_<cursor>`` is the next request's
    ``<cursor>``, until it is null or a page comes back empty."""

    path: str
    items: str
    cursor: str
    params: dict[str, str | int]

    def page(self, position: str | None) -> Call[JSON]:
        params = dict(self.params)
        if position is not None:
            params[self.cursor] = position
        return Call("GET", self.path, _json, params=params)

    def after(self, page: JSON) -> str | None:
        """The next page's cursor, or None after the last page."""
        position = page.get(f"next_{self.cursor}")
        return position if position and page[self.items] else None


class AmpUpFace(Transport, Generic[R, W]):
    """Identity and request building of the AmpUp routes; subclasses say how a call is
    sent (``_call``) and how a listing is walked (``_walk``)."""

    _prefix = ""

    def __init__(
        self,
        server_url: str | None = None,
        user: str | None = None,
        *,
        agent_id: str | None = None,
        api_key: str | None = None,
        admin_token: str | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(server_url, agent_id, api_key, timeout=timeout, headers=headers)
        self.user = user
        self.admin_token = admin_token

    def identity_headers(self) -> dict[str, str]:
        headers = super().identity_headers()
        if self.user:
            headers["X-AmpUp-User"] = self.user
        if self.admin_token:
            headers[ADMIN_TOKEN_HEADER] = self.admin_token
        return headers

    def _call(self, call: Call[Versioned]) -> R:
        raise NotImplementedError

    def _walk(self, listing: Listing) -> W:
        raise NotImplementedError

    def _acl(self, acl: str | Sequence[str] | None) -> list[str]:
        if acl is not None:
            return _names(acl)
        if not self.user:
            raise ValidationError("acl is required: this client names no user whose "
                                  "private ACL (user:<id>) could be the default")
        return [f"user:{self.user}"]

    def _optional_acl(self, acl: str | Sequence[str] | None) -> list[str] | None:
        """``acl`` as a list, or None for the server's default (runs, sessions, closures)."""
        return None if acl is None else _names(acl)

    def _get(self, path: str, *, if_none_match: str | None = None, **params: Any) -> R:
        return self._call(Call("GET", path, _json, params=_params(**params),
                               headers=preconditions(if_none_match=if_none_match)))

    def _post(self, path: str, body: JSON | None = None) -> R:
        return self._call(Call("POST", path, _json, json=body))

    def _put(self, path: str, body: JSON, *, if_match: str | None = None,
             if_none_match: str | None = None) -> R:
        return self._call(Call("PUT", path, _json, json=body,
                               headers=preconditions(if_match, if_none_match)))

    def _delete(self, path: str, **params: Any) -> R:
        return self._call(Call("DELETE", path, _json, params=_params(**params)))

    def _listing(self, path: str, items: str, cursor: str, **params: Any) -> W:
        return self._walk(Listing(path, items, cursor, _params(**params)))


__all__ = ["JSON", "AmpUpFace", "Listing"]
