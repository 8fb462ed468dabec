"""Edges of the HTTP API an audit found and left, each over HTTP against a real server on
SQLite and on PostgreSQL: where a 422 says its field came from, the bound on an AMP
cell's ``decay_rate``, empty AMP search filters, unknown body fields, and the commit's own
NUL check naming the field it found. The inspector's and ``/docs``' browser edges are in
test_inspector.py and test_docs_page.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.extraction_data import BODY, DEALS
from tests.memory_support import (
    ADMIN_TOKEN,
    BACKENDS,
    Memory,
    backend_env,
    new_scope,
    run_cli,
    start,
)
from tests.model_support import ScriptedModel
from tests.pg import PostgresFactory

AGENT = {"X-AMP-Agent-ID": "edge-agent"}
ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[Memory, Path, dict[str, str]]]:
    """One server per backend; on PostgreSQL the AMP cells too live there."""
    env = backend_env(request.param, request)
    if request.param == "postgres":
        pg: PostgresFactory = request.getfixturevalue("postgres")
        env["AMP_STORE_URI"] = pg.new_database("edgeamp")
    home = tmp_path_factory.mktemp(f"edges-{request.param}")
    proc = start(home, env)
    client = Memory(proc.url)
    yield client, home, env
    client.close()
    proc.stop()


@pytest.fixture
def m(served: tuple[Memory, Path, dict[str, str]]) -> Memory:
    return served[0]


def _loc(r: httpx.Response) -> list[Any]:
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "VALIDATION_ERROR", r.text
    return list(error["details"]["errors"][0]["loc"])


# -- 1. every 422 says where its field came from ------------------------------------------------

def test_every_422_names_the_request_part_its_field_came_from(m: Memory) -> None:
    """FastAPI's own request errors say ``["query", "after"]``; the errors our services
    raise said ``["after"]``. The same request part leads every ``loc`` now, on every route
    family, whoever found the problem: path, query or body."""
    scope = new_scope()
    r = m.write(scope, "Acme has 5 seats.")
    assert r.status_code == 201, r.text
    ep = r.json()["id"]
    c = m.http

    def fact(quote: str, unit: int = 1) -> dict[str, Any]:
        return {"entity": "acme", "predicate": "seats", "value": "5", "quote": quote,
                "cites": [{"episode": ep, "unit": unit}]}

    cases: list[tuple[httpx.Response, list[Any]]] = [
        # AmpUp reads: query parameters (services' errors and FastAPI's alike)
        (c.get("/episodes", params={"scope": scope, "after": "a" * 64}), ["query", "after"]),
        (c.get("/entities", params={"scope": "BAD"}), ["query", "scope"]),
        (c.get("/facts", params={"scope": scope, "entity": "acme", "pin": "pin_x"}),
         ["query", "pin"]),
        (c.get("/ledger", params={"scope": scope, "before": "nope"}), ["query", "before"]),
        (c.get(f"/episodes/{ep}", params={"scope": scope, "branch": "BAD!"}),
         ["query", "branch"]),
        (c.get("/runs", params={"scope": "BAD"}), ["query", "scope"]),
        (c.get("/runs", params={"scope": scope, "before": "x"}), ["query", "before"]),
        # path parameters
        (c.get("/pin/pin_bad"), ["path", "pin_id"]),
        (c.get("/snapshots/nope"), ["path", "snapshot_id"]),
        (c.delete("/branches/BAD", params={"scope": scope}), ["path", "name"]),
        (c.get("/schemas/BAD/team_1"), ["path", "org"]),
        (c.get("/schemas/acme/Team"), ["path", "team"]),
        (c.get("/principals/bad user", headers=ADMIN), ["path", "user"]),
        # bodies: episodes, facts, branches, holds, workspaces, schemas, search, advice
        (m.write(scope, "a\x00b"), ["body", "body"]),  # the episode's field named body
        (c.post("/facts", json={"scope": scope, **fact("nope")}), ["body", "quote"]),
        (c.post("/facts", json={"scope": scope, **fact("5 seats", 9)}),
         ["body", "cites", 0, "unit"]),
        (c.post("/facts/batch", json={"scope": scope, "facts": [fact("5 seats"),
                                                                 fact("nope")]}),
         ["body", "facts", 1, "quote"]),
        (c.put(f"/episodes/{ep}/acl", json={"scope": scope, "acl": []}), ["body", "acl"]),
        (c.post("/branches", json={"scope": scope, "name": ""}), ["body", "name"]),
        (c.post("/merge", json={"scope": scope, "from": "main"}), ["body", "from"]),
        (c.post("/pin", json={"scope": scope, "ttl": "0s"}), ["body", "ttl"]),
        (c.post("/snapshots", json={"scopes": ["BAD"]}), ["body", "scopes"]),
        (c.post("/workspaces", json={"name": "w", "ttl": "0s"}), ["body", "ttl"]),
        (c.put(f"/schemas/{scope}", json={"builtin": "nope"}, headers=ADMIN),
         ["body", "builtin"]),
        (c.post("/search", json={"scope": "BAD", "query": "x"}), ["body", "scope"]),
        (c.post("/search", json={"scope": scope, "query": "x", "tz": "Nowhere/X"}),
         ["body", "tz"]),
        (c.post("/search", json={"scope": scope, "query": "x", "rerank": True}),
         ["body", "rerank"]),
        (c.post("/query", json={"scope": scope, "find": "nope"}), ["body", "find"]),
        (c.post("/query", json={"scope": scope, "find": "facts", "select": ["x"]}),
         ["body", "select"]),
        (c.post("/advice", json={"scope": "BAD", "task": "t"}), ["body", "scope"]),
        (c.post("/runs", json={"scope": scope, "task": "t", "bogus": 1}), ["body", "bogus"]),
        # AMP: FastAPI's query errors and the body's, unchanged
        (c.get("/amp/v1/memories", params={"limit": 0}, headers=AGENT), ["query", "limit"]),
        (c.get("/amp-cells", params={"status": "nope"}, headers=AGENT), ["query", "status"]),
        (c.post("/amp/v1/memories", json={"type": "semantic", "content": {"text": ""},
                                          "identity": {"owner_id": "u", "owner_type": "user"}},
                headers=AGENT), ["body", "content", "text"]),
    ]
    got = [(r.request.method, r.request.url.path, _loc(r)[:len(want)]) for r, want in cases]
    assert got == [(r.request.method, r.request.url.path, want) for r, want in cases]


# -- 2. decay_rate has an upper bound -----------------------------------------------------------

def _cell(owner: str, **scoring: Any) -> dict[str, Any]:
    return {"type": "semantic", "content": {"text": f"edge decay note {owner}"},
            "identity": {"owner_id": owner, "owner_type": "user"}, "scoring": scoring}


def test_decay_rate_is_bounded_and_the_fastest_allowed_scores_finitely(
        m: Memory, uid: str) -> None:
    """The spec sets decay_rate >= 0 and no maximum; a rate past one e-fold per second
    (86,400 a day) is a 422 on create and on PATCH. A cell at the bound scores 0 (an
    underflow, never NaN or inf) wherever the score is used: the read, search, the
    inspector's listing and a lifecycle pass."""
    c = m.http
    owner = f"edge-{uid}"
    too_fast = c.post("/amp/v1/memories", json=_cell(owner, decay_rate=86400.5), headers=AGENT)
    assert _loc(too_fast) == ["body", "scoring", "decay_rate"]
    for huge in ("1e308", "1.7976931348623157e308"):
        # A JSON number as written, not Python's repr of a float.
        raw = json.dumps(_cell(owner)).replace('"scoring": {}',
                                                f'"scoring": {{"decay_rate": {huge}}}')
        r = c.post("/amp/v1/memories", content=raw,
                   headers={**AGENT, "Content-Type": "application/json"})
        assert _loc(r) == ["body", "scoring", "decay_rate"]
    made = c.post("/amp/v1/memories", json=_cell(owner, decay_rate=86400, importance=1.0),
                  headers=AGENT)
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    assert _loc(c.patch(f"/amp/v1/memories/{cid}", json={"scoring": {"decay_rate": 1e6}},
                        headers=AGENT)) == ["body", "scoring", "decay_rate"]
    ok = c.patch(f"/amp/v1/memories/{cid}", json={"scoring": {"decay_rate": 86400.0}},
                 headers=AGENT)
    assert ok.status_code == 200 and ok.json()["scoring"]["decay_rate"] == 86400.0, ok.text

    read = c.get(f"/amp/v1/memories/{cid}", headers=AGENT)
    assert read.status_code == 200, read.text
    found = c.post("/amp/v1/memories/search", json={"query": "edge decay note",
                                                    "owner_id": owner}, headers=AGENT)
    assert found.status_code == 200 and [x["id"] for x in found.json()["results"]] == [cid]
    listed = c.get("/amp-cells", params={"owner_id": owner}, headers=AGENT)
    assert listed.status_code == 200, listed.text
    score = listed.json()["cells"][0]["decay_score"]
    assert isinstance(score, float) and 0.0 <= score <= 1.0, listed.text
    # Ten years on, the score is e^(-86400 x 3652): 0, and the pass counts the cell stale.
    run = c.post("/amp/v1/lifecycle/run", json={"now": "2036-01-01T00:00:00Z",
                                                "dry_run": True}, headers=ADMIN)
    assert run.status_code == 200, run.text
    assert run.json()["transitions"]["active_to_stale"] >= 1


# -- 3. empty AMP search filters match nothing --------------------------------------------------

def test_an_empty_status_or_types_list_matches_nothing(m: Memory, uid: str) -> None:
    """The spec lists ``status`` as the statuses to include and ``types`` as the types to
    filter to, with no minimum length: an empty list is the empty set and matches no
    cell (the reference server does so for ``status``). Left out (or null) they are the
    defaults: active, any type. ``include_stale`` still adds stale to an empty status."""
    c = m.http
    owner = f"edgef-{uid}"
    active = c.post("/amp/v1/memories", json=_cell(owner), headers=AGENT).json()["id"]
    stale = c.post("/amp/v1/memories", json=_cell(owner), headers=AGENT).json()["id"]
    r = c.patch(f"/amp/v1/memories/{stale}", json={"lifecycle": {"status": "stale"}},
                headers=AGENT)
    assert r.status_code == 200, r.text

    def search(**extra: Any) -> list[str]:
        r = c.post("/amp/v1/memories/search", json={"query": "edge decay note",
                                                    "owner_id": owner, **extra}, headers=AGENT)
        assert r.status_code == 200, r.text
        return sorted(x["id"] for x in r.json()["results"])

    assert search() == [active]
    assert search(status=None, types=None) == [active]
    assert search(status=[]) == []
    assert search(types=[]) == []
    assert search(types=[], status=["active", "stale"]) == []
    assert search(status=[], include_stale=True) == [stale]
    assert search(types=["semantic"], status=["active", "stale"]) == sorted([active, stale])


# -- 4. unknown fields --------------------------------------------------------------------------

def test_unknown_fields_are_refused_on_ampup_and_ignored_on_amp(m: Memory, uid: str) -> None:
    """AmpUp bodies (PUT and POST; there is no PATCH route) name an unknown field in a
    422. The AMP reference says a PATCH (and any AMP body) ignores one, and its published
    clients may send them: kept, and nothing of it is stored."""
    scope = new_scope()
    assert m.write(scope, "Acme has 5 seats.").status_code == 201
    c = m.http
    bad = c.put("/principals/edge-bob", json={"groups": [], "roles": [], "rolez": ["x"]},
                headers=ADMIN)
    assert _loc(bad) == ["body", "rolez"]
    assert bad.json()["error"]["details"]["errors"][0]["type"] == "extra_forbidden"
    assert _loc(c.post("/branches", json={"scope": scope, "name": "b", "form": "main"})) == [
        "body", "form"]
    cid = c.post("/amp/v1/memories", json={**_cell(f"edgeu-{uid}"), "colour": "red"},
                 headers=AGENT).json()["id"]
    r = c.patch(f"/amp/v1/memories/{cid}", json={"colour": "blue",
                                                 "scoring": {"importance": 0.9, "weight": 3}},
                headers=AGENT)
    assert r.status_code == 200, r.text
    assert "colour" not in r.json() and "weight" not in r.json()["scoring"]
    assert r.json()["scoring"]["importance"] == 0.9


# -- 5. the commit's own NUL check names the field -----------------------------------------------

def test_a_nul_in_a_model_name_from_the_config_file_stops_before_the_model_is_asked(
        served: tuple[Memory, Path, dict[str, str]], scripted_model: ScriptedModel,
        tmp_path: Path) -> None:
    """A request body never carries U+0000 to a commit (it is refused as the body is read),
    nor does a corpus ``load`` (a record holding one is an invalid record) or a model's
    candidate fact (rejected alone, ``string_nul``). Text from the settings could: a model
    name from the config file is written on every read mark of an extraction pass, and
    the commit's last check refused it only after the model had been asked. The setting
    is refused as the settings load now, in one line naming it; nothing is asked or
    written."""
    m, home, env = served
    scope = new_scope()
    org, team = scope.split("/")
    r = m.http.put(f"/schemas/{org}/{team}", json={"schema": DEALS}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert m.write(scope, BODY, acl=["*"]).status_code == 201
    scripted_model.script([], default={"reply": {"facts": []}})
    config = tmp_path / "config.toml"
    config.write_text('model_name = "scripted\\u0000model"\n')  # TOML's escape
    model_env = {k: v for k, v in scripted_model.env().items()
                 if k != "AMPUP_MEMORY_MODEL"}  # the name from the file, not the env
    commits = len(m.ledger(scope))
    done = run_cli(home, {**env, **model_env, "AMPUP_MEMORY_MODEL_RETRIES": "0"},
                   "extract", "--scope", scope, "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert scripted_model.calls() == []
    assert "invalid setting model_name (AMPUP_MEMORY_MODEL)" in done.stderr, done.stderr
    assert "control character U+0000" in done.stderr and "Traceback" not in done.stderr
    assert len(m.ledger(scope)) == commits


# -- 6. blank text: the published pattern is the rule ---------------------------------------------

# Blank to Python's str.strip() only (U+001F, U+0085), to ECMA-262's \s only (U+FEFF, the
# dialect of JSON Schema patterns), to both (U+3000, a space), and neither (a letter).
BLANK_EDGES = {"\x1f": True, "\x85": True, "\ufeff": True, "\u3000 ": True, "x": False}


def test_blank_text_is_refused_exactly_where_the_published_pattern_refuses_it(
        m: Memory, uid: str) -> None:
    """A client that checks a body against the OpenAPI document must refuse what the server
    refuses: the AmpUp entity and predicate published no pattern (a fuzzer's " " was a
    surprise 422), and the AMP fields published ``\\S``, which ECMA-262 and Python read
    apart (U+FEFF was accepted as a query, U+001F refused as one)."""
    import re

    c = m.http
    schemas = c.get("/openapi.json").json()["components"]["schemas"]
    published = {
        "predicate": schemas["CloseValue"]["properties"]["predicate"]["pattern"],
        "entity": schemas["FactIn"]["properties"]["entity"]["pattern"],
        "query": schemas["SearchRequest"]["properties"]["query"]["pattern"],
    }
    assert len(set(published.values())) == 1, published
    pattern = re.compile(published["query"])
    scope = new_scope()
    for text, blank in BLANK_EDGES.items():
        assert (pattern.search(text) is None) is blank, repr(text)
        r = c.post("/close", json={"scope": scope, "entity": "acme", "predicate": text})
        if blank:
            assert _loc(r) == ["body", "predicate"], r.text
            assert r.json()["error"]["details"]["errors"][0]["type"] == "string_blank"
        else:
            assert r.status_code != 422 or "predicate" not in _loc(r), r.text
        r = c.post("/amp/v1/memories/search", json={"query": text, "owner_id": f"b-{uid}"},
                   headers=AGENT)
        if blank:
            assert _loc(r) == ["body", "query"], r.text
        else:
            assert r.status_code == 200, r.text


# -- 7. a name in both the query and the body: the part the route reads --------------------------

def test_a_field_named_in_the_query_and_the_body_is_located_where_the_route_reads_it(
        m: Memory) -> None:
    """``loc`` named the query whenever the request carried a query parameter of the
    field's name, also on a route that reads only its body: ``POST /search?scope=a/b``
    with a bad ``scope`` in the body said ``["query", "scope"]``. A route that reads its
    query names the query's bad value and ignores a body it does not read; a query
    parameter the route does not take is refused as such (``web.query``), after the
    route's own path and query values are judged."""
    good, c = new_scope(), m.http
    assert m.write(good, "Acme has 5 seats.").status_code == 201
    for scope in (good, "BAD"):
        r = c.post("/search", params={"scope": scope}, json={"scope": good, "query": "seats"})
        assert _loc(r) == ["query", "scope"]
        assert r.json()["error"]["details"]["errors"][0]["type"] == "extra_forbidden"
    assert _loc(c.post("/search", json={"scope": "BAD", "query": "seats"})) == ["body", "scope"]
    assert _loc(c.request("GET", "/entities", params={"scope": "BAD"},
                          json={"scope": good})) == ["query", "scope"]
    r = c.request("GET", "/entities", params={"scope": good}, json={"scope": "BAD"})
    assert r.status_code == 200 and r.json()["entities"] == [], r.text
    # a bad path value is the path's; a query parameter of the path's name is one the
    # route does not take
    assert _loc(c.delete("/branches/BAD", params={"scope": good})) == ["path", "name"]
    for name in ("BAD", "missing"):
        r = c.delete(f"/branches/{name}", params={"scope": good, "name": "fine"})
        assert _loc(r) == ["query", "name"]


# -- 8. HEAD wherever GET -------------------------------------------------------------------------

def test_head_answers_as_get_without_a_body_on_every_get_route(m: Memory) -> None:
    """FastAPI's routes serve only the methods they list: ``HEAD /docs``, ``/openapi.json``
    or ``/episodes`` answered 405, unlike Starlette's routes and every static file here.
    Each GET path of the published schema, and the pages outside it, now answers HEAD
    with the GET's status and headers and no body; a 405's ``Allow`` names HEAD beside
    GET, and a path with no GET still refuses HEAD."""
    scope = new_scope()
    r = m.write(scope, "Acme has 5 seats.")
    assert r.status_code == 201, r.text
    filled = {"episode_id": r.json()["id"], "org": scope.split("/")[0], "team": "team_1"}
    c = m.http
    spec = c.get("/openapi.json").json()
    paths = ["/docs", "/redoc", "/docs/oauth2-redirect", "/openapi.json", "/spec",
             "/static-offline-docs/swagger-ui.css", "/"]
    for path, item in spec["paths"].items():
        if "get" in item:
            for name in re.findall(r"{(\w+)}", path):
                path = path.replace(f"{{{name}}}", filled.get(name, "x"))
            paths.append(path)
    headers = {**AGENT, **ADMIN}
    seen = []
    for path in paths:
        get = c.get(path, params={"scope": scope}, headers=headers)
        head = c.head(path, params={"scope": scope}, headers=headers)
        same = {k: head.headers.get(k) == get.headers.get(k)
                for k in ("content-type", "content-security-policy")}
        seen.append((path, head.status_code, head.content, all(same.values())))
    assert seen == [(path, get_status, b"", True) for path, get_status in
                    ((p, c.get(p, params={"scope": scope}, headers=headers).status_code)
                     for p in paths)]
    assert c.head("/docs").headers["content-length"] == str(len(c.get("/docs").content))
    assert c.put("/docs").headers["allow"] == "GET, HEAD"
    assert c.post("/entities", params={"scope": scope}).headers["allow"] == "GET, HEAD"
    refused = c.head("/search")
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"
    # inside a mount (the pages' static files) too: Allow was empty there
    refused = c.post("/static-offline-docs/swagger-ui.css")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
