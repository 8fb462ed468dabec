"""The HNSW graph of the embedded index (`search/index/ann.py`): with the threshold
forced low it proposes the vector candidates, and answers stay exact, readable-only and
the same after a rebuild. Below the threshold (the default for every other test) search
is exact."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import DocumentBatch
from ampup_memory.search.index.common import VectorMatrix
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.index.sqlite import SQLiteIndex
from ampup_memory.search.visibility import Principal
from tests.memory_support import ADMIN_TOKEN, QUIET, Memory, new_scope, serving
from tests.search_docs import episode, fact, unit_vectors, when

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


def _settle(engine: SearchEngine) -> None:
    """Start the graphs (a query does) and wait for the background thread to swap them in."""
    assert isinstance(engine.index, SQLiteIndex)
    vector = engine.embedder.embed(["budget"])[0]
    engine.index.nearest_passages(S, "main", vector, 10)
    engine.index.nearest_facts(S, "main", vector, 10)
    engine.index.wait_graphs(120)


def _answers(engine: SearchEngine) -> list[Any]:
    _settle(engine)
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
        _settle(ann)
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
        _settle(ann)
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


# -- the saved graph ------------------------------------------------------------------------

def _graph_file(index: Path, table: str) -> Path:
    found = list(index.with_name(index.name + ".graphs").glob(f"{table}-*.ann"))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("m, efc", [(16, 64), (32, 128)])
def test_a_graph_saved_loaded_and_grown_is_the_graph_built_in_one_go(
        tmp_path: Path, m: int, efc: int) -> None:
    """usearch restarts its level generator when an index is loaded; graphs are sealed
    (saved and loaded back) at fixed sizes so that one saved at a checkpoint, loaded in
    another process and grown proposes exactly what a graph built in one go, or fed row
    by row, proposes. Without the seals 7 of 300 candidate lists differed. Alike for the
    default parameters and for others a setting chooses."""
    import numpy as np

    from ampup_memory.search.index.ann import Ann, GraphParams, checkpoint_after

    params = GraphParams(m, efc)

    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((2500, 64)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    nums = np.arange(1, 2501, dtype=np.int64)
    queries = rng.standard_normal((300, 64)).astype(np.float32)
    seals: list[tuple[int, bytes]] = []
    whole = Ann(64, params=params)
    whole.add(nums, vecs, lambda count, _last, data: seals.append((count, data)))
    assert whole._index.connectivity == m and whole._index.expansion_add == efc
    assert [n for n, _ in seals] == [256 * i for i in range(1, 9)] + [2304]
    assert checkpoint_after(2304) == 2560
    stepped = Ann(64, params=params)
    for i in range(0, 2500, 37):
        stepped.add(nums[i:i + 37], vecs[i:i + 37])
    count, data = seals[4]  # as loaded after a restart at 1,280 rows
    grown = Ann(64, data, int(nums[count - 1]), params)
    grown.add(nums[count:], vecs[count:])
    want = [list(whole.candidates(q, 10)) for q in queries]
    assert [list(stepped.candidates(q, 10)) for q in queries] == want
    assert [list(grown.candidates(q, 10)) for q in queries] == want


def _graph_and_exact(rng: Any, fields: Callable[[int], dict[str, int]]
                     ) -> tuple[Any, VectorMatrix, VectorMatrix]:
    """3,000 random unit vectors of 32 dimensions put in two matrices, one with its graph
    built (from 500 rows) and one exact; ``fields(i)`` gives row i + 1's put keywords."""
    import numpy as np

    vecs = rng.standard_normal((3000, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    graph, exact = VectorMatrix(32, ann_min=500), VectorMatrix(32)
    for i, v in enumerate(vecs):
        for m in (graph, exact):
            m.put(i + 1, v, **fields(i))
    graph.top(vecs[0], 10)  # starts the background build
    graph.wait(120)
    assert graph.ann is not None
    return vecs, graph, exact


def test_a_seq_range_lists_the_nearest_rows_of_its_commits_with_a_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a graph, a list bounded to a seq range (a view's segment) is the k nearest of
    the rows in it, as exact search gives them: the graph is asked for more by the share
    of rows the range keeps, and exact search answers when its proposals fall short."""
    import numpy as np

    from ampup_memory.search.index import common

    # At 3,000 rows exact search is cheaper than the graph (`group_candidates`); a graph
    # candidate made as cheap as a row sends the ranges to the graph.
    monkeypatch.setattr(common, "GROUP_COST", 1)

    rng = np.random.default_rng(3)
    # ten rows per commit, seqs 1..300
    vecs, graph, exact = _graph_and_exact(rng, lambda i: {"seq": i // 10 + 1})
    for q in rng.standard_normal((20, 32)).astype(np.float32):
        q /= np.linalg.norm(q)
        for seqs in ((0, 280), (0, 150), (200, 210), (299, 300)):
            want = exact.top(q, 10, seqs=seqs)
            held = [n for n in range(1, 3001) if seqs[0] < (n - 1) // 10 + 1 <= seqs[1]]
            best = sorted(((n, float(vecs[n - 1] @ q)) for n in held),
                          key=lambda h: (-h[1], h[0]))[:10]
            assert sorted(n for n, _ in want) == sorted(n for n, _ in best)
            assert sorted(graph.top(q, 10, seqs=seqs)) == sorted(want)


def test_saved_graph_is_reused_and_a_stale_one_rebuilt(
        tmp_path: Path, engines: tuple[SearchEngine, SearchEngine],
        wordllama: WordLlamaEmbedder) -> None:
    """A reopened index loads the graphs it saved (no build) and answers as before; once a
    row below the saved graph's last changes while no process watches (here: a vector
    rewritten by a process with the graph off), the file no longer fingerprints the rows:
    it is rejected and the graph built again, answers still the exact index's. So is a
    whole, well-formed graph file built from other rows."""
    exact, ann = engines
    for e in (exact, ann):
        e.ingest(_batch(0, 600))
    live = _answers(ann)
    assert isinstance(ann.index, SQLiteIndex)
    assert ann.index.graphs() == {"built": 2, "loaded": 0, "rejected": 0, "saved": 2,
                                  "building": 0}
    ann.index.close()
    uri = f"sqlite:///{tmp_path / 'ann.db'}"
    reopened = SearchEngine(open_index(uri, 1), wordllama)
    try:
        assert _answers(reopened) == live == _answers(exact)
        assert reopened.index.graphs() == {"built": 0, "loaded": 2, "rejected": 0,
                                           "saved": 0, "building": 0}
    finally:
        reopened.index.close()
    off = SearchEngine(open_index(uri, 0), wordllama)
    with off.index.transaction():
        off.index.set_vectors("passages", [(3, [1.0] + [0.0] * 255)])
    off.index.close()
    with exact.index.transaction():
        exact.index.set_vectors("passages", [(3, [1.0] + [0.0] * 255)])
    _rejected_and_rebuilt(uri, wordllama, exact)
    _foreign_graph(_graph_file(tmp_path / "ann.db", "passages"), 256)
    _rejected_and_rebuilt(uri, wordllama, exact)
    # The file the last open saved, of these very rows, now says it was built with the
    # build parameters graphs had before (M 16, efConstruction 64): rejected, built again.
    _rewrite_header(_graph_file(tmp_path / "ann.db", "passages"), connectivity=16,
                    expansion_add=64)
    _rejected_and_rebuilt(uri, wordllama, exact)


def test_a_graph_saved_with_other_parameters_is_rebuilt_with_the_settings(
        tmp_path: Path, engines: tuple[SearchEngine, SearchEngine],
        wordllama: WordLlamaEmbedder) -> None:
    """Graphs saved with the default M 32 / efConstruction 128 are not used once the
    settings say M 24 / efConstruction 96: both are rejected and built again with the
    new parameters (the files then say so), answers still the exact index's; the graphs
    saved with M 24 are then loaded, and answer as the live ones did."""
    import json
    import struct

    from ampup_memory.search.index.ann import MAGIC, GraphParams
    from ampup_memory.settings import load_settings

    exact, ann = engines
    for e in (exact, ann):
        e.ingest(_batch(0, 600))
    default = _answers(ann)
    ann.index.close()
    uri = f"sqlite:///{tmp_path / 'ann.db'}"
    settings = load_settings(home=str(tmp_path), search_ann_connectivity=24,
                             search_ann_expansion_add=96)
    assert settings.ann_params == GraphParams(24, 96)

    def header(table: str) -> dict[str, Any]:
        raw = _graph_file(tmp_path / "ann.db", table).read_bytes()
        (size,) = struct.unpack(">I", raw[len(MAGIC):len(MAGIC) + 4])
        found: dict[str, Any] = json.loads(raw[len(MAGIC) + 4:len(MAGIC) + 4 + size])
        return found

    assert {header(t)["connectivity"] for t in ("facts", "passages")} == {32}
    wider = SearchEngine(open_index(uri, 1, settings.ann_params), wordllama)
    try:
        live = _answers(wider)
        assert wider.index.graphs() == {"built": 2, "loaded": 0, "rejected": 2,
                                        "saved": 2, "building": 0}
        assert live == _answers(exact) == default
        graph = _graph(wider, "passages").ann
        assert graph is not None and graph._index.connectivity == 24
    finally:
        wider.index.close()
    for t in ("facts", "passages"):
        assert (header(t)["connectivity"], header(t)["expansion_add"]) == (24, 96)
    reopened = SearchEngine(open_index(uri, 1, settings.ann_params), wordllama)
    try:
        assert _answers(reopened) == live
        assert reopened.index.graphs() == {"built": 0, "loaded": 2, "rejected": 0,
                                           "saved": 0, "building": 0}
    finally:
        reopened.index.close()


def test_unset_graph_parameters_are_one_default_that_keeps_existing_indexes(
        tmp_path: Path) -> None:
    """Unset, every new graph gets 32 / 128, pgvector's indexes too, and an existing
    PostgreSQL index is kept as built (an upgrade rebuilds none); a value set applies to
    both backends and to existing indexes."""
    from ampup_memory.settings import load_settings

    unset = load_settings(home=str(tmp_path)).ann_params
    assert not unset.given
    assert unset.values() == (32, 128)
    assert unset.pg_storage() == "WITH (m = 32, ef_construction = 128)"
    both = load_settings(home=str(tmp_path), search_ann_connectivity=24).ann_params
    assert both.given and both.values() == (24, 128)
    assert not both.pg_built_with(None) and both.pg_built_with(["m=24", "ef_construction=128"])


@pytest.mark.parametrize("name, value, bound", [
    ("AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY", "3", "greater than or equal to 4"),
    ("AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY", "101", "less than or equal to 100"),
    ("AMPUP_MEMORY_SEARCH_ANN_CONNECTIVITY", "65", "at least twice"),  # unset: 128
    ("AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD", "60", "at least twice"),  # unset M: 32
    ("AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD", "7", "greater than or equal to 8"),
    ("AMPUP_MEMORY_SEARCH_ANN_EXPANSION_ADD", "1001", "less than or equal to 1000"),
])
def test_graph_parameters_out_of_bounds_stop_the_start_with_their_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str,
        bound: str) -> None:
    from ampup_memory.settings import load_settings

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as raised:
        load_settings(home=str(tmp_path))
    assert name in str(raised.value) and bound in str(raised.value), str(raised.value)


def _status(proc: Any) -> dict[str, int]:
    r = httpx.get(f"{proc.url}/status", headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    assert r.status_code == 200, r.text
    graphs: dict[str, int] = r.json()["search_graphs"]
    return graphs


def _settled(proc: Any, m: Memory, scope: str, ready: Callable[[dict[str, int]], bool]
             ) -> dict[str, int]:
    """Query (a query starts the graph) until the counters show it ``ready`` and nothing
    is being built or saved."""
    import time

    end = time.monotonic() + 120
    while True:
        _query(m, scope, "Nightjar budget")
        graphs = _status(proc)
        if ready(graphs) and graphs["building"] == 0:
            time.sleep(0.5)  # a last save may still be queued
            return _status(proc)
        assert time.monotonic() < end, graphs
        time.sleep(0.2)


def _rejected_and_rebuilt(uri: str, embedder: WordLlamaEmbedder, exact: SearchEngine) -> None:
    """Opened again, the index rejects one table's saved graph (the passages'), builds
    it again, loads the other, and answers as the exact index does."""
    opened = SearchEngine(open_index(uri, 1), embedder)
    try:
        assert _answers(opened) == _answers(exact)
        assert opened.index.graphs() == {"built": 1, "loaded": 1, "rejected": 1,
                                         "saved": 1, "building": 0}
    finally:
        opened.index.close()


def _rewrite_header(path: Path, **fields: Any) -> None:
    """Change fields of a saved graph's header, its graph bytes (and their digest) kept."""
    import json
    import struct

    from ampup_memory.search.index.ann import MAGIC

    raw = path.read_bytes()
    (size,) = struct.unpack(">I", raw[len(MAGIC):len(MAGIC) + 4])
    start = len(MAGIC) + 4
    header = {**json.loads(raw[start:start + size]), **fields}
    text = json.dumps(header).encode()
    path.write_bytes(MAGIC + struct.pack(">I", len(text)) + text + raw[start + size:])


def _foreign_graph(path: Path, dimensions: int) -> None:
    """A whole, well-formed graph file of 512 rows that are not the index's."""
    import numpy as np

    from ampup_memory.search.index.ann import Ann, GraphFile, GraphStats, fingerprint

    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((512, dimensions)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    nums = np.arange(1, 513, dtype=np.int64)
    sealed: list[bytes] = []
    Ann(dimensions).add(nums, vecs, lambda _count, _last, data: sealed.append(data))
    GraphFile(path, GraphStats()).write(sealed[-1], dimensions, 512, 512,
                                        fingerprint(nums, vecs, np.arange(512)))


def test_restart_loads_the_saved_graph_and_rebuilds_a_corrupt_one(
        tmp_path: Path) -> None:
    """Over HTTP, threshold 100, 400 passages (three in four bob's only): the graph is built
    in the background and saved; a restart loads it (``/status`` counts a load, no build)
    and answers the same JSON; a torn graph file is rejected and built again; every
    answer keeps alice to what she may read, and the graph's top 10 agree with exact
    search (threshold 0, same files) at recall@10 >= 0.98."""
    home, s = tmp_path / "home", new_scope()
    env = {**ENV, "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "100"}
    queries = ["Nightjar acquisition codename", "budget pilot", *QUERIES]

    def answers(proc: Any) -> list[Any]:
        alice, bob = Memory(proc.url, "alice"), Memory(proc.url, "bob")
        try:
            return [(_query(alice, s, q), _query(bob, s, q)) for q in queries]
        finally:
            alice.close()
            bob.close()

    def restarted(ready: Callable[[dict[str, int]], bool]) -> tuple[dict[str, int], Any]:
        with serving(home, env) as proc:
            m = Memory(proc.url, "bob")
            graphs = _settled(proc, m, s, ready)
            m.close()
            return graphs, answers(proc)

    with serving(home, env) as proc:
        bob = Memory(proc.url, "bob")
        for part in range(2):
            r = bob.http.post("/episodes/batch", json={"scope": s, "episodes": [
                {"source": f"doc:{part}-{i}", "acl": ["*"] if i % 4 == 0 else ["user:bob"],
                 "body": f"Nightjar acquisition codename {'open' if i % 4 == 0 else 'shut'}"
                 f" {part}-{i}. " + " ".join(_body(part * 200 + i))} for i in range(200)]})
            assert r.status_code == 201, r.text
        first = _settled(proc, bob, s, lambda g: g["built"] >= 1)
        assert first == {"built": 1, "loaded": 0, "rejected": 0, "saved": 1, "building": 0}
        before = answers(proc)
        bob.close()
    seen = [p["text"] for mine, _ in before for p in mine]
    assert len(seen) == 10 * len(queries) and all(" open " in t for t in seen)
    assert sum(" shut " in p["text"] for _, theirs in before for p in theirs) > 5 * len(queries)

    graphs, after = restarted(lambda g: g["loaded"] >= 1)
    assert graphs == {"built": 0, "loaded": 1, "rejected": 0, "saved": 0, "building": 0}
    assert after == before

    passages = _graph_file(home / "index.db", "passages")
    raw = bytearray(passages.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # torn or corrupt: the digest no longer matches
    passages.write_bytes(bytes(raw))
    graphs, after = restarted(lambda g: g["built"] >= 1)
    assert graphs == {"built": 1, "loaded": 0, "rejected": 1, "saved": 1, "building": 0}
    assert after == before

    with serving(home, {**env, "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "0"}) as proc:
        exact = answers(proc)
        assert _status(proc)["built"] == 0
    hits = total = 0
    for (a_ann, b_ann), (a_exact, b_exact) in zip(before, exact, strict=True):
        for got, want in ((a_ann, a_exact), (b_ann, b_exact)):
            ids = {p["text"] for p in want}
            hits += sum(p["text"] in ids for p in got)
            total += len(want)
    assert total == 20 * len(queries) and hits / total >= 0.98


EXIT_DURING_A_BUILD = """
import time
import numpy as np
from ampup_memory.search.index.common import VectorMatrix
matrix = VectorMatrix(32, ann_min=10)
rng = np.random.default_rng(1)
vectors = rng.standard_normal((20000, 32)).astype(np.float32)
vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
for i, vector in enumerate(vectors):
    matrix.put(i + 1, vector)
matrix.top(vectors[0], 10)  # starts the background build
time.sleep(0.3)
print("exiting", flush=True)
"""


def test_a_process_exiting_during_a_graph_build_exits_cleanly() -> None:
    # A daemon thread still inside usearch while the interpreter tore down aborted the
    # process (exit 134, "terminate called without an active exception"): a server
    # stopped while it built a large scope's graph died that way.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", EXIT_DURING_A_BUILD], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "exiting"
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr


def test_a_graph_keeps_growing_in_place_after_a_row_is_removed() -> None:
    # `_live(after)` dropped its `after` filter as soon as a row had been removed, so the
    # rows written since the graph's last row were "every row": the graph was thrown away
    # and built again after each write, and a loaded one was never swapped in.
    matrix = VectorMatrix(32, ann_min=10)
    vectors = unit_vectors(400, 32, 2)
    for i in range(300):
        matrix.put(i + 1, vectors[i])
    matrix.top(vectors[0], 10)
    matrix.wait(60)
    matrix.remove(5)
    matrix.top(vectors[0], 10)  # a row of the graph changed: built again
    matrix.wait(60)
    assert matrix.ann is not None and len(matrix.ann) == 299
    assert matrix.stats.counts["built"] == 2
    assert 5 not in [n for n, _ in matrix.top(vectors[4], 10)]  # asked for by its own vector
    for i in range(300, 400):
        matrix.put(i + 1, vectors[i])
    found = matrix.top(vectors[350], 10)  # 100 new rows: added inline, nothing rebuilt
    assert matrix.ann is not None and len(matrix.ann) == 399
    assert found[0][0] == 351 and 5 not in [n for n, _ in found]
    matrix.wait(60)
    assert matrix.stats.counts["built"] == 2


def test_a_query_after_a_write_does_not_copy_the_rows_already_held() -> None:
    # Each write followed by a query stacked the whole matrix again (np.vstack): at 1M
    # 256-d rows, a gigabyte copied per query after every write, linear in the scope.
    import numpy as np

    matrix = VectorMatrix(8)
    vectors = unit_vectors(3000, 8, 3)
    for i in range(2000):
        matrix.put(i + 1, vectors[i])
    matrix.top(vectors[0], 5)
    first = previous = matrix.matrix
    copies = 0
    for i in range(2000, 3000):
        matrix.put(i + 1, vectors[i])
        found = matrix.top(vectors[i], 1)
        assert found[0][0] == i + 1
        copies += not np.shares_memory(previous, matrix.matrix)
        previous = matrix.matrix
    assert copies <= 1  # the held rows are copied when the room runs out, not per write
    assert np.array_equal(matrix.matrix, vectors) and np.array_equal(
        matrix.nums, np.arange(1, 3001))
    assert np.array_equal(first, vectors[:2000])  # a view handed out earlier is unchanged


def test_a_dropped_workspace_takes_its_saved_graphs_and_a_leftover_goes_at_start(
        tmp_path: Path) -> None:
    """Over HTTP, threshold 100: a workspace scope and a normal scope each get a saved
    passage graph; deleting the workspace deletes its graph file and keeps the other. A
    graph file whose scope is gone (a drop a crash cut short, or cleared by another
    process) and a dead process's temporary file are removed at the next start, which
    still loads the live scope's graph."""
    home = tmp_path / "home"
    graphs = home / "index.db.graphs"
    env = {**ENV, "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "100"}

    def fill(m: Memory, scope: str) -> None:
        r = m.http.post("/episodes/batch", json={"scope": scope, "episodes": [
            {"source": f"doc:{i}", "acl": ["*"],
             "body": f"Nightjar budget {i}. " + " ".join(_body(i))} for i in range(300)]})
        assert r.status_code == 201, r.text

    with serving(home, env) as proc:
        bob = Memory(proc.url, "bob")
        r = bob.http.post("/workspaces", json={"name": "graphs", "ttl": "1d"})
        assert r.status_code == 201, r.text
        ws, normal = r.json()["id"], new_scope()
        fill(bob, normal)
        _settled(proc, bob, normal, lambda g: g["saved"] >= 1)
        kept = set(graphs.glob("passages-*.ann"))
        fill(bob, f"{ws}/team_1")
        _settled(proc, bob, f"{ws}/team_1", lambda g: g["saved"] >= 2)
        theirs = set(graphs.glob("passages-*.ann")) - kept
        assert len(kept) == len(theirs) == 1, (kept, theirs)
        leftover = (graphs / ("passages-" + "0" * 32 + ".ann"))
        leftover.write_bytes(next(iter(theirs)).read_bytes())
        gone = bob.http.delete(f"/workspaces/{ws}")
        assert gone.status_code == 200 and gone.json()["dropped"] is True, gone.text
        assert set(graphs.glob("*.ann")) == kept | {leftover}
        bob.close()
    dead_tmp = graphs / f"passages-{'1' * 32}.ann.{2 ** 22 + 7}.1.tmp"  # no such pid
    dead_tmp.write_bytes(b"torn")
    with serving(home, env) as proc:
        assert set(graphs.iterdir()) == kept
        m = Memory(proc.url, "bob")
        assert _settled(proc, m, normal, lambda g: g["loaded"] >= 1)["built"] == 0
        m.close()


def test_begun_rows_are_the_nearest_begun_rows_with_a_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a graph, a list of the rows begun at an instant (`top(begun_at=...)`) is the
    k nearest of those rows, as exact search gives them, whether the cost rule asks the
    graph for more or scores the begun rows alone: a few begun, half, nearly all."""
    import numpy as np

    from ampup_memory.search.index import common

    rng = np.random.default_rng(5)
    # row n begins at 10 (n - 1)
    vecs, graph, exact = _graph_and_exact(rng, lambda i: {"start": i * 10})
    for cost in (common.GROUP_COST, 1):  # 1: a graph candidate as cheap as a row
        monkeypatch.setattr(common, "GROUP_COST", cost)
        for q in rng.standard_normal((10, 32)).astype(np.float32):
            q /= np.linalg.norm(q)
            for at in (95, 14_990, 29_000, 10**9):
                begun_rows = [n for n in range(1, 3001) if (n - 1) * 10 <= at]
                best = sorted(((n, float(vecs[n - 1] @ q)) for n in begun_rows),
                              key=lambda h: (-h[1], h[0]))[:10]
                want = exact.top(q, 10, begun_at=at)
                assert sorted(n for n, _ in want) == sorted(n for n, _ in best)
                assert sorted(graph.top(q, 10, begun_at=at)) == sorted(want)


def test_pgvectors_ef_search_covers_k_within_its_valid_range() -> None:
    """One rule for the PostgreSQL store's and index's ``hnsw.ef_search``: pgvector refuses
    values outside 1..1000, and a value below k cuts an iterative scan's rounds short."""
    from ampup_memory.search.index.ann import PG_CELL_EF_FLOOR, PG_EF_SEARCH, pg_ef_search

    for k in (1, 10, 50, 100, 400, 999, 1000, 1001, 5000):
        ef = pg_ef_search(k)
        assert 1 <= ef <= 1000
        assert ef >= min(k, 1000)
        assert ef >= PG_EF_SEARCH[0]
        lower = pg_ef_search(k, PG_CELL_EF_FLOOR)  # the cell store's floor, no owner named
        assert 1 <= lower <= 1000 and lower >= min(k, 1000) and lower >= PG_CELL_EF_FLOOR
        assert lower == ef or k < PG_EF_SEARCH[0]
