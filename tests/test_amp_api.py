"""The AMP wire contract over real HTTP against a real server process."""

from __future__ import annotations

import json
import re
import subprocess
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


def test_patch_refuses_a_null_for_a_value_a_cell_always_has(http: httpx.Client,
                                                             uid: str) -> None:
    """`{"content": {"metadata": null}}` answered 200 and kept the old metadata (so did a
    null importance, reader list or public flag): a null the cell cannot hold is a 422
    naming it, as the reference refuses it (its update model types none of them nullable),
    and nothing changes. A null part (`"scoring": null`) is left out, as there; a null
    `expires_at` clears the expiry."""
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    cell = make(http, f"a_{uid}", f"u_{uid}", content={"text": "x", "metadata": {"k": 1}},
                access_policy={"readable_by": ["r1"], "writable_by": ["w1"], "public": True})
    url = f"/memories/{cell['id']}"
    for part, name in (("content", "text"), ("content", "metadata"),
                       ("scoring", "importance"), ("scoring", "confidence"),
                       ("scoring", "decay_rate"), ("access_policy", "readable_by"),
                       ("access_policy", "writable_by"), ("access_policy", "public"),
                       ("lifecycle", "status")):
        r = http.patch(url, headers=me, json={part: {name: None}})
        assert r.status_code == 422, (part, name, r.text)
        (error,) = r.json()["error"]["details"]["errors"]
        assert error["loc"] == ["body", part, name], error
        assert error["msg"] == "may not be null: leave it out to keep the stored value"
    r = http.patch(url, headers=me, json={"type": None})
    assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["loc"] == [
        "body", "type"], r.text
    kept = http.get(url, headers=me).json()
    assert kept["content"] == {"text": "x", "metadata": {"k": 1}}
    assert kept["scoring"] == cell["scoring"] | {"access_count": 1}
    assert kept["access_policy"] == cell["access_policy"]
    assert kept["lifecycle"]["last_updated_at"] == cell["lifecycle"]["last_updated_at"]
    # What a client leaves out or sends as an empty value changes as documented.
    r = http.patch(url, headers=me, json={"content": None, "scoring": None,
                                          "access_policy": None,
                                          "lifecycle": {"expires_at": None}})
    assert r.status_code == 200, r.text
    cleared = http.patch(url, headers=me, json={"content": {"metadata": {}}}).json()
    assert cleared["content"] == {"text": "x", "metadata": {}}


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
    # the message says what the route wants (it said only "Access denied.")
    assert "X-AMP-Admin-Token" in r.json()["error"]["message"], r.text
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
    # Allow names every method the path serves (two routes serve /memories; HEAD with GET).
    for method, path, allow in (("PUT", "/memories", "GET, HEAD, POST"),
                                ("POST", "/health", "GET, HEAD"),
                                ("PUT", "/memories/mem_x", "DELETE, GET, HEAD, PATCH"),
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
                                ("PATCH", "/memories/query", "GET, HEAD")):
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


DENIED = {"error": {"code": "ACCESS_DENIED", "message": "Access denied.", "details": {}}}


def test_a_write_never_shows_what_a_read_would_not(http: httpx.Client, uid: str) -> None:
    """`writable_by` grants no read, on every route: PATCH answers a blind writer with the
    id alone, and only the owner or the creator may send `access_policy` or `identity`."""
    creator, owner, blind, both = f"c_{uid}", f"o_{uid}", f"w_{uid}", f"rw_{uid}"
    secret = f"secret{uid}"
    cell = make(http, creator, owner,
                content={"text": f"{secret} door code", "metadata": {"pin": secret}},
                access_policy={"readable_by": [both], "writable_by": [blind, both]})
    url = f"/memories/{cell['id']}"
    w = {"X-AMP-Agent-ID": blind}
    r = http.patch(url, headers=w, json={"content": {"metadata": {"note": "x"}}})
    assert r.status_code == 200, r.text
    assert r.json() == {"id": cell["id"]}
    # It cannot grant itself read, nor probe the policy or the identity by equality.
    for body in ({"access_policy": {"readable_by": [blind]}},
                 {"access_policy": {"public": True}},
                 {"access_policy": {"readable_by": [both]}},  # the stored value: still 403
                 {"access_policy": {}},
                 {"identity": {"owner_id": owner}},
                 {"identity": {"owner_id": "someone_else"}}):
        r = http.patch(url, headers=w, json=body)
        assert (r.status_code, r.json()) == (403, DENIED), body
    assert http.get(url, headers=w).status_code == 403
    # `created_at` equal vs different would tell it the hidden value: one answer for both.
    probes = [http.patch(url, headers=w, json={"created_at": when})
              for when in (cell["lifecycle"]["created_at"], "2001-01-01T00:00:00Z")]
    assert {p.status_code for p in probes} == {422}
    assert probes[0].content == probes[1].content
    # Errors leave the hidden parts out too: no size on 413, no current status on 409.
    big = http.patch(url, headers=w, json={"content": {"metadata": {"x": "y" * 70_000}}})
    assert big.status_code == 413 and "size_bytes" not in big.json()["error"]["details"]
    early = http.delete(url, headers=w)
    assert early.status_code == 409 and "active" not in early.text
    assert early.json()["error"]["details"] == {"to": "deleted"}
    r = http.patch(url, headers=w, json={"lifecycle": {"status": "archived"}})
    assert r.status_code == 200 and r.json() == {"id": cell["id"]}
    back = http.patch(url, headers=w, json={"lifecycle": {"status": "active"}})
    assert back.status_code == 409 and "archived" not in back.text
    assert secret not in "".join(x.text for x in (early, back, big))
    # A writer that may also read gets the cell, but still may not change the policy.
    rw = {"X-AMP-Agent-ID": both}
    seen = http.patch(url, headers=rw, json={"content": {"metadata": {"by": both}}})
    assert seen.status_code == 200 and seen.json()["content"]["text"] == f"{secret} door code"
    assert http.patch(url, headers=rw, json={"access_policy": {"public": True}}).json() == DENIED
    # The owner and the creator may; their answers are whole cells.
    for agent, readers in ((owner, [both, blind]), (creator, [both])):
        r = http.patch(url, headers={"X-AMP-Agent-ID": agent},
                       json={"access_policy": {"readable_by": readers}})
        assert r.status_code == 200, r.text
        assert r.json()["access_policy"]["readable_by"] == readers
        assert r.json()["content"]["metadata"] == {"by": both}
    assert http.delete(url, headers=w).status_code == 204


def test_agent_ids_are_checked(http: httpx.Client, uid: str) -> None:
    """An agent id is 1-256 visible ASCII characters other than '/' and '*', in the header
    (401, like any bad identity) and wherever a body names an agent (422)."""
    owner = f"u_{uid}"
    for agent in ("agent_é".encode(), b"../x", ("x" * 5000).encode(),
                  b"a/b", b"team*", "агент".encode()):
        for method, path in (("GET", "/memories"), ("POST", "/memories")):
            r = http.request(method, path, headers={"X-AMP-Agent-ID": agent},
                             json={"type": "semantic", "content": {"text": "t"},
                                   "identity": {"owner_id": owner, "owner_type": "user"}})
            assert r.status_code == 401, (agent[:20], r.text)
            err = r.json()["error"]
            assert err["code"] == "UNAUTHENTICATED" and "not a valid agent id" in err["message"]
    assert http.get("/memories", params={"owner_id": owner},
                    headers={"X-AMP-Agent-ID": "a"}).json()["results"] == []
    # Regex metacharacters are literal and allowed (the AMP conformance suite uses them).
    odd = f"^a.b?[1](x|y)\\{uid}$"
    cell = make(http, odd, owner, access_policy={"readable_by": [f"reader-{uid}-*"]})
    assert cell["identity"]["created_by"] == odd
    assert http.get(f"/memories/{cell['id']}",
                    headers={"X-AMP-Agent-ID": f"reader-{uid}-7"}).status_code == 200
    base = {"type": "semantic", "content": {"text": "t"}}
    bad_bodies = [
        ({"identity": {"owner_id": owner, "owner_type": "user", "created_by": "../x"}},
         ["identity", "created_by"]),
        # An agent owner's bad id is named as the field it is (docs/api.md, "Where loc
        # points"); it was ["body", "identity"], the object the rule was checked on.
        ({"identity": {"owner_id": "agent_é", "owner_type": "agent"}},
         ["identity", "owner_id"]),
        ({"identity": {"owner_type": "agent", "owner_id": "a*"}}, ["identity", "owner_id"]),
        ({"identity": {"owner_id": "y" * 257, "owner_type": "agent"}},
         ["identity", "owner_id"]),
        ({"identity": {"owner_id": owner, "owner_type": "user"},
          "access_policy": {"readable_by": ["agent_é*"]}},
         ["access_policy", "readable_by", 0]),
        ({"identity": {"owner_id": owner, "owner_type": "user"},
          "access_policy": {"writable_by": ["ok", "a b"]}},
         ["access_policy", "writable_by", 1]),
        ({"identity": {"owner_id": owner, "owner_type": "user"},
          "access_policy": {"readable_by": ["z" * 257]}},
         ["access_policy", "readable_by", 0]),
    ]
    for extra, loc in bad_bodies:
        r = http.post("/memories", headers={"X-AMP-Agent-ID": f"a_{uid}"},
                      json={**base, **extra})
        assert r.status_code == 422, (extra, r.text)
        locs = [e["loc"] for e in r.json()["error"]["details"]["errors"]]
        assert [got[1:] for got in locs] == [loc], (loc, locs)
    assert http.get("/memories", params={"owner_id": owner},
                    headers={"X-AMP-Agent-ID": f"a_{uid}"}).json()["results"] == []
    # A user (not agent) owner's id is not an agent id: any 1-256 characters.
    person = make(http, f"a_{uid}", "Jürgen Müller")
    assert person["identity"]["owner_id"] == "Jürgen Müller"
    r = http.patch(f"/memories/{person['id']}", headers={"X-AMP-Agent-ID": f"a_{uid}"},
                   json={"access_policy": {"readable_by": ["bad id"]}})
    assert r.status_code == 422
    assert r.json()["error"]["details"]["errors"][0]["loc"] == [
        "body", "access_policy", "readable_by", 0]


def test_bodies_are_parsed_strictly(http: httpx.Client, uid: str) -> None:
    """`false`, `0` or `"1"` where a number, a date or a flag is due: 422, never coerced."""
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    owner = f"u_{uid}"
    ident = {"owner_id": owner, "owner_type": "user"}
    cell = make(http, f"a_{uid}", owner)

    def create(**extra: Any) -> tuple[str, str, dict[str, Any]]:
        return "POST", "/memories", {"type": "semantic", "content": {"text": "strict"},
                                     "identity": ident, **extra}

    cases: list[tuple[tuple[str, str, Any], list[str | int]]] = [
        (create(scoring={"importance": False}), ["scoring", "importance"]),
        (create(scoring={"importance": "0.5"}), ["scoring", "importance"]),
        (create(scoring={"confidence": True}), ["scoring", "confidence"]),
        (create(scoring={"decay_rate": "1"}), ["scoring", "decay_rate"]),
        (create(lifecycle={"expires_at": 0}), ["lifecycle", "expires_at"]),
        (create(lifecycle={"expires_at": False}), ["lifecycle", "expires_at"]),
        (create(lifecycle={"expires_at": 1893456000}), ["lifecycle", "expires_at"]),
        (create(access_policy={"public": 1}), ["access_policy", "public"]),
        (create(access_policy={"public": "true"}), ["access_policy", "public"]),
        (create(content={"text": 1}), ["content", "text"]),
        (("PATCH", f"/memories/{cell['id']}", {"scoring": {"importance": False}}),
         ["scoring", "importance"]),
        (("PATCH", f"/memories/{cell['id']}", {"lifecycle": {"expires_at": 0}}),
         ["lifecycle", "expires_at"]),
        (("PATCH", f"/memories/{cell['id']}", {"access_policy": {"public": 0}}),
         ["access_policy", "public"]),
        (("POST", "/memories/search", {"query": "q", "limit": "5"}), ["limit"]),
        (("POST", "/memories/search", {"query": "q", "limit": True}), ["limit"]),
        (("POST", "/memories/search", {"query": "q", "offset": False}), ["offset"]),
        (("POST", "/memories/search", {"query": "q", "include_stale": 1}), ["include_stale"]),
        (("POST", "/memories/search", {"query": 1}), ["query"]),
        (("POST", "/lifecycle/run", {"now": 0, "dry_run": True}), ["now"]),
        (("POST", "/lifecycle/run", {"now": False, "dry_run": True}), ["now"]),
        (("POST", "/lifecycle/run", {"dry_run": 1}), ["dry_run"]),
        (("POST", "/lifecycle/run", {"dry_run": "true"}), ["dry_run"]),
        (("POST", "/lifecycle/purge", {"id": 1}), ["id"]),
    ]
    for (method, path, body), loc in cases:
        r = http.request(method, path, headers={**me, **ADMIN}, json=body)
        assert r.status_code == 422, (path, body, r.text)
        err = r.json()["error"]
        assert err["code"] == "VALIDATION_ERROR"
        assert ["body", *loc] in [e["loc"][:len(loc) + 1] for e in err["details"]["errors"]], (
            body, err)
    listed = http.get("/memories", params={"owner_id": owner}, headers=me).json()["results"]
    assert [c["id"] for c in listed] == [cell["id"]]  # nothing else was stored
    assert http.get(f"/memories/{cell['id']}", headers=me).json()["scoring"]["importance"] == 0.5


HOLD_THE_LEASE = """
import sys, time
from ampup_memory.amp.service import LIFECYCLE_LEASE
from ampup_memory.amp.store.sqlite import SQLiteStore
with SQLiteStore("sqlite:///" + sys.argv[1], None).lease(LIFECYCLE_LEASE, 600) as held:
    print("held" if held else "taken", flush=True)
    time.sleep(600)
"""


def test_a_manual_run_waits_for_a_live_pass_not_a_killed_one(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """docs/api.md: 503 UNAVAILABLE when a manual run waited AMP_LIFECYCLE_RUN_WAIT_SECONDS
    (30 s by default; 3 here) for another process's pass; another process holds the lease
    here, mid-"pass". Killed (kill -9), it holds nothing: the next run answers 200 at once
    (its lease row kept the lifecycle from every process for 600 s, each manual run 503)."""
    import subprocess
    import sys
    import time

    home = tmp_path_factory.mktemp("lease-wait")
    env = {"AMP_ADMIN_TOKEN": ADMIN_TOKEN, "AMP_LIFECYCLE_RUN_WAIT_SECONDS": "3"}
    with ServerProcess(home, env=env) as server, httpx.Client(
            base_url=server.url + "/amp/v1", timeout=30) as http:
        holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LEASE,
                                   str(server.home / "amp.db")], stdout=subprocess.PIPE)
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == b"held"
            start = time.monotonic()
            r = http.post("/lifecycle/run", headers=ADMIN, json={}, timeout=90)
            waited = time.monotonic() - start
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "UNAVAILABLE"
            assert r.headers["Retry-After"] == "5"
            assert 2.9 <= waited < 30
            # A dry run changes nothing and takes no lease: it answers at once.
            dry = http.post("/lifecycle/run", headers=ADMIN, json={"dry_run": True})
            assert dry.status_code == 200
        finally:
            holder.kill()  # kill -9, mid-"pass"
            holder.wait(10)
        start = time.monotonic()
        r = http.post("/lifecycle/run", headers=ADMIN, json={}, timeout=90)
        assert r.status_code == 200, r.text
        assert time.monotonic() - start < 2.5


def test_the_readme_try_it_block_runs(server: ServerProcess) -> None:
    """README.md's "Try it" curls run as written: the cell is made, and the billing agent
    its policy names finds it by search."""
    readme = Path(__file__).resolve().parent.parent / "README.md"
    section = readme.read_text().split("\n## Try it\n", 1)[1]
    block = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)[0]
    script = "set -e -o pipefail\n" + block.replace("localhost:8765",
                                                     server.url.removeprefix("http://"))
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    # curl prints each answer with no line break after it: two JSON values back to back.
    created, end = json.JSONDecoder().raw_decode(ran.stdout)
    found = json.loads(ran.stdout[end:])
    assert created["access_policy"]["readable_by"] == ["agent_billing_*"]
    assert created["id"] in [cell["id"] for cell in found["results"]], found


def test_a_refused_cell_is_refused_before_its_document_is_read(
        server: ServerProcess, http: httpx.Client, uid: str) -> None:
    """A cell the caller may not read (or write) is refused by its guard column, the cell
    itself never parsed, so the refusal costs what an unknown id costs (a 64 KB cell took
    0.13 ms more to refuse than an id that names nothing: a caller holding a cell's id
    could tell it exists). A hidden cell whose document is no JSON shows it: the one 403,
    not the 500 that parsing it gives."""
    import sqlite3

    owner, stranger = {"X-AMP-Agent-ID": f"a_{uid}"}, {"X-AMP-Agent-ID": f"s_{uid}"}
    writer = {"X-AMP-Agent-ID": f"w_{uid}"}
    hidden = make(http, f"a_{uid}", f"u_{uid}", access_policy={"writable_by": [f"w_{uid}"]})
    older = make(http, f"a_{uid}", f"u_{uid}", access_policy={"writable_by": [f"w_{uid}"]})
    nothing = "mem_" + "0" * 26
    with sqlite3.connect(server.home / "amp.db") as conn:
        doc = conn.execute("SELECT doc FROM cells WHERE id = ?", (hidden["id"],)).fetchone()[0]
        conn.execute("UPDATE cells SET doc = 'not json' WHERE id = ?", (hidden["id"],))
        # A row an older version wrote: its guard names no writers.
        conn.execute("UPDATE cells SET guard = json_remove(guard, '$.writable_by')"
                     " WHERE id = ?", (older["id"],))
    try:
        for method, body in (("GET", None), ("HEAD", None),
                             ("PATCH", {"content": {"text": "y"}}), ("DELETE", None)):
            r = http.request(method, f"/memories/{hidden['id']}", headers=stranger, json=body)
            unknown = http.request(method, f"/memories/{nothing}", headers=stranger, json=body)
            assert r.status_code == unknown.status_code == 403, (method, r.text)
            assert r.content == unknown.content, method
    finally:
        with sqlite3.connect(server.home / "amp.db") as conn:
            conn.execute("UPDATE cells SET doc = ? WHERE id = ?", (doc, hidden["id"]))
    assert http.get(f"/memories/{hidden['id']}", headers=owner).status_code == 200
    # The older row: its writer still writes (the whole cell decides), a stranger cannot.
    r = http.patch(f"/memories/{older['id']}", headers=writer, json={"content": {"text": "z"}})
    assert r.status_code == 200 and r.json() == {"id": older["id"]}, r.text
    r = http.patch(f"/memories/{older['id']}", headers=stranger, json={"content": {"text": "z"}})
    assert r.status_code == 403, r.text
    # A write puts the writers in the guard again.
    with sqlite3.connect(server.home / "amp.db") as conn:
        guard = conn.execute("SELECT guard FROM cells WHERE id = ?", (older["id"],)).fetchone()[0]
    assert json.loads(guard)["writable_by"] == [f"w_{uid}"]


def test_a_policy_holds_at_most_64_patterns_a_list(http: httpx.Client, uid: str) -> None:
    """Every listing and search tests each candidate cell's patterns against its caller:
    300 cells of 7,000 patterns each made every other agent's search take 8 s."""
    me = {"X-AMP-Agent-ID": f"a_{uid}"}
    many = [f"r{i}_{uid}*" for i in range(65)]
    body = {"type": "semantic", "content": {"text": "x"},
            "identity": {"owner_id": f"u_{uid}", "owner_type": "user"}}
    for key in ("readable_by", "writable_by"):
        r = http.post("/memories", headers=me, json={**body, "access_policy": {key: many}})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"]["errors"][0]["loc"][-1] == key, r.text
    cell = make(http, f"a_{uid}", f"u_{uid}",
                access_policy={"readable_by": many[:64], "writable_by": many[:64]})
    for key in ("readable_by", "writable_by"):
        r = http.patch(f"/memories/{cell['id']}", headers=me,
                       json={"access_policy": {key: many}})
        assert r.status_code == 422, r.text
    r = http.patch(f"/memories/{cell['id']}", headers=me,
                   json={"access_policy": {"readable_by": many[1:]}})
    assert r.status_code == 200, r.text
