"""/search and /query on branches, over real HTTP, on both backends (SQLite; PostgreSQL
for the catalog, the read index and the search index).

A search on a branch reads the view GET /facts reads: main up to the fork, then the
branch's own commits (and ``at_commit`` cuts the last of them). Every answer here is
checked against GET /facts on the same view, so search and core agree on one rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ampup_memory.search.index.registry import open_index
from tests.memory_support import BACKENDS, Memory, backend_env, new_scope, serving


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[tuple[Memory, str]]:
    env = backend_env(request.param, request)
    home = tmp_path_factory.mktemp(f"search-branches-{request.param}")
    index_uri = env.get("AMPUP_MEMORY_INDEX_URI", f"sqlite:///{home / 'index.db'}")
    with serving(home, env) as proc:
        m = Memory(proc.url, "alice")
        yield m, index_uri
        m.close()


def ok(r: httpx.Response, status: int = 201) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    return body


def write(m: Memory, scope: str, body: str, branch: str = "main",
          acl: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return ok(m.http.post("/episodes", json={
        "scope": scope, "branch": branch, "source": f"doc:{abs(hash(body))}", "body": body,
        "acl": acl or ["*"], **extra}))


def fact(m: Memory, scope: str, entity: str, predicate: str, value: str, quote: str,
         episode: str, branch: str = "main") -> dict[str, Any]:
    return ok(m.http.post("/facts", json={
        "scope": scope, "branch": branch, "entity": entity, "predicate": predicate,
        "value": value, "quote": quote, "cites": [{"episode": episode, "unit": 1}]}))


def make_branch(m: Memory, scope: str, name: str, **extra: Any) -> dict[str, Any]:
    return ok(m.http.post("/branches", json={"scope": scope, "name": name, **extra}))


def search(m: Memory, scope: str, query: str, **extra: Any) -> dict[str, Any]:
    return ok(m.http.post("/search", json={"scope": scope, "query": query, "limit": 50,
                                           **extra}), 200)


def values(m: Memory, scope: str, query: str, entity: str, predicate: str,
           **extra: Any) -> list[Any]:
    return [f["value"] for f in search(m, scope, query, **extra)["results"]
            if (f["entity"], f["predicate"]) == (entity, predicate)]


def core(m: Memory, scope: str, entity: str, predicate: str, **params: Any) -> list[Any]:
    """What GET /facts answers on the same view: the rule search must agree with."""
    got = ok(m.facts(scope, entity, predicate=predicate, **params), 200)["facts"]
    return [f["value"] for f in got]


def passages(m: Memory, scope: str, query: str, **extra: Any) -> set[str]:
    r = m.http.post("/query", json={"scope": scope, "find": "passages", "query": query,
                                    "limit": 50, **extra})
    return {p["episode"] for p in ok(r, 200)["results"]}


def test_a_branch_searches_its_own_rows_over_its_base(served: tuple[Memory, str]) -> None:
    m, _ = served
    s = new_scope()
    base = write(m, s, "Acme budget is 50k. Acme plan is basic. Acme owner is Ann.")["id"]
    fact(m, s, "Acme", "budget", "50k", "Acme budget is 50k", base)
    fact(m, s, "Acme", "plan", "basic", "Acme plan is basic", base)
    make_branch(m, s, "exp")
    make_branch(m, s, "other")

    mine = write(m, s, "Acme budget is 70k. Zephyr codename is Nightjar.", "exp")["id"]
    fact(m, s, "Acme", "budget", "70k", "Acme budget is 70k", mine, "exp")
    fact(m, s, "Zephyr", "codename", "Nightjar", "Zephyr codename is Nightjar", mine, "exp")
    # a fact on the branch citing an episode of its base
    fact(m, s, "Acme", "owner", "Ann", "Acme owner is Ann", base, "exp")
    theirs = write(m, s, "Zephyr codename is Kestrel.", "other")["id"]
    fact(m, s, "Zephyr", "codename", "Kestrel", "Zephyr codename is Kestrel", theirs, "other")
    # main moves on after the fork
    later = write(m, s, "Acme plan is pro. Quasar launch is on Friday.")["id"]
    fact(m, s, "Acme", "plan", "pro", "Acme plan is pro", later)
    fact(m, s, "Quasar", "launch", "Friday", "Quasar launch is on Friday", later)

    on = {"branch": "exp"}
    # the branch's own version beats its base's; its base stays as of the fork
    assert values(m, s, "Acme budget", "Acme", "budget", **on) == ["70k"] == core(
        m, s, "Acme", "budget", **on)
    assert values(m, s, "Acme plan", "Acme", "plan", **on) == ["basic"] == core(
        m, s, "Acme", "plan", **on)
    assert values(m, s, "Acme owner", "Acme", "owner", **on) == ["Ann"]
    assert values(m, s, "Zephyr codename", "Zephyr", "codename", **on) == ["Nightjar"]
    assert values(m, s, "Quasar launch Friday", "Quasar", "launch", **on) == []
    assert passages(m, s, "Zephyr codename Nightjar", **on) >= {mine}
    assert not passages(m, s, "Quasar launch Friday", **on) & {later}
    assert theirs not in passages(m, s, "Zephyr codename Kestrel", **on)
    text = m.http.post("/search", json={"scope": s, "query": "Quasar launch Zephyr",
                                        "format": "text", "branch": "exp"}).text
    assert "Nightjar" in text and "Friday" not in text and "Kestrel" not in text

    # main sees none of the branch; the other branch only its own
    assert values(m, s, "Acme budget", "Acme", "budget") == ["50k"] == core(
        m, s, "Acme", "budget")
    assert values(m, s, "Acme plan", "Acme", "plan") == ["pro"]
    assert values(m, s, "Zephyr codename", "Zephyr", "codename") == []
    assert values(m, s, "Acme owner", "Acme", "owner") == []
    assert mine not in passages(m, s, "Zephyr codename Nightjar")
    assert values(m, s, "Zephyr codename", "Zephyr", "codename", branch="other") == [
        "Kestrel"]
    assert mine not in passages(m, s, "Zephyr codename Nightjar", branch="other")
    assert values(m, s, "Acme budget", "Acme", "budget", branch="other") == ["50k"]

    # merged, main finds what the branch wrote (and keeps its own later plan)
    ok(m.http.post("/merge", json={"scope": s, "from": "exp"}), 200)
    assert values(m, s, "Zephyr codename", "Zephyr", "codename") == ["Nightjar"]
    assert values(m, s, "Acme budget", "Acme", "budget") == ["70k"] == core(
        m, s, "Acme", "budget")
    assert values(m, s, "Acme plan", "Acme", "plan") == ["pro"]
    assert mine in passages(m, s, "Zephyr codename Nightjar")


def test_a_branch_of_a_branch_reads_its_whole_chain(served: tuple[Memory, str]) -> None:
    m, _ = served
    s = new_scope()
    base = write(m, s, "Acme budget is 50k.")["id"]
    fact(m, s, "Acme", "budget", "50k", "Acme budget is 50k", base)
    make_branch(m, s, "a")
    mid = write(m, s, "Acme region is north. Acme budget is 60k.", "a")["id"]
    fact(m, s, "Acme", "region", "north", "Acme region is north", mid, "a")
    make_branch(m, s, "a/b", **{"from": "a"})
    fact(m, s, "Acme", "budget", "60k", "Acme budget is 60k", mid, "a")  # after a/b forked
    top = write(m, s, "Acme tier is gold.", "a/b")["id"]
    fact(m, s, "Acme", "tier", "gold", "Acme tier is gold", top, "a/b")
    on = {"branch": "a/b"}
    assert values(m, s, "Acme region", "Acme", "region", **on) == ["north"]
    assert values(m, s, "Acme tier", "Acme", "tier", **on) == ["gold"]
    assert values(m, s, "Acme budget", "Acme", "budget", **on) == ["50k"] == core(
        m, s, "Acme", "budget", **on)
    assert values(m, s, "Acme budget", "Acme", "budget", branch="a") == ["60k"]
    assert passages(m, s, "Acme region north tier gold", **on) >= {mid, top}


def test_a_branch_search_follows_new_commits_and_a_branch_made_again(
        served: tuple[Memory, str]) -> None:
    """A branch's chain is read once per creation marker (``branch_segments``): a commit
    on the branch between two searches is found by the second, and a branch deleted and
    made again under its name reads from its new fork point, never its old chain. The
    values are literal: GET /facts reads its view through the same function."""
    m, _ = served
    s = new_scope()
    base = write(m, s, "Acme budget is 50k.")["id"]
    fact(m, s, "Acme", "budget", "50k", "Acme budget is 50k", base)
    make_branch(m, s, "exp")
    on = {"branch": "exp"}
    assert values(m, s, "Acme budget", "Acme", "budget", **on) == ["50k"]
    assert values(m, s, "Zephyr codename", "Zephyr", "codename", **on) == []
    mine = write(m, s, "Zephyr codename is Nightjar. Acme budget is 70k.", "exp")["id"]
    fact(m, s, "Zephyr", "codename", "Nightjar", "Zephyr codename is Nightjar", mine, "exp")
    assert values(m, s, "Zephyr codename", "Zephyr", "codename", **on) == ["Nightjar"]
    assert mine in passages(m, s, "Zephyr codename Nightjar", **on)
    fact(m, s, "Acme", "budget", "70k", "Acme budget is 70k", mine, "exp")
    assert values(m, s, "Acme budget", "Acme", "budget", **on) == ["70k"]
    later = write(m, s, "Acme budget is 90k.")["id"]  # main, after the fork
    fact(m, s, "Acme", "budget", "90k", "Acme budget is 90k", later)
    assert values(m, s, "Acme budget", "Acme", "budget", **on) == ["70k"]
    assert later not in passages(m, s, "Acme budget 90k", **on)

    ok(m.http.delete("/branches/exp", params={"scope": s}), 200)
    assert ok(m.http.post("/search", json={"scope": s, "query": "Acme", **on}),
              404)["error"]["code"] == "NOT_FOUND"
    make_branch(m, s, "exp")  # forks from main's head now
    assert values(m, s, "Acme budget", "Acme", "budget", **on) == ["90k"]
    assert values(m, s, "Zephyr codename", "Zephyr", "codename", **on) == []
    found = passages(m, s, "Acme budget 90k Zephyr Nightjar", **on)
    assert later in found and mine not in found


def test_an_acl_narrowed_on_a_branch_holds_there_only(served: tuple[Memory, str]) -> None:
    m, index_uri = served
    bob = m.as_user("bob")
    s = new_scope()
    base = write(m, s, "Acme budget is 50k.")["id"]
    fact(m, s, "Acme", "budget", "50k", "Acme budget is 50k", base)
    make_branch(m, s, "tmp")
    on = {"branch": "tmp"}
    assert values(bob, s, "Acme budget", "Acme", "budget", **on) == ["50k"]
    ok(m.http.put(f"/episodes/{base}/acl",
                  json={"scope": s, "branch": "tmp", "acl": ["user:alice"]}), 200)
    # hidden on the branch, for its facts and its passages, as GET /facts hides it
    assert values(bob, s, "Acme budget", "Acme", "budget", **on) == [] == core(
        bob, s, "Acme", "budget", **on)
    assert passages(bob, s, "Acme budget", **on) == set()
    assert values(m, s, "Acme budget", "Acme", "budget", **on) == ["50k"]
    assert passages(m, s, "Acme budget", **on) == {base}
    # main's ACL still lets bob read it on main
    assert values(bob, s, "Acme budget", "Acme", "budget") == ["50k"] == core(
        bob, s, "Acme", "budget")
    assert passages(bob, s, "Acme budget") == {base}

    # a fact the branch writes later citing it is hidden from bob as well
    more = write(m, s, "Acme budget is 65k.", "tmp")["id"]
    fact(m, s, "Acme", "owner", "Ann", "Acme budget is 50k", base, "tmp")
    assert values(bob, s, "Acme owner", "Acme", "owner", **on) == []
    assert values(m, s, "Acme owner", "Acme", "owner", **on) == ["Ann"]
    assert more in passages(bob, s, "Acme budget 65k", **on)

    # deleted and made again: the branch starts from main, its old rows gone
    index = open_index(index_uri)
    try:
        main_counts = index.counts(s)
        ok(m.http.delete("/branches/tmp", params={"scope": s}), 200)
        assert index.counts(s)["episodes"] == main_counts["episodes"] - 2
        assert index.counts(s)["facts"] == main_counts["facts"] - 1
    finally:
        index.close()
    make_branch(m, s, "tmp")
    assert values(bob, s, "Acme budget", "Acme", "budget", **on) == ["50k"] == core(
        bob, s, "Acme", "budget", **on)
    assert passages(bob, s, "Acme budget", **on) == {base}
    assert values(m, s, "Acme owner", "Acme", "owner", **on) == []
    assert more not in passages(m, s, "Acme budget 65k", **on)
    bob.close()


def test_main_narrowing_after_the_fork_holds_on_the_branch(
        served: tuple[Memory, str]) -> None:
    """The current ACL along the chain: main's later change reaches the branch (core's
    rule, readindex._current_acl), unless the branch changed it itself."""
    m, _ = served
    bob = m.as_user("bob")
    s = new_scope()
    base = write(m, s, "Acme budget is 50k.")["id"]
    fact(m, s, "Acme", "budget", "50k", "Acme budget is 50k", base)
    make_branch(m, s, "side")
    ok(m.http.put(f"/episodes/{base}/acl", json={"scope": s, "acl": ["user:alice"]}), 200)
    on = {"branch": "side"}
    assert values(bob, s, "Acme budget", "Acme", "budget", **on) == [] == core(
        bob, s, "Acme", "budget", **on)
    ok(m.http.put(f"/episodes/{base}/acl",
                  json={"scope": s, "branch": "side", "acl": ["user:bob"]}), 200)
    assert values(bob, s, "Acme budget", "Acme", "budget", **on) == ["50k"] == core(
        bob, s, "Acme", "budget", **on)
    assert passages(bob, s, "Acme budget", **on) == {base}
    assert values(bob, s, "Acme budget", "Acme", "budget") == []
    bob.close()


def test_search_at_a_commit_of_a_branch(served: tuple[Memory, str]) -> None:
    m, _ = served
    s = new_scope()
    base = write(m, s, "Acme budget is 50k.")["id"]
    fact(m, s, "Acme", "budget", "50k", "Acme budget is 50k", base)
    make_branch(m, s, "exp")
    first = write(m, s, "Acme budget is 70k.", "exp", occurred_at="2030-01-01T00:00:00Z")
    c0 = first["commit"]
    c1 = fact(m, s, "Acme", "budget", "70k", "Acme budget is 70k", first["id"], "exp")["commit"]
    second = write(m, s, "Acme budget is 80k.", "exp", occurred_at="2030-02-01T00:00:00Z")
    c2 = fact(m, s, "Acme", "budget", "80k", "Acme budget is 80k", second["id"],
              "exp")["commit"]
    fact(m, s, "Acme", "budget", "55k", "Acme budget is 50k", base)  # main, after the fork

    at = "2030-06-01T00:00:00Z"
    for commit, want in ((c0, ["50k"]), (c1, ["70k"]), (c2, ["80k"])):
        on = {"branch": "exp", "at_commit": commit, "as_of": at}
        answer = search(m, s, "Acme budget", **on)
        assert answer["at_commit"] == commit
        assert values(m, s, "Acme budget", "Acme", "budget", **on) == want == core(
            m, s, "Acme", "budget", **on)
    on = {"branch": "exp"}
    assert passages(m, s, "Acme budget", at_commit=c0, **on) == {base, first["id"]}
    assert passages(m, s, "Acme budget", at_commit=c1, **on) == {base, first["id"]}
    assert passages(m, s, "Acme budget", **on) == {base, first["id"], second["id"]}
    # a commit of main is not a commit of the branch: the 404 GET /facts gives
    main_head = m.ledger(s)[0]["id"]
    expected = m.facts(s, "Acme", branch="exp", at_commit=main_head)
    got = m.http.post("/search", json={"scope": s, "query": "Acme", "branch": "exp",
                                       "at_commit": main_head})
    assert (got.status_code, got.json()) == (expected.status_code, expected.json())
    assert got.status_code == 404
    unknown = m.http.post("/search", json={"scope": s, "query": "Acme", "branch": "nope"})
    assert (unknown.status_code, unknown.json()) == (
        404, m.facts(s, "Acme", branch="nope").json())


def _batch(m: Memory, scope: str, rows: list[tuple[str, str, str]], episode: str,
           branch: str = "main") -> str:
    """(entity, value, valid_from) facts of predicate ``status``, in one commit (its id)."""
    return str(ok(m.http.post("/facts/batch", json={"scope": scope, "branch": branch, "facts": [
        {"entity": e, "predicate": "status", "value": v, "quote": "Status report",
         "valid_from": at, "cites": [{"episode": episode, "unit": 1}]}
        for e, v, at in rows]}))["commit"])


def _ranking(m: Memory, scope: str, query: str, **extra: Any) -> list[tuple[Any, ...]]:
    got = ok(m.http.post("/search", json={"scope": scope, "query": query, "limit": 10,
                                          **extra}), 200)["results"]
    return [(f["entity"], f["predicate"], f["value"], f["score"]) for f in got]


WORDS = ("amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor",
         "indigo", "juniper", "kelp", "lagoon", "meadow")


def _value(i: int) -> str:
    """A distinct value per row (no two rows tie); ``lagoon`` in one row of three."""
    words = [WORDS[(i * 7 + j * 5) % 12] for j in range(1 + i % 4)]
    return " ".join([*words, "lagoon"] if i % 3 == 0 else words) + f" {i}"


def test_a_branch_ranks_as_a_main_holding_exactly_its_view(
        served: tuple[Memory, str]) -> None:
    """A branch's view is one space: a search on it answers what the same search answers
    on a scope whose main holds exactly the rows the branch sees (values and scores),
    not the k best of each segment side by side (k = 50 here)."""
    m, _ = served
    body = "Status report for the quarter."
    # 60 facts on main valid late in 2023, 5 on the branch valid early in 2023 (whose
    # entities sort first), 3 on main after the fork, valid later still.
    base = [(f"zz-base-{i:02}", _value(i), f"2023-12-{1 + i % 28:02}T{i % 24:02}:00:00Z")
            for i in range(60)]
    own = [(f"aa-own-{i}", _value(60 + i), f"2023-01-0{1 + i}T00:00:00Z")
           for i in range(5)]
    after = [(f"mm-after-{i}", _value(70 + i), f"2023-12-31T1{i}:00:00Z") for i in range(3)]

    s = new_scope()
    ep = write(m, s, body)["id"]
    _batch(m, s, base, ep)
    make_branch(m, s, "exp")
    head = _batch(m, s, own, ep, "exp")
    _batch(m, s, after, ep)

    ref = new_scope()  # main holds exactly what exp sees
    ep_ref = write(m, ref, body)["id"]
    _batch(m, ref, base, ep_ref)
    _batch(m, ref, own, ep_ref)

    # A window alone: the candidates are the 50 facts valid in it most recently, of the
    # view's rows (main's rows after the fork are not the view's). Then meaning alone
    # (no fact holds the words): the 50 nearest.
    # Not words: BM25 (both backends) scores the view's rows with the view's statistics,
    # which on a plain branch search count main's rows after the fork too
    # (docs/search.md, "Scores across segments").
    queries = ["in 2023", "quokka wombat"]
    words = ["lagoon cobalt", "lagoon in 2023"]
    for query in queries:
        want = _ranking(m, ref, query)
        assert want, query
        assert _ranking(m, s, query, branch="exp") == want, query
    # Held at the branch's head, the view's rows are exactly ref's main: word scores
    # match on both backends (BM25 with the view's statistics, the branch's rows and
    # main's up to the fork counted together).
    for query in words:
        assert _ranking(m, s, query, branch="exp", at_commit=head) == _ranking(
            m, ref, query), query
    # Main's ranking is its own: the branch's rows are not in it.
    assert not any(e.startswith("aa-own") for e, *_ in _ranking(m, s, "in 2023"))


FILLER = ("pricing", "roadmap", "invoice", "training", "outage", "forecast", "quota",
          "onboarding", "escalation", "procurement", "renewal", "champion")


def _keyword_parts(m: Memory, scope: str, query: str, **on: Any
                   ) -> tuple[dict[str, float], dict[str, float]]:
    """The keyword part of each fact (by value) and of each passage (by episode)."""
    facts = search(m, scope, query, **on)["results"]
    found = ok(m.http.post("/query", json={"scope": scope, "find": "passages",
                                           "query": query, "limit": 50, **on}), 200)
    return ({f["value"]: f["parts"]["keyword"] for f in facts},
            {p["episode"]: p["parts"]["keyword"] for p in found["results"]})


def test_a_branch_exact_match_wins_the_keyword_side_over_its_base(
        served: tuple[Memory, str]) -> None:
    """A branch's rows are scored with the view's keyword statistics, not those of the
    branch's own few rows: on a branch of one episode every word is in all its rows, and
    its own statistics gave each word a weight near zero, so the branch's exact match
    lost the keyword side to a base row sharing one word (docs/search.md)."""
    m, _ = served
    s = new_scope()
    for i in range(24):  # main's many rows, none holding a query word
        words = " ".join(FILLER[(i + j) % len(FILLER)] for j in range(5))
        ep = write(m, s, f"Account{i} review: {words}.")["id"]
        fact(m, s, f"Account{i}", "topic", words, f"Account{i} review: {words}", ep)
    near = write(m, s, "Calder bridge repairs start in spring.")["id"]  # one query word
    fact(m, s, "Calder bridge", "repairs", "spring", "Calder bridge repairs start in spring",
         near)
    make_branch(m, s, "field")
    mine = write(m, s, "Osprey nests at Calder marsh.", "field")
    head = fact(m, s, "Osprey", "nests_at", "Calder marsh", "Osprey nests at Calder marsh",
                mine["id"], "field")["commit"]
    query = "Osprey nests at Calder marsh"
    for on in ({"branch": "field"},
               {"branch": "field", "at_commit": head}):
        facts, passages = _keyword_parts(m, s, query, **on)
        assert facts["Calder marsh"] == 1.0 > facts["spring"], (on, facts)
        assert passages[mine["id"]] == 1.0 > passages[near], (on, passages)
    # Main's own search is unchanged by the branch: its row there keeps the whole side.
    facts, passages = _keyword_parts(m, s, query)
    assert facts["spring"] == 1.0
    assert "Calder marsh" not in facts and mine["id"] not in passages
