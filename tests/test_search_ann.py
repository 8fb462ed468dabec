"""The HNSW graph of the embedded index (`search/index/ann.py`): with the threshold
forced low it proposes the vector candidates, and answers stay exact, readable-only and
the same after a rebuild. Below the threshold (the default for every other test) search
is exact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import DocumentBatch
from ampup_memory.search.index.common import VectorMatrix
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.index.sqlite import SQLiteIndex
from ampup_memory.search.visibility import Principal
from tests.memory_support import QUIET, Memory, new_scope, serving
from tests.search_docs import episode, fact, when

S = "acme__sales"
NOW = when("2025-04-15T12:00:00")
ANN = Principal("ann", groups=("sales",))
WORDS = ("alpha bravo charlie delta echo foxtrot budget pilot renewal security review churn "
         "acme globex initech hooli may june invoice contract onboarding").split()
QUERIES = ["budget pilot", "renewal security review", "globex churn", "delta echo",
           "invoice contract june", "onboarding hooli", "alpha foxtrot may"]


def _body(i: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + w * (1 + i % 5)) % len(WORDS)] for w in range(4 + i % 6)),
            f"note ref{i}: " + " ".join(WORDS[(i * 3 + w) % len(WORDS)] for w in range(3))]


def _batch(start: int, stop: int) -> DocumentBatch:
    eps = [episode(S, _body(i), ["*"] if i % 3 else ["group:sales"], source=f"call:{i}")
           for i in range(start, stop)]
    return DocumentBatch(eps, [fact(e, f"Account {i}", "status", _body(i)[1], _body(i)[1])
                               for i, e in zip(range(start, stop), eps, strict=True)])


def _graph(engine: SearchEngine, table: str) -> VectorMatrix:
    assert isinstance(engine.index, SQLiteIndex)
    return engine.index._vectors[table].by_key[(S, "main")]


def _answers(engine: SearchEngine) -> list[Any]:
    out: list[Any] = []
    for q in QUERIES:
        out.append([(r.row.num, r.score, r.parts) for r in
                    engine.search_passages(S, "main", q, ANN, now=NOW).passages])
        out.append([(r.row.id, r.score) for r in
                    engine.search_facts(S, "main", q, ANN, now=NOW).facts])
        vector = engine.embedder.embed([q])[0]
        for k in (10, 50):
            out.append(sorted(engine.index.nearest_passages(S, "main", vector, k)))
            out.append(sorted(engine.index.nearest_facts(S, "main", vector, k)))
    return out


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()  # real vectors: few exact ties, unlike the hash embedder


@pytest.fixture
def engines(tmp_path: Path, wordllama: WordLlamaEmbedder
            ) -> Iterator[tuple[SearchEngine, SearchEngine]]:
    exact = SearchEngine(open_index(f"sqlite:///{tmp_path / 'exact.db'}", 0), wordllama)
    ann = SearchEngine(open_index(f"sqlite:///{tmp_path / 'ann.db'}", 1), wordllama)
    exact.ensure_model()
    ann.ensure_model()
    yield exact, ann
    exact.index.close()
    ann.index.close()


def test_ann_and_exact_search_agree_on_a_small_index(
        engines: tuple[SearchEngine, SearchEngine]) -> None:
    """Threshold 1: the graph proposes candidates (it exists and holds every row) and
    every answer, scores included, is the exact search's; the top-k vector candidates too
    (texts are distinct, so few rows tie: a tie shared by more rows than the graph
    proposes is where the two could differ). The graph is fed in steps with queries in
    between, the exact index in one go."""
    exact, ann = engines
    exact.ingest(_batch(0, 600))
    for start in range(0, 600, 150):
        ann.ingest(_batch(start, start + 150))
        ann.search_passages(S, "main", "budget pilot", ANN, now=NOW)
        ann.search_facts(S, "main", "budget pilot", ANN, now=NOW)
    want = _answers(exact)
    assert _answers(ann) == want
    assert sum(len(a) for a in want) > 800  # many rows compared, not a few
    for table in ("passages", "facts"):
        graph = _graph(ann, table).ann
        assert graph is not None and len(graph) == 600
        assert _graph(exact, table).ann is None


def test_ann_graph_is_rebuilt_alike_after_a_reopen_and_a_change(
        tmp_path: Path, engines: tuple[SearchEngine, SearchEngine],
        wordllama: WordLlamaEmbedder) -> None:
    """A reopened index builds its graph from the file's rows in one go; an index filled
    in other batches builds it in steps: both propose the same candidates, so answer
    alike, and a row whose vector is replaced rebuilds the graph, still alike."""
    exact, ann = engines
    for start in range(0, 450, 90):
        ann.ingest(_batch(start, start + 90))
        ann.search_passages(S, "main", "renewal", ANN, now=NOW)
    exact.ingest(_batch(0, 450))
    live = _answers(ann)
    ann.index.close()
    reopened = SearchEngine(open_index(f"sqlite:///{tmp_path / 'ann.db'}", 1), wordllama)
    try:
        assert _answers(reopened) == live == _answers(exact)
        # re-embedding rewrites every vector in place: the graph is dropped and rebuilt
        with reopened.index.transaction():
            reopened.index.set_vectors("passages", [(1, [1.0] + [0.0] * 255)])
        with exact.index.transaction():
            exact.index.set_vectors("passages", [(1, [1.0] + [0.0] * 255)])
        assert _answers(reopened) == _answers(exact)
        assert _graph(reopened, "passages").ann is not None
    finally:
        reopened.index.close()


# -- over HTTP ------------------------------------------------------------------------------

ENV = {**QUIET, "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "0",
       "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "1"}


def _query(m: Memory, scope: str, q: str) -> list[dict[str, Any]]:
    r = m.http.post("/query", json={"scope": scope, "find": "passages", "query": q,
                                    "limit": 10})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def test_ann_search_shows_only_readable_passages_and_a_rebuild_answers_alike(
        tmp_path: Path) -> None:
    """With the graph on (300 passages, 50 candidates), three in four nearest passages
    are bob's private ones: alice gets only what she may read (candidates are filtered by
    the one rule, and over-fetched when too few survive), bob gets his; the index deleted
    and refilled from the tables answers the same JSON, scores included."""
    home, s = tmp_path / "home", new_scope()
    queries = ["Nightjar acquisition codename", "budget pilot", *QUERIES]
    with serving(home, ENV) as proc:
        alice, bob = Memory(proc.url, "alice"), Memory(proc.url, "bob")
        for part in range(6):
            r = bob.http.post("/episodes/batch", json={"scope": s, "episodes": [
                {"source": f"doc:{part}-{i}", "acl": ["*"] if i % 4 == 0 else ["user:bob"],
                 "body": f"Nightjar acquisition codename {'open' if i % 4 == 0 else 'shut'}"
                 f" {part}-{i}. " + " ".join(_body(part * 50 + i))} for i in range(50)]})
            assert r.status_code == 201, r.text
            assert _query(bob, s, "Nightjar budget")  # the graph is built, then grows
        before = [(_query(alice, s, q), _query(bob, s, q)) for q in queries]
        seen = [p["text"] for mine, _ in before for p in mine]
        owned = [p["text"] for _, theirs in before for p in theirs]
        assert len(seen) == len(owned) == 10 * len(queries)
        assert all(" open " in t for t in seen)
        assert sum(" shut " in t for t in owned) > len(owned) / 2
        alice.close()
        bob.close()
    for name in ("index.db", "index.db-wal", "index.db-shm"):
        (home / name).unlink(missing_ok=True)
    with serving(home, ENV) as proc:
        alice, bob = Memory(proc.url, "alice"), Memory(proc.url, "bob")
        after = [(_query(alice, s, q), _query(bob, s, q)) for q in queries]
        alice.close()
        bob.close()
    assert after == before
