"""Rules an adversarial audit pinned down, each over real HTTP against real servers:
revocation reaches every version, hidden episodes answer with their existence only, a
held episode never changes even when two servers write it at once, one newest-wins, and
documented rules no other test held (close's default ACL, citations, the admin's ACL
change, principals, size limits, bad user ids)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, new_scope, start
from tests.server_process import ServerProcess
from tests.test_mcp import http_client_for, ok, refused


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    p = start(tmp_path_factory.mktemp("mem-audit"), dict(QUIET))
    yield p
    p.stop()


@pytest.fixture
def m(proc: ServerProcess) -> Iterator[Memory]:
    client = Memory(proc.url)
    yield client
    client.close()


def _ok(r: httpx.Response, status: int = 201) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    return body


def _search(m: Memory, scope: str, **extra: Any) -> list[tuple[str, Any]]:
    r = m.http.post("/search", json={"scope": scope, "query": "Acme budget", "limit": 50,
                                     **extra})
    return sorted((f["entity"], f["value"]) for f in _ok(r, 200)["results"])


# -- 3. revocation: the current ACL decides who reads any version ---------------------------
async def test_a_narrowed_acl_hides_every_version(m: Memory, proc: ServerProcess) -> None:
    bob = m.as_user("bob")
    s = new_scope()
    w = _ok(m.write(s, "Acme budget for the pilot is 40k.", document="plan",
                    occurred_at="2025-01-10T00:00:00Z"))
    e1, c0 = w["id"], w["commit"]
    c1 = _ok(m.fact(s, "Acme", "budget", "40k", "budget for the pilot is 40k",
                    [(e1, 1)]))["commit"]
    doc = {"scope": s, "document": "plan", "at_commit": c1}
    # Before: bob reads it on every path, now and as of c1.
    assert bob.episode(s, e1, at_commit=c1).status_code == 200
    assert [f["value"] for f in bob.facts(s, "Acme", at_commit=c1).json()["facts"]] == ["40k"]
    assert bob.http.post("/document", json=doc).status_code == 200
    assert _search(bob, s, at_commit=c1) == [("Acme", "40k")]

    _ok(m.http.put(f"/episodes/{e1}/acl", json={"scope": s, "acl": ["user:alice"]}), 200)
    missing = bob.episode(s, "e" * 64)
    assert missing.status_code == 404
    for at in (c0, c1, None):
        extra = {"at_commit": at} if at else {}
        hidden = bob.episode(s, e1, **extra)
        assert (hidden.status_code, hidden.json()) == (404, missing.json()), at
        assert bob.facts(s, "Acme", **extra).json() == {"facts": []}, at
        assert bob.facts(s, "Acme", history="true", **extra).json() == {"facts": []}, at
        gone = bob.http.post("/document", json={**doc, **extra} if at else
                             {"scope": s, "document": "plan"})
        assert gone.status_code == 404, at
        assert _search(bob, s, **extra) == [], at
    # The MCP tool reads through the same rule.
    async with http_client_for(proc.url, {"X-AMP-Agent-ID": "agent_bob",
                                          "X-AmpUp-User": "bob"}) as client:
        said = await refused(client, "get_episode", scope=s, id=e1, at_commit=c1)
        assert "No such episode" in said
    # Alice still reads it as of c1, with the ACL it has now.
    got = _ok(m.episode(s, e1, at_commit=c1), 200)
    assert got["acl"] == ["user:alice"] and got["body"] == "Acme budget for the pilot is 40k."
    assert [f["value"] for f in m.facts(s, "Acme", at_commit=c1).json()["facts"]] == ["40k"]
    # Widening works the same way: the new ACL counts for old commits too.
    _ok(m.http.put(f"/episodes/{e1}/acl", json={"scope": s, "acl": ["user:alice",
                                                                  "user:bob"]}), 200)
    assert bob.episode(s, e1, at_commit=c0).status_code == 200
    assert _search(bob, s, at_commit=c1) == [("Acme", "40k")]
    async with http_client_for(proc.url, {"X-AMP-Agent-ID": "agent_bob",
                                          "X-AmpUp-User": "bob"}) as client:
        seen = json.loads(await ok(client, "get_episode", scope=s, id=e1, at_commit=c0))
        assert seen["acl"] == ["user:alice", "user:bob"]
    bob.close()


# -- 6. a hidden episode answers with its existence and nothing more ------------------------
def test_rewriting_a_hidden_episode_reveals_only_that_it_exists(m: Memory) -> None:
    bob = m.as_user("bob")
    s = new_scope()
    src, body = "slack:C7:1", "alice: the layoff list is final"
    held = _ok(m.write(s, body, source=src, acl=["user:alice"], about=["hr"],
                       occurred_at="2025-02-01T09:00:00Z"))
    ep = held["id"]
    assert ep == hashlib.sha256(f"{src}\n{body}".encode()).hexdigest()
    attempts = [
        {"acl": ["user:alice"], "about": ["hr"], "occurred_at": "2025-02-01T09:00:00Z"},
        {"acl": ["user:alice"]},
        {"acl": ["*"], "about": ["x"], "occurred_at": "2020-01-01T00:00:00Z"},
        {"acl": ["user:bob"], "document": "d"},
    ]
    answers = [bob.write(s, body, source=src, **a) for a in attempts]
    expected = {"error": {"code": "CONFLICT", "message": f"Episode {ep} already exists; a "
                          "write never changes a held episode.", "details": {"id": ep}}}
    for r in answers:
        assert (r.status_code, r.json()) == (409, expected)
        assert held["commit"] not in r.text
    batch = bob.http.post("/episodes/batch", json={"scope": s, "episodes": [
        {"source": src, "body": body, **attempts[0]}]})
    assert batch.status_code == 409
    assert batch.json()["error"]["details"] == {"conflicts": [{"index": 0, "id": ep}]}
    assert len(m.ledger(s)) == 1
    # The reader keeps the full answer: 200 with the commit, or 409 naming the fields.
    same = _ok(m.write(s, body, source=src, acl=["user:alice"]), 200)
    assert same == {"id": ep, "commit": held["commit"], "created": False}
    diff = m.write(s, body, source=src, acl=["*"])
    assert diff.status_code == 409 and diff.json()["error"]["details"] == {
        "id": ep, "fields": ["acl"]}
    bob.close()


def test_the_ledger_does_not_tell_whether_a_guessed_body_is_held(m: Memory) -> None:
    bob = m.as_user("bob")
    s = new_scope()
    secret = "Umbrella acquisition closes on June 3."
    _ok(m.write(s, secret, source="gmail:t1:1", acl=["user:alice"]))
    guessed = _ok(bob.write(s, secret, source="slack:C1:9", acl=["user:bob"]))
    novel = _ok(bob.write(s, "Something nobody wrote before.", source="slack:C1:10",
                          acl=["user:bob"]))
    ledger = {c["id"]: c for c in bob.ledger(s)}
    counts = {"episodes": 1, "facts": 0, "closures": 0, "acl_changes": 0}
    assert ledger[guessed["commit"]]["changes"] == counts
    assert ledger[novel["commit"]]["changes"] == counts
    assert "bodies" not in bob.http.get("/ledger", params={"scope": s}).text
    # The body is still stored once, and both readers get their own episode's text.
    assert _ok(bob.episode(s, guessed["id"]), 200)["body"] == secret
    bob.close()


# -- 5. one episode id, two servers, one moment ---------------------------------------------
def test_two_servers_writing_one_episode_answer_as_if_in_turn(tmp_path: Path) -> None:
    """Two processes share one catalog and warehouse (each with its own read index) and
    write the same episode ids at the same moment: the loser answers as a second write
    would, 409 when its fields differ, 200 with the winner's commit when they are equal."""
    home = tmp_path / "home"
    servers = [start(home, {**QUIET, "AMPUP_MEMORY_INDEX_URI": f"sqlite:///{home}/idx{i}.db"})
               for i in range(2)]
    try:
        users = [Memory(s.url, "alice") for s in servers]
        s = new_scope()
        _ok(users[0].write(s, "warm-up", source="slack:C0:0"))  # the scope exists
        rounds = 3

        def race(n: int, same: bool) -> list[httpx.Response]:
            barrier = threading.Barrier(2)

            def one(i: int) -> httpx.Response:
                acl = ["*"] if same else ["user:alice", f"group:writer{i}"]
                barrier.wait()
                return users[i].write(s, f"alice: round {n} same={same}",
                                      source=f"slack:C1:{n}:{same}", acl=acl)

            with ThreadPoolExecutor(2) as pool:
                return list(pool.map(one, range(2)))

        for n in range(rounds):
            for same in (False, True):
                got = race(n, same)
                codes = sorted(r.status_code for r in got)
                assert codes == ([200, 201] if same else [201, 409]), (n, same, [
                    r.text for r in got])
                winner = next(i for i, r in enumerate(got) if r.status_code == 201)
                won = got[winner].json()
                lost = next(r for r in got if r.status_code != 201)
                if same:
                    assert lost.json() == {**won, "created": False}
                else:
                    assert lost.json()["error"]["details"]["fields"] == ["acl"]
                # Both servers read the winner's episode, with the winner's ACL.
                for u in users:
                    held = _ok(u.episode(s, won["id"]), 200)
                    assert held["commit"] == won["commit"]
                    assert held["acl"] == (["*"] if same else
                                           [f"group:writer{winner}", "user:alice"])
        ledgers = [u.ledger(s) for u in users]
        assert ledgers[0] == ledgers[1] and len(ledgers[0]) == 1 + 2 * rounds
    finally:
        for srv in servers:
            srv.stop()


# -- newest-wins: one rule for GET /facts and /search ----------------------------------------
def test_a_valid_from_tie_goes_to_the_later_commit_everywhere(m: Memory) -> None:
    s = new_scope()
    e1 = _ok(m.write(s, "Acme budget is 40k.", occurred_at="2025-01-01T00:00:00Z"))["id"]
    e2 = _ok(m.write(s, "Acme budget is 55k.", occurred_at="2025-01-01T00:00:00Z"))["id"]
    tie = "2025-02-01T00:00:00Z"
    first = _ok(m.fact(s, "Acme", "budget", "55k", "Acme budget is 55k.", [(e2, 1)],
                       valid_from=tie))
    _ok(m.fact(s, "Acme", "budget", "40k", "Acme budget is 40k.", [(e1, 1)], valid_from=tie))
    # Within one commit the later position wins the tie.
    _ok(m.http.post("/facts/batch", json={"scope": s, "facts": [
        {"entity": "Acme", "predicate": "owner", "value": v, "quote": q, "valid_from": tie,
         "cites": [{"episode": e, "unit": 1}]}
        for v, q, e in (("raj", "Acme budget is 55k.", e2), ("ann", "Acme budget is 40k.", e1))]}))
    facts = {f["predicate"]: f["value"] for f in m.facts(s, "Acme").json()["facts"]}
    assert facts == {"budget": "40k", "owner": "ann"}
    r = m.http.post("/search", json={"scope": s, "query": "Acme budget owner", "limit": 50})
    assert sorted((f["predicate"], f["value"]) for f in _ok(r, 200)["results"]) == [
        ("budget", "40k"), ("owner", "ann")]
    # As of the first fact's commit the only version wins, on both paths.
    at = first["commit"]
    assert [f["value"] for f in m.facts(s, "Acme", at_commit=at).json()["facts"]] == ["55k"]
    assert _search(m, s, at_commit=at) == [("Acme", "55k")]
    history = m.facts(s, "Acme", predicate="budget", history="true").json()["facts"]
    assert [(f["value"], f["valid_to"]) for f in history] == [("55k", tie), ("40k", None)]


# -- documented rules no test held ----------------------------------------------------------
def test_close_reason_defaults_to_the_entries_all_cited_episodes_share(m: Memory) -> None:
    s = new_scope()
    assert m.set_principal("alice", groups=["sales", "eng"]).status_code == 200
    a = _ok(m.write(s, "Acme renews in May.", acl=["group:sales", "user:alice"]))["id"]
    b = _ok(m.write(s, "Acme renewal: May, confirmed.", acl=["group:eng", "group:sales"]))["id"]
    c = _ok(m.write(s, "Acme renewal is set.", acl=["group:eng", "user:alice"]))["id"]
    _ok(m.fact(s, "acme", "renewal", "May", "renews in May", [(a, 1), (b, 1)]))
    closed = _ok(m.http.post("/close", json={"scope": s, "entity": "acme",
                                             "predicate": "renewal", "reason": "Churned."}))
    assert _ok(m.episode(s, closed["episode"]), 200)["acl"] == ["group:sales"]
    # Three cited episodes sharing two entries: both.
    _ok(m.fact(s, "acme", "owner", "dana", "Acme", [(a, 1), (b, 1), (c, 1)]))
    _ok(m.fact(s, "acme", "stage", "won", "Acme", [(b, 1), (c, 1)]))
    stage = _ok(m.http.post("/close", json={"scope": s, "entity": "acme",
                                            "predicate": "stage", "reason": "Reopened."}))
    assert _ok(m.episode(s, stage["episode"]), 200)["acl"] == ["group:eng"]
    # Nothing shared: 422 acl_required, and nothing committed; an explicit acl closes it.
    before = len(m.ledger(s))
    r = m.http.post("/close", json={"scope": s, "entity": "acme", "predicate": "owner",
                                    "reason": "Dana left."})
    assert r.status_code == 422
    assert r.json()["error"]["details"]["errors"][0]["type"] == "acl_required"
    assert len(m.ledger(s)) == before
    owner = _ok(m.http.post("/close", json={"scope": s, "entity": "acme",
                                            "predicate": "owner", "reason": "Dana left.",
                                            "acl": ["user:alice"]}))
    assert _ok(m.episode(s, owner["episode"]), 200)["acl"] == ["user:alice"]
    # A public episode narrows nothing: a value citing it and alice's note closes with
    # the note's ACL (it was 422 acl_required: "*" and "user:alice" share no entry).
    public = _ok(m.write(s, "Acme signed.", acl=["*"]))["id"]
    note = _ok(m.write(s, "Acme signed, per Raj.", acl=["user:alice"]))["id"]
    _ok(m.fact(s, "acme", "signed", "yes", "Acme signed", [(public, 1), (note, 1)]))
    signed = _ok(m.http.post("/close", json={"scope": s, "entity": "acme",
                                             "predicate": "signed", "reason": "Voided."}))
    assert _ok(m.episode(s, signed["episode"]), 200)["acl"] == ["user:alice"]
    assert m.set_principal("alice").status_code == 200


def test_citing_an_unreadable_episode_is_answered_like_a_missing_one(m: Memory) -> None:
    bob = m.as_user("bob")
    s = new_scope()
    hidden = _ok(m.write(s, "Acme budget is 90k.", acl=["user:alice"]))["id"]
    shown = _ok(m.write(s, "Acme budget is 40k.", acl=["*"]))["id"]
    for cites in ([(hidden, 1)], [(shown, 1), (hidden, 1)]):
        missing_cites = [(("f" * 64) if e == hidden else e, u) for e, u in cites]
        a = bob.fact(s, "Acme", "budget", "90k", "Acme budget is 90k.", cites)
        b = bob.fact(s, "Acme", "budget", "90k", "Acme budget is 90k.", missing_cites)
        assert (a.status_code, a.json()) == (b.status_code, b.json())
        assert a.status_code == 422
        pos = len(cites) - 1
        assert a.json()["error"]["details"]["errors"] == [{
            "loc": ["body", "cites", pos, "episode"], "msg": "no such episode",
            "type": "episode_unknown"}]
    assert len(m.ledger(s)) == 2
    bob.close()


def test_the_admin_changes_an_acl_it_did_not_write(m: Memory) -> None:
    s = new_scope()
    w = _ok(m.write(s, "alice: draft", source="slack:C5:1", acl=["user:alice", "user:root"]))
    root = m.as_user("root")
    body = {"scope": s, "acl": ["user:alice", "user:root", "group:ops"]}
    assert root.http.put(f"/episodes/{w['id']}/acl", json=body).status_code == 403
    wrong = root.http.put(f"/episodes/{w['id']}/acl", json=body,
                          headers={"X-AMP-Admin-Token": "not-the-token"})
    assert wrong.status_code == 403
    r = root.http.put(f"/episodes/{w['id']}/acl", json=body,
                      headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    changed = _ok(r, 200)
    assert changed["acl"] == ["group:ops", "user:alice", "user:root"] and changed["commit"]
    head = m.ledger(s)[0]
    assert (head["id"], head["author"], head["message"]) == (
        changed["commit"], "root", "change acl of 1 episode")
    assert _ok(m.episode(s, w["id"]), 200)["acl"] == ["group:ops", "user:alice", "user:root"]
    # The admin credential does not open an episode its user may not read: 404, as missing.
    zed = m.as_user("zed").http.put(f"/episodes/{w['id']}/acl", json=body,
                                    headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    absent = m.as_user("zed").http.put(f"/episodes/{'f' * 64}/acl", json=body,
                                       headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    assert (zed.status_code, zed.json()) == (404, absent.json())
    root.close()


def test_get_principals(m: Memory) -> None:
    admin = {"X-AMP-Admin-Token": ADMIN_TOKEN}
    user = "pat" + new_scope()[1:8]
    assert _ok(m.http.get(f"/principals/{user}", headers=admin), 200) == {
        "user": user, "groups": [], "roles": []}
    _ok(m.set_principal(user, groups=["sales", "eng", "sales"], roles=["lead"]), 200)
    assert _ok(m.http.get(f"/principals/{user}", headers=admin), 200) == {
        "user": user, "groups": ["eng", "sales"], "roles": ["lead"]}
    for headers in ({}, {"X-AMP-Admin-Token": "wrong"}):
        r = m.http.get(f"/principals/{user}", headers=headers)
        assert r.status_code == 403 and r.json()["error"]["code"] == "ACCESS_DENIED"
    bad = m.http.get("/principals/bad%20user", headers=admin)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_ERROR"


def _refused_at(r: httpx.Response, loc_end: str | int) -> bool:
    body = r.json()
    return (r.status_code == 422 and body["error"]["code"] == "VALIDATION_ERROR"
            and any(e["loc"][-1] == loc_end for e in body["error"]["details"]["errors"]))


def test_the_documented_size_limits(m: Memory) -> None:
    s = new_scope()
    # body: 1,000,000 bytes of UTF-8 (a 3-byte character makes the count bytes, not chars)
    big = "€" + "a" * (1_000_000 - 3)
    assert m.write(s, big).status_code == 201
    assert _refused_at(m.write(s, big + "a"), "body")
    long_unit = "q" * 4001
    ep = _ok(m.write(s, f"Acme short.\n\n{long_unit}\n\nx" + "z" * 20_001))["id"]
    ok_fact = {"entity": "e" * 256, "predicate": "p" * 128, "value": "v" * 4000,
               "quote": "q" * 4000, "cites": [{"episode": ep, "unit": 2}] * 32}
    assert _ok(m.http.post("/facts", json={"scope": s, **ok_fact}))["id"]
    for field, value, end in (("entity", "e" * 257, "entity"),
                              ("predicate", "p" * 129, "predicate"),
                              ("value", "v" * 4001, "str"), ("quote", "q" * 4001, "quote"),
                              ("cites", ok_fact["cites"] * 2, "cites"),
                              ("value", float("inf"), "float")):
        payload = json.dumps({"scope": s, **ok_fact, field: value})
        r = m.http.post("/facts", content=payload, headers={"content-type": "application/json"})
        assert r.status_code == 422, (field, r.text)
        if field != "value":
            assert _refused_at(r, end), (field, r.text)
    facts = [{"entity": "acme", "predicate": f"p{i}", "value": i, "quote": "Acme short.",
              "cites": [{"episode": ep, "unit": 1}]} for i in range(1001)]
    assert _refused_at(m.http.post("/facts/batch", json={"scope": s, "facts": facts}),
                       "facts")
    assert _ok(m.http.post("/facts/batch", json={"scope": s, "facts": facts[:1000]}))
    reason = "x" + "z" * 19_999
    closed = m.http.post("/close", json={"scope": s, "entity": "e" * 256,
                                         "predicate": "p" * 128, "reason": reason + "z"})
    assert _refused_at(closed, "reason")
    assert m.http.post("/close", json={"scope": s, "entity": "e" * 256, "predicate": "p" * 128,
                                       "reason": reason}).status_code == 201
    for q, status in (("Acme " * 400, 200), ("Acme " * 400 + "x", 422)):
        r = m.http.post("/search", json={"scope": s, "query": q})
        assert r.status_code == status, (len(q), r.text)


@pytest.mark.parametrize("user", ["bad user", "-leading", "a" * 201, "x/y", "ü"])
def test_an_invalid_user_id_is_401_on_every_route(m: Memory, user: str) -> None:
    s = new_scope()
    headers = {"X-AmpUp-User": user.encode("utf-8")}  # type: ignore[dict-item]
    ep = "a" * 64
    calls = [
        ("POST", "/episodes", {"scope": s, "source": "doc:x", "body": "b", "acl": ["*"]}),
        ("POST", "/episodes/batch", {"scope": s, "episodes": []}),
        ("GET", f"/episodes/{ep}?scope={s}", None),
        ("PUT", f"/episodes/{ep}/acl", {"scope": s, "acl": ["*"]}),
        ("POST", "/document", {"scope": s, "document": "d"}),
        ("POST", "/facts", {}),
        ("POST", "/facts/batch", {}),
        ("GET", f"/facts?scope={s}&entity=e", None),
        ("POST", "/close", {}),
        ("GET", f"/ledger?scope={s}", None),
        ("POST", "/search", {"scope": s, "query": "x"}),
        ("POST", "/query", {"scope": s, "find": "passages", "query": "x"}),
    ]
    for method, path, body in calls:
        r = httpx.request(method, m.url + path, json=body, headers=headers, timeout=30)
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["error"]["code"] == "UNAUTHENTICATED", (method, path, r.text)
        assert "user id" in r.json()["error"]["message"]


def test_no_caller_is_401_before_an_invalid_query_or_path(m: Memory) -> None:
    """docs/api.md: identity is checked before anything else, so a request without a
    caller is 401 even when its query or path is invalid (here: the one check FastAPI
    runs on it, before the route's own code)."""
    calls = [
        "/episodes?scope=a/b&limit=0", "/episodes?scope=a/b&after=zz", "/episodes",
        "/entities?scope=a/b&limit=0", "/entities?scope=a/b&after=",
        "/facts?scope=a/b", "/facts?scope=a/b&entity=e&history=maybe",
        "/facts?scope=a/b&entity=e&as_of=soon", f"/episodes/{'a' * 64}",
        "/ledger?scope=a/b&limit=0", "/runs?scope=a/b&before=zz", "/runs?scope=a/b&limit=0",
        f"/runs/run_{'0' * 61}", f"/sessions/ses_{'0' * 61}", "/situations", "/notes",
        "/procedures", "/extraction/status", "/branches", "/workspaces?all=maybe",
        f"/workspaces/ws_{'0' * 62}", f"/pin/pin_{'0' * 61}", f"/snapshots/snap_{'0' * 60}",
        "/schemas/a/b?history=maybe",
    ]
    for path in calls:
        r = httpx.get(m.url + path, timeout=30)
        assert (r.status_code, r.json()["error"]["code"]) == (401, "MISSING_USER"), \
            (path, r.text)
    for method, path in (("DELETE", "/branches/b"), ("DELETE", f"/pin/pin_{'0' * 61}"),
                         ("DELETE", f"/snapshots/snap_{'0' * 60}"),
                         ("DELETE", f"/workspaces/ws_{'0' * 62}"),
                         ("POST", f"/pin/pin_{'0' * 61}/renew"),
                         ("POST", f"/workspaces/ws_{'0' * 62}/renew"),
                         ("POST", f"/workspaces/ws_{'0' * 62}/snapshots")):
        r = httpx.request(method, m.url + path, timeout=30)
        assert (r.status_code, r.json()["error"]["code"]) == (401, "MISSING_USER"), \
            (method, path, r.text)


def test_no_admin_credential_is_403_before_an_invalid_query_or_path(m: Memory) -> None:
    """docs/api.md: identity is checked before anything else. On an admin route that is
    the admin credential: a request without it is 403 even when its query or path is
    invalid (it was a 422, so a caller with no credential learned which were valid); with
    it, the same request is the 422."""
    calls = [("GET", "/amp-lifecycle?limit=0", None),
             ("GET", "/principals/not%20an%20id", None),
             ("PUT", "/principals/not%20an%20id", {"groups": [], "roles": []}),
             ("PUT", f"/schemas/{'a' * 65}/b", {"builtin": "sales"})]
    for method, path, body in calls:
        r = httpx.request(method, m.url + path, json=body, timeout=30,
                          headers={"X-AmpUp-User": "alice"})
        assert (r.status_code, r.json()["error"]["code"]) == (403, "ACCESS_DENIED"), \
            (method, path, r.text)
        r = httpx.request(method, m.url + path, json=body, timeout=30,
                          headers={"X-AmpUp-User": "alice", "X-AMP-Admin-Token": ADMIN_TOKEN})
        assert (r.status_code, r.json()["error"]["code"]) == (422, "VALIDATION_ERROR"), \
            (method, path, r.text)


def test_an_empty_paging_cursor_names_nothing(m: Memory) -> None:
    """An empty `before` on /ledger is refused like a garbage one, not read as absent
    (an empty `after` on /episodes or `before` on /runs is a 422 too)."""
    scope = new_scope()
    _ok(m.write(scope, "one"))
    for path in (f"/ledger?scope={scope}&before=", f"/ledger?scope={scope}&before=zz",
                 f"/episodes?scope={scope}&after=", f"/runs?scope={scope}&before="):
        r = m.http.get(path)
        assert (r.status_code, r.json()["error"]["code"]) == (422, "VALIDATION_ERROR"), \
            (path, r.text)
    assert m.http.get(f"/ledger?scope={scope}").status_code == 200
