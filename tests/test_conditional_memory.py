"""Conditional writes on AmpUp's replaceable resources (a scope's schema, a principal, an
episode's ACL, the procedure sources), over real HTTP: two server processes sharing one
catalog and warehouse (each with its own read index, as servers of a fleet), on the
SQLite and the PostgreSQL catalog. A tag one server gives holds on the other; of writers
holding one tag, across both servers, exactly one lands (the check runs inside the
ledger's or the table's compare-and-set)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.memory_support import ADMIN_TOKEN, BACKENDS, Memory, backend_env, new_scope, start
from tests.server_process import ServerProcess

ADMIN = {"X-AMP-Admin-Token": ADMIN_TOKEN}


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Memory]]:
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
    env = backend_env(request.param, request)
    home: Path = tmp_path_factory.mktemp("cond")
    procs: list[ServerProcess] = []
    try:
        for i in range(2):
            procs.append(start(home, {**env,
                                      "AMPUP_MEMORY_INDEX_URI": f"sqlite:///{home}/idx{i}.db"}))
        clients = [Memory(p.url) for p in procs]
        yield clients
        for c in clients:
            c.close()
    finally:
        for p in procs:
            p.stop()


def race(writes: list[Callable[[], httpx.Response]]) -> list[int]:
    """Run the writes at once; their status codes, in order."""
    start_line = threading.Barrier(len(writes))
    codes = [0] * len(writes)

    def run(i: int) -> None:
        start_line.wait()
        codes[i] = writes[i]().status_code

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def code(r: httpx.Response) -> str:
    body: dict[str, dict[str, str]] = r.json()
    return body["error"]["code"]


# -- a scope's schema ----------------------------------------------------------------------

def schema_path(scope: str) -> str:
    return "/schemas/" + scope


def test_schema_create_only_then_if_match(pair: list[Memory]) -> None:
    a, b = pair
    scope = new_scope()
    r = a.http.get(schema_path(scope))
    assert r.status_code == 200 and r.json()["schema"] is None and "ETag" not in r.headers
    # If-Match on a scope with no schema: nothing to match.
    r = a.http.put(schema_path(scope), json={"builtin": "sales"},
                   headers={**ADMIN, "If-Match": "*"})
    assert r.status_code == 412 and code(r) == "PRECONDITION_FAILED"
    r = a.http.put(schema_path(scope), json={"builtin": "sales"},
                   headers={**ADMIN, "If-None-Match": "*"})
    assert r.status_code == 200, r.text
    first = r.headers["ETag"]
    assert first == f'"{r.json()["commit"]}"'
    # The other server (same catalog) agrees on the version.
    assert b.http.get(schema_path(scope)).headers["ETag"] == first
    r = b.http.put(schema_path(scope), json={"builtin": "engineering"},
                   headers={**ADMIN, "If-None-Match": "*"})
    assert r.status_code == 412, r.text
    r = b.http.put(schema_path(scope), json={"builtin": "engineering"},
                   headers={**ADMIN, "If-Match": first})
    assert r.status_code == 200, r.text
    second = r.headers["ETag"]
    assert second != first
    r = a.http.put(schema_path(scope), json={"builtin": "corpus"},
                   headers={**ADMIN, "If-Match": first})
    assert r.status_code == 412, r.text
    got = a.http.get(schema_path(scope))
    assert got.json()["name"] == "engineering" and got.headers["ETag"] == second
    assert a.http.get(schema_path(scope), headers={"If-None-Match": second}).status_code == 304


def test_schema_history_read_is_tagged_by_its_newest_version(pair: list[Memory]) -> None:
    """`history=true` as of a past time shows the old version beside every later one: its
    tag was the old version's commit, so a version set afterwards left it unchanged and
    a conditional read answered 304 over a history that had grown."""
    a, _ = pair
    scope = new_scope()
    r = a.http.put(schema_path(scope), json={"builtin": "sales"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    past = {"as_of": r.json()["set_at"], "history": "true"}
    held = a.http.get(schema_path(scope), params=past)
    assert held.headers["ETag"] == r.headers["ETag"]
    r = a.http.put(schema_path(scope), json={"builtin": "engineering"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    again = a.http.get(schema_path(scope), params=past,
                       headers={"If-None-Match": held.headers["ETag"]})
    assert again.status_code == 200, again.status_code
    assert again.json()["name"] == "sales" and len(again.json()["history"]) == 2
    assert again.headers["ETag"] == r.headers["ETag"]  # the newest version's, as PUT's
    assert a.http.get(schema_path(scope), params=past,
                      headers={"If-None-Match": r.headers["ETag"]}).status_code == 304


def test_schema_writers_holding_one_tag_one_wins(pair: list[Memory]) -> None:
    a, _ = pair
    scope = new_scope()
    r = a.http.put(schema_path(scope), json={"builtin": "sales"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    tag = r.headers["ETag"]
    names = ["engineering", "corpus", "engineering", "corpus"]
    codes = race([
        (lambda c=pair[i % 2], n=n: c.http.put(  # type: ignore[misc]
            schema_path(scope), json={"builtin": n}, headers={**ADMIN, "If-Match": tag}))
        for i, n in enumerate(names)])
    assert sorted(codes) == [200, 412, 412, 412], codes
    assert a.http.get(schema_path(scope)).json()["name"] == names[codes.index(200)]


# -- a principal ---------------------------------------------------------------------------

def test_principal_if_match(pair: list[Memory]) -> None:
    a, b = pair
    user = "p_" + new_scope().split("/")[0]
    path = f"/principals/{user}"
    r = a.http.get(path, headers=ADMIN)
    assert r.status_code == 200, r.text
    empty = r.headers["ETag"]  # every user id has one: no groups, no roles
    r = b.http.put(path, json={"groups": ["sales"], "roles": []},
                   headers={**ADMIN, "If-Match": empty})
    assert r.status_code == 200, r.text
    tag = r.headers["ETag"]
    assert tag != empty and a.http.get(path, headers=ADMIN).headers["ETag"] == tag
    r = a.http.put(path, json={"groups": ["eng"], "roles": []},
                   headers={**ADMIN, "If-Match": empty})
    assert r.status_code == 412 and code(r) == "PRECONDITION_FAILED"
    assert a.http.get(path, headers=ADMIN).json()["groups"] == ["sales"]
    codes = race([
        (lambda c=pair[i % 2], g=g: c.http.put(  # type: ignore[misc]
            path, json={"groups": [g], "roles": []}, headers={**ADMIN, "If-Match": tag}))
        for i, g in enumerate(["g1", "g2", "g3", "g4"])])
    assert sorted(codes) == [200, 412, 412, 412], codes
    assert a.http.get(path, headers=ADMIN).json()["groups"] == [f"g{codes.index(200) + 1}"]


# -- an episode's ACL ----------------------------------------------------------------------

def test_acl_if_match_and_no_probe(pair: list[Memory]) -> None:
    a, b = pair
    scope = new_scope()
    r = a.write(scope, "the Q3 plan, draft", acl=["user:alice"])
    assert r.status_code == 201, r.text
    ep = r.json()["id"]
    got = a.episode(scope, ep)
    assert got.status_code == 200, got.text
    tag = got.headers["ETag"]
    assert b.episode(scope, ep).headers["ETag"] == tag
    acl_path = f"/episodes/{ep}/acl"
    r = b.http.put(acl_path, json={"scope": scope, "acl": ["user:alice", "group:sales"]},
                   headers={"If-Match": tag})
    assert r.status_code == 200, r.text
    new = r.headers["ETag"]
    assert new != tag and a.episode(scope, ep).headers["ETag"] == new
    r = a.http.put(acl_path, json={"scope": scope, "acl": ["*"]}, headers={"If-Match": tag})
    assert r.status_code == 412, r.text
    assert a.episode(scope, ep).json()["acl"] == ["group:sales", "user:alice"] or \
        sorted(a.episode(scope, ep).json()["acl"]) == ["group:sales", "user:alice"]
    # Bob may not read it: his answer is an unknown id's, whatever his condition.
    bob = a.as_user("bob")
    try:
        unknown = "0" * 64
        answers = [bob.http.put(f"/episodes/{i}/acl", json={"scope": scope, "acl": ["*"]},
                                headers={"If-Match": cond})
                   for i in (ep, unknown) for cond in ('"stale"', "*")]
        assert {r.status_code for r in answers} == {404}
        assert len({r.text for r in answers}) == 1
    finally:
        bob.close()
    codes = race([
        (lambda c=pair[i % 2], e=e: c.http.put(  # type: ignore[misc]
            acl_path, json={"scope": scope, "acl": ["user:alice", e]},
            headers={"If-Match": new}))
        for i, e in enumerate(["group:g1", "group:g2", "group:g3", "group:g4"])])
    assert sorted(codes) == [200, 412, 412, 412], codes


# -- If-Match on the reads -----------------------------------------------------------------

def test_every_versioned_read_judges_if_match(pair: list[Memory]) -> None:
    """RFC 9110 13.1.1: If-Match is judged on a read too, before If-None-Match. It was
    ignored, so a read naming a version it no longer had got another one as a 200."""
    a, _ = pair
    scope = new_scope()
    r = a.write(scope, "the Q4 plan", acl=["user:alice"])
    assert r.status_code == 201, r.text
    ep = r.json()["id"]
    schema = schema_path(scope)
    for cond in ("*", '"x"'):  # no schema yet: no version to match
        r = a.http.get(schema, headers={"If-Match": cond})
        assert r.status_code == 412 and code(r) == "PRECONDITION_FAILED", r.text
    assert a.http.put(schema, json={"builtin": "sales"}, headers=ADMIN).status_code == 200
    reads: dict[str, Callable[[dict[str, str]], httpx.Response]] = {
        "episode": lambda h: a.http.get(f"/episodes/{ep}", params={"scope": scope}, headers=h),
        "schema": lambda h: a.http.get(schema, headers=h),
        "principal": lambda h: a.http.get("/principals/ifm-user", headers={**ADMIN, **h}),
        "sources": lambda h: a.http.get("/procedures/sources", params={"scope": scope},
                                        headers={**ADMIN, **h}),
    }
    for name, read in reads.items():
        plain = read({})
        assert plain.status_code == 200, (name, plain.text)
        tag = plain.headers["ETag"]
        for held in (tag, "*", f'"x", {tag}'):
            r = read({"If-Match": held})
            assert (r.status_code, r.headers["ETag"]) == (200, tag), (name, held, r.text)
        for stale in ('"stale"', "W/" + tag, ""):
            r = read({"If-Match": stale})
            assert r.status_code == 412 and code(r) == "PRECONDITION_FAILED", (name, stale)
        # If-Match first: a stale one is 412 even where If-None-Match would say 304.
        r = read({"If-Match": '"stale"', "If-None-Match": tag})
        assert r.status_code == 412, (name, r.status_code)
        assert read({"If-Match": tag, "If-None-Match": tag}).status_code == 304, name
    # A caller who may not read the episode gets the unknown id's 404, never the 412.
    bob = a.as_user("bob")
    try:
        answers = [bob.http.get(f"/episodes/{i}", params={"scope": scope},
                                headers={"If-Match": '"stale"'}) for i in (ep, "0" * 64)]
        assert [r.status_code for r in answers] == [404, 404]
        assert answers[0].text == answers[1].text
    finally:
        bob.close()


# -- the procedure sources -----------------------------------------------------------------

def test_procedure_sources_if_match(pair: list[Memory]) -> None:
    a, b = pair
    scope = new_scope()
    assert a.write(scope, "step one, then two", source="doc:runbook",
                   document="runbook").status_code == 201
    r = a.http.get("/procedures/sources", params={"scope": scope}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["documents"] == [], r.text
    empty = r.headers["ETag"]
    body = {"scope": scope, "documents": ["runbook"]}
    r = b.http.put("/procedures/sources", json=body, headers={**ADMIN, "If-Match": empty})
    assert r.status_code == 200, r.text
    tag = r.headers["ETag"]
    assert a.http.get("/procedures/sources", params={"scope": scope},
                      headers=ADMIN).headers["ETag"] == tag != empty
    r = a.http.put("/procedures/sources", json={"scope": scope, "documents": []},
                   headers={**ADMIN, "If-Match": empty})
    assert r.status_code == 412, r.text
    assert a.http.get("/procedures/sources", params={"scope": scope},
                      headers=ADMIN).json()["documents"] == ["runbook"]
    codes = race([
        (lambda c=pair[i % 2], d=d: c.http.put(  # type: ignore[misc]
            "/procedures/sources", json={"scope": scope, "documents": d},
            headers={**ADMIN, "If-Match": tag}))
        for i, d in enumerate([[], ["runbook", "a"], ["b"], ["c"]])])
    assert sorted(codes) == [200, 412, 412, 412], codes
