"""AmpUp routes refuse a query parameter they do not take (a misspelt `as_of` or `branch`
answered as of now, or from main, and said nothing); the AMP face keeps the reference
server's leniency; identity and admin rights still answer first."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import ADMIN_TOKEN
from tests.server_process import ServerProcess, plain_client

USER = {"X-AmpUp-User": "alice", "X-AMP-Agent-ID": "agent_strict",
        "X-AMP-Admin-Token": ADMIN_TOKEN}
STRANGER = "zz_not_a_parameter"
# Filled by the answer itself (each needs a real id or scope before it answers 200).
SAMPLE = {"scope": "strict/team", "org": "strict", "team": "team", "entity": "acme",
          "name": "main", "user": "alice", "document": "doc-1", "kind": "extract"}


def _paths(server: ServerProcess) -> list[tuple[str, str, set[str], set[str]]]:
    """(method, path, query names, required ones) of every GET route outside /amp/v1 in
    the API schema."""
    spec: dict[str, Any] = httpx.get(f"{server.url}/openapi.json").json()
    found = []
    for path, ops in spec["paths"].items():
        if path.startswith("/amp/v1") or "get" not in ops:
            continue
        query = [p for p in ops["get"].get("parameters", []) if p["in"] == "query"]
        found.append(("GET", path, {p["name"] for p in query},
                      {p["name"] for p in query if p.get("required")}))
    return found


def test_every_ampup_read_refuses_a_query_parameter_it_does_not_take(
        server: ServerProcess) -> None:
    checked = 0
    with plain_client(base_url=server.url, timeout=30) as http:
        for _, path, names, required in _paths(server):
            url = path.format(**{k: SAMPLE.get(k, "x" * 8) for k in _slots(path)})
            given = {name: SAMPLE[name] for name in required}
            r = http.get(url, params={**given, STRANGER: "1"}, headers=USER)
            assert r.status_code == 422, (path, r.status_code, r.text)
            error = r.json()["error"]
            assert error["details"]["errors"][0]["loc"] == ["query", STRANGER], (path, error)
            assert error["details"]["errors"][0]["type"] == "extra_forbidden"
            for name in names:  # the answer lists what the route takes
                assert name in error["message"], (path, name, error["message"])
            checked += 1
    assert checked >= 20  # the check walked the schema, not an empty list


def _slots(path: str) -> list[str]:
    return [part[1:-1].split(":")[0] for part in path.split("/")
            if part.startswith("{") and part.endswith("}")]


def test_a_misspelt_parameter_is_named_with_the_one_meant(server: ServerProcess) -> None:
    with plain_client(base_url=server.url, timeout=30) as http:
        r = http.get("/facts", params={"scope": "strict/team", "entity": "acme",
                                       "asof": "2026-01-01T00:00:00Z"}, headers=USER)
        assert r.status_code == 422, r.text
        assert "query.asof: not a query parameter of this route (did you mean as_of?)" \
            in r.json()["error"]["message"]
        # A body route reads no query at all.
        r = http.post("/search", params={"scope": "strict/team"}, headers=USER,
                      json={"scope": "strict/team", "query": "acme"})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"]["errors"][0]["loc"] == ["query", "scope"]
        # Declared parameters still pass.
        ok = http.get("/facts", params={"scope": "strict/team", "entity": "acme"},
                      headers=USER)
        assert ok.status_code == 200, ok.text


def test_identity_and_admin_answer_before_the_query_is_judged(
        server: ServerProcess) -> None:
    with plain_client(base_url=server.url, timeout=30) as http:
        for method, path in (("GET", "/episodes?scope=strict/team"), ("POST", "/episodes"),
                             ("POST", "/search"), ("GET", "/schemas")):
            r = http.request(method, f"{path}{'&' if '?' in path else '?'}{STRANGER}=1",
                             json={} if method == "POST" else None)
            assert r.status_code == 401, (path, r.text)
        r = http.get(f"/status?{STRANGER}=1", headers={"X-AMP-Admin-Token": "wrong"})
        assert r.status_code == 403, r.text


def test_the_amp_face_ignores_unknown_parameters_as_the_reference_does(
        server: ServerProcess) -> None:
    with plain_client(base_url=server.url, timeout=30) as http:
        r = http.get("/amp/v1/memories", params={"owner_id": "nobody", STRANGER: "1"},
                     headers={"X-AMP-Agent-ID": "agent_strict"})
        assert r.status_code == 200, r.text
