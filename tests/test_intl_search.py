"""International text in keyword search, over real HTTP, on both index backends.

One rule (`search/tokenize.keyword_text`) makes what each backend indexes and searches:
a word inside a Chinese, Japanese, Thai or Korean sentence is found, and spellings a
reader takes for one word (NFC and NFD, upper and lower case, with and without accents,
full-width and plain) find each other, on SQLite and PostgreSQL alike. Both indexes of an
older rule are brought to it when opened (SQLite's keyword files refill from their rows;
PostgreSQL's rows get their keyword text and tsvectors again): nothing is re-embedded.
AMP cell search follows the same rule on both cell stores (since session 33), and a cell
store an older version made, or wrote into, is brought to it too.
"""

from __future__ import annotations

import json
import sqlite3
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.memory_support import BACKENDS, Memory, backend_env, new_scope, serving
from tests.server_process import ServerProcess
from tests.test_mcp import http_client_for, ok


@dataclass
class Served:
    backend: str
    memory: Memory
    home: Path
    env: dict[str, str]
    proc: ServerProcess


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


# (stored sentence, the query a user types for a word of it)
CASES = [
    ("我昨天在北京买了一台新电脑", "电脑"),
    ("我的猫喜欢睡在窗台上", "猫"),
    ("東京の天気は今日とても良いです", "天気"),
    ("昨日、新しいコンピューターを買いました", "コンピューター"),
    ("ฉันชอบกินข้าวผัดมาก", "ข้าวผัด"),
    ("서울에서 친구를 만났습니다", "서울"),
    ("어제 일찍 집에 갔어요", "집"),
    (nfd("Renée booked the hôtel in Zürich"), "Zürich"),
    ("Renée booked the chalet in Genève", nfd("Genève")),
    ("Die Straße vor dem Büro ist gesperrt", "STRASSE"),
    ("Η ΟΔΟΣ είναι κλειστή σήμερα", "οδός"),
    ("İstanbul'da yeni bir ofis açtık", "istanbul"),
    ("We met at the café near the station", "cafe"),
    ("注文番号はＡＢＣ１２３です", "ABC123"),
    ("שָׁלוֹם עֲלֵיכֶם חברים", "שלום"),
    ("मुंबई में बैठक सोमवार को है", "मुंबई"),
]
UNCITED = "会议纪要：下周在深圳见客户"  # no fact cites it: the text answer quotes it
NOISE = [UNCITED, "我们明天开会讨论新的计划", "明日は雨が降るそうです", "วันนี้อากาศร้อนมาก",
         "The weekly report is ready", "Die Besprechung ist morgen"]


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[Served]:
    env = backend_env(request.param, request)
    if request.param == "postgres":  # the AMP cells too
        env["AMP_STORE_URI"] = env["AMPUP_MEMORY_INDEX_URI"]
    home = tmp_path_factory.mktemp(f"intl-{request.param}")
    with serving(home, env) as proc:
        m = Memory(proc.url, "alice")
        yield Served(request.param, m, home, env, proc)
        m.close()


@pytest.fixture(scope="module")
def corpus(served: Served) -> tuple[str, list[str]]:
    m = served.memory
    scope = new_scope()
    bodies = [s for s, _ in CASES] + NOISE
    r = m.http.post("/episodes/batch", json={"scope": scope, "episodes": [
        {"source": f"doc:s{i}", "body": b, "acl": ["*"]} for i, b in enumerate(bodies)]})
    assert r.status_code == 201, r.text
    ids = [e["id"] for e in r.json()["episodes"]]
    r = m.http.post("/facts/batch", json={"scope": scope, "facts": [
        {"entity": f"note:{i}", "predicate": "says", "value": "-", "quote": s,
         "cites": [{"episode": ids[i], "unit": 1}]} for i, (s, _) in enumerate(CASES)]})
    assert r.status_code == 201, r.text
    return scope, ids


AGENT = {"X-AMP-Agent-ID": "agent_intl"}


@pytest.fixture(scope="module")
def cells(served: Served) -> tuple[str, list[str]]:
    """Every sentence of CASES and NOISE as an AMP cell of one owner: (owner, ids)."""
    owner = "u_intl"
    ids = []
    for text in [s for s, _ in CASES] + NOISE:
        r = served.memory.http.post("/amp/v1/memories", headers=AGENT, json={
            "type": "semantic", "content": {"text": text},
            "identity": {"owner_id": owner, "owner_type": "user"}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return owner, ids


def _cell_hits(m: Memory, owner: str, query: str, limit: int = 1) -> list[str]:
    r = m.http.post("/amp/v1/memories/search", headers=AGENT,
                    json={"query": query, "owner_id": owner, "limit": limit})
    assert r.status_code == 200, r.text
    return [c["id"] for c in r.json()["results"]]


def _passage_hits(m: Memory, scope: str, query: str) -> list[dict[str, Any]]:
    r = m.http.post("/query", json={"scope": scope, "find": "passages", "query": query,
                                    "limit": 5})
    assert r.status_code == 200, r.text
    return [p for p in r.json()["results"] if p["parts"]["keyword"] > 0]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[q for _, q in CASES])
def test_a_word_of_a_stored_sentence_is_found_by_keyword(
        served: Served, corpus: tuple[str, list[str]],
        case: int) -> None:
    m = served.memory
    scope, ids = corpus
    query = CASES[case][1]
    hits = _passage_hits(m, scope, query)
    assert hits and hits[0]["episode"] == ids[case], (query, hits)
    r = m.http.post("/search", json={"scope": scope, "query": query, "limit": 5})
    assert r.status_code == 200, r.text
    facts = [f for f in r.json()["results"] if f["parts"]["keyword"] > 0]
    assert facts and facts[0]["entity"] == f"note:{case}", (query, facts)


def test_amp_cell_search_finds_a_word_of_a_stored_sentence(
        served: Served, cells: tuple[str, list[str]]) -> None:
    """Each query's cell first (the hash embedder: by keyword), on both cell stores."""
    owner, ids = cells
    missed = [q for i, (_, q) in enumerate(CASES)
              if _cell_hits(served.memory, owner, q) != [ids[i]]]
    assert missed == []


def _cells_sql(served: Served, sql: str, params: tuple[Any, ...]) -> None:
    """A statement on the cell store beside the server, as another process would."""
    if served.backend == "sqlite":
        with sqlite3.connect(served.home / "amp.db") as conn:
            conn.execute(sql, params)
        return
    with psycopg.connect(served.env["AMP_STORE_URI"], autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), params)


def test_a_text_an_older_version_changed_is_searched_by_its_new_words(
        served: Served, cells: tuple[str, list[str]]) -> None:
    """An older version writes ``text`` alone: the store's triggers owe the cell its
    words, which the next search makes."""
    owner, ids = cells
    cell = ids[len(CASES) + 2]  # a NOISE cell: 明日は雨が降るそうです
    _cells_sql(served, "UPDATE cells SET text = ? WHERE id = ?",
               ("来週の火曜日に健康診断があります", cell))
    assert _cell_hits(served.memory, owner, "健康診断") == [cell]


def test_the_text_answer_quotes_the_source_unit_holding_the_word(
        served: Served, corpus: tuple[str, list[str]]) -> None:
    m = served.memory
    scope, _ = corpus
    r = m.http.post("/search", json={"scope": scope, "query": "深圳", "format": "text"})
    assert r.status_code == 200, r.text
    assert UNCITED in r.text, r.text


async def test_the_mcp_search_tools_find_a_word_of_a_stored_sentence(
        served: Served, corpus: tuple[str, list[str]]) -> None:
    scope, ids = corpus
    headers = {"X-AMP-Agent-ID": "agent_alice", "X-AmpUp-User": "alice"}
    async with http_client_for(served.memory.url, headers) as alice:
        passages = json.loads(await ok(alice, "query_memory", scope=scope, query="天気"))
        answer = await ok(alice, "search_memory", scope=scope, query="ข้าวผัด")
    assert passages["results"][0]["episode"] == ids[2]
    assert CASES[4][0] in answer  # the fact's quote: the Thai sentence


def test_non_latin_names_are_kept_and_found_and_non_ascii_ids_refused_in_words(
        served: Served, corpus: tuple[str, list[str]]) -> None:
    """Entity ids and predicates in any script are names (in NFC); scopes and branches
    are ASCII identifiers, and anything else is a 422 naming the rule, never a 500."""
    m = served.memory
    scope, ids = corpus
    r = m.fact(scope, "人物:王伟", "住在", "北京", "北京", [(ids[0], 1)])
    assert r.status_code == 201, r.text
    r = m.fact(scope, "שלום", "גר_ב", "תל אביב", "北京", [(ids[0], 1)])
    assert r.status_code == 201, r.text
    r = m.facts(scope, "人物:王伟")
    assert r.status_code == 200 and r.json()["facts"][0]["predicate"] == "住在", r.text
    r = m.http.post("/search", json={"scope": scope, "query": "王伟住在哪里"})
    assert r.status_code == 200 and r.json()["results"][0]["entity"] == "人物:王伟", r.text
    r = m.fact(scope, nfd("café"), "says", "x", "北京", [(ids[0], 1)])
    assert r.status_code == 422 and "NFC" in r.json()["error"]["message"], r.text
    for bad in ("北京/团队", "équipe/t1", "ｔ/x", "t/x\u200d"):
        r = m.write(bad, "hello")
        assert r.status_code == 422 and "invalid scope" in r.json()["error"]["message"]
    for name in ("分支", "feature/ü", "dev\u200d"):
        r = m.http.post("/branches", json={"scope": scope, "name": name})
        assert r.status_code == 422 and "branch name" in r.json()["error"]["message"]
        r = m.http.post("/search", json={"scope": scope, "query": "x", "branch": name})
        assert r.status_code == 422, r.text


def test_scripts_and_marks_alone_answer_and_match_nothing(
        served: Served, corpus: tuple[str, list[str]],
        ) -> None:
    m = served.memory
    scope, _ = corpus
    for query in ("🎉", "\u200d", "\u0301\u0301", "👨\u200d👩\u200d👧", "　"):
        r = m.http.post("/query", json={"scope": scope, "find": "passages", "query": query})
        assert r.status_code in (200, 422), r.text
        if r.status_code == 200:
            assert [p for p in r.json()["results"] if p["parts"]["keyword"] > 0] == []


def _make_old_cells(backend: str, home: Path, env: dict[str, str]) -> None:
    """Put the cell store back as a version before session 33 left it: no ``words``, and
    on SQLite no `cells_words` (its `cells_fts` is as it was), on PostgreSQL ``tsv`` of
    the raw text with its counts and postings."""
    if backend == "sqlite":
        with sqlite3.connect(home / "amp.db") as conn:
            for name in ("cells_words_ai", "cells_words_ad", "cells_words_au"):
                conn.execute(f"DROP TRIGGER {name}")
            conn.execute("DROP TABLE cells_words")
            conn.execute("DROP VIEW cells_keyword")
            conn.execute("DROP TABLE cell_words_owed")
            conn.execute("ALTER TABLE cells DROP COLUMN words")
        return
    from ampup_memory.amp.store import pg_postings, pg_words

    with psycopg.connect(env["AMP_STORE_URI"], autocommit=True) as conn, conn.transaction():
        conn.execute("DROP TRIGGER cell_words_owed_written ON cells")
        conn.execute("DROP TRIGGER cell_words_owed_rewritten ON cells")
        conn.execute("DROP TABLE cell_words_owed")
        conn.execute("ALTER TABLE cells DROP COLUMN words CASCADE")
        conn.execute("ALTER TABLE cells ADD COLUMN tsv tsvector GENERATED ALWAYS AS"
                     " (to_tsvector('english'::regconfig, text)) STORED")
        conn.execute("CREATE INDEX cells_tsv ON cells USING gin (tsv)")
        pg_words.made_triggers(conn, pg_words.TRIGGERS + pg_postings.TRIGGERS)
        pg_words.recount(conn)
        pg_postings.refill(conn)


def _make_old(backend: str, home: Path, env: dict[str, str]) -> None:
    """Put the index back to the rule before keyword_text: SQLite's keyword files as
    format 0 (the raw text under 'porter unicode61'), PostgreSQL's tsvectors of the raw
    text without a words column."""
    _make_old_cells(backend, home, env)
    if backend == "sqlite":
        for path in (home / "index.db.keywords").glob("*.db"):
            with sqlite3.connect(path) as conn:
                conn.execute("PRAGMA user_version = 0")
                for table, cols in (("facts_fts", "entity, predicate_words, value, quote"),
                                    ("passages_fts", "text")):
                    conn.execute(f"DROP TABLE {table}")
                    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5({cols},"
                                 " content='', tokenize='porter unicode61')")
        return
    with psycopg.connect(env["AMPUP_MEMORY_INDEX_URI"], autocommit=True) as conn:
        conn.execute("ALTER TABLE search_passages DROP COLUMN words CASCADE")
        conn.execute("ALTER TABLE search_passages ADD COLUMN tsv tsvector GENERATED ALWAYS"
                     " AS (to_tsvector('english', text)) STORED")
        conn.execute("ALTER TABLE search_facts DROP COLUMN words CASCADE")
        conn.execute(
            "ALTER TABLE search_facts ADD COLUMN tsv tsvector GENERATED ALWAYS AS ("
            "setweight(to_tsvector('english', entity), 'A')"
            " || setweight(to_tsvector('english', value), 'B')"
            " || setweight(to_tsvector('english', replace(predicate, '_', ' ')), 'C')"
            " || setweight(to_tsvector('english', quote), 'D')) STORED")


def test_rows_an_older_version_wrote_beside_this_one_get_their_keyword_text(
        served: Served, corpus: tuple[str, list[str]],
        ) -> None:
    """A rolling upgrade (docs/operations.md, "Upgrading a fleet"): a server of the version
    before the ``words`` column, serving beside this one on one PostgreSQL index, inserts
    its rows without their keyword text (its INSERT names no ``words``), and keyword search
    missed them for good: tools/rolling_audit.py left 8 passages and 8 facts so after the
    fleet was upgraded and restarted. The next start of this version writes them. Here
    the older version's rows are made by setting ``words`` back to NULL."""
    if served.backend != "postgres":
        pytest.skip("SQLite's keyword files are written by this version only")
    scope, ids = corpus
    m = served.memory
    before = [_passage_hits(m, scope, q) for _, q in CASES]
    with psycopg.connect(served.env["AMPUP_MEMORY_INDEX_URI"], autocommit=True) as conn:
        rows = sum(conn.execute(f"UPDATE {table} SET words = NULL WHERE scope = %s"
                                " AND words IS NOT NULL", (scope,)).rowcount
                   for table in ("search_passages", "search_facts"))
    assert rows >= 2 * (len(CASES) - 1)  # one of them is ASCII
    assert _passage_hits(m, scope, "电脑") == []  # what the older version's rows answered
    served.proc.stop()
    served.proc.start()
    served.memory = Memory(served.proc.url, "alice")
    m.close()
    after = [_passage_hits(served.memory, scope, q) for _, q in CASES]
    assert after == before


def test_an_index_of_the_older_rule_is_brought_to_it_when_opened(
        served: Served, corpus: tuple[str, list[str]], cells: tuple[str, list[str]],
        ) -> None:
    """Runs last: it stops the module's server, makes its index as an older version left
    it, and starts it again on the same home."""
    scope, ids = corpus
    owner, _ = cells
    before = [_passage_hits(served.memory, scope, q) for _, q in CASES]
    cells_before = [_cell_hits(served.memory, owner, q, limit=5) for _, q in CASES]
    served.proc.stop()
    _make_old(served.backend, served.home, served.env)
    with serving(served.home, served.env) as proc:
        again = Memory(proc.url, "alice")
        after = [_passage_hits(again, scope, q) for _, q in CASES]
        hits = _passage_hits(again, scope, "电脑")
        cells_after = [_cell_hits(again, owner, q, limit=5) for _, q in CASES]
        again.close()
    assert hits and hits[0]["episode"] == ids[0]
    assert after == before  # every score as before: the same postings, rebuilt
    assert cells_after == cells_before
