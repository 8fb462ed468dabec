"""201 Created with the new resource's ``Location`` (RFC 9110 §15.3.2): without one, a 201
says the resource it made is the request's own URL (``/runs`` for a new run). Only routes
whose new resource another route reads answer one (a run, a session, an episode, a cell,
a workspace, a pin, a snapshot); a fact, a closure, a reward or a branch has no route of
its own to read it at."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse

LOCATION_DOC = {"Location": {"description": "Where the new resource is read (a path on "
                             "this server).", "schema": {"type": "string"}}}


def location(request: Request, path: str, **query: str | None) -> str:
    """``path`` (percent-encoded here) with ``query`` (empty values left out), under the
    request's root path (a proxy's prefix)."""
    sent = urlencode({k: v for k, v in query.items() if v})
    return f"{request.scope.get('root_path', '')}{quote(path)}" + (f"?{sent}" if sent else "")


def created(request: Request, body: Any, path: str, *, headers: dict[str, str] | None = None,
            **query: str | None) -> JSONResponse:
    """The 201 answer ``body`` for a resource now read at ``path`` (``query`` as in
    `location`)."""
    return JSONResponse(body, status_code=201,
                        headers={"Location": location(request, path, **query),
                                 **(headers or {})})


def created_doc(description: str = "Created", headers: dict[str, Any] | None = None,
                ) -> dict[str, Any]:
    """A 201's documentation with its ``Location`` header (and ``headers``)."""
    return {"description": description, "headers": {**LOCATION_DOC, **(headers or {})}}
