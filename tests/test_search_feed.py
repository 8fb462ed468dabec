"""The search index is fed from core's commits, over real HTTP against real servers.

Writes go through the AmpUp API (and the CLI); every answer is read back from /search
and /query. Nothing here fills the index directly.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import (
    QUIET,
    Memory,
    bar_line,
    cli_in_process,
    new_scope,
    run_cli,
    serving,
)

ENV = {**QUIET, "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "1"}
SECRET = "Umbrella acquisition codename Nightjar"


def search(m: Memory, scope: str, query: str, **extra: Any) -> httpx.Response:
    r = m.http.post("/search", json={"scope": scope, "query": query, "limit": 50, **extra})
    assert r.status_code == 200, r.text
    return r


def facts(m: Memory, scope: str, query: str) -> set[tuple[str, str, Any]]:
    return {(f["entity"], f["predicate"], f["value"])
            for f in search(m, scope, query).json()["results"]}


def passages(m: Memory, scope: str, query: str) -> list[str]:
    r = m.http.post("/query", json={"scope": scope, "find": "passages", "query": query,
                                    "limit": 50})
    assert r.status_code == 200, r.text
    return [p["text"] for p in r.json()["results"]]


def write(m: Memory, scope: str, body: str, acl: list[str]) -> str:
    r = m.write(scope, body, acl)
    assert r.status_code == 201, r.text
    episode_id: str = r.json()["id"]
    return episode_id


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def alice(home: Path) -> Iterator[Memory]:
    with serving(home, ENV) as proc:
        m = Memory(proc.url, "alice")
        yield m
        m.close()


def test_every_write_is_searchable_when_it_returns(alice: Memory) -> None:
    s = new_scope()
    ep = write(alice, s, "Acme budget for the pilot is 40k.", ["*"])
    assert any("40k" in t for t in passages(alice, s, "Acme budget"))
    r = alice.fact(s, "Acme", "budget", "40k", "Acme budget for the pilot is 40k.", [(ep, 1)])
    assert r.status_code == 201, r.text
    assert ("Acme", "budget", "40k") in facts(alice, s, "Acme budget")

    batch = alice.http.post("/episodes/batch", json={"scope": s, "episodes": [
        {"source": "doc:a", "body": "Initech renewal is due in June.", "acl": ["*"]},
        {"source": "doc:b", "body": "Globex churn risk is high.", "acl": ["*"]}]})
    assert batch.status_code == 201, batch.text
    ids = [e["id"] for e in batch.json()["episodes"]]
    assert any("Globex" in t for t in passages(alice, s, "Globex churn"))
    r = alice.http.post("/facts/batch", json={"scope": s, "facts": [
        {"entity": "Initech", "predicate": "renewal", "value": "June",
         "quote": "Initech renewal is due in June.", "cites": [{"episode": ids[0], "unit": 1}]},
        {"entity": "Globex", "predicate": "churn_risk", "value": "high",
         "quote": "Globex churn risk is high.", "cites": [{"episode": ids[1], "unit": 1}]}]})
    assert r.status_code == 201, r.text
    found = facts(alice, s, "Initech renewal Globex churn")
    assert {("Initech", "renewal", "June"), ("Globex", "churn_risk", "high")} <= found

    # closing a value: the next search no longer ranks it (it is not current)
    r = alice.http.post("/close", json={"scope": s, "entity": "Globex",
                                        "predicate": "churn_risk", "reason": "Deal signed."})
    assert r.status_code == 201, r.text
    assert ("Globex", "churn_risk", "high") not in facts(alice, s, "Globex churn")

    # an ACL change moves the episode out of sight at once, facts and passages alike
    r = alice.http.put(f"/episodes/{ep}/acl", json={"scope": s, "acl": ["user:bob"]})
    assert r.status_code == 200, r.text
    assert ("Acme", "budget", "40k") not in facts(alice, s, "Acme budget")
    assert not any("40k" in t for t in passages(alice, s, "Acme budget"))
    bob = alice.as_user("bob")
    assert ("Acme", "budget", "40k") in facts(bob, s, "Acme budget")
    bob.close()


def test_cli_load_and_other_processes_are_searchable(home: Path, alice: Memory,
                                                      tmp_path: Path) -> None:
    s = new_scope()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "notes.md").write_text("Hooli picked the Denver office for the offsite.\n")
    done = run_cli(home, ENV, "load", str(corpus), "--scope", s, "--acl", "*")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["created"] == 1
    # written by another process: the search of this scope catches up first
    assert any("Denver" in t for t in passages(alice, s, "Hooli offsite"))


QUERIES = ["Acme budget", "Initech renewal June", "pilot", "alpha bravo", "bravo charlie",
           "budget for the pilot", "who starts in May", "renewal", "Globex churn risk",
           "delta echo foxtrot", "security review", "what did Raj say"]
WORDS = ("alpha bravo charlie delta echo foxtrot budget pilot renewal security review churn "
         "Acme Globex Initech Hooli May June").split()


def _answers(m: Memory, scope: str) -> list[Any]:
    out: list[Any] = []
    for q in QUERIES:
        out.append(search(m, scope, q, as_of="2100-01-01T00:00:00Z").json())
        out.append(search(m, scope, q, format="text").text)
        r = m.http.post("/query", json={"scope": scope, "find": "passages", "query": q,
                                        "limit": 50})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        out.append([p["text"] for p in results])  # what passages() reads, one request less
        out.append(results)  # scores and parts of every passage
    return out


def _many_commits(m: Memory, scope: str, salt: int) -> None:
    """Commits of several episodes each (a rebuild applies fifty commits at a time, so
    its batches differ from the live ones), single writes and facts."""
    for c in range(6):
        bodies = [" ".join(WORDS[(salt + c * 7 + e * 3 + w) % len(WORDS)] for w in range(5 + e))
                  + f". Note {c}-{e}." for e in range(7)]
        r = m.http.post("/episodes/batch", json={"scope": scope, "episodes": [
            {"source": f"doc:{salt}-{c}-{e}", "body": b, "acl": ["*"] if e % 3 else
             ["user:alice"]} for e, b in enumerate(bodies)]})
        assert r.status_code == 201, r.text
        ids = [e["id"] for e in r.json()["episodes"]]
        r = m.http.post("/facts/batch", json={"scope": scope, "facts": [
            {"entity": b.split()[0].capitalize(), "predicate": f"note_{c}_{e}",
             "value": b.split()[1], "quote": b, "cites": [{"episode": ep, "unit": 1}]}
            for e, (b, ep) in enumerate(zip(bodies, ids, strict=True)) if e % 2]})
        assert r.status_code == 201, r.text
        write(m, scope, f"Alpha bravo single write {salt} {c}: pilot budget review.", ["*"])


def test_rebuild_from_the_tables_gives_identical_answers(home: Path) -> None:
    # The bundled default embedder, as the auditor ran it.
    env = {**ENV, "AMP_EMBEDDING_PROVIDER": "wordllama"}
    s, other = new_scope(), new_scope()
    with serving(home, env) as proc:
        m = Memory(proc.url, "alice")
        call = write(m, s, "Ann: Acme budget for the pilot is 40k.\n\nRaj: pilot starts May.",
                     ["*"])
        memo = write(m, s, "Initech renewal is due in June.", ["user:alice"])
        for body in (["Acme", "budget", "40k", "Ann: Acme budget for the pilot is 40k.", call],
                     ["Initech", "renewal", "June", "Initech renewal is due in June.", memo]):
            r = m.fact(s, *body[:4], [(body[4], 1)])
            assert r.status_code == 201, r.text
        # two scopes written in turns: live, their rows interleave; a rebuild feeds
        # one scope after the other
        for salt in range(2):
            _many_commits(m, s, salt)
            _many_commits(m, other, salt + 5)
        before = [_answers(m, s), _answers(m, other)]
        m.close()
    assert any(before[0][0]["results"]) and before[0][2]
    assert sum(len(a) for a in before[0][3::4]) > 50  # many scores compared, not a few
    assert (home / "index.db").exists()
    _delete_index(home)
    done = cli_in_process(home, env, "index", "rebuild")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["commits"] == 4 + 2 * 2 * 6 * 3 and report["facts"] == 2 + 2 * 2 * 6 * 3
    read_index = report["read_index_commits"]
    assert f"{read_index}/{read_index}" in bar_line(done.stderr, "rebuilding the read index")
    with serving(home, {**env, "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "0"}) as proc:
        m = Memory(proc.url, "alice")
        assert [_answers(m, s), _answers(m, other)] == before
        m.close()
    # no rebuild at all: a server catches up from the tables on its own
    _delete_index(home)
    with serving(home, env) as proc:
        m = Memory(proc.url, "alice")
        assert [_answers(m, s), _answers(m, other)] == before
        m.close()
    # an index file of the older layout (one keyword table for every scope) is emptied
    # on start and refilled from the tables: same answers
    _downgrade_index(home)
    with serving(home, env) as proc:
        m = Memory(proc.url, "alice")
        assert [_answers(m, s), _answers(m, other)] == before
        m.close()
    with sqlite3.connect(home / "index.db") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() != ("1",)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "facts_fts" not in names and "facts_ai" not in names


def _downgrade_index(home: Path) -> None:
    """Make the index look like one written before keyword spaces: format 1, one global
    FTS5 table fed by a trigger, rows kept (but no longer trusted)."""
    with sqlite3.connect(home / "index.db") as conn:
        conn.execute("DELETE FROM meta WHERE key = 'format'")
        conn.execute("CREATE VIRTUAL TABLE facts_fts USING fts5(entity, predicate_words,"
                     " value, quote, content='facts', content_rowid='num')")
        conn.execute("CREATE TRIGGER facts_ai AFTER INSERT ON facts BEGIN INSERT INTO"
                     " facts_fts(rowid, entity, predicate_words, value, quote) VALUES"
                     " (new.num, new.entity, new.predicate_words, new.value, new.quote); END")
        conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('rebuild')")


def _delete_index(home: Path) -> None:
    for name in ("index.db", "index.db-wal", "index.db-shm"):
        (home / name).unlink(missing_ok=True)


def test_a_membership_change_counts_on_the_next_search(alice: Memory) -> None:
    s = new_scope()
    public = write(alice, s, "Acme legal approved the security review.", ["*"])
    hidden = write(alice, s, f"{SECRET}: Acme budget frozen by the board.",
                   ["group:sales", "user:alice"])
    for entity, pred, value, quote, ep in (
            ("Acme", "security_review", "approved", "Acme legal approved the security review.",
             public),
            ("Acme", "budget", "frozen", f"{SECRET}: Acme budget frozen by the board.", hidden)):
        assert alice.fact(s, entity, pred, value, quote, [(ep, 1)]).status_code == 201
    carol = alice.as_user("carol")
    assert carol.set_principal("carol", groups=["sales"]).status_code == 200
    assert ("Acme", "budget", "frozen") in facts(carol, s, "Acme budget codename")
    assert any(SECRET in t for t in passages(carol, s, "Umbrella acquisition codename"))
    assert SECRET in search(carol, s, "Acme budget codename Umbrella", format="text").text

    assert carol.set_principal("carol", groups=[]).status_code == 200
    assert ("Acme", "budget", "frozen") not in facts(carol, s, "Acme budget codename")
    assert ("Acme", "security_review", "approved") in facts(carol, s, "Acme review")
    assert not any(SECRET in t for t in passages(carol, s, "Umbrella acquisition codename"))
    text = search(carol, s, "Acme budget codename Umbrella Nightjar", format="text").text
    for leak in (SECRET, "Nightjar", "frozen", "Umbrella", "board", "[e2"):
        assert leak not in text
    # the last line names only episodes she may read
    assert text.strip().splitlines()[-1].split()[1:] == [public]
    carol.close()
