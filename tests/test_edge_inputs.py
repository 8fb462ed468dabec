"""Every route of the published schema, over HTTP on SQLite and on PostgreSQL, with bad and
edge input a conformance suite or a careless client sends: wrong types, huge numbers and
strings, NUL, lone surrogates (escaped in JSON and raw in a path), right-to-left marks and
combining marks, path identifiers spelled ``..`` or ``%2F`` or 3,000 characters long, a
query parameter twice, bodies of the wrong content type or none, methods a path does not
serve, caller headers that are no text. The answer is always a 4xx (or a 2xx) in the one
envelope (a 405 with its ``Allow``): never a 5xx, a traceback, a hang, or an error the
server logged.

Also: another user's record answers exactly as a record that does not exist, and racing
writes of principals, pins and workspaces all land.

Routes come from the served schema, so a new route is covered the day it is published;
one whose body has no example here fails `test_every_body_route_has_an_example` until it
gets one (an example reaches the checks behind the body's shape). The values are fixed,
not drawn: each kind of edge once per parameter or field, about 2,500 requests a backend
(test_fuzz.py draws schema-shaped examples; this sends what no schema allows).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import ADMIN_TOKEN, BACKENDS, backend_env, new_scope, start
from tests.pg import PostgresFactory
from tests.server_process import ServerProcess, plain_client

USER, OTHER = "edge.alice", "edge.bob"
AGENT, OTHER_AGENT = "edge_agent_a", "edge_agent_b"
HEADERS = {"X-AmpUp-User": USER, "X-AMP-Agent-ID": AGENT, "X-AMP-Admin-Token": ADMIN_TOKEN}

# A path identifier: each is one segment on the wire (httpx would fold a bare "..").
SEGMENTS = ["%2e%2e", "%2E%2E%2F%2E%2E", "a%2Fb", "%00", "%ED%A0%80", "%FF",
            "%E2%80%AEevil", "e%CC%81%CC%81", "x" * 3000, "%20"]
QUERY_VALUES = ["", "\x00", "9" * 30, "-1", "1.5", "\u202e\u0301", "x" * 3000]
# A body field's value: wrong types, out of range, NUL, right-to-left and combining marks.
FIELD_VALUES: list[Any] = [None, {}, [None], 2**64, 1e308, "", "\x00",
                           "\u202ee\u0301\u0301", "x" * 100_000]
LONE_SURROGATE = '"\\ud800x"'  # valid JSON text, no Unicode string
WHOLE_BODIES: list[tuple[bytes, str | None]] = [
    (b"", "application/json"), (b"null", "application/json"), (b"[]", "application/json"),
    (b'"x"', "application/json"), (b"{", "application/json"), (b"1e999", "application/json"),
    ("{}".encode("utf-16"), "application/json"), (b"\xff\xfe{}", "application/json"),
    (b"a=b&c=d", "application/x-www-form-urlencoded"), (b"\x00" * 8, None),
]
CALLERS: list[dict[str, str | bytes]] = [
    {"X-AmpUp-User": b"\xff\xfe", "X-AMP-Agent-ID": b"\xff"},
    {"X-AmpUp-User": "x" * 5000, "X-AMP-Agent-ID": "x" * 5000},
    {"X-AmpUp-User": "", "X-AMP-Agent-ID": "", "X-AMP-Admin-Token": "wrong"},
]


class Served:
    def __init__(self, proc: ServerProcess, seeded: dict[str, str]) -> None:
        self.proc, self.seeded = proc, seeded


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[Served]:
    """One server per backend (the AMP cells too on PostgreSQL), with a record of every
    kind that has an id, made by the caller."""
    env = backend_env(request.param, request)
    if request.param == "postgres":
        pg: PostgresFactory = request.getfixturevalue("postgres")
        env["AMP_STORE_URI"] = pg.new_database("edgeinamp")
    proc = start(tmp_path_factory.mktemp(f"edge-inputs-{request.param}"), env)
    try:
        with plain_client(base_url=proc.url, timeout=60, headers=HEADERS) as http:
            yield Served(proc, _seed(http))
    finally:
        proc.stop()


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code in (200, 201), (r.request.method, r.request.url, r.text)
    body: dict[str, Any] = r.json()
    return body


def _seed(http: httpx.Client) -> dict[str, str]:
    scope = new_scope()
    ep = _ok(http.post("/episodes", json={"scope": scope, "source": "doc:plan",
                                          "body": "Acme renewed in March.", "acl": ["*"]}))
    _ok(http.post("/branches", json={"scope": scope, "name": "trial"}))
    ws = _ok(http.post("/workspaces", json={"name": "edges", "ttl": "1h"}))
    _ok(http.post("/episodes", json={"scope": f"{ws['id']}/team_1", "source": "doc:x",
                                     "body": "In a workspace.", "acl": ["*"]}))
    return {
        "scope": scope, "org": scope.split("/")[0], "team": scope.split("/")[1],
        "episode_id": ep["id"], "name": "trial", "user": USER, "workspace_id": ws["id"],
        "pin_id": _ok(http.post("/pin", json={"scope": scope, "ttl": "1h"}))["id"],
        "snapshot_id": _ok(http.post(f"/workspaces/{ws['id']}/snapshots"))["id"],
        "run_id": _ok(http.post("/runs", json={"scope": scope, "task": "t"}))["id"],
        "session_id": _ok(http.post("/sessions/start", json={"scope": scope}))["id"],
        "memory_id": _ok(http.post("/amp/v1/memories", json={
            "type": "semantic", "content": {"text": "Acme prefers e-mail."},
            "identity": {"owner_id": http.headers["X-AMP-Agent-ID"],
                         "owner_type": "agent"}}))["id"],
    }


def _examples(s: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """A body each route accepts (or refuses only for what exists), so an edge value in one
    field reaches the checks behind the shape."""
    scope, ep = s["scope"], s["episode_id"]
    fact = {"entity": "acme", "predicate": "plan", "value": "Pro", "quote": "Acme renewed",
            "cites": [{"episode": ep, "unit": 1}]}
    cell = {"type": "semantic", "content": {"text": "hi"},
            "identity": {"owner_id": AGENT, "owner_type": "agent"}}
    return {
        ("post", "/advice"): {"scope": scope, "task": "renew acme"},
        ("post", "/amp/v1/lifecycle/purge"): {"id": s["memory_id"]},
        ("post", "/amp/v1/lifecycle/run"): {"dry_run": True},
        ("post", "/amp/v1/memories"): cell,
        ("post", "/amp/v1/memories/search"): {"query": "acme"},
        ("patch", "/amp/v1/memories/{memory_id}"): {"content": {"text": "hi again"}},
        ("post", "/branches"): {"scope": scope, "name": "other"},
        ("post", "/close"): {"scope": scope, "entity": "acme", "predicate": "plan",
                             "reason": "churned"},
        ("post", "/document"): {"scope": scope, "document": "plan"},
        ("post", "/episodes"): {"scope": scope, "source": "doc:z", "body": "Text.",
                                "acl": ["*"]},
        ("post", "/episodes/batch"): {"scope": scope, "episodes": [
            {"source": "doc:z", "body": "Text two.", "acl": ["*"]}]},
        ("put", "/episodes/{episode_id}/acl"): {"scope": scope, "acl": ["*"]},
        ("post", "/facts"): {"scope": scope, **fact},
        ("post", "/facts/batch"): {"scope": scope, "facts": [fact]},
        ("post", "/merge"): {"scope": scope, "from": "trial", "dry_run": True},
        ("post", "/pin"): {"scope": scope, "ttl": "1h"},
        ("post", "/pin/{pin_id}/renew"): {"ttl": "2h"},
        ("put", "/principals/{user}"): {"groups": ["g"], "roles": ["r"]},
        ("put", "/procedures/sources"): {"scope": scope, "documents": ["plan"]},
        ("post", "/query"): {"scope": scope, "find": "facts", "entity": "acme"},
        ("post", "/runs"): {"scope": scope, "task": "t"},
        ("post", "/runs/reward"): {"run": s["run_id"], "reward": 1, "reason": "fine"},
        ("put", "/schemas/{org}/{team}"): {"builtin": "sales"},
        ("post", "/search"): {"scope": scope, "query": "acme"},
        ("post", "/sessions/end"): {"session": s["session_id"], "transcript": "t",
                                    "outcome": "success"},
        ("post", "/sessions/start"): {"scope": scope},
        ("post", "/snapshots"): {"scopes": [scope]},
        ("post", "/workspaces"): {"name": "w", "ttl": "1h"},
        ("post", "/workspaces/{workspace_id}/renew"): {"ttl": "2h"},
    }


def _operations(http: httpx.Client) -> list[tuple[str, str, dict[str, Any]]]:
    spec = http.get("/openapi.json").json()
    return [(method, path, op) for path, item in spec["paths"].items()
            for method, op in item.items()]


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"{(\w+)}", lambda m: values[m.group(1)], path)


class Sender:
    """Sends one request, keeps what broke the rule (a failed test lists them all)."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.broken: list[tuple[Any, ...]] = []
        self.sent = 0

    def __call__(self, method: str, url: str, **kw: Any) -> None:
        self.sent += 1
        try:
            r = self.http.request(method, url, **kw)
        except httpx.TimeoutException:
            self.broken.append(("timeout", method, url[:120], str(kw)[:200]))
            return
        text = r.text
        if r.status_code >= 500 or "Traceback" in text or 'File "' in text:
            self.broken.append((r.status_code, method, url[:120], str(kw)[:200], text[:300]))
        elif r.status_code == 405 and not r.headers.get("allow"):
            self.broken.append(("no Allow", method, url[:120]))
        elif r.status_code >= 400 and method != "HEAD":
            error = r.json().get("error") if text.startswith("{") else None
            if not (isinstance(error, dict) and set(error) == {"code", "message", "details"}):
                self.broken.append(("envelope", r.status_code, method, url[:120], text[:300]))


def test_every_body_route_has_an_example(served: Served) -> None:
    with plain_client(base_url=served.proc.url, timeout=60) as http:
        with_body = {(m, p) for m, p, op in _operations(http) if "requestBody" in op}
    assert with_body == set(_examples(served.seeded))


def test_every_route_answers_edge_input_with_a_4xx_in_the_envelope(served: Served) -> None:
    seeded = served.seeded
    examples = _examples(seeded)
    with plain_client(base_url=served.proc.url, timeout=60, headers=HEADERS) as http:
        send = Sender(http)
        paths_seen: set[str] = set()
        for method, path, op in _operations(http):
            verb = method.upper()
            params = op.get("parameters", [])
            url = _fill(path, seeded)
            query = {p["name"]: seeded["scope"] if p["name"] == "scope" else "1"
                     for p in params if p["in"] == "query" and p["name"] in ("scope", "limit")}
            body = examples.get((method, path))
            as_json: dict[str, Any] = {} if body is None else {"json": body}
            for name in (p["name"] for p in params if p["in"] == "path"):
                for segment in SEGMENTS:
                    send(verb, _fill(path, {**seeded, name: segment}), params=query, **as_json)
            for name in (p["name"] for p in params if p["in"] == "query"):
                for value in QUERY_VALUES:
                    send(verb, url, params={**query, name: value}, **as_json)
                send(verb, url, params=[*query.items(), (name, "a"), (name, "b")], **as_json)
            if body is not None:
                raw = json.dumps(body)
                for field in [*body, "unexpected"]:
                    for value in FIELD_VALUES:
                        send(verb, url, params=query, json={**body, field: value})
                    send(verb, url, params=query, content=raw[:-1] + f', "{field}": '
                         f'{LONE_SURROGATE}}}', headers={"Content-Type": "application/json"})
                send(verb, url, params=query, content=raw,
                     headers={"Content-Type": "text/plain"})
                for content, kind in WHOLE_BODIES:
                    send(verb, url, params=query, content=content,
                         headers={"Content-Type": kind} if kind else {})
            else:
                send(verb, url, params=query, json={"unexpected": [1]})
            for caller in CALLERS:
                send(verb, url, params=query, headers=caller, **as_json)
            send(verb, url, params=query, headers={"If-None-Match": "*", "If-Match": '"x"',
                                                   "If-Modified-Since": "yesterday",
                                                   "Range": "bytes=9-1"}, **as_json)
            if url not in paths_seen:
                paths_seen.add(url)
                for other in ("OPTIONS", "TRACE", "PROPFIND", "HEAD"):
                    send(other, url, params=query)
        # the pages outside the schema (the MCP transport answers in JSON-RPC, not here)
        for page in ("/docs", "/redoc", "/openapi.json", "/static-offline-docs/redoc.standalone.js",
                     "/", "/health", "/spec"):
            for other in ("POST", "PUT", "DELETE", "OPTIONS", "TRACE", "HEAD"):
                send(other, page, content=b"{}")
    assert send.broken == [], f"{len(send.broken)} of {send.sent} requests"
    assert send.sent > 1500  # every route was reached, not skipped
    logged = Path(served.proc.log_path).read_text(errors="replace")
    assert "Traceback" not in logged and "unhandled error" not in logged, logged[-3000:]


def test_another_users_record_answers_as_a_missing_one(served: Served) -> None:
    """Status and body alike, with the id itself masked. Pins and snapshots are left out
    on purpose: whoever has their id may read through them (docs/branches.md)."""
    with plain_client(base_url=served.proc.url, timeout=60, headers={
            "X-AmpUp-User": OTHER, "X-AMP-Agent-ID": OTHER_AGENT}) as http:
        other = _seed(http)
    s = served.seeded
    probes: list[tuple[str, str, str, dict[str, Any]]] = [
        ("GET", "/episodes/@", "episode_id", {"params": {"scope": other["scope"]}}),
        ("PUT", "/episodes/@/acl", "episode_id", {"json": {"scope": other["scope"],
                                                           "acl": ["*"]}}),
        ("GET", "/workspaces/@", "workspace_id", {}),
        ("POST", "/workspaces/@/renew", "workspace_id", {"json": {"ttl": "2h"}}),
        ("POST", "/workspaces/@/snapshots", "workspace_id", {}),
        ("DELETE", "/workspaces/@", "workspace_id", {}),
        ("GET", "/runs/@", "run_id", {}),
        ("POST", "/runs/reward", "run_id", {"json": {"run": "@", "reward": 1,
                                                     "reason": "r"}}),
        ("GET", "/sessions/@", "session_id", {}),
        ("POST", "/advice", "session_id", {"json": {"scope": s["scope"], "task": "t",
                                                    "session": "@"}}),
        ("POST", "/sessions/end", "session_id", {"json": {
            "session": "@", "transcript": "t", "outcome": "success"}}),
        ("GET", "/amp/v1/memories/@", "memory_id", {}),
        ("PATCH", "/amp/v1/memories/@", "memory_id", {"json": {"content": {"text": "x"}}}),
        ("GET", "/amp-cells/@", "memory_id", {}),
        ("POST", "/amp/v1/lifecycle/purge", "memory_id", {"json": {"id": "@"}}),
        ("DELETE", "/amp/v1/memories/@", "memory_id", {}),
    ]
    # The episode must be another user's to read: the seed's is public.
    with plain_client(base_url=served.proc.url, timeout=60,
                      headers={"X-AmpUp-User": OTHER}) as http:
        other["episode_id"] = _ok(http.post("/episodes", json={
            "scope": other["scope"], "source": "doc:own", "body": "Only bob reads this.",
            "acl": [f"user:{OTHER}"]}))["id"]
    caller = {"X-AmpUp-User": USER, "X-AMP-Agent-ID": AGENT}  # no admin token here
    with plain_client(base_url=served.proc.url, timeout=60, headers=caller) as http:
        differ = []
        for method, path, kind, kw in probes:
            real = other[kind]
            absent = real[:-4] + ("0000" if real[-4:] != "0000" else "1111")
            answers = []
            for value in (real, absent):
                filled = json.loads(json.dumps(kw).replace("@", value))
                r = http.request(method, path.replace("@", value), **filled)
                answers.append((r.status_code, r.text.replace(value, "<id>")))
            if answers[0] != answers[1] or answers[0][0] < 400:
                differ.append((method, path, answers))
    assert differ == []


def test_concurrent_writes_of_principals_workspaces_and_holds_never_fail(
        served: Served) -> None:
    """Their rows went in with pyiceberg's own retry, which rebases on the snapshot it
    started from; another writer's upkeep may have expired it by then: concurrent
    ``PUT /principals/{user}`` answered 500 ("Cannot find starting snapshot"). Each lost
    race is retried on the table as it now is."""
    with plain_client(base_url=served.proc.url, timeout=60, headers=HEADERS) as http:
        pin = _ok(http.post("/pin", json={"scope": served.seeded["scope"], "ttl": "1h"}))
        ws = _ok(http.post("/workspaces", json={"name": "racing", "ttl": "1h"}))
    # Upkeep compacts and expires as a table grows: 9 rounds cross its lines while racing
    # (before the fix some of the later ones answered 500, on SQLite and PostgreSQL alike).
    writes = [("PUT", "/principals/edge.racer", {"groups": [f"g{n}"]}) for n in range(6)]
    writes += [("POST", f"/pin/{pin['id']}/renew", {"ttl": "2h"}),
               ("POST", f"/workspaces/{ws['id']}/renew", {"ttl": "2h"})]

    def send(write: tuple[str, str, dict[str, Any]]) -> tuple[int, str]:
        method, path, body = write
        with plain_client(base_url=served.proc.url, timeout=120, headers=HEADERS) as http:
            r = http.request(method, path, json=body)
            return r.status_code, r.text[:300]

    answers = []
    with ThreadPoolExecutor(len(writes)) as pool:
        for _ in range(9):
            answers += pool.map(send, writes)
    assert [code for code, _ in answers] == [200] * len(answers), answers
    with plain_client(base_url=served.proc.url, timeout=60, headers=HEADERS) as http:
        groups = _ok(http.get("/principals/edge.racer"))["groups"]
    assert len(groups) == 1 and groups[0] in {f"g{n}" for n in range(6)}
