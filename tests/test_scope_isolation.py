"""Scopes do not influence each other's scores, over real HTTP, on both index backends.

The auditor's case: bob asks ``zebra apple`` in scope A; then alice writes hundreds of
private "zebra" episodes and facts into scope B. Keyword statistics (document count,
average length, how many documents hold "zebra") must be scope A's alone, so bob's
answers in A stay exactly the same: same order, same floats.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.memory_support import BACKENDS, Memory, backend_env, new_scope, serving

A_BODIES = [
    "zebra apple orchard",
    "apple orchard",
    "The apple orchard by the river grows six kinds of apple.",
    "Orchard tools are stored in the barn.",
]
QUERIES = ["zebra apple", "apple orchard", "zebra", "orchard barn tools"]


@pytest.fixture(scope="module", params=BACKENDS)
def alice(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[Memory]:
    env = backend_env(request.param, request)
    home = tmp_path_factory.mktemp(f"isolation-{request.param}")
    with serving(home, env) as proc:
        m = Memory(proc.url, "alice")
        yield m
        m.close()


def _answers(bob: Memory, scope: str) -> list[Any]:
    out: list[Any] = []
    for q in QUERIES:
        r = bob.http.post("/query", json={"scope": scope, "find": "passages", "query": q,
                                          "limit": 20})
        assert r.status_code == 200, r.text
        out.append(r.json())
        r = bob.http.post("/search", json={"scope": scope, "query": q, "limit": 20,
                                           "as_of": "2100-01-01T00:00:00Z"})
        assert r.status_code == 200, r.text
        out.append(r.json())
        r = bob.http.post("/search", json={"scope": scope, "query": q, "format": "text",
                                           "as_of": "2100-01-01T00:00:00Z"})
        assert r.status_code == 200, r.text
        out.append(r.text)
    return out


def _fill_a(alice: Memory, scope: str) -> None:
    r = alice.http.post("/episodes/batch", json={"scope": scope, "episodes": [
        {"source": f"doc:a{i}", "body": body, "acl": ["*"]} for i, body in enumerate(A_BODIES)]})
    assert r.status_code == 201, r.text
    ids = [e["id"] for e in r.json()["episodes"]]
    r = alice.http.post("/facts/batch", json={"scope": scope, "facts": [
        {"entity": "Zebra apple", "predicate": "grows_in", "value": "orchard",
         "quote": A_BODIES[0], "cites": [{"episode": ids[0], "unit": 1}]},
        {"entity": "Apple", "predicate": "grows_in", "value": "orchard",
         "quote": A_BODIES[1], "cites": [{"episode": ids[1], "unit": 1}]},
        {"entity": "Orchard", "predicate": "kinds_of_apple", "value": "six",
         "quote": A_BODIES[2], "cites": [{"episode": ids[2], "unit": 1}]},
    ]})
    assert r.status_code == 201, r.text


def _flood_b(alice: Memory, scope: str) -> None:
    """Hundreds of private zebra episodes and facts in B, in batches and one at a time."""
    for start in (0, 100, 200):
        r = alice.http.post("/episodes/batch", json={"scope": scope, "episodes": [
            {"source": f"doc:z{n}", "body": f"zebra number {n}", "acl": ["user:alice"]}
            for n in range(start, start + 100)]})
        assert r.status_code == 201, r.text
        ids = [e["id"] for e in r.json()["episodes"]]
        r = alice.http.post("/facts/batch", json={"scope": scope, "facts": [
            {"entity": f"Zebra {n}", "predicate": "number", "value": str(n),
             "quote": f"zebra number {n}", "cites": [{"episode": ep, "unit": 1}]}
            for n, ep in zip(range(start, start + 100), ids, strict=True)]})
        assert r.status_code == 201, r.text
    for n in range(300, 310):  # single commits too: each grows the index on its own
        r = alice.write(scope, f"zebra apple zebra apple orchard {n}", ["user:alice"],
                        source=f"doc:z{n}")
        assert r.status_code == 201, r.text


def test_writes_to_one_scope_leave_every_score_of_another_unchanged(alice: Memory) -> None:
    a, b = new_scope(), new_scope()
    _fill_a(alice, a)
    bob = alice.as_user("bob")
    before = _answers(bob, a)
    passages = before[0]["results"]
    # the auditor's order: both words beat one word
    assert passages[0]["text"] == "zebra apple orchard"
    assert passages[0]["parts"]["keyword"] == 1.0 > passages[1]["parts"]["keyword"] > 0
    assert "apple orchard" in [p["text"] for p in passages[1:]]
    facts = before[1]["results"]
    assert facts[0]["entity"] == "Zebra apple"

    _flood_b(alice, b)
    # alice's flood is in B: visible to her there, so it really is indexed
    r = alice.http.post("/query", json={"scope": b, "find": "passages", "query": "zebra",
                                        "limit": 5})
    assert r.status_code == 200 and len(r.json()["results"]) == 5, r.text

    after = _answers(bob, a)
    assert after == before  # every float, every order, the text answer byte for byte
    bob.close()
