"""HEAD answered as GET, without the body, on every path a GET route serves (RFC 9110
§9.3.2): ``HEAD /docs``, ``/openapi.json`` or ``/episodes`` answered 405, because
FastAPI's routes serve exactly the methods they list, unlike Starlette's, which add HEAD
to GET. One rule here rather than HEAD added to each route: the API schema stays one
operation per route. A path some route serves HEAD for itself (``/health``, the
inspector, the pages' static files, ``/mcp``, which answers every method) is left to it."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ampup_memory.web.routing import serves


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD" \
                or serves(scope["app"], scope, "HEAD") or not serves(scope["app"], scope, "GET"):
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            # The GET's headers, Content-Length included (what a GET would send); no body.
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET", HEAD_KEY: True}, receive, headers_only)


# Set on the scope of a HEAD this middleware runs as a GET, for a route whose GET has an
# effect a HEAD must not have (an AMP cell's read counts an access).
HEAD_KEY = "ampup.head"


def is_head(scope: Scope) -> bool:
    """Whether this GET is a HEAD answered as one (its body is dropped)."""
    return bool(scope.get(HEAD_KEY))
