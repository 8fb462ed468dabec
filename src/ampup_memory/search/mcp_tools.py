"""The MCP tools of search as plain functions; `mcp/` registers them on its servers.

``search_memory`` returns the text answer (facts grouped by entity with citations, then
uncited source text, then the episode ids ``get_episode`` reads); ``query_memory``
returns ranked passages as JSON-ready data.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ampup_memory.search.service import FactSearchRequest, PassageQueryRequest, SearchService
from ampup_memory.web.body import validation_errors


def search_memory(
    service: SearchService,
    user: str,
    scope: str,
    query: str,
    as_of: datetime | str | None = None,
    limit: int = 10,
    tz: str | None = None,
    branch: str | None = None,
    at_commit: str | None = None,
    pin: str | None = None,
    snapshot: str | None = None,
) -> str:
    """Facts ranked by keyword and meaning, as the text answer agents read."""
    try:
        req = FactSearchRequest.model_validate({
            "scope": scope, "query": query, "as_of": as_of, "limit": limit, "format": "text",
            "tz": tz, "branch": branch, "at_commit": at_commit, "pin": pin,
            "snapshot": snapshot,
        })
    except ValidationError as exc:
        raise validation_errors(exc, ()) from exc
    answer = service.search(user, req)
    assert isinstance(answer, str)
    return answer


def query_memory(
    service: SearchService,
    user: str,
    scope: str,
    query: str | None,
    find: str = "passages",
    limit: int = 10,
    tz: str | None = None,
    branch: str | None = None,
    at_commit: str | None = None,
    pin: str | None = None,
    snapshot: str | None = None,
    other: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Episode passages ranked the same way; needs no extraction model. A ``query`` of
    None is left out of the request, so it is refused as POST /query refuses a body
    without one (``query: Field required``), not as an empty one. ``other``: arguments
    the caller gave that passages do not take (the typed finds' ``where``, ``offset``,
    ...), put in the request so it refuses them as POST /query does, not drops them."""
    body = {"scope": scope, "find": find, "limit": limit, "tz": tz, "branch": branch,
            "at_commit": at_commit, "pin": pin, "snapshot": snapshot, **(other or {})}
    if query is not None:
        body["query"] = query
    try:
        req = PassageQueryRequest.model_validate(body)
    except ValidationError as exc:
        raise validation_errors(exc, ()) from exc
    return service.query(user, req)
