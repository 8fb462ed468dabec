"""The AMP wire contract over real HTTP against a real server process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN
from tests.server_process import ServerProcess

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}


def make(http: httpx.Client, agent: str, owner: str, text: str = "likes green tea",
         **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "semantic", "content": {"text": text},
        "identity": {"owner_id": owner, "owner_type": "user"}, **extra,
    }
    r = http.post("/memories", headers={"X-AMP-Agent-ID": agent}, json=body)
    assert r.status_code == 201, r.text
    cell: dict[str, Any] = r.json()
    return cell


def test_create_defaults_and_ignored_fields(http: httpx.Client, uid: str) -> None:
    r = http.post("/memories", headers={"X-AMP-Agent-ID": f"a_{uid}"}, json={
        "id": "mem_mine", "type": "episodic", "content": {"text": "hello"},
        "identity": {"owner_id": f"u_{uid}", "owner_type": "user", "created_by": "someone"},
        "scoring": {"access_count": 99},
        "lifecycle": {"status": "archived", "created_at": "2000-01-01T00:00:00Z"},
    })
    assert r.status_code == 201
    cell = r.json()
    assert re.fullmatch(r"mem_[0-9A-HJKMNP-TV-Z]{26}", cell["id"])
    assert cell["amp_version"] == "0.1.0"
    assert cell["identity"]["created_by"] == f"a_{uid}"
    assert cell["scoring"] == {"importance": 0.5, "confidence": 1.0, "decay_rate": 0.01,
                               "access_count": 0}
    assert cell["access_policy"] == {"readable_by": [], "writable_by": [], "public": False}
    assert cell["lifecycle"]["status"] == "active"
    assert not cell["lifecycle"]["created_at"].startswith("2000")


def test_ids_strictly_increase(http: httpx.Client, uid: str) -> None:
    ids = [make(http, f"a_{uid}", f"u_{uid}")["id"] for _ in range(20)]
    assert ids == sorted(ids) and len(set(ids)) == 20


def test_created_by_from_body_only_without_header(http: httpx.Client, uid: str) -> None:
    body = {"type": "semantic", "content": {"text": "x"},
            "identity": {"owner_id": "u", "owner_type": "user", "created_by": f"b_{uid}"}}
    r = http.post("/memories", json=body)
    assert r.status_code == 201 and r.json()["identity"]["created_by"] == f"b_{uid}"
    body["identity"].pop("created_by")  # type: ignore[attr-defined]
    r = http.post("/memories", json=body)
    assert r.status_code == 401 and r.json()["error"]["code"] == "MISSING_AGENT_ID"


@pytest.mark.parametrize("headers", [{}, {"X-AMP-Agent-ID": ""}])
def test_identity_before_validation(http: httpx.Client, headers: dict[str, str]) -> None:
    for method, path in [("POST", "/memories"), ("PATCH", "/memories/mem_x"),
                         ("POST", "/memories/search"), ("GET", "/memories?limit=999")]:
        r = http.request(method, path, headers=headers, content=b"{not json")
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["error"]["code"] == "MISSING_AGENT_ID"


def test_listing_route_answers_as_itself(http: httpx.Client, uid: str) -> None:
    make(http, f"a_{uid}", f"u_{uid}")
    r = http.get("/memories/query", params={"owner_id": f"u_{uid}"},
                 headers={"X-AMP-Agent-ID": f"a_{uid}"})
    assert r.status_code == 200
    assert set(r.json()) == {"results", "returned", "has_more", "offset", "limit"}
    assert r.json()["returned"] == 1


def test_denied_bodies_are_identical(http: httpx.Client, uid: str) -> None:
    private = make(http, f"a_{uid}", f"u_{uid}")
    gone = make(http, f"a_{uid}", f"u_{uid}")
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    assert http.patch(f"/memories/{gone['id']}", headers=me,
                      json={"lifecycle": {"status": "archived"}}).status_code == 200
    assert http.delete(f"/memories/{gone['id']}", headers=me).status_code == 204
    other = {"X-AMP-Agent-ID": f"stranger_{uid}"}
    answers = [
        http.get(f"/memories/{private['id']}", headers=other),
        http.get("/memories/mem_01J00000000000000000000000", headers=other),
        http.get(f"/memories/{gone['id']}", headers=me),
        http.patch(f"/memories/{gone['id']}", headers=me, json={"scoring": {}}),
        http.delete(f"/memories/{gone['id']}", headers=me),
        http.patch(f"/memories/{private['id']}", headers=other, json={}),
    ]
    assert {a.status_code for a in answers} == {403}
    assert len({a.content for a in answers}) == 1


def test_patch_deep_merge(http: httpx.Client, uid: str) -> None:
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    cell = make(http, f"a_{uid}", f"u_{uid}", content_extra := "x",
                access_policy={"readable_by": ["r1"], "writable_by": ["w1"], "public": True})
    del content_extra
    r = http.patch(f"/memories/{cell['id']}", headers=me, json={
        "scoring": {"importance": 0.9}, "access_policy": {"readable_by": ["r2"]},
        "content": {"metadata": {"k": 1}}})
    assert r.status_code == 200, r.text
    new = r.json()
    assert new["scoring"]["importance"] == 0.9
    assert new["scoring"]["confidence"] == 1.0 and new["scoring"]["decay_rate"] == 0.01
    assert new["access_policy"] == {"readable_by": ["r2"], "writable_by": ["w1"], "public": True}
    assert new["content"] == {"text": "x", "metadata": {"k": 1}}
    assert new["lifecycle"]["last_updated_at"] > cell["lifecycle"]["last_updated_at"]
    # Fixed fields: equal is ignored (instants, not strings), different is 422.
    created = cell["lifecycle"]["created_at"].replace("Z", "+00:00")
    same = http.patch(f"/memories/{cell['id']}", headers=me, json={
        "id": cell["id"], "amp_version": "0.1.0", "identity": cell["identity"],
        "lifecycle": {"created_at": created}})
    assert same.status_code == 200, same.text
    for body in ({"id": "mem_other"}, {"identity": {"owner_id": "x"}},
                 {"lifecycle": {"created_at": "2001-01-01T00:00:00Z"}}):
        bad = http.patch(f"/memories/{cell['id']}", headers=me, json=body)
        assert bad.status_code == 422, body
        assert bad.json()["error"]["details"]["errors"]


def test_status_transitions(http: httpx.Client, uid: str) -> None:
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    cell = make(http, f"a_{uid}", f"u_{uid}")
    url = f"/memories/{cell['id']}"

    def to(status: str) -> httpx.Response:
        return http.patch(url, headers=me, json={"lifecycle": {"status": status}})

    assert to("active").status_code == 200
    assert to("deleted").json()["error"]["code"] == "INVALID_TRANSITION"
    assert http.delete(url, headers=me).status_code == 409
    assert to("stale").status_code == 200
    assert http.delete(url, headers=me).status_code == 409
    assert to("active").status_code == 200
    assert to("archived").status_code == 200
    assert to("archived").status_code == 200  # same status: no-op
    assert to("active").status_code == 409
    assert http.delete(url, headers=me).status_code == 204
    listed = http.get("/memories", params={"status": "deleted", "owner_id": f"u_{uid}"},
                      headers=me).json()
    assert listed["results"] == []
    found = http.post("/memories/search", headers=me, json={
        "query": "green tea", "owner_id": f"u_{uid}",
        "status": ["active", "stale", "archived", "deleted"]}).json()
    assert cell["id"] not in {c["id"] for c in found["results"]}


def test_paging_counts_only_readable(http: httpx.Client, uid: str) -> None:
    owner = f"u_{uid}"
    visible = []
    for i in range(25):
        policy = {"readable_by": [f"reader_{uid}"]} if i % 2 == 0 else {}
        cell = make(http, f"a_{uid}", owner, f"note {i}", access_policy=policy)
        if i % 2 == 0:
            visible.append(cell["id"])
    h = {"X-AMP-Agent-ID": f"reader_{uid}"}
    seen: list[str] = []
    offset = 0
    while True:
        page = http.get("/memories", params={"owner_id": owner, "limit": 5, "offset": offset},
                        headers=h).json()
        seen += [c["id"] for c in page["results"]]
        assert page["returned"] == len(page["results"])
        if not page["has_more"]:
            break
        offset += 5
    assert seen == sorted(visible, reverse=True)
    for bad in ({"limit": 101}, {"limit": 0}, {"offset": -1}, {"status": "gone"}):
        r = http.get("/memories", params=bad, headers=h)
        assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR"


def test_search_ranks_shared_words_and_does_not_count_reads(http: httpx.Client, uid: str) -> None:
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    owner = f"u_{uid}"
    hit = make(http, f"a_{uid}", owner, "The customer prefers email for contact about invoices")
    make(http, f"a_{uid}", owner, "Quarterly rainfall in the northern valley was low")
    r = http.post("/memories/search", headers=me,
                  json={"query": "contact preference email", "owner_id": owner})
    body = r.json()
    assert set(body) == {"results", "returned", "has_more", "offset", "limit", "query"}
    assert body["results"][0]["id"] == hit["id"]
    assert http.get(f"/memories/{hit['id']}", headers=me).json()["scoring"]["access_count"] == 1
    assert http.post("/memories/search", headers=me,
                     json={"query": "x", "limit": 101}).status_code == 422
    assert http.post("/memories/search", headers=me, json={}).status_code == 422


def test_spec_numbers_are_enforced(http: httpx.Client, uid: str) -> None:
    caps = http.get("/spec").json()["capabilities"]
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    assert http.get("/memories", params={"limit": caps["max_page_size"]},
                    headers=me).status_code == 200
    assert http.get("/memories", params={"limit": caps["max_page_size"] + 1},
                    headers=me).status_code == 422
    # Cell size: the whole compact serialized cell is measured.
    cell = make(http, f"a_{uid}", f"u_{uid}", "x")
    overhead = len(json.dumps(cell, separators=(",", ":")).encode()) - 1
    limit = caps["max_cell_size_bytes"]
    fits = make(http, f"a_{uid}", f"u_{uid}", "y" * (limit - overhead - 40))
    assert fits["id"]
    too_big = http.post("/memories", headers=me, json={
        "type": "semantic", "content": {"text": "z" * (limit - overhead + 1)},
        "identity": {"owner_id": f"u_{uid}", "owner_type": "user"}})
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "CELL_TOO_LARGE"
    grow = http.patch(f"/memories/{cell['id']}", headers=me,
                      json={"content": {"text": "w" * limit}})
    assert grow.status_code == 413
    # Scoring budget: exactly max_patches pass, the next is 429; refused ones don't count.
    budget = caps["scoring_patch_limit"]
    url = f"/memories/{cell['id']}"
    assert http.patch(url, headers=me, json={"scoring": {"importance": 2}}).status_code == 422
    for i in range(budget["max_patches"]):
        r = http.patch(url, headers=me, json={"scoring": {"importance": i / 10}})
        assert r.status_code == 200, r.text
    limited = http.patch(url, headers=me, json={"scoring": {"importance": 0.9}})
    assert limited.status_code == 429
    retry = int(limited.headers["Retry-After"])
    assert 0 < retry <= budget["window_seconds"]
    assert limited.json()["error"]["details"]["retry_after_seconds"] == retry
    assert http.patch(url, headers=me, json={"content": {"text": "ok"}}).status_code == 200
    # Order: 403 before 422 before 429 before 409.
    other = {"X-AMP-Agent-ID": f"z_{uid}"}
    assert http.patch(url, headers=other, json={"scoring": {"importance": 5}}).status_code == 403
    assert http.patch(url, headers=me, json={"scoring": {"importance": 5}}).status_code == 422
    assert http.patch(url, headers=me, json={"scoring": {"importance": 0.2},
                      "lifecycle": {"status": "deleted"}}).status_code == 429


def test_admin_routes(http: httpx.Client, uid: str) -> None:
    r = http.post("/lifecycle/run", json={"dry_run": True})
    assert r.status_code == 403 and r.json()["error"]["code"] == "ACCESS_DENIED"
    r = http.post("/lifecycle/run", headers={"X-AMP-Admin-Token": "wrong"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "ACCESS_DENIED"
    owner = f"u_{uid}"
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    low = make(http, f"a_{uid}", owner, "fading", scoring={"importance": 0.31})
    dry = http.post("/lifecycle/run", headers=ADMIN,
                    json={"now": "2030-01-01T00:00:00Z", "dry_run": True}).json()
    assert set(dry) == {"evaluated", "transitions", "purged"}
    assert set(dry["transitions"]) == {"active_to_stale", "stale_to_active", "stale_to_archived"}
    assert dry["transitions"]["active_to_stale"] >= 1
    stale_list = http.get("/memories", params={"owner_id": owner, "status": "stale"}, headers=me)
    assert stale_list.json()["results"] == []
    real = http.post("/lifecycle/run", headers=ADMIN, json={"now": "2030-01-01T00:00:00Z"})
    assert real.status_code == 200
    stale_list = http.get("/memories", params={"owner_id": owner, "status": "stale"}, headers=me)
    assert [c["id"] for c in stale_list.json()["results"]] == [low["id"]]
    # Purge: not deleted -> 409 INVALID_TRANSITION; inside the window -> RETENTION_WINDOW.
    r = http.post("/lifecycle/purge", headers=ADMIN, json={"id": low["id"]})
    assert r.json()["error"]["code"] == "INVALID_TRANSITION"
    url = f"/memories/{low['id']}"
    http.patch(url, headers=me, json={"lifecycle": {"status": "archived"}})
    assert http.delete(url, headers=me).status_code == 204
    r = http.post("/lifecycle/purge", headers=ADMIN, json={"id": low["id"]})
    assert r.status_code == 409 and r.json()["error"]["code"] == "RETENTION_WINDOW"
    details = r.json()["error"]["details"]
    assert set(details) >= {"deleted_at", "purgeable_at", "days_remaining"}
    assert details["days_remaining"] == 30
    assert details["deleted_at"] in r.json()["error"]["message"]


def test_admin_disabled_without_credentials(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, env={"AMP_ADMIN_TOKEN": ""}) as srv:
        r = httpx.post(f"{srv.url}/amp/v1/lifecycle/run", json={})
        assert r.status_code == 403 and r.json()["error"]["code"] == "ADMIN_DISABLED"
        caps = httpx.get(f"{srv.url}/amp/v1/spec").json()["capabilities"]
        assert caps["lifecycle_scheduler"]["enabled"] is True


def test_error_envelope_for_framework_errors(http: httpx.Client) -> None:
    for r in (http.get("/nope"), http.put("/memories"), http.post("/health")):
        body = r.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert http.get("/nope").json()["error"]["code"] == "NOT_FOUND"
    assert http.put("/memories").json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    # Allow names every method the path serves (two routes serve /memories).
    for method, path, allow in (("PUT", "/memories", "GET, POST"), ("POST", "/health", "GET"),
                                ("PUT", "/memories/mem_x", "DELETE, GET, PATCH"),
                                ("GET", "/lifecycle/run", "POST")):
        r = http.request(method, path, headers={"X-AMP-Agent-ID": "a"})
        assert r.status_code == 405 and r.headers["allow"] == allow, (method, path)


def test_audit_findings_stay_fixed(http: httpx.Client, uid: str) -> None:
    """Each of these once broke the contract (an independent audit over HTTP found them)."""
    me = {"X-AMP-Agent-ID": f"a_{uid}", "content-type": "application/json"}
    owner = f"u_{uid}"
    # Non-finite numbers are not JSON: 422, and nothing is stored.
    base = ('{"type":"semantic","content":{"text":"finite_%s"%s},'
            '"identity":{"owner_id":"%s","owner_type":"user"}%s}')
    for meta, scoring in (("", ',"scoring":{"decay_rate":Infinity}'),
                          ("", ',"scoring":{"decay_rate":1e400}'),
                          (',"metadata":{"a":NaN}', ""),
                          (',"metadata":{"a":-Infinity}', "")):
        r = http.post("/memories", headers=me, content=base % (uid, meta, owner, scoring))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    listed = http.get("/memories", params={"owner_id": owner}, headers=me).json()
    assert listed["results"] == []
    cell = make(http, f"a_{uid}", owner)
    r = http.patch(f"/memories/{cell['id']}", headers=me,
                   content='{"scoring":{"decay_rate":1e400}}')
    assert r.status_code == 422
    assert http.get(f"/memories/{cell['id']}", headers=me).json()["scoring"]["decay_rate"] == 0.01
    # A fixed route with the wrong method is 405, not a read of a cell called "search".
    for method, path, allow in (("GET", "/memories/search", "POST"),
                                ("DELETE", "/memories/search", "POST"),
                                ("PATCH", "/memories/query", "GET")):
        r = http.request(method, path, headers=me)
        assert r.status_code == 405, (method, path, r.text)
        assert r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        assert r.headers["allow"] == allow
    # A trailing slash is another route: 404 with the envelope, never a bare redirect.
    for method, path in (("GET", "/memories/"), ("GET", "/health/"), ("POST", "/memories/"),
                         ("GET", f"/memories/{cell['id']}/")):
        r = http.request(method, path, headers=me)
        assert r.status_code == 404, (method, path, r.status_code)
        assert r.json()["error"]["code"] == "NOT_FOUND"
    # Offset has no small upper bound: far past the end is an empty page.
    far = http.get("/memories", params={"owner_id": owner, "offset": 5_000_000}, headers=me)
    assert far.status_code == 200 and far.json()["results"] == []
    far = http.post("/memories/search", headers=me, json={"query": "tea", "offset": 10**9})
    assert far.status_code == 200 and far.json()["results"] == []
    assert far.json()["has_more"] is False
    # A blank query is refused like an empty one.
    for query in ("", "   "):
        r = http.post("/memories/search", headers=me, json={"query": query})
        assert r.status_code == 422, query
    # An unknown id is the one 403, on the admin purge route too.
    r = http.post("/lifecycle/purge", headers=ADMIN, json={"id": "mem_01ARZ3NDEKTSV4RRFFQ69G5FAV"})
    assert r.status_code == 403 and r.json() == {
        "error": {"code": "ACCESS_DENIED", "message": "Access denied.", "details": {}}}
    # /spec's embedding carries exactly the contract's keys.
    caps = http.get("/spec").json()["capabilities"]
    assert set(caps["embedding"]) == {"provider", "dimensions"}
