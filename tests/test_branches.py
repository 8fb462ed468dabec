"""Branches and merge over real HTTP, on both catalogs (SQLite, PostgreSQL).

A write on a branch is invisible on main and on other branches until merged; a branch sees
main as of its base plus its own commits; merge is three-way per (entity, predicate) and
refuses the whole merge on a conflict, writing nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.memory_support import Memory, backend_env, new_scope, start


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def m(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
      ) -> Iterator[Memory]:
    proc = start(tmp_path_factory.mktemp("branches"), backend_env(request.param, request))
    client = Memory(proc.url)
    yield client
    client.close()
    proc.stop()


def code(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def branch(m: Memory, scope: str, name: str, **extra: Any) -> httpx.Response:
    return m.http.post("/branches", json={"scope": scope, "name": name, **extra})


def merge(m: Memory, scope: str, src: str, **extra: Any) -> httpx.Response:
    return m.http.post("/merge", json={"scope": scope, "from": src, **extra})


def value(m: Memory, scope: str, entity: str, predicate: str, **params: Any) -> Any:
    r = m.facts(scope, entity, predicate=predicate, **params)
    assert r.status_code == 200, r.text
    facts = r.json()["facts"]
    return facts[0]["value"] if facts else None


def seeded(m: Memory) -> tuple[str, str]:
    """A scope with one episode and one fact on main: acme's budget is 50k."""
    scope = new_scope()
    ep = m.write(scope, "Acme budget is 50k. Acme plan is basic. Acme owner is Ann.")
    assert ep.status_code == 201, ep.text
    ep_id = ep.json()["id"]
    for predicate, v, quote in (("budget", "50k", "budget is 50k"),
                                ("plan", "basic", "plan is basic")):
        assert m.fact(scope, "acme", predicate, v, quote, [(ep_id, 1)]).status_code == 201
    return scope, ep_id


def test_branch_is_isolated_until_merged(m: Memory) -> None:
    scope, _ = seeded(m)
    made = branch(m, scope, "exp/try-1")
    assert made.status_code == 201, made.text
    body = made.json()
    head_main = m.ledger(scope)[0]["id"]
    assert body["base"] == head_main and body["name"] == "exp/try-1" and body["head"]

    ep = m.http.post("/episodes", json={"scope": scope, "branch": "exp/try-1",
                                         "source": "doc:new", "body": "Acme budget is 70k.",
                                         "acl": ["*"]})
    assert ep.status_code == 201, ep.text
    new_ep = ep.json()["id"]
    r = m.http.post("/facts", json={
        "scope": scope, "branch": "exp/try-1", "entity": "acme", "predicate": "budget",
        "value": "70k", "quote": "budget is 70k", "cites": [{"episode": new_ep, "unit": 1}]})
    assert r.status_code == 201, r.text

    # The branch sees main as of its base plus its own commits; main sees nothing new.
    assert value(m, scope, "acme", "budget", branch="exp/try-1") == "70k"
    assert value(m, scope, "acme", "plan", branch="exp/try-1") == "basic"
    assert value(m, scope, "acme", "budget") == "50k"
    assert m.episode(scope, new_ep).status_code == 404
    assert m.episode(scope, new_ep, branch="exp/try-1").status_code == 200

    # A commit on main after the fork is not seen by the branch.
    main_ep = m.write(scope, "Acme plan is pro.", source="doc:plan").json()["id"]
    assert m.fact(scope, "acme", "plan", "pro", "plan is pro",
                  [(main_ep, 1)]).status_code == 201
    assert value(m, scope, "acme", "plan", branch="exp/try-1") == "basic"

    listed = {b["name"]: b for b in m.http.get("/branches",
                                               params={"scope": scope}).json()["branches"]}
    assert set(listed) == {"main", "exp/try-1"}
    assert listed["exp/try-1"]["ahead"] == 2 and listed["exp/try-1"]["behind"] == 2
    assert listed["exp/try-1"]["created_by"] == "alice"

    # Merge: budget changed on the branch only, plan on main only: no conflict.
    dry = merge(m, scope, "exp/try-1", dry_run=True)
    assert dry.status_code == 200, dry.text
    assert dry.json()["merged"] is False and dry.json()["changes"]["facts"] == 1
    assert value(m, scope, "acme", "budget") == "50k"  # a dry run writes nothing
    done = merge(m, scope, "exp/try-1")
    assert done.status_code == 200, done.text
    assert done.json()["merged"] is True and done.json()["fast_forward"] is False
    assert value(m, scope, "acme", "budget") == "70k"
    assert value(m, scope, "acme", "plan") == "pro"
    assert m.episode(scope, new_ep).status_code == 200
    top = m.ledger(scope)[0]
    assert top["kind"] == "merge" and len(top["parents"]) == 2
    assert top["parents"][1] == listed["exp/try-1"]["head"]

    again = merge(m, scope, "exp/try-1")
    assert again.status_code == 200 and again.json()["merged"] is False
    assert m.ledger(scope)[0]["id"] == top["id"]


def test_conflict_refuses_the_whole_merge(m: Memory) -> None:
    scope, ep_id = seeded(m)
    assert branch(m, scope, "b1").status_code == 201
    ep_b = m.http.post("/episodes", json={"scope": scope, "branch": "b1", "source": "doc:b",
                                          "body": "Acme budget is 90k. Acme owner is Bo.",
                                          "acl": ["*"]}).json()["id"]
    for predicate, v, quote in (("budget", "90k", "budget is 90k"),
                                ("owner", "Bo", "owner is Bo")):
        r = m.http.post("/facts", json={
            "scope": scope, "branch": "b1", "entity": "acme", "predicate": predicate,
            "value": v, "quote": quote, "cites": [{"episode": ep_b, "unit": 1}]})
        assert r.status_code == 201, r.text
    ep_m = m.write(scope, "Acme budget is 60k.", source="doc:m").json()["id"]
    assert m.fact(scope, "acme", "budget", "60k", "budget is 60k",
                  [(ep_m, 1)]).status_code == 201
    before = m.ledger(scope)

    r = merge(m, scope, "b1")
    assert code(r) == (409, "MERGE_CONFLICT")
    conflicts = r.json()["error"]["details"]["conflicts"]
    assert conflicts == [{"entity": "acme", "predicate": "budget", "base": "50k",
                          "ours": "60k", "theirs": "90k"}]
    assert m.ledger(scope) == before  # nothing written, not even the owner fact
    assert value(m, scope, "acme", "owner") is None

    # Resolve by writing on one side (the branch takes main's value) and merging again.
    r = m.http.post("/facts", json={
        "scope": scope, "branch": "b1", "entity": "acme", "predicate": "budget",
        "value": "60k", "quote": "budget is 60k", "cites": [{"episode": ep_m, "unit": 1}]})
    assert r.status_code == 404 or r.status_code == 422  # main's episode is not on b1
    ep_fix = m.http.post("/episodes", json={
        "scope": scope, "branch": "b1", "source": "doc:fix", "body": "Acme budget is 60k.",
        "acl": ["*"]}).json()["id"]
    r = m.http.post("/facts", json={
        "scope": scope, "branch": "b1", "entity": "acme", "predicate": "budget",
        "value": "60k", "quote": "budget is 60k", "cites": [{"episode": ep_fix, "unit": 1}]})
    assert r.status_code == 201, r.text
    done = merge(m, scope, "b1")
    assert done.status_code == 200, done.text
    assert value(m, scope, "acme", "budget") == "60k"
    assert value(m, scope, "acme", "owner") == "Bo"
    assert ep_id


def test_hidden_values_stay_hidden_in_a_conflict(m: Memory) -> None:
    scope = new_scope()
    ep = m.write(scope, "Secret price is 5.", acl=["user:alice"]).json()["id"]
    assert m.fact(scope, "deal", "price", 5, "price is 5", [(ep, 1)]).status_code == 201
    assert branch(m, scope, "side").status_code == 201
    for where, n in (("side", 7), ("main", 9)):
        e = m.http.post("/episodes", json={"scope": scope, "branch": where,
                                           "source": f"doc:{where}",
                                           "body": f"Secret price is {n}.",
                                           "acl": ["user:alice"]}).json()["id"]
        r = m.http.post("/facts", json={
            "scope": scope, "branch": where, "entity": "deal", "predicate": "price",
            "value": n, "quote": f"price is {n}", "cites": [{"episode": e, "unit": 1}]})
        assert r.status_code == 201, r.text
    bob = m.as_user("bob")
    r = merge(bob, scope, "side")
    assert code(r) == (409, "MERGE_CONFLICT")
    # Bob may read no side: not even the attribute is named (no read shows him "deal").
    assert r.json()["error"]["details"]["conflicts"] == [
        {"entity": "hidden", "predicate": "hidden", "base": "hidden", "ours": "hidden",
         "theirs": "hidden"}]
    assert "Secret" not in r.text and "price is" not in r.text and "deal" not in r.text
    mine = merge(m, scope, "side").json()["error"]["details"]["conflicts"]
    assert mine[0]["entity"] == "deal" and mine[0]["ours"] == 9 and mine[0]["theirs"] == 7
    # Once he may read one side (the base here), the attribute is named, the rest hidden.
    assert m.http.put(f"/episodes/{ep}/acl", json={"scope": scope, "acl": ["*"]}
                      ).status_code == 200
    r = merge(bob, scope, "side")
    assert r.json()["error"]["details"]["conflicts"] == [
        {"entity": "deal", "predicate": "price", "base": 5, "ours": "hidden",
         "theirs": "hidden"}]
    bob.close()


def test_fast_forward_and_branch_of_branch(m: Memory) -> None:
    scope, _ = seeded(m)
    assert branch(m, scope, "a").status_code == 201
    e = m.http.post("/episodes", json={"scope": scope, "branch": "a", "source": "doc:a",
                                       "body": "Acme plan is gold.", "acl": ["*"]}).json()
    assert m.http.post("/facts", json={
        "scope": scope, "branch": "a", "entity": "acme", "predicate": "plan",
        "value": "gold", "quote": "plan is gold",
        "cites": [{"episode": e["id"], "unit": 1}]}).status_code == 201
    nested = branch(m, scope, "a/b", **{"from": "a"})
    assert nested.status_code == 201, nested.text
    assert value(m, scope, "acme", "plan", branch="a/b") == "gold"
    assert value(m, scope, "acme", "budget", branch="a/b") == "50k"
    # a cannot be deleted while a/b is made from it
    r = m.http.delete("/branches/a", params={"scope": scope})
    assert code(r) == (409, "BRANCH_HAS_CHILDREN")
    done = merge(m, scope, "a")
    assert done.status_code == 200 and done.json()["fast_forward"] is True, done.text
    assert value(m, scope, "acme", "plan") == "gold"


def test_delete_frees_the_name_and_keeps_the_ledger(m: Memory) -> None:
    scope, _ = seeded(m)
    assert branch(m, scope, "tmp").status_code == 201
    e = m.http.post("/episodes", json={"scope": scope, "branch": "tmp", "source": "doc:t",
                                       "body": "temporary", "acl": ["*"]}).json()["id"]
    assert code(branch(m, scope, "tmp")) == (409, "BRANCH_EXISTS")
    refused = m.as_user("bob").http.delete("/branches/tmp", params={"scope": scope})
    assert code(refused) == (403, "ACCESS_DENIED")
    assert refused.json()["error"]["message"] == (
        "Only the branch's creator or an admin may delete it."), refused.text
    r = m.http.delete("/branches/tmp", params={"scope": scope})
    assert r.status_code == 200, r.text
    assert m.episode(scope, e, branch="tmp").status_code == 404
    assert code(m.http.get("/ledger", params={"scope": scope, "branch": "tmp"})) == (
        404, "NOT_FOUND")
    again = branch(m, scope, "tmp")
    assert again.status_code == 201, again.text
    assert m.episode(scope, e, branch="tmp").status_code == 404  # starts from main again
    ledger = m.http.get("/ledger", params={"scope": scope, "branch": "tmp"}).json()["commits"]
    assert [c["kind"] for c in ledger] == ["branch", "delete", "commit", "branch"]
    assert code(m.http.delete("/branches/main", params={"scope": scope})) == (
        409, "BRANCH_PROTECTED")
    # No name is no branch: it was read as main (409 "Branch 'main' cannot be deleted").
    assert code(m.http.delete("/branches/", params={"scope": scope})) == (
        422, "VALIDATION_ERROR")


@pytest.mark.parametrize("name", ["..", "a/", "/a", "a//b", "A", "a\x00b", "x" * 600,
                                  "a b", "../etc"])
def test_bad_branch_names_are_422(m: Memory, name: str) -> None:
    scope, _ = seeded(m) if name == ".." else (new_scope(), "")
    r = branch(m, scope, name)
    assert code(r) == (422, "VALIDATION_ERROR"), r.text


def test_bad_merges_and_unknown_branches(m: Memory) -> None:
    scope, _ = seeded(m)
    assert code(merge(m, scope, "main")) == (422, "VALIDATION_ERROR")
    assert code(merge(m, scope, "x", into="x")) == (422, "VALIDATION_ERROR")
    assert code(merge(m, scope, "nope")) == (404, "NOT_FOUND")
    assert code(branch(m, scope, "c", **{"from": "nope"})) == (404, "NOT_FOUND")
    assert code(m.facts(scope, "acme", branch="nope")) == (404, "NOT_FOUND")
    assert code(branch(m, new_scope(), "c")) == (404, "NOT_FOUND")  # no commit yet


def test_a_blank_merge_message_is_refused_not_left_out(m: Memory) -> None:
    """A merge's `message` given blank is 422 string_blank, as every other blank field is
    (docs/api.md, "Blank is not left out"): "" was read as left out (the default message)
    and "   " was written to the ledger as the merge commit's message."""
    scope, ep_id = seeded(m)
    assert branch(m, scope, "b").status_code == 201
    assert m.fact(scope, "acme", "plan", "pro", "plan is basic", [(ep_id, 1)],
                  branch="b").status_code == 201
    head = m.ledger(scope)[0]["id"]
    for blank in ("", "   "):
        r = merge(m, scope, "b", message=blank)
        assert r.status_code == 422, r.text
        first = r.json()["error"]["details"]["errors"][0]
        assert (first["loc"], first["type"]) == (["body", "message"], "string_blank"), r.text
    assert m.ledger(scope)[0]["id"] == head  # nothing merged
    done = merge(m, scope, "b", message="take the plan")
    assert done.status_code == 200 and done.json()["merged"], done.text
    assert m.ledger(scope)[0]["message"] == "take the plan"


def test_a_workspace_snapshot_holds_every_scope_and_branch(m: Memory) -> None:
    ws = m.http.post("/workspaces", json={"name": "trial", "ttl": "1h"})
    assert ws.status_code == 201, ws.text
    org = ws.json()["org"]
    one, two = f"{org}/one", f"{org}/two"
    for scope in (one, two):
        assert m.write(scope, f"{scope} budget is 50k.").status_code == 201
    assert branch(m, one, "try").status_code == 201
    ep = m.http.post("/episodes", json={"scope": one, "branch": "try", "source": "doc:t",
                                        "body": "On try the budget is 70k.", "acl": ["*"]})
    assert ep.status_code == 201, ep.text
    snap = m.http.post(f"/workspaces/{ws.json()['id']}/snapshots")
    assert snap.status_code == 201, snap.text
    heads = snap.json()["heads"]
    assert set(heads) == {f"{one}@main", f"{one}@try", f"{two}@main"}
    # Later writes on the branch are not seen through the snapshot.
    late = m.http.post("/episodes", json={"scope": one, "branch": "try", "source": "doc:late",
                                          "body": "Later on try.", "acl": ["*"]}).json()["id"]
    sid = snap.json()["id"]
    assert m.episode(one, ep.json()["id"], snapshot=sid, branch="try").status_code == 200
    assert m.episode(one, late, branch="try").status_code == 200
    assert m.episode(one, late, snapshot=sid, branch="try").status_code == 404
    # Another user's workspace is the same 404 as an unknown one.
    other = m.as_user("bob").http.post(f"/workspaces/{ws.json()['id']}/snapshots")
    unknown = m.http.post("/workspaces/ws_0000000000000000/snapshots")
    assert code(other) == code(unknown) == (404, "NOT_FOUND")
