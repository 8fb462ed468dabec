"""HTTP semantics a shared cache, a careful client and a browser rely on, on every route
(docs/security-model.md, "Caches, proxies and browsers"; docs/api.md, "Errors"):

- every answer of the API (2xx, 304, 4xx, the refusals made before any route, /mcp) is
  ``Cache-Control: no-store`` and ``Vary`` names the headers that say who calls: a proxy
  must not hand one caller's answer to another;
- the pages and their files are ``no-cache`` (the same for everyone), with the browser
  headers (nosniff, no referrer, no framing);
- a 401 carries ``WWW-Authenticate`` (keys off and on);
- a 201 that made something another route reads says where (``Location``).

One keys-off and one keys-on server for the module.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import QUIET, cli_in_process
from tests.server_process import ServerProcess, free_port, plain_client

CALLER_HEADERS = {"authorization", "x-amp-agent-id", "x-amp-api-key", "x-ampup-user",
                  "x-amp-admin-token"}
USER, AGENT = "alice", "agent_a"


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    home = tmp_path_factory.mktemp("http-off")
    with ServerProcess(home, env=QUIET) as server, \
            plain_client(base_url=server.url, timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, str]]:
    home = tmp_path_factory.mktemp("http-on")
    done = cli_in_process(home, {}, "keys", "create", "--agent", AGENT, "--user", USER)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip().splitlines()[-1]
    with ServerProcess(home, env={**QUIET, "AMP_REQUIRE_KEYS": "1"}) as server, \
            plain_client(base_url=server.url, timeout=60) as http:
        yield http, key


def private(r: httpx.Response) -> None:
    """Not for any shared cache, and varying by every header that names the caller."""
    said = r.headers.get("cache-control", "")
    assert "no-store" in [d.strip().lower() for d in said.split(",")], \
        (r.request.method, str(r.request.url), r.status_code, said)
    vary = {v.strip().lower() for v in r.headers.get("vary", "").split(",")}
    assert CALLER_HEADERS <= vary, (r.request.method, str(r.request.url), r.status_code, vary)
    assert r.headers.get("x-content-type-options") == "nosniff", r.request.url
    assert not [h for h in r.headers if h.lower().startswith("access-control-")], r.headers


def seeded(http: httpx.Client) -> dict[str, Any]:
    me = {"X-AmpUp-User": USER, "X-AMP-Agent-ID": AGENT}
    scope = f"h{uuid.uuid4().hex[:8]}/team_1"
    r = http.post("/episodes", headers=me, json={"scope": scope, "source": "doc:a",
                                                 "body": "Acme renewed.", "acl": ["*"]})
    assert r.status_code == 201, r.text
    cell = http.post("/amp/v1/memories", headers=me, json={
        "type": "semantic", "content": {"text": "Acme prefers e-mail."},
        "identity": {"owner_id": AGENT, "owner_type": "agent"}})
    assert cell.status_code == 201, cell.text
    return {"headers": me, "scope": scope, "episode_id": r.json()["id"],
            "memory_id": cell.json()["id"], "org": scope.split("/")[0], "team": "team_1",
            "user": USER, "name": "nope", "workspace_id": "ws_x", "pin_id": "pin_x",
            "snapshot_id": "snap_x", "run_id": "run_x", "session_id": "ses_x"}


def test_every_api_answer_is_no_store_and_varies_by_caller(off: httpx.Client) -> None:
    values = seeded(off)
    me = values["headers"]
    spec = off.get("/openapi.json").json()
    private(off.get("/openapi.json"))
    answered = set()
    for template, item in spec["paths"].items():
        path = re.sub(r"{(\w+)}", lambda m: str(values[m.group(1)]), template)
        for method in item:
            # As the caller (whatever the answer: 2xx, 404, 422 ...) and as no one.
            for headers in (me, {}):
                r = off.request(method.upper(), path, params={"scope": values["scope"]},
                                headers=headers, json={} if method in ("post", "put",
                                                                       "patch") else None)
                assert r.status_code < 500, (method, path, r.text)
                private(r)
                answered.add(r.status_code)
    assert {200, 401, 404, 422} <= answered, answered
    # Conditional reads: the 304 is the caller's too.
    for path in (f"/amp/v1/memories/{values['memory_id']}",
                 f"/episodes/{values['episode_id']}?scope={values['scope']}"):
        first = off.get(path, headers=me)
        assert first.status_code == 200 and first.headers.get("etag"), first.text
        private(first)
        again = off.get(path, headers={**me, "If-None-Match": first.headers["etag"]})
        assert again.status_code == 304
        private(again)
    # Answers made before any route: an unknown route, a wrong method, a HEAD, a
    # foreign page, a body over the limit, a body in a content coding, /health, /mcp.
    private(off.get("/no/such/route", headers=me))
    private(off.request("BREW", "/episodes", headers=me))
    private(off.head(f"/episodes?scope={values['scope']}", headers=me))
    private(off.post("/episodes", headers={**me, "Origin": "https://evil.example"}, json={}))
    big = off.post("/episodes", headers=me, content=b" " * (4 * 2**20 + 1))
    assert big.status_code == 413, big.text
    private(big)
    private(off.post("/episodes", headers={**me, "Content-Encoding": "gzip"}, content=b"x"))
    private(off.get("/health"))
    mcp = off.post("/mcp", headers={**me, "Accept": "application/json, text/event-stream"},
                   json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                       "protocolVersion": "2025-03-26", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}})
    assert mcp.status_code == 200, mcp.text
    private(mcp)
    private(off.post("/mcp", json={}))


PAGES = ["/", "/inspector/app.js", "/inspector/app.css", "/docs", "/redoc",
         "/docs/oauth2-redirect", "/static-offline-docs/swagger-ui.css"]


def test_pages_are_revalidated_and_guarded(off: httpx.Client) -> None:
    for path in PAGES:
        for method in ("GET", "HEAD"):
            r = off.request(method, path)
            assert r.status_code == 200, (method, path)
            assert r.headers.get("cache-control") == "no-cache", (method, path, r.headers)
            assert r.headers.get("x-content-type-options") == "nosniff", path
            assert r.headers.get("referrer-policy") == "no-referrer", path
            assert r.headers.get("x-frame-options") == "DENY", path
            if path in ("/", "/docs", "/redoc"):
                assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_401_names_its_challenge(off: httpx.Client, on: tuple[httpx.Client, str]) -> None:
    scope = "h_one/team_1"
    for path, scheme in (("/amp/v1/memories", "X-AMP-Agent-ID"),
                         (f"/episodes?scope={scope}", "X-AmpUp-User"),
                         (f"/facts?scope={scope}&entity=a", "X-AmpUp-User")):
        r = off.get(path)
        assert r.status_code == 401, r.text
        assert r.headers.get("www-authenticate") == f'{scheme} realm="ampup-memory"', path
    r = off.post("/mcp", json={})
    assert r.status_code == 401 and r.headers.get("www-authenticate"), r.headers
    http, key = on
    for headers in ({}, {"X-AMP-Agent-ID": AGENT}, {"X-AMP-Agent-ID": AGENT,
                                                     "X-AMP-API-Key": "wrong"},
                    {"Authorization": "Bearer wrong"}):
        for method, path in (("GET", "/amp/v1/memories"), ("GET", f"/episodes?scope={scope}"),
                             ("POST", "/mcp")):
            r = http.request(method, path, headers=headers, json={} if method == "POST"
                             else None)
            assert r.status_code == 401, (path, headers, r.text)
            assert r.headers.get("www-authenticate") == 'Bearer realm="ampup-memory"'
            private(r)
    ok = http.get(f"/episodes?scope={scope}", headers={"Authorization": f"Bearer {key}",
                                                        "X-AMP-Agent-ID": AGENT})
    assert ok.status_code == 200, ok.text
    assert "www-authenticate" not in ok.headers
    private(ok)



def test_201_says_where_the_new_resource_is_read(off: httpx.Client) -> None:
    me = {"X-AmpUp-User": USER, "X-AMP-Agent-ID": AGENT}
    scope = f"h{uuid.uuid4().hex[:8]}/team_1"
    episode = {"scope": scope, "source": "doc:a", "body": "Acme renewed.", "acl": ["*"]}
    workspace = off.post("/workspaces", headers=me, json={"name": "w", "ttl": "1h"})
    made = {"episode": off.post("/episodes", headers=me, json=episode),
            "cell": off.post("/amp/v1/memories", headers=me, json={
                "type": "semantic", "content": {"text": "x"},
                "identity": {"owner_id": AGENT, "owner_type": "agent"}}),
            "run": off.post("/runs", headers=me, json={"scope": scope, "task": "t"}),
            "session": off.post("/sessions/start", headers=me, json={"scope": scope}),
            "pin": off.post("/pin", headers=me, json={"scope": scope, "ttl": "1h"}),
            "snapshot": off.post("/snapshots", headers=me, json={"scopes": [scope]}),
            "workspace": workspace}
    ws_id = workspace.json()["id"]
    assert off.post("/episodes", headers=me, json={**episode, "scope": f"{ws_id}/team_1"}
                    ).status_code == 201
    made["workspace snapshot"] = off.post(f"/workspaces/{ws_id}/snapshots", headers=me)
    assert off.post("/branches", headers=me, json={"scope": scope, "name": "side"}
                    ).status_code == 201
    made["episode on a branch"] = off.post("/episodes", headers=me, json={
        **episode, "body": "On the side.", "branch": "side"})
    for what, r in made.items():
        assert r.status_code == 201, (what, r.text)
        where = r.headers.get("location")
        assert where and where.startswith("/"), (what, r.headers)
        read = off.get(where, headers=me)
        assert read.status_code == 200, (what, where, read.text)
        assert read.json()["id"] == r.json()["id"], (what, where)
    assert made["episode"].headers["location"] == (
        f"/episodes/{made['episode'].json()['id']}?scope={scope.replace('/', '%2F')}")
    assert made["episode on a branch"].headers["location"].endswith("&branch=side")
    again = off.post("/episodes", headers=me, json=episode)  # nothing new: no Location
    assert again.status_code == 200 and "location" not in again.headers


def test_a_body_declared_in_another_charset_is_never_read_as_other_text(
        off: httpx.Client) -> None:
    """Every body is read as UTF-8 JSON. One declared latin-1 holding "Ã©" (bytes C3 A9)
    was stored as "é"; with "é" (E9) it was a 422 about a code point. Both are 415 now;
    ASCII in any declared charset, and UTF-8 however declared, are read as before."""
    me = {"X-AmpUp-User": USER}
    scope = f"h{uuid.uuid4().hex[:8]}/team_1"

    def send(text: str, content_type: str, encoding: str) -> httpx.Response:
        body = json.dumps({"scope": scope, "source": "doc:c", "body": text, "acl": ["*"]},
                          ensure_ascii=False)
        return off.post("/episodes", headers={**me, "Content-Type": content_type},
                        content=body.encode(encoding))

    for text, declared, encoding in (("Ã© mojibake", "application/json; charset=latin-1",
                                      "latin-1"),
                                     ("café", "application/json; charset=ISO-8859-1",
                                      "latin-1"),
                                     ("café", 'text/plain; charset="windows-1252"', "cp1252"),
                                     ("café", "application/json; charset=utf-16", "utf-16")):
        r = send(text, declared, encoding)
        assert r.status_code == 415, (declared, r.status_code, r.text)
        error = r.json()["error"]
        assert error["code"] == "UNSUPPORTED_MEDIA_TYPE" and "UTF-8" in error["message"]
        assert "accept-encoding" not in r.headers
        private(r)
    assert off.get("/episodes", headers=me, params={"scope": scope}).json()["total"] == 0
    for text, declared, encoding in (("plain ascii", "application/json; charset=latin-1",
                                      "latin-1"),
                                     ("café", 'application/json; charset="UTF-8"', "utf-8"),
                                     ("naïve", "application/vnd.api+json", "utf-8"),
                                     ("über", "text/plain", "utf-8")):
        r = send(text, declared, encoding)
        assert r.status_code == 201, (declared, r.text)
        got = off.get(f"/episodes/{r.json()['id']}", headers=me, params={"scope": scope})
        assert got.json()["body"] == text


def test_no_cors_preflight_is_granted(off: httpx.Client) -> None:
    """A preflight grants nothing: from a page the origin check lets through (a loopback
    page) a 405 with the path's methods, from another site a 403; never an
    Access-Control-* header, so a page of another origin sends no caller header and reads
    no answer (docs/security-model.md)."""
    ask = {"Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type, x-ampup-user"}
    for path in ("/episodes", "/amp/v1/memories", "/search", "/health", "/"):
        r = off.options(path, headers={**ask, "Origin": "http://localhost:3000"})
        assert r.status_code == 405 and r.headers["allow"], (path, r.status_code)
        assert "OPTIONS" not in r.headers["allow"]
        assert not [h for h in r.headers if h.lower().startswith("access-control-")]
        r = off.options(path, headers={**ask, "Origin": "https://evil.example"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN_ORIGIN"
        assert not [h for h in r.headers if h.lower().startswith("access-control-")]
    r = off.options("/mcp", headers={**ask, "Origin": "http://localhost:3000",
                                     "X-AmpUp-User": USER})
    assert r.status_code == 405 and not [
        h for h in r.headers if h.lower().startswith("access-control-")]


def test_mcp_names_the_content_type_it_takes(off: httpx.Client) -> None:
    """POST /mcp with a body not sent as application/json: a 415 JSON-RPC error (the SDK
    said 400 "Invalid Content-Type header", bare text with no Content-Type)."""
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    accept = {"X-AMP-Agent-ID": AGENT, "Accept": "application/json, text/event-stream"}
    for sent in ("text/plain", None, "application/vnd.api+json",
                 "application/x-www-form-urlencoded"):
        r = off.post("/mcp", content=hello, headers={**accept, **(
            {"Content-Type": sent} if sent else {})})
        assert r.status_code == 415, (sent, r.status_code, r.text)
        error = r.json()["error"]
        assert error["data"]["code"] == "UNSUPPORTED_MEDIA_TYPE", r.text
        assert "application/json" in error["message"] and r.json()["jsonrpc"] == "2.0"
        private(r)
    r = off.post("/mcp", content=hello, headers={
        **accept, "Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text


def test_an_unexpected_error_is_no_store_too(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A 500 is answered outside every middleware (Starlette's own outermost layer): it is
    held to the same headers (tests/broken_server.py's spec-crashes)."""
    root = Path(__file__).resolve().parent
    home = tmp_path_factory.mktemp("http-500")
    port = free_port()
    command = [sys.executable, str(root / "broken_server.py"), "spec-crashes", str(port)]
    with ServerProcess(home, env=QUIET, command=command, port=port) as server:
        r = httpx.get(f"{server.url}/amp/v1/spec", headers={"X-AMP-Agent-ID": AGENT})
        assert r.status_code == 500 and r.json()["error"]["code"] == "INTERNAL_ERROR"
        private(r)
        assert r.headers["vary"].count("X-AmpUp-User") == 1
        ok = httpx.get(f"{server.url}/health")
        assert ok.status_code == 200 and ok.headers["vary"].count("X-AmpUp-User") == 1
