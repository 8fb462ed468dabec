"""Headers every answer carries, whichever route, refusal or error made it (the one place
that owns them; docs/security-model.md, "Caches, proxies and browsers"):

- **Caching.** What a route answers depends on who asks (an episode, a cell, a listing,
  even a 404 or 403 is that caller's): ``Cache-Control: no-store``, so no shared cache
  (a proxy, a CDN) keeps one caller's answer to hand to the next, and no browser keeps
  memory on disk; ``Vary`` names the headers that say who calls, for a cache configured
  to ignore ``no-store``. A conditional read (``If-None-Match``, 304) is the client's own
  and works without any cache. ``/mcp`` (the MCP SDK's ``no-cache`` on its event streams)
  gets ``no-store`` in front. Only the pages and their files, the same for everyone, are
  ``no-cache`` (kept, but checked with the server before each use, so an upgrade shows
  at once).
- **401** carries ``WWW-Authenticate`` (RFC 9110 §11.6.1): keys on, ``Bearer`` (the
  key in ``Authorization: Bearer`` or ``X-AMP-API-Key``); keys off, the header that
  names the caller (``X-AMP-Agent-ID`` on the AMP face, ``X-AmpUp-User`` elsewhere), as
  its scheme.
- **Browsers**: ``X-Content-Type-Options: nosniff`` (an answer is never read as another
  type than it says), ``Referrer-Policy: no-referrer`` and ``X-Frame-Options: DENY``
  (the pages also say ``frame-ancestors 'none'``; this is for browsers that read only
  the older header).

A header a route set itself is kept (the pages' ``Content-Security-Policy`` is theirs).
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ampup_memory.auth import CREDENTIAL_HEADERS
from ampup_memory.web import apidocs, inspector

REALM = 'realm="ampup-memory"'
# The interactive pages and their files: the same bytes for every caller.
_PAGES = frozenset({inspector.PAGE, apidocs.DOCS, apidocs.OAUTH2_REDIRECT, apidocs.REDOC})
_PAGE_FILES = (inspector.FILES, f"{apidocs.STATIC}/")
CALLER_HEADERS = sorted(CREDENTIAL_HEADERS.values())
BROWSER_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                   "X-Frame-Options": "DENY"}


def is_page(path: str) -> bool:
    return path in _PAGES or path.startswith(_PAGE_FILES)


def challenge(path: str, keys_required: bool) -> str:
    """The ``WWW-Authenticate`` of a 401 on ``path``."""
    if keys_required:
        return f"Bearer {REALM}"
    return f"{'X-AMP-Agent-ID' if path.startswith('/amp/') else 'X-AmpUp-User'} {REALM}"


def stamp(headers: MutableHeaders, path: str, status: int, keys_required: bool) -> None:
    """Give the answer to ``path`` the headers above (what it set itself stays)."""
    if is_page(path):
        headers.setdefault("Cache-Control", "no-cache")
    else:
        said = headers.get("Cache-Control")
        if said is None:
            headers["Cache-Control"] = "no-store"
        elif "no-store" not in said.lower():
            headers["Cache-Control"] = f"no-store, {said}"
        varies = {v.strip().lower() for v in headers.get("Vary", "").split(",")}
        missing = [name for name in CALLER_HEADERS if name.lower() not in varies]
        if missing:  # stamped twice (an error `web.errors` stamped), named once
            headers.add_vary_header(", ".join(missing))
    for name, value in BROWSER_HEADERS.items():
        headers.setdefault(name, value)
    if status == 401:
        headers.setdefault("WWW-Authenticate", challenge(path, keys_required))


class AnswerHeaders:
    """Every answer the app makes, `stamp`ed. A 500 is made outside it (Starlette's
    outermost layer runs the handler of unexpected errors), which stamps its own
    (`web.errors`)."""

    def __init__(self, app: ASGIApp, keys_required: bool) -> None:
        self.app = app
        self.keys_required = keys_required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                stamp(MutableHeaders(scope=message), path, message["status"],
                      self.keys_required)
            await send(message)

        await self.app(scope, receive, with_headers)
