"""Bad input over real HTTP: a clear 4xx in the one envelope, never a 500, and the same
keep-alive connection answers the next request.

Covers JSON nested too deep (request bodies on every route, JSON inside episode bodies),
instants UTC cannot hold, time zones that are folders or too long, request bodies over
``max_request_bytes`` (413, also on /mcp), and times before year 1000, which the search
index once stored unpadded (search answered 500 for good, even after a rebuild).
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET, new_scope
from tests.server_process import ServerProcess, raw_exchange
from tests.test_mcp import http_client_for, mcp_refusal
from tests.test_mcp import refused as mcp_refused

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEADERS = {"X-AmpUp-User": "alice", "X-AMP-Agent-ID": "agent-a",
           "X-AMP-Admin-Token": ADMIN_TOKEN}
MCP_HEADERS = {"content-type": "application/json",
               "accept": "application/json, text/event-stream"}
DEEP = b"[" * 100_000 + b"]" * 100_000
MAX_REQUEST_BYTES = 4 * 1024 * 1024  # the documented default
OVERFLOWING = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("bad-input"), env=QUIET).start(timeout=180)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120, headers=HEADERS) as c:
        yield c


def _connection(response: httpx.Response) -> Any:
    return response.extensions["network_stream"].get_extra_info("client_addr")


def still_usable(client: httpx.Client, bad: httpx.Response) -> None:
    """The connection that carried the bad request carries the next one."""
    after = client.get("/health")
    assert after.status_code == 200
    assert _connection(after) == _connection(bad), "the server dropped the connection"


def refused(client: httpx.Client, status: int, method: str, path: str,
            **kwargs: Any) -> dict[str, Any]:
    response = client.request(method, path, **kwargs)
    assert response.status_code == status, (method, path, response.text[:300])
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    still_usable(client, response)
    return dict(error)


def _routes_with_bodies() -> list[tuple[str, str]]:
    spec = json.loads((DOCS / "openapi.json").read_text())
    return [(method.upper(), path) for path, methods in spec["paths"].items()
            for method, op in methods.items() if "requestBody" in op]


# ---- JSON nested too deep ------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), _routes_with_bodies())
def test_deeply_nested_body_is_422_on_every_route(client: httpx.Client, method: str,
                                                  path: str) -> None:
    if "{memory_id}" in path:  # a cell the caller may write, so the body is what is judged
        cell = client.post("/amp/v1/memories", json={
            "type": "semantic", "content": {"text": "x"},
            "identity": {"owner_id": "agent-a", "owner_type": "agent"}})
        path = path.replace("{memory_id}", cell.json()["id"])
    path = path.replace("{episode_id}", "e" * 64).replace("{user}", "bob")
    error = refused(client, 422, method, path, content=DEEP,
                    headers={"content-type": "application/json"})
    assert "deeper than 128" in error["message"]


def test_deeply_nested_body_on_mcp_is_refused_as_rest_bodies_are(client: httpx.Client) -> None:
    response = client.post("/mcp", content=DEEP, headers=MCP_HEADERS)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == -32600  # JSON-RPC invalid request: well-formed, refused
    assert "deeper than 128" in error["message"]
    assert error["data"]["code"] == "VALIDATION_ERROR"
    still_usable(client, response)


# ---- a key named twice in one object -------------------------------------------------


def test_a_key_named_twice_is_422_on_every_route(client: httpx.Client) -> None:
    """Readers differ on which of two values counts (the last in Python and JavaScript, the
    first in others), so a gateway that checked one ACL could hand on a body read with
    another: refused wherever JSON comes in, at any depth, before anything is stored."""
    cell = client.post("/amp/v1/memories", json={
        "type": "semantic", "content": {"text": "x"},
        "identity": {"owner_id": "agent-a", "owner_type": "agent"}})
    twice = b'{"outer": {"k": 1, "k": 2}, "k": 0}'
    for method, path in _routes_with_bodies():
        path = (path.replace("{memory_id}", cell.json()["id"])
                .replace("{episode_id}", "e" * 64).replace("{user}", "bob"))
        error = refused(client, 422, method, path, content=twice,
                        headers={"content-type": "application/json"})
        assert error["message"].startswith('the key "k" appears more than once'), (path, error)
        assert error["details"]["errors"][0]["loc"] == ["body"]
    scope = new_scope()
    refused(client, 422, "POST", "/episodes", headers={"content-type": "application/json"},
            content=json.dumps({"scope": scope, "source": "doc:a", "body": "private"}
                               )[:-1].encode() + b', "acl": ["user:alice"], "acl": ["*"]}')
    found = client.post("/query", json={"scope": scope, "find": "passages",
                                        "query": "private"})
    assert found.status_code == 200 and found.json()["results"] == [], found.text
    # a stored record's JSON is read as it always was (it must split as when written)
    r = client.post("/episodes", json={"scope": scope, "source": "crm:deal", "acl": ["*"],
                                       "body": '{"k": 1, "k": 2}'})
    assert r.status_code == 201, r.text


def test_a_key_named_twice_in_an_mcp_message_is_refused(client: httpx.Client) -> None:
    message = (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
               b'{"name": "search_memory", "arguments": {"query": "x", "query": "y"}}}')
    response = client.post("/mcp", content=message, headers=MCP_HEADERS)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == -32600
    assert error["message"] == 'the key "query" appears more than once in one object; ' \
        "send each key once"
    still_usable(client, response)


@pytest.mark.parametrize("source", ["crm:deal", "slack:#general", "gmail:thread"])
def test_deeply_nested_json_in_an_episode_body_is_422(client: httpx.Client,
                                                      source: str) -> None:
    nested = '{"a":' * 5000 + "1" + "}" * 5000
    body = nested if source.startswith("crm") else f"[{nested}]"
    error = refused(client, 422, "POST", "/episodes", json={
        "scope": new_scope(), "source": source, "body": body, "acl": ["*"]})
    assert error["details"]["errors"][0]["loc"][-1] == "body"
    assert "deeper than 128" in error["message"]


def test_a_body_of_too_many_arrays_and_objects_is_422_before_it_is_parsed(
        client: httpx.Client) -> None:
    """4 MB of `[[]]` is 1.6 million containers: parsing them took 1.8 s (85 % of it the
    cyclic collector) and 3 s of CPU a request, 8 at once held /health for 13 s. Counted
    by the depth scan, more than MAX_CONTAINERS is refused before any parser builds them,
    brackets inside strings not counted."""
    import time

    from ampup_memory.web.jsontext import MAX_CONTAINERS

    many = ",".join(["[[]]"] * 800_000)
    for path, body in (
            ("/amp/v1/memories", '{"type":"semantic","content":{"text":"x","metadata":'
                                 '{"a":[' + many + ']}},"identity":{"owner_id":"u",'
                                 '"owner_type":"user"}}'),
            ("/episodes/batch", '{"scope":"a/b","episodes":[' + many + "]}")):
        started = time.perf_counter()
        error = refused(client, 422, "POST", path, content=body.encode(),
                        headers={"content-type": "application/json"})
        assert "arrays and objects; at most 100000 are read" in error["message"], error
        assert time.perf_counter() - started < 1.5  # parsing them took 1.8 s alone
    text = '"' + "[]" * (MAX_CONTAINERS + 1) + '"'  # in a string: text, not containers
    r = client.post("/amp/v1/memories", content=(
        '{"type":"semantic","content":{"text":' + text + '},"identity":{"owner_id":"u",'
        '"owner_type":"user"}}').encode(), headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text  # past the cell's size: judged as text, not refused


def test_nesting_within_the_limit_is_accepted(client: httpx.Client) -> None:
    record = '{"a":' * 100 + '"[{\\"]"' + "}" * 100  # brackets in strings do not count
    r = client.post("/episodes", json={"scope": new_scope(), "source": "crm:deal",
                                       "body": record, "acl": ["*"]})
    assert r.status_code == 201, r.text


# ---- instants UTC cannot hold ---------------------------------------------------------


def _cited_episode(client: httpx.Client, scope: str) -> str:
    r = client.post("/episodes", json={"scope": scope, "source": "doc:price",
                                       "body": "The price is ten.", "acl": ["*"]})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _refused_everywhere(client: httpx.Client, when: str) -> None:
    """``when`` is a 422 on the field that carries it, on every route that takes a time."""
    scope = new_scope()
    episode = _cited_episode(client, scope)
    fact = {"entity": "acme", "predicate": "price", "value": "ten",
            "quote": "The price is ten.", "cites": [{"episode": episode, "unit": 1}]}
    note = {"source": "doc:n", "body": "a note", "acl": ["*"], "occurred_at": when}
    cell = {"type": "semantic", "content": {"text": "x"},
            "identity": {"owner_id": "agent-a", "owner_type": "agent"}}
    created = client.post("/amp/v1/memories", json=cell)
    assert created.status_code == 201, created.text
    cell_path = f"/amp/v1/memories/{created.json()['id']}"
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "/episodes", {"scope": scope, **note}, "occurred_at"),
        ("POST", "/episodes/batch", {"scope": scope, "episodes": [note]}, "occurred_at"),
        ("POST", "/facts", {"scope": scope, **fact, "valid_from": when}, "valid_from"),
        ("POST", "/facts", {"scope": scope, **fact, "valid_to": when}, "valid_to"),
        ("POST", "/facts/batch", {"scope": scope, "facts": [{**fact, "valid_from": when}]},
         "valid_from"),
        ("POST", "/document", {"scope": scope, "document": "d", "as_of": when}, "as_of"),
        ("POST", "/search", {"scope": scope, "query": "price", "as_of": when}, "as_of"),
        ("POST", "/amp/v1/memories", {**cell, "lifecycle": {"expires_at": when}},
         "expires_at"),
        ("PATCH", cell_path, {"lifecycle": {"expires_at": when}}, "expires_at"),
        ("POST", "/amp/v1/lifecycle/run", {"now": when, "dry_run": True}, "now"),
    ]
    for method, path, body, field in cases:
        error = refused(client, 422, method, path, json=body)
        assert error["details"]["errors"][0]["loc"][-1] == field, (path, error)
    for path, params in (("/facts", {"scope": scope, "entity": "acme", "as_of": when}),
                         (f"/schemas/{scope}", {"as_of": when})):
        error = refused(client, 422, "GET", path, params=params)
        assert error["details"]["errors"][0]["loc"] == ["query", "as_of"], (path, error)


@pytest.mark.parametrize("when", OVERFLOWING)
def test_instants_outside_utc_years_are_422_everywhere(client: httpx.Client,
                                                       when: str) -> None:
    _refused_everywhere(client, when)


# Pydantic alone reads a string of digits as seconds since 1970 (and a query parameter is
# always a string), so "1741100000" was stored as 2025-03-04T14:53:20Z. ISO 8601's basic
# forms are no RFC 3339 either (GET /schemas/{org}/{team} parsed its as_of by a rule of
# its own and took them, while refusing the lower-case "t"/"z" every other route takes).
@pytest.mark.parametrize("when", ["1741100000", "0", "2025-03-04_16:00:00Z",
                                  "20250304T160000Z", "2025-03-04T16+00:00"])
def test_times_that_are_not_rfc3339_are_422_everywhere(client: httpx.Client,
                                                       when: str) -> None:
    _refused_everywhere(client, when)


@pytest.mark.parametrize("when", OVERFLOWING)
async def test_mcp_tools_refuse_instants_outside_utc_years(server: ServerProcess,
                                                          when: str) -> None:
    async with http_client_for(server.url, {"X-AMP-Agent-ID": "agent-a",
                                            "X-AmpUp-User": "alice"}) as mcp:
        scope = new_scope()
        replies = [
            await mcp_refused(mcp, "remember_memory", scope=scope, text="hi",
                              occurred_at=when),
            await mcp_refused(mcp, "get_episode", scope=scope, document="d", as_of=when),
            await mcp_refused(mcp, "search_memory", scope=scope, query="x", as_of=when),
        ]
    for reply in replies:
        assert "outside years 0001-9999" in reply, reply


def test_first_and_last_utc_instants_are_accepted(client: httpx.Client) -> None:
    scope = new_scope()
    for when in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"):
        r = client.post("/episodes", json={"scope": scope, "source": "doc:edge",
                                           "body": f"edge {when}", "acl": ["*"],
                                           "occurred_at": when})
        assert r.status_code == 201, r.text
        got = client.get(f"/episodes/{r.json()['id']}", params={"scope": scope})
        assert got.json()["occurred_at"] == when
    assert client.post("/search", json={"scope": scope, "query": "edge"}).status_code == 200
    # RFC 3339 lets "T" and "Z" be lower case: every route that reads a time takes them.
    for path, params in (("/facts", {"scope": scope, "entity": "acme"}),
                         (f"/schemas/{scope}", {})):
        r = client.get(path, params={**params, "as_of": "2030-01-01t00:00:00z"})
        assert r.status_code == 200, (path, r.text)


# ---- time zones -----------------------------------------------------------------------


# "localtime" is the server machine's own zone (on Debian a link to /etc/localtime), so the
# same request named another day on another server; "posixrules" and right/ are files of
# the tz database that name no zone of their own.
@pytest.mark.parametrize("tz", ["America", "Europe", "A" * 5000, "Europe/" + "x" * 300,
                                "localtime", "posixrules", "right/UTC"],
                         ids=["folder", "top-folder", "too-long", "too-long-file",
                              "localtime", "posixrules", "right"])
def test_time_zone_that_is_no_zone_is_422(client: httpx.Client, tz: str) -> None:
    scope = new_scope()
    for path, body in (("/search", {"scope": scope, "query": "price yesterday", "tz": tz}),
                       ("/query", {"scope": scope, "find": "passages",
                                   "query": "price yesterday", "tz": tz})):
        error = refused(client, 422, "POST", path, json=body)
        assert error["details"]["errors"][0]["loc"] == ["body", "tz"]


# ---- request size ---------------------------------------------------------------------


def test_a_body_that_is_not_json_says_every_body_is_json(client: httpx.Client) -> None:
    """A form post (`curl -d scope=a/b`) got `Invalid JSON: expected value at line 1
    column 1` alone; the message now says every body is JSON and how this one was sent.
    A body sent as JSON that is broken keeps its message as it was: the caller knows."""
    for path in ("/amp/v1/memories", "/amp/v1/memories/search", "/episodes", "/search",
                 "/facts/batch"):
        for content_type in ("application/x-www-form-urlencoded", "text/plain"):
            error = refused(client, 422, "POST", path, content=b"scope=a/b&source=x",
                            headers={"content-type": content_type})
            assert error["code"] == "VALIDATION_ERROR"
            assert error["message"].startswith("Request validation failed: body: Invalid "
                                               "JSON"), error
            assert error["message"].endswith(
                f"(every request body is a JSON object; this one was sent as "
                f"{content_type})"), error
        broken = refused(client, 422, "POST", path, content=b"{bad",
                         headers={"content-type": "application/json"})
        assert "every request body" not in broken["message"], broken


def test_a_body_not_in_utf_8_says_so(client: httpx.Client) -> None:
    """A UTF-8 byte order mark, or UTF-16 / UTF-32 JSON, got "Invalid JSON: expected value
    at line 1 column 1" (the mark is not JSON): the 422 now says bodies are UTF-8 JSON
    without one (RFC 8259, 8.1)."""
    cell = json.dumps({"type": "semantic", "content": {"text": "Encoded."},
                       "identity": {"owner_id": "agent-a", "owner_type": "agent"}})
    for content in (b"\xef\xbb\xbf" + cell.encode(), cell.encode("utf-16"),
                    cell.encode("utf-16-le"), cell.encode("utf-32")):
        for path in ("/amp/v1/memories", "/episodes"):
            error = refused(client, 422, "POST", path, content=content,
                            headers={"content-type": "application/json"})
            assert error["message"].startswith("Request validation failed: body: "), error
            assert "UTF-8" in error["message"], (content[:8], error)
            assert error["details"]["errors"][0]["loc"] == ["body"]


def test_body_over_the_limit_is_413_before_it_is_read(client: httpx.Client) -> None:
    big = b'{"scope":"' + b"x" * MAX_REQUEST_BYTES + b'"}'
    for path in ("/episodes/batch", "/amp/v1/memories"):
        error = refused(client, 413, "POST", path, content=big,
                        headers={"content-type": "application/json"})
        assert error["code"] == "PAYLOAD_TOO_LARGE"
        assert error["details"] == {"max_bytes": MAX_REQUEST_BYTES}
    # /mcp answers the same code, message and details as a JSON-RPC error (MCP clients
    # show no other kind), not its transport's plain text.
    response = client.post("/mcp", content=big, headers=MCP_HEADERS)
    assert response.status_code == 413
    assert mcp_refusal(response) == error
    still_usable(client, response)


def test_every_route_with_a_body_documents_its_413(server: ServerProcess,
                                                   client: httpx.Client) -> None:
    """The limit answers before any route runs, so no route listed it: a conformance
    checker saw a 413 that 30 operations' ``responses`` did not allow."""
    spec = client.get("/openapi.json").json()
    big = b'{"scope":"' + b"x" * MAX_REQUEST_BYTES + b'"}'
    undocumented = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            if "requestBody" not in op:
                continue
            url = re.sub(r"{\w+}", "x", path)
            response = client.request(method, url, content=big,
                                      headers={"content-type": "application/json"})
            assert response.status_code == 413, (method, path, response.text[:200])
            if "PAYLOAD_TOO_LARGE" not in op["responses"].get("413", {}).get("description", ""):
                undocumented.append(f"{method.upper()} {path}")
    assert undocumented == []


def test_a_compressed_body_is_415_on_every_route_with_a_body(client: httpx.Client) -> None:
    """The server decodes no content coding: a gzip body was read as JSON (a 422 "Invalid
    JSON" that hid why) and a JSON body labelled ``br`` was stored as if plain. Either is
    415 with ``Accept-Encoding: identity`` (RFC 9110, 15.5.16), documented on every route
    with a body, on /mcp as a JSON-RPC error; ``identity`` and a GET with no body pass."""
    cell = json.dumps({"type": "semantic", "content": {"text": "Compressed."},
                       "identity": {"owner_id": "agent-a", "owner_type": "agent"}}).encode()
    for encoding, content in (("gzip", gzip.compress(cell)), ("br", cell), ("x-zz", cell),
                              ("gzip, identity", gzip.compress(cell))):
        error = refused(client, 415, "POST", "/amp/v1/memories", content=content, headers={
            "content-type": "application/json", "content-encoding": encoding})
        assert error["code"] == "UNSUPPORTED_MEDIA_TYPE", error
        assert "Content-Encoding" in error["message"], error
        response = client.post("/amp/v1/memories", content=content, headers={
            "content-type": "application/json", "content-encoding": encoding})
        assert response.headers["accept-encoding"] == "identity"
    response = client.post("/mcp", content=gzip.compress(b"{}"),
                           headers={**MCP_HEADERS, "content-encoding": "gzip"})
    assert response.status_code == 415
    assert mcp_refusal(response)["code"] == "UNSUPPORTED_MEDIA_TYPE"
    ok = client.post("/amp/v1/memories", content=cell, headers={
        "content-type": "application/json", "content-encoding": "identity"})
    assert ok.status_code == 201, ok.text
    assert client.get("/health", headers={"content-encoding": "gzip"}).status_code == 200
    spec = client.get("/openapi.json").json()
    undocumented = [f"{method} {path}" for path, methods in spec["paths"].items()
                    for method, op in methods.items() if "requestBody" in op
                    and "UNSUPPORTED_MEDIA_TYPE" not in
                    op["responses"].get("415", {}).get("description", "")]
    assert undocumented == []


def test_chunked_body_is_counted_as_it_streams(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"scope":"'
        for _ in range(50):  # 5 MB, no Content-Length
            yield b"x" * 100_000

    error = refused(client, 413, "POST", "/episodes/batch", content=chunks(),
                    headers={"content-type": "application/json"})
    assert error["code"] == "PAYLOAD_TOO_LARGE"


def test_a_client_gone_before_its_body_is_whole_logs_no_error(server: ServerProcess,
                                                              client: httpx.Client) -> None:
    """A client that closes its connection mid-body (or sends a chunk the HTTP layer cannot
    read, which it answers 400 itself) leaves nothing to answer: the server logged each as
    an unhandled error with two tracebacks, some 130 lines a dropped connection."""
    start = server.log_path.stat().st_size
    head = ("POST /amp/v1/memories/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "X-AMP-Agent-ID: agent-a\r\nContent-Type: application/json\r\n")
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
            conn.sendall(f'{head}Content-Length: 100\r\n\r\n{{"query"'.encode())
    answer = raw_exchange("127.0.0.1", server.port, (
        f"{head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n{{}}\r\n"
        "0\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    time.sleep(1)  # the server sees each disconnect within milliseconds
    assert client.get("/health").status_code == 200
    with server.log_path.open("rb") as log:
        log.seek(start)
        written = log.read().decode("utf-8", "replace")
    assert "Traceback" not in written and "unhandled error" not in written, written[:2000]


def test_a_search_status_or_type_sent_many_times_is_one(client: httpx.Client) -> None:
    """`types` and `status` are sets: 300,000 copies of one value (more parameters than
    SQLite takes in one statement) were put into the store's query, a 500 on SQLite (on
    PostgreSQL a 503 after seconds)."""
    cell = client.post("/amp/v1/memories", json={
        "type": "semantic", "content": {"text": "repeated status probe"},
        "identity": {"owner_id": "agent-a", "owner_type": "agent"}})
    assert cell.status_code == 201, cell.text
    for field, value in (("status", "active"), ("types", "semantic")):
        r = client.post("/amp/v1/memories/search", json={
            "query": "repeated status probe", field: [value] * 300_000})
        assert r.status_code == 200, (field, r.text[:300])
        assert cell.json()["id"] in [c["id"] for c in r.json()["results"]]


def test_a_422_lists_the_first_100_problems_and_counts_them_all(client: httpx.Client) -> None:
    """A 3.6 MB body of 400,000 wrong list items was answered with each of them: 43 MB
    built in 17 s. Bodies, unknown query parameters and query values alike."""
    body = client.post("/amp/v1/memories/search", json={"query": "x", "types": [1] * 1000})
    query = client.get("/facts", params={"scope": new_scope(), "entity": "e",
                                         **{f"p{i}": "1" for i in range(150)}})
    for r, total in ((body, 1000), (query, 150)):
        assert r.status_code == 422, r.text[:300]
        error = r.json()["error"]
        assert len(error["details"]["errors"]) == 100, r.request.url
        assert error["message"].endswith(
            f"(and {total - 1} more; details.errors lists the first 100)"), error["message"]
    few = client.post("/amp/v1/memories/search", json={"query": "x", "types": [1] * 3})
    assert few.json()["error"]["message"].endswith("(and 2 more in details.errors)")
    assert len(few.json()["error"]["details"]["errors"]) == 3


def test_an_integer_beyond_a_double_is_refused_as_its_float_spelling_is(
        client: httpx.Client) -> None:
    """2e308 was a 422 but the same number written as an integer (309 digits) was stored,
    as a cell's metadata or a fact's value, for JavaScript's reader to read as Infinity."""
    scope = new_scope()
    episode = _cited_episode(client, scope)
    cell = ('{"type":"semantic","content":{"text":"big","metadata":{"n":%s}},'
            '"identity":{"owner_id":"agent-a","owner_type":"agent"}}')
    fact = ('{"scope":"' + scope + '","entity":"acme","predicate":"n","value":%s,'
            '"quote":"ten","cites":[{"episode":"' + episode + '","unit":1}]}')
    for template, path in ((cell, "/amp/v1/memories"), (fact, "/facts")):
        for number, status in (("2" + "0" * 308, 422), ("-2" + "0" * 308, 422),
                               ("1" + "0" * 308, 201)):
            r = client.post(path, content=template % number,
                            headers={"content-type": "application/json"})
            assert r.status_code == status, (path, number[:3], r.text[:300])
            if status == 422:
                assert "finite" in r.json()["error"]["message"], r.text[:300]


@pytest.mark.parametrize("escape", ["\\u0000", "\\ud800", "\\udfff"])
def test_json_in_an_episode_body_holds_no_nul_or_lone_surrogate(client: httpx.Client,
                                                                  escape: str) -> None:
    """JSON inside a body spells any character as an escape, which the request's parser
    never sees: a crm: record or slack: export holding U+0000 or a lone surrogate was
    stored (201), then its read was a 500 and, on PostgreSQL, every search of its scope."""
    scope = new_scope()
    for source, body in (("crm:deal", '{"name": "a' + escape + 'b"}'),
                         ("slack:C1", '[{"user": "u", "text": "hi ' + escape + ' there"}]'),
                         ("gmail:t", '[{"from": "a@b.c", "body": "hi ' + escape + '"}]')):
        error = refused(client, 422, "POST", "/episodes",
                        json={"scope": scope, "source": source, "body": body, "acl": ["*"]})
        assert error["details"]["errors"][0]["loc"] == ["body", "body"], error
        batch = refused(client, 422, "POST", "/episodes/batch", json={
            "scope": scope, "episodes": [{"source": "doc:x", "body": "fine", "acl": ["*"]},
                                         {"source": source, "body": body, "acl": ["*"]}]})
        assert batch["details"]["errors"][0]["loc"] == ["body", "episodes", 1, "body"], batch
    ok = client.post("/episodes", json={"scope": scope, "source": "crm:deal",
                                        "body": '{"name": "\\ud83d\\ude00 fine"}',
                                        "acl": ["*"]})
    assert ok.status_code == 201, ok.text  # a pair is one character
    assert client.get(f"/episodes/{ok.json()['id']}", params={"scope": scope}).status_code == 200
    found = client.post("/query", json={"scope": scope, "find": "passages", "query": "fine"})
    assert found.status_code == 200 and len(found.json()["results"]) == 1, found.text


def test_documented_limits_fit_under_the_default(client: httpx.Client) -> None:
    scope = new_scope()
    # The largest episode body (1,000,000 bytes), sent chunked.
    body = ("word " * 199 + "end\n\n") * 1000
    assert len(body.encode()) == 1_000_000
    raw = json.dumps({"scope": scope, "source": "doc:big", "body": body, "acl": ["*"]})
    r = client.post("/episodes", content=iter([raw.encode()]),
                    headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text[:300]
    # A batch of the most episodes a batch may hold.
    batch = [{"source": f"slack:#c{i}", "body": f"message {i}", "acl": ["*"]}
             for i in range(1000)]
    r = client.post("/episodes/batch", json={"scope": scope, "episodes": batch})
    assert r.status_code == 201, r.text[:300]
    assert len(r.json()["episodes"]) == 1000


# ---- times before year 1000 -----------------------------------------------------------


def _write_ancient(client: httpx.Client, scope: str) -> None:
    r = client.post("/episodes", json={"scope": scope, "source": "doc:old",
                                       "body": "The old price of acme was ten.",
                                       "acl": ["*"], "occurred_at": "0999-03-01T00:00:00Z"})
    assert r.status_code == 201, r.text
    cites = [{"episode": r.json()["id"], "unit": 1}]
    for entity, valid_from in (("acme", "0500-01-01T00:00:00Z"),
                               ("globex", "2024-01-01T00:00:00Z")):
        r = client.post("/facts", json={
            "scope": scope, "entity": entity, "predicate": "price", "value": "ten",
            "quote": "The old price of acme was ten.", "cites": cites,
            "valid_from": valid_from})
        assert r.status_code == 201, r.text


def _check_ancient(client: httpx.Client, scope: str) -> None:
    """Search, passages and a time window in year 800 all work, for every reader."""
    for user in ("alice", "bob"):
        headers = {"X-AmpUp-User": user}
        r = client.post("/search", json={"scope": scope, "query": "price 0800-01-01"},
                        headers=headers)
        assert r.status_code == 200, r.text[:300]
        first = r.json()["results"][0]
        assert (first["entity"], first["valid_from"]) == ("acme", "0500-01-01T00:00:00Z")
        assert first["parts"]["time"] == 1.0  # valid in the window: text order is time order
        r = client.post("/query", json={"scope": scope, "find": "passages",
                                        "query": "old price"}, headers=headers)
        assert r.status_code == 200, r.text[:300]
        assert r.json()["results"]


def test_times_before_year_1000_search_and_rank(client: httpx.Client) -> None:
    scope = new_scope()
    _write_ancient(client, scope)
    _check_ancient(client, scope)


@contextmanager
def _served(home: Path) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    srv = ServerProcess(home, env=QUIET).start(timeout=180)  # a loaded CI box starts slowly
    try:
        with httpx.Client(base_url=srv.url, timeout=120, headers=HEADERS) as c:
            yield srv, c
    finally:
        srv.stop()


def _index_times(index: Path) -> list[str]:
    with sqlite3.connect(index) as db:
        return sorted([r[0] for r in db.execute("SELECT occurred_at FROM episodes")]
                      + [r[0] for r in db.execute("SELECT valid_from FROM facts")])


def test_index_with_unpadded_years_reads_and_heals_on_rebuild(tmp_path: Path) -> None:
    """An index written before times were zero-padded ('999-03-01T…') still answers, and
    `ampup-memory index rebuild` rewrites it in the one fixed-width form."""
    scope = new_scope()
    with _served(tmp_path) as (srv, c):
        _write_ancient(c, scope)
    index = tmp_path / "index.db"
    with sqlite3.connect(index) as db:  # the spelling the index used to store
        db.execute("UPDATE episodes SET occurred_at = substr(occurred_at, 2)"
                   " WHERE occurred_at LIKE '0%'")
        db.execute("UPDATE facts SET valid_from = substr(valid_from, 2)"
                   " WHERE valid_from LIKE '0%'")
    assert "999-03-01T00:00:00.000000Z" in _index_times(index)
    with _served(tmp_path) as (srv, c):
        r = c.post("/search", json={"scope": scope, "query": "acme price"})
        assert r.status_code == 200, r.text[:300]  # legacy rows read back
    rebuilt = subprocess.run(
        [sys.executable, "-m", "ampup_memory.cli", "index", "rebuild"],
        env={**srv.env}, capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _index_times(index) == sorted([
        "0999-03-01T00:00:00.000000Z", "0500-01-01T00:00:00.000000Z",
        "2024-01-01T00:00:00.000000Z"])
    with _served(tmp_path) as (srv, c):
        _check_ancient(c, scope)


NUL = "a\x00b"


@pytest.mark.postgres
async def test_nul_characters_are_422_and_never_stall_a_scope(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """U+0000 in any AmpUp text (body, query, path, MCP tool argument) is a 422 naming
    where, on PostgreSQL too, whose text cannot hold it: it once landed in the tables and
    then failed in the read index, so every later request on the scope was a 500. The
    AMP face keeps accepting it in cells (its store maps it away)."""
    from tests.memory_support import backend_env

    env = {**backend_env("postgres", request), "AMP_EMBEDDING_PROVIDER": "hash"}
    scope = new_scope()
    with ServerProcess(tmp_path / "home", env=env) as proc, \
            httpx.Client(base_url=proc.url, headers=HEADERS, timeout=60) as c:
        def episode(body: str, source: str = "doc:a") -> httpx.Response:
            return c.post("/episodes", json={"scope": scope, "source": source, "body": body,
                                             "acl": ["*"]})

        assert episode("The Porto office opened.").status_code == 201
        assert c.post("/branches", json={"scope": scope, "name": "b1"}).status_code == 201
        refused = {
            ("body", "body"): episode(NUL, "doc:b"),
            ("body", "source"): episode("x", "doc:" + NUL),
            ("body", "message"): c.post("/merge", json={"scope": scope, "from": "b1",
                                                        "message": NUL}),
            ("body", "task"): c.post("/runs", json={"scope": scope, "task": NUL}),
            ("body", "query"): c.post("/search", json={"scope": scope, "query": NUL}),
            ("query", "entity"): c.get("/facts", params={"scope": scope, "entity": NUL}),
            ("query", "after"): c.get("/entities", params={"scope": scope, "after": NUL}),
            ("path",): c.get("/episodes/%00", params={"scope": scope}),
        }
        async with http_client_for(proc.url, HEADERS) as mcp:
            by_tool = await mcp_refused(mcp, "remember_memory", scope=scope, text=NUL)
        # The scope still serves: reads, writes, branches, merges.
        after = [episode("The Lisbon office opened."),
                 c.post("/branches", json={"scope": scope, "name": "b2"}),
                 c.post("/merge", json={"scope": scope, "from": "b1"}),
                 c.get("/ledger", params={"scope": scope}),
                 c.post("/search", json={"scope": scope, "query": "office"})]
        cell = c.post("/amp/v1/memories", json={
            "type": "semantic", "content": {"text": NUL},
            "identity": {"owner_id": "alice", "owner_type": "user"}})
        log = proc.log_path.read_text()
    for loc, r in refused.items():
        assert r.status_code == 422, (loc, r.text)
        error = r.json()["error"]
        assert error["code"] == "VALIDATION_ERROR" and "NUL" in error["message"], r.text
        assert tuple(error["details"]["errors"][0]["loc"]) == loc, r.text
    assert "NUL" in by_tool
    assert [r.status_code for r in after] == [201, 201, 200, 200, 200], [r.text for r in after]
    assert cell.status_code == 201, cell.text
    assert "unhandled error" not in log and "Traceback" not in log


@pytest.mark.parametrize("method, path, name", [
    ("GET", "/scopes", "X-AmpUp-User"),
    ("GET", "/amp/v1/memories", "X-AMP-Agent-ID"),
    ("GET", "/status", "X-AMP-Admin-Token"),
    ("POST", "/mcp", "X-AmpUp-User"),
])
def test_a_credential_header_sent_twice_with_two_values_is_401(
        server: ServerProcess, method: str, path: str, name: str) -> None:
    """Which copy names the caller would depend on the reader: refused, on REST, AMP,
    admin and MCP routes alike. The same value twice is one caller, and is let in."""
    base = [(k, v) for k, v in {**HEADERS, **MCP_HEADERS}.items() if k != name]
    body = ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}} if path == "/mcp" else None)
    first = HEADERS[name] if name != "X-AmpUp-User" else "alice"
    with httpx.Client(base_url=server.url, timeout=60) as c:
        twice = c.request(method, path, json=body,
                          headers=[*base, (name, first), (name, first + "x")])
        assert twice.status_code == 401, twice.text
        error = mcp_refusal(twice) if path == "/mcp" else twice.json()["error"]
        assert error["code"] == "UNAUTHENTICATED" and name in error["message"]
        still_usable(c, twice)
        same = c.request(method, path, json=body, headers=[*base, (name, first), (name, first)])
        assert same.status_code == 200, same.text


@pytest.mark.parametrize("blank", [" ", "\t", "  \n"])
def test_a_blank_entity_or_predicate_is_422_on_every_fact_route(client: httpx.Client,
                                                                 blank: str) -> None:
    """White space alone names nothing: refused as an entity or predicate wherever a fact
    is written or closed, as it already was in an episode's `about`."""
    scope = new_scope()
    episode = _cited_episode(client, scope)
    fact = {"entity": "acme", "predicate": "price", "value": "ten",
            "quote": "The price is ten.", "cites": [{"episode": episode, "unit": 1}]}
    for field in ("entity", "predicate"):
        bad = {**fact, field: blank}
        for path, body in (("/facts", {"scope": scope, **bad}),
                           ("/facts/batch", {"scope": scope, "facts": [bad]}),
                           ("/close", {"scope": scope, "entity": bad["entity"],
                                       "predicate": bad["predicate"]})):
            error = refused(client, 422, "POST", path, json=body)
            first = error["details"]["errors"][0]
            assert (first["loc"][-1], first["type"]) == (field, "string_blank"), (path, error)
    error = refused(client, 422, "POST", "/episodes",
                    json={"scope": scope, "source": "doc:a", "body": "b", "acl": ["*"],
                          "about": [blank]})
    first = error["details"]["errors"][0]
    assert (first["loc"][-2:], first["type"]) == (["about", 0], "string_blank"), error
    assert client.post("/facts", json={"scope": scope, **fact}).status_code == 201


def test_a_422_message_names_its_first_problem(server: ServerProcess,
                                               client: httpx.Client) -> None:
    """Every request-shape 422 said only "Request validation failed.", so an SDK's exception
    (which shows the message) gave no hint; the message now names the first problem and
    where it is, and how many more `details.errors` holds."""
    from ampup_memory.client import AMPClient, ValidationError

    bad_cell = {"type": "semantc", "content": {"text": "x"},
                "identity": {"owner_id": "u", "owner_type": "user"}}
    error = refused(client, 422, "POST", "/amp/v1/memories", json=bad_cell)
    assert error["message"] == ("Request validation failed: body.type: Input should be "
                                "'episodic', 'semantic' or 'procedural'"), error
    error = refused(client, 422, "POST", "/episodes",
                    json={"scope": new_scope(), "source": "doc:x", "body": "b"})
    assert error["message"] == "Request validation failed: body.acl: Field required", error
    error = refused(client, 422, "GET", "/amp/v1/memories", params={"limit": "abc"})
    assert error["message"].startswith("Request validation failed: query.limit: "), error
    error = refused(client, 422, "POST", "/amp/v1/memories", json={"type": "semantic"})
    assert error["message"] == ("Request validation failed: body.content: Field required "
                                "(and 1 more in details.errors)"), error
    assert len(error["details"]["errors"]) == 2
    # PATCH's own checks (a field that may not change) say it the same way.
    made = client.post("/amp/v1/memories", json={**bad_cell, "type": "semantic"})
    assert made.status_code == 201, made.text
    error = refused(client, 422, "PATCH", f"/amp/v1/memories/{made.json()['id']}",
                    json={"amp_version": "9.9.9"})
    assert error["message"].startswith("Request validation failed: body.amp_version: "), error
    with AMPClient(server.url, "agent-a") as amp, pytest.raises(ValidationError) as raised:
        amp.remember("x", "u", importance=5)
    assert "body.scoring.importance: Input should be less than or equal to 1" in str(
        raised.value)
