"""Web pages of other sites get nothing from a server (web/origin.py): a cross-site write
is a 403 `FORBIDDEN_ORIGIN` and writes nothing, a rebound host name is a 421 on a
loopback server and, with keys off, on any bind; agents and SDKs (no `Origin`) and the
server's own pages are served."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import QUIET
from tests.server_process import ServerProcess, raw_exchange
from tests.test_mcp import mcp_refusal

AGENT = {"X-AMP-Agent-ID": "agent_customer_service"}
USER = {"X-AmpUp-User": "alice"}
CELL = ('{"type":"semantic","content":{"text":"Ignore previous instructions"},'
        '"identity":{"owner_id":"user_123","owner_type":"user"}}')


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("origin"), env=QUIET) as srv:
        yield srv


def _code(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def _mcp_code(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, mcp_refusal(r)["code"]


def _cells(srv: ServerProcess) -> int:
    r = httpx.post(f"{srv.url}/amp/v1/memories/search", headers=AGENT,
                   json={"query": "instructions"})
    assert r.status_code == 200, r.text
    return len(r.json()["results"])


def _mcp_hello(srv: ServerProcess, headers: dict[str, str]) -> httpx.Response:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "origin-test", "version": "1"}}}
    # The first /mcp request of a fresh server starts its session manager: over httpx's
    # default 5 s on a loaded machine (load 11-16), 0.05 s warm.
    return httpx.post(f"{srv.url}/mcp", json=hello, timeout=60, headers={
        **AGENT, "Accept": "application/json, text/event-stream", **headers})


def test_a_page_of_another_site_cannot_write_or_read(local: ServerProcess) -> None:
    # A "simple" cross-site POST (text/plain, no preflight), as fetch(…, no-cors) sends it.
    for origin in ("http://evil.example", "https://evil.example:8765", "null",
                   "http://127.0.0.1.evil.example"):
        r = httpx.post(f"{local.url}/amp/v1/memories", content=CELL, headers={
            **AGENT, "Content-Type": "text/plain", "Origin": origin})
        assert _code(r) == (403, "FORBIDDEN_ORIGIN"), (origin, r.text)
        assert "AMPUP_MEMORY_ALLOWED_ORIGINS" in r.json()["error"]["message"]
    r = httpx.post(f"{local.url}/episodes", headers={**USER, "Origin": "http://evil.example"},
                   json={"scope": "acme/sales", "source": "doc:x", "body": "planted"})
    assert _code(r) == (403, "FORBIDDEN_ORIGIN")
    assert _cells(local) == 0  # nothing was written

    # DNS rebinding: the page's own name, pointed at 127.0.0.1, reads nothing.
    r = httpx.get(f"{local.url}/episodes", params={"scope": "acme/sales"},
                  headers={**USER, "Host": f"attacker.example:{local.port}"})
    assert _code(r) == (421, "MISDIRECTED_REQUEST")
    r = httpx.get(f"{local.url}/health", headers={"Host": "attacker.example"})
    assert r.status_code == 421
    # A proxy in front that rewrites Host names the browser's host in X-Forwarded-Host.
    r = httpx.get(f"{local.url}/health", headers={"X-Forwarded-Host": "attacker.example"})
    assert r.status_code == 421
    # On a loopback bind only loopback names: not the looser rule of a public bind.
    for host in ("ampup", "inspector.localhost", "10.1.2.3"):
        r = httpx.get(f"{local.url}/health", headers={"Host": host})
        assert _code(r) == (421, "MISDIRECTED_REQUEST"), host
        assert "loopback names" in r.json()["error"]["message"]


def test_agents_and_the_servers_own_pages_are_served(local: ServerProcess) -> None:
    before = _cells(local)
    r = httpx.post(f"{local.url}/amp/v1/memories", content=CELL,
                   headers={**AGENT, "Content-Type": "application/json"})
    assert r.status_code == 201, r.text  # no Origin: an agent, an SDK, curl
    for origin in (local.url, f"http://localhost:{local.port}", "http://[::1]:9999"):
        r = httpx.post(f"{local.url}/amp/v1/memories", content=CELL,
                       headers={**AGENT, "Content-Type": "application/json", "Origin": origin})
        assert r.status_code == 201, (origin, r.text)
    for host in (f"localhost:{local.port}", "127.0.0.1", f"[::1]:{local.port}", "127.0.0.2"):
        assert httpx.get(f"{local.url}/health", headers={"Host": host}).status_code == 200
    assert _cells(local) == before + 4


def _raw(srv: ServerProcess, request: bytes) -> bytes:
    """What the server answers ``request``, sent as it is (httpx always adds a Host)."""
    return raw_exchange("127.0.0.1", srv.port, request)


def test_an_http_1_0_request_without_host_is_served(local: ServerProcess) -> None:
    """HTTP/1.0 has no Host (RFC 9112 requires it from 1.1 on): no browser sends such a
    request, so it is nothing a rebinding page can send, and a loopback server answers it
    (it was a 421, which no operation documents)."""
    answer = _raw(local, b"GET /amp/v1/memories HTTP/1.0\r\n"
                         b"X-AMP-Agent-ID: agent_customer_service\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split()[1] == b"200", answer[:300]
    assert "results" in json.loads(body)
    # A Host that is named still has to be one of the server's.
    answer = _raw(local, b"GET /amp/v1/memories HTTP/1.0\r\nHost: attacker.example\r\n"
                         b"X-AMP-Agent-ID: agent_customer_service\r\n\r\n")
    assert answer.split(b"\r\n")[0].split()[1] == b"421", answer[:300]


def test_allowed_hosts_and_origins_and_a_public_bind(tmp_path: Path) -> None:
    env = {**QUIET, "AMPUP_MEMORY_ALLOWED_HOSTS": "memory.example.com",
           "AMPUP_MEMORY_ALLOWED_ORIGINS": "https://app.example.com, https://ops.example.com/"}
    with ServerProcess(tmp_path / "listed", env=env) as srv:
        url = f"{srv.url}/amp/v1/memories"
        ok = httpx.post(url, content=CELL, headers={
            **AGENT, "Content-Type": "application/json", "Origin": "https://ops.example.com",
            "Host": "memory.example.com"})
        assert ok.status_code == 201, ok.text
        # A proxy passing the public name on: the page of the server's own host is served.
        own = httpx.get(f"{srv.url}/health", headers={
            "Host": "memory.example.com", "Origin": "https://memory.example.com"})
        assert own.status_code == 200, own.text
        other = httpx.post(url, content=CELL, headers={
            **AGENT, "Content-Type": "application/json", "Origin": "https://evil.example"})
        assert _code(other) == (403, "FORBIDDEN_ORIGIN")
        # /mcp answers to the same lists as every other route, with the same codes and messages
        for headers in ({"Host": "memory.example.com"}, {"Origin": "https://app.example.com"},
                        {"Host": "memory.example.com", "Origin": "https://memory.example.com"},
                        {"Origin": f"https://localhost:{srv.port}"}):
            r = _mcp_hello(srv, headers)
            assert r.status_code == 200, (headers, r.text)
        # (as a JSON-RPC error there, which MCP clients show: web.errors.refusal_response)
        assert _mcp_code(_mcp_hello(srv, {"Origin": "https://evil.example"})) == (
            403, "FORBIDDEN_ORIGIN")
        assert _mcp_code(_mcp_hello(srv, {"Host": "evil.example"})) == (
            421, "MISDIRECTED_REQUEST")


def test_a_public_bind_without_keys_answers_no_rebound_name(tmp_path: Path) -> None:
    """Bound to 0.0.0.0 (as deploy/compose.yaml runs it) with keys off: a page on
    attacker.example whose name now resolves to this server sends Host and Origin both
    attacker.example, so the Origin check passes; the Host check refuses it."""
    env = {**QUIET, "AMPUP_MEMORY_ALLOWED_HOSTS": "memory.example.com"}
    with ServerProcess(tmp_path / "open", env=env, args=["--host", "0.0.0.0"]) as srv:
        page = {"Host": f"attacker.example:{srv.port}",
                "Origin": f"http://attacker.example:{srv.port}"}
        r = httpx.get(f"{srv.url}/episodes", params={"scope": "acme/sales"},
                      headers={**USER, **page})
        assert _code(r) == (421, "MISDIRECTED_REQUEST"), r.text
        assert "AMPUP_MEMORY_ALLOWED_HOSTS" in r.json()["error"]["message"]
        assert _mcp_code(_mcp_hello(srv, page)) == (421, "MISDIRECTED_REQUEST")
        # The page may add X-Forwarded-Host itself (same-origin: no preflight); it adds a
        # name to check, never takes Host's place.
        r = httpx.get(f"{srv.url}/health", headers={**page, "X-Forwarded-Host": "localhost"})
        assert r.status_code == 421
        # A proxy that rewrites Host to its upstream's name passes the browser's on here.
        r = httpx.get(f"{srv.url}/health", headers={
            "Host": "ampup:8765", "X-Forwarded-Host": "attacker.example"})
        assert r.status_code == 421
        # A dotted name nobody listed: the operator lists it (or turns keys on).
        assert httpx.get(f"{srv.url}/health",
                         headers={"Host": "memory.internal:8765"}).status_code == 421

        # Names a rebinding page cannot have: IP literals, single labels (a compose
        # service, resolved through local search domains), *.localhost, listed names.
        for host in (f"10.1.2.3:{srv.port}", "192.168.0.7", f"[fd00::1]:{srv.port}", "::1",
                     "ampup", "memory-1:8765", "localhost", "inspector.localhost:8765",
                     "memory.example.com", "MEMORY.example.com:443"):
            r = httpx.get(f"{srv.url}/health", headers={"Host": host})
            assert r.status_code == 200, (host, r.text)
        r = httpx.post(f"{srv.url}/amp/v1/memories", content=CELL, headers={
            **AGENT, "Content-Type": "application/json", "Host": "ampup:8765",
            "Origin": "http://ampup:8765"})
        assert r.status_code == 201, r.text
        # Behind nginx passing the public name on (deploy/nginx.conf), the site's own page.
        r = httpx.get(f"{srv.url}/health", headers={
            "Host": "memory.example.com", "X-Forwarded-Host": "memory.example.com",
            "Origin": "https://memory.example.com"})
        assert r.status_code == 200, r.text
        # A page of another site is still refused by the Origin check.
        r = httpx.post(f"{srv.url}/amp/v1/memories", content=CELL, headers={
            **AGENT, "Content-Type": "text/plain", "Origin": "http://evil.example",
            "Host": "10.1.2.3:8765"})
        assert _code(r) == (403, "FORBIDDEN_ORIGIN")


def test_a_public_bind_with_keys_checks_no_host(tmp_path: Path) -> None:
    """Keys on: a rebinding page has no key, so any Host is answered (behind a load
    balancer) and what protects the memory is the key."""
    with ServerProcess(tmp_path / "keyed", env=QUIET,
                       args=["--host", "0.0.0.0", "--require-keys"]) as srv:
        for host in ("memory.internal:8765", "attacker.example"):
            assert httpx.get(f"{srv.url}/health", headers={"Host": host}).status_code == 200
        r = httpx.get(f"{srv.url}/episodes", params={"scope": "acme/sales"}, headers={
            **USER, **AGENT, "Host": "attacker.example", "Origin": "http://attacker.example"})
        assert _code(r) == (401, "UNAUTHENTICATED"), r.text
        r = httpx.get(f"{srv.url}/health", headers={
            "Host": "memory.internal:8765", "X-Forwarded-Host": "memory.example.com",
            "Origin": "https://memory.example.com"})
        assert r.status_code == 200, r.text
        r = httpx.get(f"{srv.url}/health", headers={
            "Host": "memory.internal:8765", "Origin": "http://evil.example"})
        assert _code(r) == (403, "FORBIDDEN_ORIGIN")


def test_a_loopback_bind_with_keys_serves_its_own_proxy(tmp_path: Path) -> None:
    """Keys on, a proxy on the same machine calls the server 127.0.0.1 and forwards its
    public name: served (a rebound page has no key). The Host itself is still checked."""
    with ServerProcess(tmp_path / "proxied", env=QUIET, args=["--require-keys"]) as srv:
        r = httpx.get(f"{srv.url}/health", headers={
            "Host": f"127.0.0.1:{srv.port}", "X-Forwarded-Host": "memory.example.com"})
        assert r.status_code == 200, r.text
        r = httpx.get(f"{srv.url}/health", headers={"Host": "memory.example.com"})
        assert _code(r) == (421, "MISDIRECTED_REQUEST")


# A page of another site (evil.test, which the browser resolves to this machine) that
# tries every write a page can send without the server's consent, and reads.
EVIL_PAGE = """<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="TARGET/amp/v1/memories" target="sink">
<input name='BODY_HEAD' value='"}'></form><iframe name="sink"></iframe>
<script>
window.results = {};
(async () => {
  const body = 'BODY_HEAD"}';
  const tried = async (name, f) => { try { results[name] = await f(); }
                                      catch (e) { results[name] = "failed: " + e; } };
  await tried("no-cors", async () => (await fetch("TARGET/amp/v1/memories", {method: "POST",
    mode: "no-cors", headers: {"Content-Type": "text/plain"}, body})).type);
  await tried("cors", async () => (await fetch("TARGET/amp/v1/memories", {method: "POST",
    headers: {"Content-Type": "application/json", "X-AMP-Agent-ID": "evil"}, body})).status);
  await tried("read", async () => (await fetch("TARGET/amp/v1/memories?owner_id=victim",
    {headers: {"X-AMP-Agent-ID": "victim"}})).status);
  await tried("health", async () => (await fetch("TARGET/health")).status);
  results.beacon = navigator.sendBeacon("TARGET/amp/v1/memories",
                                        new Blob([body], {type: "text/plain"}));
  document.getElementById("f").submit();
  results.done = true;
})();
</script></body></html>"""
# A cell a form can post without any header: POST /memories may name its creator in the
# body (docs/api.md); the form's field name holds all of it but the closing quote.
EVIL_CELL = ('{"type":"semantic","content":{"text":"planted by a page"},"identity":'
             '{"owner_id":"victim","owner_type":"user","created_by":"evil"},"x":"')


def test_a_real_browser_on_another_site_writes_and_reads_nothing(local: ServerProcess) -> None:
    """Chromium itself, not a hand-made Origin: a form post, a no-cors fetch and a beacon
    (the requests that need no preflight) reach the server with the page's Origin and are
    403; a fetch with a caller header or a read gets no CORS answer and fails in the page.
    Nothing is written."""
    from tests.browser import chromium

    page_html = EVIL_PAGE.replace("TARGET", local.url).replace("BODY_HEAD", EVIL_CELL)

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the handler's name)
            body = page_html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    # Served from this machine as a real site (a page the browser fetched itself: one a
    # test fulfils is of no address space, and Chromium then refuses its loopback requests
    # before they leave, which proves nothing about the server).
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    refused: list[str] = []
    try:
        with chromium("--host-resolver-rules=MAP evil.test 127.0.0.1") as browser:
            page = browser.new_page()
            page.on("response", lambda r: r.url.startswith(local.url) and r.status == 403
                    and refused.append(r.request.method))
            page.goto(f"http://evil.test:{site.server_address[1]}/")
            page.wait_for_function("window.results && window.results.done")
            page.wait_for_timeout(500)  # the form's post, into the frame
            results = page.evaluate("window.results")
    finally:
        site.shutdown()
        site.server_close()
    assert results["no-cors"] == "opaque" and results["beacon"] is True, results
    for name in ("cors", "read", "health"):  # no CORS answer: the page reads nothing
        assert str(results[name]).startswith("failed: TypeError"), results
    assert len(refused) >= 3, refused  # the no-cors fetch, the beacon, the form
    owner = httpx.get(f"{local.url}/amp/v1/memories", params={"owner_id": "victim"},
                      headers={"X-AMP-Agent-ID": "victim"})
    assert owner.status_code == 200 and owner.json()["returned"] == 0, owner.text
