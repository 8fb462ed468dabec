"""The keyword statistics a search takes, on both index backends: taken once per search
(passage search's wider rounds too), the rows listed bounded by the mark they were
counted at, and the caches behind them bounded.

Real SQLite files and a real PostgreSQL server; a second index object on the same file or
database stands for another server writing between two steps of a search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ampup_memory.search.embed import HashEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import DocumentBatch, SearchIndex
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.visibility import Principal
from tests.pg import PostgresFactory
from tests.search_docs import episode, fact

S = "acme__sales"
ANN = Principal("ann")
HIDDEN = 60  # matching passages ann may not read: her first rounds find too few


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'index.db'}"
    factory: PostgresFactory = request.getfixturevalue("postgres")
    return factory.new_database("stats")


def _small_budget(monkeypatch: pytest.MonkeyPatch, budget_: int) -> None:
    """The postings budget at ``budget_`` for both backends (read at call time)."""
    from ampup_memory.search import budget
    from ampup_memory.search.index import postgres as postgres_index
    from ampup_memory.search.index import sqlite as sqlite_index

    for module in (budget, sqlite_index, postgres_index):
        monkeypatch.setattr(module, "POSTINGS_BUDGET", budget_, raising=False)


def _write(eng: SearchEngine, i: int, acl: str, text: str = "") -> None:
    """Commit ``i`` (seq ``i``): one episode saying "renewal" with ``i % 7`` fillers, and
    a fact saying the same."""
    text = text or "renewal " + " ".join(f"filler{j}" for j in range(i % 7))
    e = replace(episode(S, [text], [acl], commit=f"c{i}", source=f"call:{i}"), seq=i)
    eng.ingest(DocumentBatch([e], [fact(e, f"Acme {i}", "note", "x", text, seq=i)]))


def _fill(eng: SearchEngine) -> None:
    """HIDDEN passages only a group reads, then three ann reads."""
    eng.ensure_model()
    for i in range(1, HIDDEN + 1):
        _write(eng, i, "group:board")
    for i in range(HIDDEN + 1, HIDDEN + 4):
        _write(eng, i, "user:ann")


def _answer(eng: SearchEngine) -> list[tuple[str, object, float]]:
    found = eng.search_passages(S, "main", "renewal", ANN, limit=10).passages
    return [(p.episode.id, p.parts, p.score) for p in found]


def _on_call(obj: object, name: str, before: Callable[[int], None]) -> list[int]:
    """Run ``before(n)`` ahead of the n-th call (from 1) of ``obj.name``; the calls'
    numbers so far."""
    calls: list[int] = []
    real = getattr(obj, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(calls) + 1)
        before(len(calls))
        return real(*args, **kwargs)

    setattr(obj, name, wrapped)
    return calls


def test_a_write_between_passage_search_rounds_moves_no_score(
        index_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ann reads 3 of 63 matching passages: her passage search widens its lists (k 50,
    then 200). Another server's commit landing between the rounds (a passage she may not
    read, saying the word) moves no score of her answer: every round lists and weighs by
    the statistics the search took once. When each round took them again, the second
    weighed her passages by one more row holding the word."""
    eng = SearchEngine(open_index(index_uri), HashEmbedder(32))
    other = SearchEngine(open_index(index_uri), HashEmbedder(32))
    try:
        _fill(eng)
        alone = _answer(eng)
        assert len(alone) == 3

        def write_before_round_two(n: int) -> None:
            if n == 2:
                _write(other, HIDDEN + 10, "group:board", "renewal")

        rounds = _on_call(eng.index, "keyword_passages", write_before_round_two)
        assert _answer(eng) == alone
        assert len(rounds) >= 2
        monkeypatch.undo()
        assert _answer(eng) != alone  # the write landed and counts from now on
    finally:
        other.index.close()
        eng.index.close()


def test_a_passage_search_counts_its_words_once_however_many_rounds(
        index_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The keyword statistics (the words' counts, and on PostgreSQL the space's newest
    commit, an index read) are taken once per passage search, not once per round."""
    from ampup_memory.search.index.postgres import PostgresIndex

    eng = SearchEngine(open_index(index_uri), HashEmbedder(32))
    try:
        _fill(eng)
        counted = _on_call(eng.index, "_term_counts", lambda n: None)
        rounds = _on_call(eng.index, "keyword_passages", lambda n: None)
        marks: list[int | None] = []
        if isinstance(eng.index, PostgresIndex):
            mark = PostgresIndex._mark

            def read(conn: Any, table: str, scope: str, branch: str, upto: int | None
                     ) -> int:
                marks.append(upto)
                return mark(conn, table, scope, branch, upto)

            monkeypatch.setattr(PostgresIndex, "_mark", staticmethod(read))
        assert len(_answer(eng)) == 3
        assert len(rounds) >= 2
        assert len(counted) == 1
        assert marks == ([None] if isinstance(eng.index, PostgresIndex) else [])
    finally:
        eng.index.close()


def _listed(idx: SearchIndex, kind: str, terms: Any) -> list[tuple[int, float]]:
    if kind == "facts":
        return idx.keyword_facts(S, "main", terms, 50)
    return idx.keyword_passages(S, "main", terms, 50)


@pytest.mark.parametrize("kind", ["facts", "passages"])
def test_an_over_budget_pass_lists_the_rows_up_to_its_mark(
        index_uri: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the postings budget a pass ranks the newest matches only; with a search's
    statistics taken (its mark), a row another server writes before the ranked query
    neither enters the list nor pushes a counted row out of it."""
    _small_budget(monkeypatch, 4)
    eng = SearchEngine(open_index(index_uri), HashEmbedder(32))
    other = SearchEngine(open_index(index_uri), HashEmbedder(32))
    try:
        for i in range(1, 13):
            _write(eng, i, "*")
        words = eng.index.keyword_view(kind, S, [("main", None)], ["renewal"])
        before = _listed(eng.index, kind, words)
        assert len(before) == 4
        _write(other, 13, "*", "renewal")
        assert _listed(eng.index, kind, words) == before
        fresh = _listed(eng.index, kind, ["renewal"])
        assert len(fresh) == 4 and fresh != before  # the new row is among the newest
    finally:
        other.index.close()
        eng.index.close()


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["facts", "passages"])
def test_a_pg_over_budget_pass_lists_the_rows_its_statistics_count(
        postgres: PostgresFactory, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL, a space's own words (no view): the pass takes its mark and statistics,
    then ranks; a row written by another server in between is not ranked among the
    newest matches (its statistics do not count it)."""
    from ampup_memory.search.index.postgres import PostgresIndex

    _small_budget(monkeypatch, 4)
    uri = postgres.new_database("mark")
    eng = SearchEngine(open_index(uri), HashEmbedder(32))
    other = SearchEngine(open_index(uri), HashEmbedder(32))
    try:
        for i in range(1, 13):
            _write(eng, i, "*")
        before = _listed(eng.index, kind, ["renewal"])
        assert len(before) == 4
        index = eng.index
        assert isinstance(index, PostgresIndex)
        affordable = index._affordable

        def then_a_write(*args: Any) -> Any:
            found = affordable(*args)
            _write(other, 13, "*", "renewal")
            return found

        monkeypatch.setattr(index, "_affordable", then_a_write)
        assert _listed(index, kind, ["renewal"]) == before
    finally:
        other.index.close()
        eng.index.close()


@pytest.mark.postgres
def test_pg_sizes_grow_after_each_write_and_stay_bounded(
        postgres: PostgresFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A space's size is remembered in one place, by mark: a search after each write adds
    the rows of the commits since (never a pass over the whole space again), and the
    sizes kept stay within their caps however many spaces are searched."""
    from ampup_memory.search.index import postgres as pg

    eng = SearchEngine(open_index(postgres.new_database("sizes")), HashEmbedder(32))
    index = eng.index
    assert isinstance(index, pg.PostgresIndex)
    try:
        _fill(eng)
        searched = _answer(eng)
        sizes: list[str] = []
        execute = psycopg.Connection.execute

        def seen(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any
                 ) -> Any:
            if "coalesce(sum(" in str(query):
                sizes.append("grown" if "seq > %s" in str(query) else "full")
            return execute(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", seen)
        for i in range(HIDDEN + 4, HIDDEN + 8):
            _write(eng, i, "group:board")
            grown = _answer(eng)
            index._sizes.clear()
            assert _answer(eng) == grown  # counted in full: the same statistics
        assert sizes == ["grown", "full"] * 4
        assert searched != grown  # the new rows count
        monkeypatch.undo()
        monkeypatch.setattr(pg, "SIZES_KEPT", 3)
        monkeypatch.setattr(pg, "SIZE_MARKS", 2)
        for i in range(8):
            scope = f"acme__s{i}"
            for seq in (1, 2, 3):
                e = replace(episode(scope, [f"renewal {seq}"], ["*"], commit=f"c{seq}",
                                    source=f"call:{seq}"), seq=seq)
                eng.ingest(DocumentBatch([e], []))
                for upto in (None, 1, 2):
                    index.keyword_passages(scope, "main", ["renewal"], 10, upto)
        assert len(index._sizes) <= 3
        assert all(len(marks) <= 2 for marks in index._sizes.values())
    finally:
        index.close()


def _held_searches(tmp_path: Path) -> tuple[SearchEngine, Any]:
    from ampup_memory.search.index.sqlite import SQLiteIndex

    eng = SearchEngine(open_index(f"sqlite:///{tmp_path / 'index.db'}"), HashEmbedder(32))
    assert isinstance(eng.index, SQLiteIndex)
    return eng, eng.index


def _idle(index: Any) -> list[Any]:
    from ampup_memory.search.index.keywords import SpaceConnection

    idle = [c for conns in index._spaces._idle.values() for c in conns]
    assert idle and all(isinstance(c, SpaceConnection) for c in idle)
    return idle


def test_sqlite_phrases_kept_stay_bounded_under_many_words(tmp_path: Path) -> None:
    """A space connection keeps the rows of the phrases its held searches collected; 300
    distinct words, each in one row, keep at most PHRASES of them (their rows alone, far
    under PHRASE_ROWS, bounded nothing), and a search after an eviction scores as
    before it."""
    from ampup_memory.search.index import keywords

    eng, index = _held_searches(tmp_path)
    try:
        words = [f"word{i}" for i in range(300)]
        for seq in (1, 2):  # the held searches below read commit 1's rows alone
            e = replace(episode(S, [" ".join(words)], ["*"], commit=f"c{seq}",
                                source=f"call:{seq}"), seq=seq)
            eng.ingest(DocumentBatch([e], []))
        first = index.keyword_passages(S, "main", [words[0]], 10, upto=1)
        for word in words:
            assert index.keyword_passages(S, "main", [word], 10, upto=1)
        assert all(0 < len(c.phrases) <= keywords.PHRASES for c in _idle(index))
        assert index.keyword_passages(S, "main", [words[0]], 10, upto=1) == first
    finally:
        index.close()


def test_sqlite_row_lengths_kept_stay_bounded_under_many_spaces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each space connection keeps its rows' lengths for held searches; the idle
    connections of many spaces keep at most LENGTH_ROWS together (12 here: 6 spaces of 5
    rows), and a space whose lengths were dropped scores as before."""
    from ampup_memory.search.index import keywords

    monkeypatch.setattr(keywords, "LENGTH_ROWS", 12)
    eng, index = _held_searches(tmp_path)
    try:
        first: list[tuple[int, float]] = []
        for i in range(6):
            scope = f"acme__s{i}"
            for seq in (1, 2, 3, 4, 5):
                e = replace(episode(scope, [f"renewal {'x ' * seq}"], ["*"],
                                    commit=f"c{seq}", source=f"call:{seq}"), seq=seq)
                eng.ingest(DocumentBatch([e], []))
            found = index.keyword_passages(scope, "main", ["renewal"], 10, upto=4)
            assert len(found) == 4
            first = first or found
        assert 0 < sum(c.length_rows for c in _idle(index)) <= 12
        assert index.keyword_passages("acme__s0", "main", ["renewal"], 10, upto=4) == first
    finally:
        index.close()
