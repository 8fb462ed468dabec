"""/search and /query over real HTTP against a real server process.

Most tests fill the index through the engine; the ``at_commit`` tests write through the
AmpUp API on both index backends. Everything asserted here is read back over HTTP from
`ampup-memory serve`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import DocumentBatch
from ampup_memory.search.index.registry import open_index
from tests.memory_support import BACKENDS, Memory, backend_env, new_scope, run_cli, serving
from tests.search_docs import episode, fact
from tests.server_process import ServerProcess

S = "acme/sales"
SECRET = "Umbrella acquisition codename Nightjar"


def _fill(home: Path) -> None:
    index = open_index(f"sqlite:///{home / 'index.db'}")
    engine = SearchEngine(index, WordLlamaEmbedder())
    engine.ensure_model()
    call = episode(S, ["Ann: Acme budget for the pilot is 40k.",
                       "Raj: Acme wants the pilot to start in May.",
                       "Ann: Acme also asked about single sign-on support."], ["*"],
                   occurred="2025-03-04")
    mail = episode(S, ["Acme legal approved the security review."], ["group:sales"],
                   kind="message", occurred="2025-03-20", source="gmail:t1")
    hidden = episode(S, [f"{SECRET}: Acme budget frozen by the board."], ["user:bob"],
                     kind="paragraph", occurred="2025-03-25", source="doc:memo")
    engine.ingest(DocumentBatch([call, mail, hidden], [
        fact(call, "Acme", "budget", '"40k"', "Acme budget for the pilot is 40k.", unit=1,
             valid_from="2025-03-04"),
        fact(call, "Acme", "pilot_start", '"May"', "Acme wants the pilot to start in May.",
             unit=2, valid_from="2025-03-04"),
        fact(mail, "Acme", "security_review", '"approved"',
             "Acme legal approved the security review.", valid_from="2025-03-20"),
        fact(hidden, "Acme", "budget", '"frozen"', f"{SECRET}: Acme budget frozen by the board.",
             valid_from="2025-03-25", seq=2),
        fact([call, hidden], "Umbrella", "codename", '"Nightjar"', SECRET, unit=1,
             valid_from="2025-03-25", seq=2),
    ]))
    index.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("search-home")
    _fill(home)
    with ServerProcess(home) as proc:
        yield proc


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def as_user(user: str) -> dict[str, str]:
    return {"X-AmpUp-User": user}


def test_json_answer_has_scores_and_parts(api: httpx.Client) -> None:
    r = api.post("/search", json={"scope": S, "query": "Acme budget"}, headers=as_user("ann"))
    assert r.status_code == 200, r.text
    body = r.json()
    top = body["results"][0]
    assert (top["entity"], top["predicate"], top["value"]) == ("Acme", "budget", "40k")
    for res in body["results"]:
        p = res["parts"]
        assert set(p) == {"keyword", "meaning", "time"}
        assert 0 <= p["keyword"] <= 1 and 0 <= p["meaning"] <= 1
        assert res["score"] == pytest.approx(0.6 * p["keyword"] + 0.4 * p["meaning"] + p["time"],
                                             abs=1e-5)
    assert SECRET not in r.text and "frozen" not in r.text


def test_each_user_sees_exactly_what_its_entries_allow(api: httpx.Client) -> None:
    def facts(user: str) -> set[tuple[str, str]]:
        r = api.post("/search", json={"scope": S, "query": "Acme budget review codename",
                                      "limit": 50}, headers=as_user(user))
        assert r.status_code == 200, r.text
        return {(f["predicate"], str(f["value"])) for f in r.json()["results"]}

    ann = facts("ann")  # no groups: '*' only
    assert ("budget", "40k") in ann and ("security_review", "approved") not in ann
    bob = facts("bob")  # user:bob sees the memo: its newer budget wins for him
    assert ("budget", "frozen") in bob and ("budget", "40k") not in bob
    assert ("codename", "Nightjar") in bob


def test_text_answer_groups_cites_and_leaks_nothing(api: httpx.Client) -> None:
    r = api.post("/search", json={"scope": S, "query": "Acme pilot budget sign-on",
                                  "format": "text"}, headers=as_user("ann"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    lines = text.strip().splitlines()
    assert lines[0] == "Acme"
    assert re.search(r'- budget: "40k" .*\[e1 t1\]', text)
    assert re.search(r'- pilot_start: "May" .*\[e1 t2\]', text)
    # the third turn is matching source text no fact cites: quoted with its own label
    assert re.search(r'\[e1 t3\] "Ann: Acme also asked about single sign-on support\."', text)
    assert lines[-1].startswith("episodes: ") and len(lines[-1].split()) == 2
    for leak in (SECRET, "Nightjar", "frozen", "Umbrella", "[e2", "memo"):
        assert leak not in text


def test_json_answer_has_the_text_answers_uncited_source_text(api: httpx.Client) -> None:
    """JSON ``sources`` is the text answer's "source text no fact cites", same order and
    quotes, with episode ids instead of labels, and nothing the caller may not read."""
    for user, query in (("ann", "Acme pilot budget sign-on"), ("bob", "Acme budget board"),
                        ("ann", "single sign-on support")):
        body = {"scope": S, "query": query}
        got = api.post("/search", json=body, headers=as_user(user))
        text = api.post("/search", json={**body, "format": "text"}, headers=as_user(user)).text
        assert got.status_code == 200, got.text
        sources = got.json()["sources"]
        lines = text.strip().splitlines()
        episodes = lines[-1].split()[1:]
        quoted = lines[lines.index("source text no fact cites:") + 1:-1]
        assert quoted, text
        expected = []
        for line in quoted:
            m = re.fullmatch(r'  \[e(\d+) (\w)(\d+)\] "(.*)"', line)
            assert m, line
            expected.append((episodes[int(m[1]) - 1], int(m[3]), m[2], m[4]))
        assert [(q["episode"], q["unit"], q["kind"][0], q["text"]) for q in sources] == expected
        for q in sources:
            assert q["source"] and q["occurred_at"].endswith("Z")
        if user == "ann":
            assert SECRET not in got.text and "memo" not in got.text


def test_passages_follow_the_episode_acl(api: httpx.Client) -> None:
    def texts(user: str) -> list[str]:
        r = api.post("/query", json={"scope": S, "find": "passages", "query": "Acme budget"},
                     headers=as_user(user))
        assert r.status_code == 200, r.text
        return [p["text"] for p in r.json()["results"]]

    assert not any(SECRET in t for t in texts("ann"))
    assert any(SECRET in t for t in texts("bob"))
    first = api.post("/query", json={"scope": S, "find": "passages", "query": "single sign-on",
                                     "limit": 1}, headers=as_user("ann")).json()["results"]
    assert len(first) == 1 and first[0]["units"][2]["kind"] == "turn"


def test_a_named_window_ranks_its_facts_first(api: httpx.Client) -> None:
    r = api.post("/search", json={"scope": S, "query": "Acme on 2025-03-20"},
                 headers=as_user("ann"))
    body = r.json()
    assert body["window"]["start"] == "2025-03-20T00:00:00Z"
    # ann sees two current Acme facts stated on March 4; none holds only on the 20th for her,
    # but both hold through it, so both are boosted; the group-only review is not hers
    assert all(f["parts"]["time"] == 1.0 for f in body["results"] if f["entity"] == "Acme")


def test_since_a_month_runs_to_today(api: httpx.Client) -> None:
    """"since March 2025" is March until now: the review approved on the 20th and the
    budget stated on the 4th both still hold today, so both are in the window, which ends
    after today rather than on April 1st."""
    body = api.post("/search", json={"scope": S, "query": "Acme since March 2025"},
                    headers=as_user("ann")).json()
    assert body["window"]["start"] == "2025-03-01T00:00:00Z", body["window"]
    assert body["window"]["end"] > datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), body
    assert body["results"] and all(f["parts"]["time"] == 1.0 for f in body["results"])


def test_bad_requests_are_422_and_identity_comes_first(api: httpx.Client) -> None:
    r = api.post("/search", json={"scope": "Acme Sales", "query": "x"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "MISSING_USER"
    for body in ({"scope": "Acme Sales", "query": "x"}, {"scope": S, "query": ""},
                 {"scope": S, "query": "x", "limit": 101}, {"scope": S, "query": "x", "tz": "Nope"},
                 {"scope": S, "find": "cells", "query": "x"}):
        path = "/query" if "find" in body else "/search"
        r = api.post(path, json=body, headers=as_user("ann"))
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR"
    r = api.post("/query", json={"scope": S, "find": "passages", "query": "Acme",
                                 "limit": 100}, headers=as_user("ann"))
    assert r.status_code == 200
    # Any find that is none of the three is the one 422 naming them, whatever its type.
    for find in ("cells", 1, None, ["facts"]):
        r = api.post("/query", json={"scope": S, "find": find, "query": "x"},
                     headers=as_user("ann"))
        assert r.status_code == 422, (find, r.text)
        assert r.json()["error"]["details"]["errors"] == [{
            "loc": ["body", "find"], "msg": "find is one of: passages, facts, entities",
            "type": "literal_error"}], (find, r.text)
    # Dates at the edge of the calendar are words, not a 500 (found by an audit).
    for path, extra in (("/search", {}), ("/query", {"find": "passages"})):
        for query, tz in (("price 9999-12-31", None), ("price 0001-01-01", "Asia/Tokyo")):
            r = api.post(path, json={"scope": S, "query": query, **extra,
                                     **({"tz": tz} if tz else {})}, headers=as_user("ann"))
            assert r.status_code == 200, (path, query, r.text)


def test_a_blank_query_is_refused_as_every_blank_text_is(api: httpx.Client) -> None:
    """A query of white space alone answered 200 with nothing (a template whose variable
    came out empty looked like a search that found nothing), where AMP's search query, an
    advice task and an entity are 422 `string_blank`; the published pattern says so."""
    for path, extra in (("/search", {}), ("/query", {"find": "passages"})):
        for blank in (" ", "\t\n", "\u3000"):
            r = api.post(path, json={"scope": S, "query": blank, **extra},
                         headers=as_user("ann"))
            assert r.status_code == 422, (path, blank, r.text)
            [problem] = r.json()["error"]["details"]["errors"]
            assert (problem["loc"], problem["type"]) == (["body", "query"], "string_blank")


def test_a_query_that_matches_nothing_answers_nothing(api: httpx.Client) -> None:
    """No shared word, no meaning, no window: no result, rather than every fact at 0."""
    for path, extra in (("/search", {}), ("/query", {"find": "passages"})):
        r = api.post(path, json={"scope": S, "query": "zzzzqqq", **extra},
                     headers=as_user("ann"))
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["results"] == [], answer
    text = api.post("/search", json={"scope": S, "query": "zzzzqqq", "format": "text"},
                    headers=as_user("ann")).text
    assert "Acme" not in text


# -- search as of a commit (both index backends, written through the API) -----------------


@pytest.fixture(scope="module", params=BACKENDS)
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[Memory, Path, dict[str, str]]]:
    env = backend_env(request.param, request)
    home = tmp_path_factory.mktemp(f"search-commit-{request.param}")
    with serving(home, env) as proc:
        m = Memory(proc.url, "alice")
        yield m, home, env
        m.close()


def _ok(r: httpx.Response, status: int = 201) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    return body


def _search(m: Memory, scope: str, query: str = "Acme budget", **extra: Any
            ) -> dict[str, Any]:
    return _ok(m.http.post("/search", json={"scope": scope, "query": query, "limit": 50,
                                            **extra}), 200)


def _budgets(answer: dict[str, Any]) -> list[tuple[str, Any, str | None]]:
    return sorted((f["id"], f["value"], f["valid_to"]) for f in answer["results"]
                  if (f["entity"], f["predicate"]) == ("Acme", "budget"))


def _facts_at(m: Memory, scope: str, **params: Any) -> list[tuple[str, Any, str | None]]:
    got = _ok(m.facts(scope, "Acme", predicate="budget", **params), 200)["facts"]
    return sorted((f["id"], f["value"], f["valid_to"]) for f in got)


def _episodes(m: Memory, scope: str, **extra: Any) -> set[str]:
    r = m.http.post("/query", json={"scope": scope, "find": "passages",
                                    "query": "Acme budget pilot", "limit": 50, **extra})
    return {p["episode"] for p in _ok(r, 200)["results"]}


def test_search_at_a_commit_sees_what_that_commit_left(
        written: tuple[Memory, Path, dict[str, str]]) -> None:
    m, _, _ = written
    s = new_scope()
    w1 = _ok(m.write(s, "Acme budget for the pilot is 40k.",
                     occurred_at="2025-01-10T00:00:00Z"))
    e1, c0 = w1["id"], w1["commit"]
    v1 = _ok(m.fact(s, "Acme", "budget", "40k", "Acme budget for the pilot is 40k.",
                    [(e1, 1)]))
    c1 = v1["commit"]
    e2 = _ok(m.write(s, "Acme budget was raised to 55k for the pilot.",
                     occurred_at="2025-06-01T00:00:00Z"))["id"]
    v2 = _ok(m.fact(s, "Acme", "budget", "55k", "Acme budget was raised to 55k", [(e2, 1)]))
    c2 = v2["commit"]
    e3 = _ok(m.write(s, "Acme pilot budget review moved to Friday."))["id"]

    assert _budgets(_search(m, s)) == [(v2["id"], "55k", None)]
    at1 = _search(m, s, at_commit=c1)
    assert at1["at_commit"] == c1 and _search(m, s)["at_commit"] is None
    # v1 is current as of c1, and nothing ends it yet: v2 was not committed
    assert _budgets(at1) == [(v1["id"], "40k", None)] == _facts_at(m, s, at_commit=c1)
    assert _budgets(_search(m, s, at_commit=c0)) == [] == _facts_at(m, s, at_commit=c0)
    # the time window applies on top: valid time March 2025, as of c2, is v1 ending in June
    march = "2025-03-01T00:00:00Z"
    assert _budgets(_search(m, s, at_commit=c2, as_of=march)) == [
        (v1["id"], "40k", "2025-06-01T00:00:00Z")] == _facts_at(m, s, at_commit=c2, as_of=march)

    assert _episodes(m, s, at_commit=c0) == {e1} == _episodes(m, s, at_commit=c1)
    assert _episodes(m, s, at_commit=c2) == {e1, e2}
    assert _episodes(m, s) == {e1, e2, e3}

    r = m.http.post("/search", json={"scope": s, "query": "Acme budget pilot review",
                                     "format": "text", "at_commit": c1})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert '- budget: "40k"' in r.text
    for later in ("55k", "Friday", e2, e3):
        assert later not in r.text
    assert r.text.strip().splitlines()[-1] == f"episodes: {e1}"

    # a closure counts only from its commit on
    closed = _ok(m.http.post("/close", json={"scope": s, "entity": "Acme",
                                             "predicate": "budget", "reason": "Pilot lost."}))
    assert _budgets(_search(m, s)) == [] == _facts_at(m, s)
    assert _budgets(_search(m, s, at_commit=closed["commit"])) == []
    assert _budgets(_search(m, s, at_commit=c2)) == [(v2["id"], "55k", None)]


def test_a_scope_of_documents_only_answers_json_with_its_source_text(
        written: tuple[Memory, Path, dict[str, str]]) -> None:
    """No fact yet, only loaded text: JSON used to answer ``"results": []`` while the
    text answer quoted the source; now both show it, under the same rules."""
    m, _, _ = written
    bob = m.as_user("bob")
    s = new_scope()
    first = _ok(m.write(s, "Hooli picked the Denver office for the pilot.\n\n"
                           "Lunch is at noon.", source="doc:notes.md"))
    mine = _ok(m.write(s, "Hooli budget for Denver is private.", acl=["user:alice"],
                       source="doc:private.md"))
    answer = _search(m, s, "Where is the Hooli pilot? Denver office")
    assert answer["results"] == []
    found = [(q["episode"], q["unit"]) for q in answer["sources"]]
    assert (first["id"], 1) in found and (mine["id"], 1) in found
    assert (first["id"], 2) not in found  # a unit that does not match is not quoted
    quote = next(q for q in answer["sources"] if q["episode"] == first["id"])
    assert quote == {"episode": first["id"], "unit": 1, "kind": "paragraph",
                     "text": "Hooli picked the Denver office for the pilot.",
                     "source": "doc:notes.md", "occurred_at": quote["occurred_at"]}
    text = m.http.post("/search", json={"scope": s, "format": "text", "limit": 50,
                                        "query": "Where is the Hooli pilot? Denver office"}).text
    assert "Hooli picked the Denver office for the pilot." in text
    # bob may read only the first document; as of its commit, the second did not exist
    assert {q["episode"] for q in _search(bob, s, "Hooli Denver")["sources"]} == {first["id"]}
    early = _search(m, s, "Hooli Denver", at_commit=first["commit"])
    assert {q["episode"] for q in early["sources"]} == {first["id"]}
    bob.close()


def test_search_at_a_commit_uses_the_current_acl(
        written: tuple[Memory, Path, dict[str, str]]) -> None:
    m, _, _ = written
    bob = m.as_user("bob")
    s = new_scope()
    e1 = _ok(m.write(s, "Acme budget for the pilot is 40k."))["id"]
    c1 = _ok(m.fact(s, "Acme", "budget", "40k", "budget for the pilot is 40k",
                    [(e1, 1)]))["commit"]
    assert _budgets(_search(bob, s, at_commit=c1)) != []
    _ok(m.http.put(f"/episodes/{e1}/acl", json={"scope": s, "acl": ["user:alice"]}), 200)
    # One rule on every read path: today's ACL decides, as of any commit
    assert bob.episode(s, e1, at_commit=c1).status_code == 404
    assert _facts_at(bob, s, at_commit=c1) == []
    assert _budgets(_search(bob, s, at_commit=c1)) == []
    assert _episodes(bob, s, at_commit=c1) == set()
    assert _budgets(_search(m, s, at_commit=c1)) != [] and _episodes(m, s, at_commit=c1) == {e1}
    bob.close()


def test_a_commit_of_another_process_is_searched_once_caught_up(
        written: tuple[Memory, Path, dict[str, str]], tmp_path: Path) -> None:
    m, home, env = written
    s = new_scope()
    _ok(m.write(s, "Acme budget for the pilot is 40k."))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "notes.md").write_text("Hooli picked the Denver office for the pilot.\n")
    done = run_cli(home, env, "load", str(corpus), "--scope", s, "--acl", "*")
    assert done.returncode == 0, done.stderr
    head = m.ledger(s)[0]["id"]  # the CLI's commit: this server has not fed it yet
    r = m.http.post("/query", json={"scope": s, "find": "passages", "query": "Hooli Denver",
                                    "at_commit": head})
    assert any("Denver" in p["text"] for p in _ok(r, 200)["results"])


def test_an_unknown_commit_is_the_error_get_facts_gives(
        written: tuple[Memory, Path, dict[str, str]]) -> None:
    m, _, _ = written
    s, other = new_scope(), new_scope()
    _ok(m.write(s, "Acme budget for the pilot is 40k."))
    foreign = _ok(m.write(other, "elsewhere"))["commit"]
    for bad in ("01" + "0" * 24, foreign, "no such commit; DROP TABLE x"):
        expected = m.facts(s, "Acme", at_commit=bad)
        assert expected.status_code == 404 and expected.json()["error"]["code"] == "NOT_FOUND"
        for path, body in (("/search", {"query": "Acme"}),
                           ("/search", {"query": "Acme", "format": "text"}),
                           ("/query", {"find": "passages", "query": "Acme"})):
            got = m.http.post(path, json={"scope": s, "at_commit": bad, **body})
            assert (got.status_code, got.json()) == (404, expected.json()), (path, bad)


def test_a_date_in_a_fact_query_matches_the_date_words_as_well_as_the_window(
        written: tuple[Memory, Path, dict[str, str]]) -> None:
    """"Which deal closes on 2025-11-20?" names a window (every deal below is valid on
    that day) and the date words: the deal whose value is that date ranks first. When the
    date was a window only, the query's words were "deal closes", which the two other
    deals match better (their entity says "deal")."""
    m, _, _ = written
    s = new_scope()
    deals = [("Hooli data migration", "2025-11-20", "The Hooli data migration closes on"
              " 2025-11-20."),
             ("Initech platform deal", "2025-06-30", "The Initech platform deal closes"
              " on 2025-06-30."),
             ("Acme expansion deal", "2026-01-15", "The Acme expansion deal closes on"
              " 2026-01-15.")]
    ids = {}
    for entity, value, quote in deals:
        e = _ok(m.write(s, quote, occurred_at="2025-01-10T00:00:00Z"))["id"]
        ids[entity] = _ok(m.fact(s, entity, "close_date", value, quote, [(e, 1)],
                                 valid_from="2025-01-10T00:00:00Z"))["id"]
    answer = _search(m, s, "Which deal closes on 2025-11-20?")
    assert answer["window"]["start"].startswith("2025-11-20"), answer
    assert [f["id"] for f in answer["results"]][:1] == [ids["Hooli data migration"]], answer
    # the same date written in words finds it too (its ISO numbers are query words)
    answer = _search(m, s, "Which deal closes on 20 November 2025?")
    assert [f["id"] for f in answer["results"]][:1] == [ids["Hooli data migration"]], answer


def test_how_many_asks_for_a_count_and_many_is_not_a_query_word(
        written: tuple[Memory, Path, dict[str, str]]) -> None:
    """"How many kits …?": the word "many" is the question's form, not its subject, so a
    passage that says "many" three times no longer outranks the one about the kits
    (`POST /query`; facts and AMP cells read the query's words the same way)."""
    m, _, _ = written
    s = new_scope()
    kits = _ok(m.write(s, "I finished two model kits this spring: a Spitfire and a Tiger"
                          " tank, both in the scale I like best for a shelf."))["id"]
    many = _ok(m.write(s, "Many shops sell many kinds of paint, and many brushes."))["id"]
    for filler in ("The weather was mild all week.", "We talked about the office move."):
        _ok(m.write(s, filler))
    r = m.http.post("/query", json={"scope": s, "find": "passages",
                                    "query": "How many kits?", "limit": 5})
    answer = _ok(r, 200)
    assert [p["episode"] for p in answer["results"]][:1] == [kits], answer
    assert many not in [p["episode"] for p in answer["results"]
                        if p["parts"]["keyword"] > 0], answer
