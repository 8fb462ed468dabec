"""Which browsers the server answers: a guard against cross-site requests and DNS
rebinding, on every route, `/mcp` included (the MCP SDK's own guard is off there).

With keys off (the default on a laptop) a request needs no credential, so any web page
the user opens could otherwise write to the memory (a "simple" cross-site POST needs no
CORS preflight) or, by pointing its own host name at 127.0.0.1, read it. Browsers always
name the page's origin on a cross-site write (``Origin``) and the host they think they
talk to (``Host``); agents, SDKs and curl send no ``Origin`` and are not affected.

- ``Origin``, when sent, must be a loopback page, the server's own host (what ``Host``
  or a proxy's ``X-Forwarded-Host`` names), or one of AMPUP_MEMORY_ALLOWED_ORIGINS:
  else 403 ``FORBIDDEN_ORIGIN``.
- On a server bound to a loopback address, ``Host`` must be a loopback name or one of
  AMPUP_MEMORY_ALLOWED_HOSTS: else 421 ``MISDIRECTED_REQUEST``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ampup_memory.errors import AmpError, ForbiddenOrigin, MisdirectedRequest
from ampup_memory.web.errors import error_response

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def names(text: str) -> frozenset[str]:
    """A comma-separated setting as a set of lower-case entries."""
    return frozenset(part.strip().lower() for part in text.split(",") if part.strip())


def host_name(value: str) -> str:
    """``Host`` or ``X-Forwarded-Host`` without its port, lower-case (``[::1]`` → ``::1``)."""
    value = value.split(",")[0].strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class OriginGuard:
    def __init__(self, app: ASGIApp, *, bound_to: str, allowed_hosts: str = "",
                 allowed_origins: str = "") -> None:
        self.app = app
        self.check_host = bound_to.strip("[]").lower() in LOOPBACK
        self.hosts = LOOPBACK | {host_name(h) for h in names(allowed_hosts)}
        self.origins = frozenset(o.rstrip("/") for o in names(allowed_origins))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(Headers(scope=scope))
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, headers: Headers) -> AmpError | None:
        """Why a request with these headers is not answered, or None."""
        host = host_name(headers.get("host", ""))
        if self.check_host and host not in self.hosts:
            return MisdirectedRequest(
                "This server answers to its loopback names only (or those in "
                "AMPUP_MEMORY_ALLOWED_HOSTS).")
        origin = headers.get("origin")
        if origin is None:
            return None
        own = {host, host_name(headers.get("x-forwarded-host", ""))} - {""}
        page = urlsplit(origin.strip().lower())
        page_host = page.hostname or ""
        if origin.strip().lower().rstrip("/") in self.origins or (
                page.scheme in ("http", "https") and (page_host in LOOPBACK
                                                      or page_host in own)):
            return None
        return ForbiddenOrigin(
            "Requests from pages of another site are refused; list the site in "
            "AMPUP_MEMORY_ALLOWED_ORIGINS to allow it.")
