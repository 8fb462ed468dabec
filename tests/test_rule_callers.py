"""Every caller of the read and write rules gives the answer written in a table, over HTTP.

The reference server once had two read checks that disagreed for one kind of agent id.
Here every caller is held to tables of literal answers, worked out by hand from the
specification, never from `access.can_read` or `acl.may_read` (a test that asks the rule
for its own answer cannot catch a change to the rule):

- AMP: GET, both listing routes and search against the READ table; PATCH and DELETE
  against the WRITE table; a PATCH of `access_policy` against MANAGE (owner and creator
  only), and what a PATCH answers against READ (a writer who may not read sees the id).
- AmpUp: GET /episodes/{id}, POST /document, GET /facts, POST /search and POST /query
  against the EPISODE and FACT tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.memory_support import QUIET, Memory, new_scope, serving

T, F = True, False

# -- AMP cells -------------------------------------------------------------------------------
# Every agent id and pattern holds the test's uid, so tests sharing one server never meet.
AGENTS = ["creator_{u}", "owner_{u}", "billing_{u}_v1", "billing_{u}_", "billing_{u}_v2",
          "x_{u}_ops", "billingX{u}", "billing.{u}", "billing?{u}", "marketing_{u}"]

# (policy, who may read, who may write), one literal per agent, in the order of AGENTS:
#         creator owner bill_v1 bill_ bill_v2 x_ops billX bill. bill? marketing
CELLS: list[tuple[dict[str, Any], tuple[bool, ...], tuple[bool, ...]]] = [
    ({"public": True},
     (T, T, T, T, T, T, T, T, T, T), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["billing_{u}_*"]},  # '*' matches the empty run too
     (T, T, T, T, T, F, F, F, F, F), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["billing_{u}_v1"]},  # no '*': the whole id, not a prefix
     (T, T, T, F, F, F, F, F, F, F), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["*_{u}_ops"]},
     (T, T, F, F, F, T, F, F, F, F), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["bill*{u}*"]},  # anchored at the start, free at the end
     (T, T, T, T, T, F, T, T, T, F), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["billing.{u}"]},  # '.' is literal, not "any character"
     (T, T, F, F, F, F, F, T, F, F), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["billing?{u}"]},  # '?' is literal too
     (T, T, F, F, F, F, F, F, T, F), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["nobody_{u}", "*_{u}_ops", "marketing_{u}"]},  # any one pattern will do
     (T, T, F, F, F, T, F, F, F, T), (T, T, F, F, F, F, F, F, F, F)),
    ({"readable_by": ["*"]},
     (T, T, T, T, T, T, T, T, T, T), (T, T, F, F, F, F, F, F, F, F)),
    ({"writable_by": ["billing_{u}_*"]},  # grants write, not read
     (T, T, F, F, F, F, F, F, F, F), (T, T, T, T, T, F, F, F, F, F)),
    ({"readable_by": ["*"], "writable_by": ["x_{u}_ops", "billing.{u}"]},
     (T, T, T, T, T, T, T, T, T, T), (T, T, F, F, F, T, F, T, F, F)),
    ({"readable_by": [], "writable_by": [], "public": False},
     (T, T, F, F, F, F, F, F, F, F), (T, T, F, F, F, F, F, F, F, F)),
]


def fill(template: Any, uid: str) -> Any:
    if isinstance(template, str):
        return template.replace("{u}", uid)
    if isinstance(template, list):
        return [fill(t, uid) for t in template]
    if isinstance(template, dict):
        return {k: fill(v, uid) for k, v in template.items()}
    return template


def test_the_tables_are_whole() -> None:
    for policy, reads, writes in CELLS:
        assert len(reads) == len(writes) == len(AGENTS), policy
        assert reads[:2] == writes[:2] == (T, T), policy  # the creator and the owner


def _create(http: httpx.Client, uid: str, policy: dict[str, Any], owner_type: str,
            text: str) -> str:
    r = http.post("/memories", headers={"X-AMP-Agent-ID": f"creator_{uid}"}, json={
        "type": "semantic", "content": {"text": text},
        "identity": {"owner_id": f"owner_{uid}", "owner_type": owner_type},
        "access_policy": fill(policy, uid),
    })
    assert r.status_code == 201, r.text
    cell_id: str = r.json()["id"]
    return cell_id


@pytest.mark.parametrize("owner_type", ["user", "agent", "organization"])
def test_every_read_caller_answers_as_the_table(http: httpx.Client, uid: str,
                                                owner_type: str) -> None:
    ids = [_create(http, uid, policy, owner_type, f"zebra{uid} fact number {i}")
           for i, (policy, _, _) in enumerate(CELLS)]
    for a, agent in enumerate(fill(AGENTS, uid)):
        h = {"X-AMP-Agent-ID": agent}
        params = {"owner_id": f"owner_{uid}", "limit": 100}
        listed = {c["id"] for c in http.get("/memories", params=params,
                                            headers=h).json()["results"]}
        queried = {c["id"] for c in http.get("/memories/query", params=params,
                                             headers=h).json()["results"]}
        found = {c["id"] for c in http.post("/memories/search", headers=h, json={
            "query": f"zebra{uid} fact", "owner_id": f"owner_{uid}", "limit": 100,
        }).json()["results"]}
        for cell_id, (policy, reads, _) in zip(ids, CELLS, strict=True):
            expected = reads[a]
            got = http.get(f"/memories/{cell_id}", headers=h)
            assert got.status_code == (200 if expected else 403), (agent, policy)
            assert (cell_id in listed) is expected, ("GET /memories", agent, policy)
            assert (cell_id in queried) is expected, ("GET /memories/query", agent, policy)
            assert (cell_id in found) is expected, ("POST /memories/search", agent, policy)


def test_patch_and_delete_answer_as_the_write_table(http: httpx.Client, uid: str) -> None:
    creator = {"X-AMP-Agent-ID": f"creator_{uid}"}
    for policy, _, writes in CELLS:
        for agent, expected in zip(fill(AGENTS, uid), writes, strict=True):
            cell_id = _create(http, uid, policy, "agent", "deploy after tests")
            h = {"X-AMP-Agent-ID": agent}
            # A non-scoring PATCH so the scoring budget never interferes.
            patched = http.patch(f"/memories/{cell_id}", headers=h,
                                 json={"lifecycle": {"status": "archived"}})
            assert patched.status_code == (200 if expected else 403), (agent, policy)
            if not expected:
                # Archive as the creator so DELETE's precondition holds for everyone.
                http.patch(f"/memories/{cell_id}", headers=creator,
                           json={"lifecycle": {"status": "archived"}})
            deleted = http.delete(f"/memories/{cell_id}", headers=h)
            assert deleted.status_code == (204 if expected else 403), (agent, policy)


# Who may change `access_policy` or `identity`: the owner (an agent) and the creator only,
# whatever the policy says. In the order of AGENTS.
MANAGE = (T, T, F, F, F, F, F, F, F, F)


def test_patch_answers_and_policy_changes_follow_the_tables(http: httpx.Client,
                                                            uid: str) -> None:
    for policy, reads, writes in CELLS:
        cell_id = _create(http, uid, policy, "agent", f"hidden{uid} note")
        stored = fill(policy, uid)
        for agent, may_read, may_write, may_manage in zip(
                fill(AGENTS, uid), reads, writes, MANAGE, strict=True):
            h = {"X-AMP-Agent-ID": agent}
            # The stored policy sent back unchanged still needs the owner or the creator.
            sent = http.patch(f"/memories/{cell_id}", headers=h,
                              json={"access_policy": stored})
            assert sent.status_code == (200 if may_manage else 403), (agent, policy)
            touched = http.patch(f"/memories/{cell_id}", headers=h,
                                 json={"content": {"metadata": {"by": agent}}})
            assert touched.status_code == (200 if may_write else 403), (agent, policy)
            if may_write and not may_read:
                assert touched.json() == {"id": cell_id}, (agent, policy)
            if may_write and may_read:
                assert touched.json()["content"]["text"] == f"hidden{uid} note"
            assert (f"hidden{uid}" in sent.text + touched.text) is (may_read and may_write
                                                                  or may_manage), agent


# -- AmpUp episodes and facts ---------------------------------------------------------------
READERS = {"ann": (["sales"], []), "bob": ([], ["admin"]), "cy": (["eng"], ["cs"]),
           "dee": ([], [])}
# The writer must read what its facts cite, so every ACL but '*' also names user:writer;
# none of the four readers holds that entry.
#                                                        ann bob cy  dee
EPISODES: list[tuple[list[str], tuple[bool, ...]]] = [
    (["*"],                                             (T,  T,  T,  T)),
    (["user:ann"],                                      (T,  F,  F,  F)),
    (["group:sales"],                                   (T,  F,  F,  F)),
    (["role:admin"],                                    (F,  T,  F,  F)),
    (["user:bob", "group:eng"],                         (F,  T,  T,  F)),
    (["group:sales", "role:admin"],                     (T,  T,  F,  F)),
    (["user:an"],                                       (F,  F,  F,  F)),  # whole ids only
    (["role:sales"],                                    (F,  F,  F,  F)),  # the kind counts
    (["group:cs", "role:eng"],                          (F,  F,  F,  F)),
]
# Facts citing two episodes: visible only to who may read both.
#                                                        ann bob cy  dee
PAIRS: list[tuple[tuple[int, int], tuple[bool, ...]]] = [
    ((1, 2),                                            (T,  F,  F,  F)),
    ((0, 4),                                            (F,  T,  T,  F)),
    ((3, 5),                                            (F,  T,  F,  F)),
    ((2, 3),                                            (F,  F,  F,  F)),
]


@pytest.fixture(scope="module")
def ampup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with serving(tmp_path_factory.mktemp("callers"), QUIET) as proc:
        writer = Memory(proc.url, "writer")
        yield writer
        writer.close()


def test_every_ampup_read_caller_answers_as_the_tables(ampup: Memory) -> None:
    scope = new_scope()
    for user, (groups, roles) in READERS.items():
        assert ampup.set_principal(user, groups=groups, roles=roles).status_code == 200
    episodes: list[str] = []
    for i, (acl, _) in enumerate(EPISODES):
        body = f"Zebra account {i} stage is s{i}."
        r = ampup.write(scope, body, acl=acl if acl == ["*"] else [*acl, "user:writer"],
                        document=f"handbook{i}")
        assert r.status_code == 201, r.text
        episodes.append(r.json()["id"])
        posted = ampup.fact(scope, f"acct{i}", "stage", f"s{i}", body, [(episodes[i], 1)])
        assert posted.status_code == 201, posted.text
    for (x, y), _ in PAIRS:
        posted = ampup.fact(scope, f"pair{x}{y}", "stage", "both",
                            f"Zebra account {x} stage is s{x}.", [(episodes[x], 1),
                                                                  (episodes[y], 1)])
        assert posted.status_code == 201, posted.text

    for r_i, user in enumerate(READERS):
        m = ampup.as_user(user)
        search = m.http.post("/search", json={"scope": scope, "query": "zebra account stage",
                                              "limit": 100})
        assert search.status_code == 200, search.text
        searched = {f["entity"] for f in search.json()["results"]}
        passages = m.http.post("/query", json={"scope": scope, "find": "passages",
                                               "query": "zebra account stage", "limit": 100})
        assert passages.status_code == 200, passages.text
        passage_eps = {p["episode"] for p in passages.json()["results"]}
        for i, (acl, reads) in enumerate(EPISODES):
            expected = reads[r_i]
            got = m.episode(scope, episodes[i])
            assert got.status_code == (200 if expected else 404), (user, acl)
            doc = m.http.post("/document", json={"scope": scope, "document": f"handbook{i}"})
            assert doc.status_code == (200 if expected else 404), (user, acl)
            facts = m.facts(scope, f"acct{i}")
            assert facts.status_code == 200, facts.text
            assert [f["value"] for f in facts.json()["facts"]] == ([f"s{i}"] if expected
                                                                   else []), (user, acl)
            assert (f"acct{i}" in searched) is expected, ("POST /search", user, acl)
            assert (episodes[i] in passage_eps) is expected, ("POST /query", user, acl)
        for (x, y), reads in PAIRS:
            expected = reads[r_i]
            facts = m.facts(scope, f"pair{x}{y}").json()["facts"]
            assert bool(facts) is expected, ("GET /facts", user, x, y)
            assert (f"pair{x}{y}" in searched) is expected, ("POST /search", user, x, y)
        m.close()


def test_membership_is_read_fresh_by_every_caller(ampup: Memory) -> None:
    """The same table row flips when the principal changes, with no episode touched."""
    scope = new_scope()
    r = ampup.write(scope, "Zebra renewal is in May.", acl=["group:ops", "user:writer"],
                    document="renewal")
    assert r.status_code == 201, r.text
    episode = r.json()["id"]
    assert ampup.fact(scope, "renewal", "month", "May", "Zebra renewal is in May.",
                      [(episode, 1)]).status_code == 201
    eve = ampup.as_user("eve")
    for groups, expected in ((["ops"], T), (["sales"], F), (["ops", "sales"], T), ([], F)):
        assert ampup.set_principal("eve", groups=groups).status_code == 200
        assert eve.episode(scope, episode).status_code == (200 if expected else 404), groups
        assert (eve.http.post("/document", json={"scope": scope, "document": "renewal"})
                .status_code == (200 if expected else 404)), groups
        assert bool(eve.facts(scope, "renewal").json()["facts"]) is expected, groups
        found = eve.http.post("/search", json={"scope": scope, "query": "zebra renewal"})
        assert bool(found.json()["results"]) is expected, groups
    eve.close()
