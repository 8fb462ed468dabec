"""Which browsers the server answers: a guard against cross-site requests and DNS
rebinding, on every route, `/mcp` included (the MCP SDK's own guard is off there).

With keys off (the default on a laptop) a request needs no credential, so any web page
the user opens could otherwise write to the memory (a "simple" cross-site POST needs no
CORS preflight) or, by pointing its own host name at the server's address, read it.
Browsers always name the page's origin on a cross-site write (``Origin``) and the host
they think they talk to (``Host``); agents, SDKs and curl send no ``Origin`` and are not
affected.

- ``Origin``, when sent, must be a loopback page, the server's own host (what ``Host``
  or a proxy's ``X-Forwarded-Host`` names), or one of AMPUP_MEMORY_ALLOWED_ORIGINS:
  else 403 ``FORBIDDEN_ORIGIN``.
- ``Host`` (and ``X-Forwarded-Host``, when sent) must be a name a rebinding page cannot
  have, else 421 ``MISDIRECTED_REQUEST``: on a loopback bind, a loopback name; on any
  other bind with keys off, an IP literal, a name without a dot or one under
  ``.localhost``; on both, one of AMPUP_MEMORY_ALLOWED_HOSTS. With keys on, a server on
  another address checks no ``Host``: a rebinding page has no key to send.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ampup_memory.errors import AmpError, ForbiddenOrigin, MisdirectedRequest
from ampup_memory.web.errors import refusal_response


def names(text: str) -> frozenset[str]:
    """A comma-separated setting as a set of lower-case entries."""
    return frozenset(part.strip().lower() for part in text.split(",") if part.strip())


def host_name(value: str) -> str:
    """``Host`` or ``X-Forwarded-Host`` without its port, lower-case (``[::1]`` → ``::1``)."""
    value = value.split(",")[0].strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ``::1``): for a bind address, a
    server only this machine reaches; for a ``Host``, the name such a server is called by."""
    address = ip_literal(host)
    return host.lower() == "localhost" if address is None else address.is_loopback


def unownable(host: str) -> bool:
    """A ``Host`` no rebinding page can carry: its page would have to be served from this
    name. An IP literal is the server's own address, not a name anyone re-points; a name
    without a dot resolves through the local search domains (``localhost``, a compose
    service), and ``*.localhost`` never leaves the machine (RFC 6761). A host without
    any name (no ``Host`` header) is no browser's."""
    return (ip_literal(host) is not None or "." not in host
            or host.endswith(".localhost"))


class OriginGuard:
    def __init__(self, app: ASGIApp, *, bound_to: str, keys_required: bool,
                 allowed_hosts: str = "", allowed_origins: str = "") -> None:
        self.app = app
        self.loopback = is_loopback(bound_to)
        # Keys on: a page (rebound or not) cannot send one, so only a loopback bind keeps
        # its Host check there; keys off, every bind checks it.
        self.check_host = self.loopback or not keys_required
        self.keys_required = keys_required
        self.hosts = frozenset(host_name(h) for h in names(allowed_hosts))
        self.origins = frozenset(o.rstrip("/") for o in names(allowed_origins))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(Headers(scope=scope))
        if refusal is not None:
            await refusal_response(refusal, scope)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def answers_to(self, host: str) -> bool:
        """Whether this server answers a browser that calls it ``host``. No name at all
        (an HTTP/1.0 request without ``Host``) is no browser's: every browser sends one."""
        if not host or host in self.hosts:
            return True
        return is_loopback(host) if self.loopback else unownable(host)

    def refusal(self, headers: Headers) -> AmpError | None:
        """Why a request with these headers is not answered, or None."""
        host = host_name(headers.get("host", ""))
        forwarded = host_name(headers.get("x-forwarded-host", ""))
        # Keys off, a proxy that rewrites Host to its upstream's name (``ampup``,
        # accepted) names the browser's host in X-Forwarded-Host: that one must pass too.
        # A page cannot use the header to pass: it only adds a name to check. Keys on, a
        # proxy on the same machine (Host 127.0.0.1, its public name forwarded) is served
        # as before: a rebound page has no key to send.
        check_forwarded = bool(forwarded) and not self.keys_required
        if self.check_host and not (self.answers_to(host) and (
                not check_forwarded or self.answers_to(forwarded))):
            return MisdirectedRequest(
                "This server answers to its loopback names only (or those in "
                "AMPUP_MEMORY_ALLOWED_HOSTS)." if self.loopback else
                "Without API keys this server answers to IP addresses, names without a "
                "dot and *.localhost only: list its host name in AMPUP_MEMORY_ALLOWED_HOSTS "
                "(or require keys, AMP_REQUIRE_KEYS).")
        origin = headers.get("origin")
        if origin is None:
            return None
        own = {host, forwarded} - {""}
        page = urlsplit(origin.strip().lower())
        page_host = page.hostname or ""
        if origin.strip().lower().rstrip("/") in self.origins or (
                page.scheme in ("http", "https") and (is_loopback(page_host)
                                                      or page_host in own)):
            return None
        return ForbiddenOrigin(
            "Requests from pages of another site are refused; list the site in "
            "AMPUP_MEMORY_ALLOWED_ORIGINS to allow it.")
