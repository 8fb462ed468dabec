"""The HNSW graph over the AMP cell vectors (embedded SQLite store): with the threshold
forced low (1,000) it proposes the vector candidates of AMP search, over real HTTP, and
the answers stay those of exact search (threshold 0, same files): unfiltered, and for an
owner above the 5,000 cells ranked exactly in SQL, whose best cells must be found even
when every cell nearest the query is another owner's. The graph is saved and a restart
loads it; deleted and edited cells are never returned from their old vectors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET, serving
from tests.search_docs import unit_vectors

BIG = "user_big"  # 5,100 cells about warehouses and invoices
OTHER = "user_other"  # 1,100 cells about the garden and the kitchen, what queries ask
AGENT = "agent_t"
ENV = {**QUIET, "AMP_EMBEDDING_PROVIDER": "wordllama"}
GRAPH = {**ENV, "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "1000"}
EXACT = {**ENV, "AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS": "0"}

BIG_WORDS = ("warehouse invoice lease pallet forklift customs freight shipment berlin "
             "rotterdam container audit quarterly tariff depot").split()
OTHER_WORDS = ("garden tomato basil kitchen recipe soup oven harvest compost seedling "
               "watering pumpkin herbs bread dinner").split()
QUERIES = ["tomato soup recipe", "watering the seedlings", "pumpkin harvest dinner",
           "bread in the oven", "compost for the garden", "basil and herbs",
           "kitchen recipe for dinner", "garden harvest"]


NEW_TEXT = "zebra giraffe safari elephant"


def _text(words: list[str], i: int) -> str:
    picked = [words[(i * 7 + w * (1 + i % 5)) % len(words)] for w in range(3 + i % 4)]
    return " ".join(picked) + f" (note {i})"


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6,200 cells written in-process through AmpService.create (the server's own write
    path, embeddings in batches), then served over HTTP by the tests."""
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    home = tmp_path_factory.mktemp("amp-ann") / "home"
    rt = open_runtime(load_settings(home=str(home), embedding_provider="wordllama"))
    try:
        rt.store._conn().execute("PRAGMA synchronous=OFF")  # type: ignore[attr-defined]
        cells = [(BIG, _text(BIG_WORDS, i)) for i in range(5100)]
        cells += [(OTHER, _text(OTHER_WORDS, i)) for i in range(1100)]
        for start in range(0, len(cells), 1000):
            part = cells[start:start + 1000]
            vectors = rt.embedder.embed([t for _, t in part])
            for (owner, text), vector in zip(part, vectors, strict=True):
                body = {"type": "semantic", "content": {"text": text},
                        "identity": {"owner_id": owner, "owner_type": "user"}}
                rt.amp.create(AGENT, json.dumps(body).encode(), vector)
    finally:
        rt.close()
    return home


def _search(http: httpx.Client, query: str, owner: str | None = None) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"query": query, "limit": 10}
    if owner is not None:
        body["owner_id"] = owner
    r = http.post("/memories/search", json=body)
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def _graphs(proc: Any) -> dict[str, int]:
    r = httpx.get(f"{proc.url}/status", headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
    assert r.status_code == 200, r.text
    graphs: dict[str, int] = r.json()["stores"]["amp"]["graphs"]
    return graphs


def _settled(proc: Any, http: httpx.Client, *ready: str) -> dict[str, int]:
    """Search (a search starts the graph) until one of the counters ``ready`` moved and
    nothing is being built or saved."""
    before = _graphs(proc)
    end = time.monotonic() + 120
    while True:
        _search(http, QUERIES[0])
        graphs = _graphs(proc)
        if any(graphs[r] > before[r] for r in ready) and graphs["building"] == 0:
            time.sleep(0.5)  # a last save may still be queued
            return _graphs(proc)
        assert time.monotonic() < end, graphs
        time.sleep(0.2)


def _answers(http: httpx.Client) -> list[list[tuple[str, str]]]:
    return [[(c["id"], c["identity"]["owner_id"]) for c in _search(http, q, owner)]
            for q in QUERIES for owner in (None, BIG, OTHER)]


@pytest.fixture
def client() -> Iterator[Any]:
    def make(proc: Any) -> httpx.Client:
        return httpx.Client(base_url=proc.url + "/amp/v1", headers={"X-AMP-Agent-ID": AGENT},
                            timeout=60)
    yield make


def test_graph_answers_match_exact_search_with_and_without_an_owner(
        filled: Path, client: Any) -> None:
    """Graph vs exact at recall@10 >= 0.98; an owner's search returns that owner's best
    cells (before: the 200 nearest cells of all owners, filtered afterwards, held none of
    user_big's, so the search found nothing); a restart loads the saved graph."""
    with serving(filled, EXACT) as proc:
        http = client(proc)
        exact = _answers(http)
        assert _graphs(proc)["built"] == 0
        http.close()
    with serving(filled, GRAPH) as proc:
        http = client(proc)
        first = _settled(proc, http, "built")
        assert first == {"built": 1, "loaded": 0, "rejected": 0, "saved": 1, "building": 0}
        graph = _answers(http)
        r = httpx.get(f"{proc.url}/status", headers={"X-AMP-Admin-Token": ADMIN_TOKEN})
        memory = r.json()["stores"]["amp"]["vector_memory"]
        # 6,200 vectors of 256 dimensions, and the graph; no owner holds a block (the one
        # owner above 5,000 cells holds more than a quarter of them).
        assert memory["matrix"] >= 6200 * 256 * 4 and memory["graph"] > 0, memory
        assert memory["blocks"] == 0, memory
        http.close()
    hits = total = 0
    for got, want in zip(graph, exact, strict=True):
        hits += len({i for i, _ in got} & {i for i, _ in want})
        total += len(want)
    assert total == 10 * len(exact) and hits / total >= 0.98, hits / total
    for answers in (exact, graph):
        for n, found in enumerate(answers):
            owner = (None, BIG, OTHER)[n % 3]
            assert len(found) == 10
            assert all(o == (owner or OTHER) for _, o in found), (n, found)

    with serving(filled, GRAPH) as proc:
        http = client(proc)
        again = _settled(proc, http, "loaded")
        assert again == {"built": 0, "loaded": 1, "rejected": 0, "saved": 0, "building": 0}
        assert _answers(http) == graph
        http.close()


def test_deleted_and_edited_cells_are_never_returned_from_the_graph(
        filled: Path, client: Any) -> None:
    """A deleted cell is not returned, an edited one is found by its new text and not by
    its old one, before and after the graph is rebuilt from the changed rows."""
    with serving(filled, GRAPH) as proc:
        http = client(proc)
        _settled(proc, http, "loaded", "built")  # saved by the test above, if it ran
        query = "tomato soup recipe"
        top = [c["id"] for c in _search(http, query)]
        gone, edited = top[0], top[1]
        r = http.patch(f"/memories/{gone}", json={"lifecycle": {"status": "archived"}})
        assert r.status_code == 200, r.text
        r = http.delete(f"/memories/{gone}")
        assert r.status_code == 204, r.text
        r = http.patch(f"/memories/{edited}", json={"content": {"text": NEW_TEXT}})
        assert r.status_code == 200, r.text
        for rebuilt in (False, True):
            if rebuilt:
                _settled(proc, http, "built")
            ids = [c["id"] for c in _search(http, query)]
            assert gone not in ids and edited not in ids, ids
            assert edited in [c["id"] for c in _search(http, NEW_TEXT)]
            assert gone not in [c["id"] for q in QUERIES for c in _search(http, q, OTHER)]
        http.close()


def test_group_search_finds_the_groups_nearest_rows_by_graph_or_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`VectorMatrix.top(group=...)` (what an owner filter uses): a common group through
    the graph at recall@10 >= 0.98, a rare one scored exactly; never another group's row."""
    import numpy as np

    from ampup_memory.search.index import common
    from ampup_memory.search.index.common import VectorMatrix, dots

    # At 6,000 rows scoring a group exactly is cheaper than the graph (`group_candidates`);
    # a graph candidate made as cheap as a row sends the common group to the graph.
    monkeypatch.setattr(common, "GROUP_COST", 1)

    vecs = unit_vectors(6000, 32, 3)
    groups = np.where(np.arange(6000) % 10 < 7, 1, np.where(np.arange(6000) % 100 == 7, 2, 3))
    matrix = VectorMatrix(32, ann_min=1000)
    for i, (v, g) in enumerate(zip(vecs, groups, strict=True)):
        matrix.put(i + 1, v, group=int(g))
    queries = unit_vectors(40, 32, 4)
    matrix.top(queries[0], 10)
    matrix.wait(120)
    assert matrix.ann is not None
    for group, least in ((1, 0.98), (2, 1.0)):
        members = np.flatnonzero(groups == group)
        hits = 0
        for q in queries:
            got = {n for n, _ in matrix.top(q, 10, group=group)}
            sims = dots(vecs[members], q)
            want = {int(members[i]) + 1 for i in np.argsort(-sims)[:10]}
            assert all(groups[n - 1] == group for n in got)
            hits += len(got & want)
        assert hits / (10 * len(queries)) >= least, (group, hits)
    assert matrix.top(queries[0], 10, group=99) == []


def test_a_group_takes_the_cheaper_path_at_a_million_rows() -> None:
    """The path rule, with the costs measured at a million 256-d rows: the 8 % owner
    (80,000 cells, 2,500 graph candidates for 200 of its own) is scored in its own block
    (80,000 rows in place, about 8 ms, against 35 ms gathered and 97 through the graph;
    its first search gathers the rows into it), or gathered where it may have no block;
    rarer owners are gathered; half the rows, or a view's base segment, go to the graph."""
    from ampup_memory.search.index.common import group_candidates

    assert group_candidates(200, 80_000, 1_000_000, block=True) == ("block", 0)
    assert group_candidates(200, 80_000, 1_000_000, block=False) == ("block", 0)
    assert group_candidates(200, 80_000, 1_000_000) == ("gather", 0)
    assert group_candidates(200, 80_000, 1_000_000, graph=False, block=True) == ("block", 0)
    assert group_candidates(200, 20_000, 1_000_000) == ("gather", 0)
    assert group_candidates(200, 500_000, 1_000_000) == ("graph", 400)
    assert group_candidates(100, 990_000, 1_000_000) == ("graph", 102)
    assert group_candidates(100, 990, 1_000_000) == ("gather", 0)
    # Without a graph, a group of a quarter or more is scored in place with every row.
    assert group_candidates(100, 500_000, 1_000_000, graph=False) == ("scan", 0)


def _reference(vecs: Any, nums: Any, query: Any, k: int) -> list[tuple[int, float]]:
    """The ``k`` nearest of ``vecs`` by numpy (`dots`), ties to the lower number."""
    from ampup_memory.search.index.common import dots

    sims = dots(vecs, query)
    order = sorted(range(len(nums)), key=lambda i: (-float(sims[i]), int(nums[i])))[:k]
    return sorted((int(nums[i]), float(sims[i])) for i in order)


def test_a_groups_block_answers_like_exact_search_through_changes() -> None:
    """`VectorMatrix.top(group=...)` from a large group's block: the same rows and the
    same floats as numpy over the group's current vectors, after rows are added, changed
    and removed; a larger group's block displaces a smaller one's within the budget."""
    import numpy as np

    from ampup_memory.search.index.common import BLOCK_BUDGET, VectorMatrix

    n, dims = 20_000, 32
    vecs = unit_vectors(n + 300, dims, 5)
    # group 1: 10 % of the rows, group 2: 5 %, the rest spread over 40 small groups.
    groups = np.where(np.arange(n + 300) % 20 < 2, 1,
                      np.where(np.arange(n + 300) % 20 == 2, 2, 3 + np.arange(n + 300) % 40))
    matrix = VectorMatrix(dims)
    current = vecs.copy()
    for i in range(n):
        matrix.put(i + 1, vecs[i], group=int(groups[i]))
    queries = unit_vectors(5, dims, 6)

    def check(group: int) -> None:
        members = np.flatnonzero(groups[:len(matrix.pos)] == group)
        for q in queries:
            got = sorted(matrix.top(q, 50, group=group))
            assert got == _reference(current[members], members + 1, q, 50)

    check(2)
    assert set(matrix._blocks) == {2}
    check(1)  # 10 % + 5 % fit within a quarter of the rows: both kept
    assert set(matrix._blocks) == {1, 2}
    assert matrix.block_memory() >= (2000 + 1000) * dims * 4
    # Rows added (pending, then caught up by the block), changed in place and removed.
    for i in range(n, n + 300):
        matrix.put(i + 1, vecs[i], group=int(groups[i]))
    for num in (1, 2, 21, 40, n + 1, n + 2):  # rows of groups 1 and 2, old and new
        at = num - 1
        current[at] = queries[0] if num % 2 else -queries[1]
        matrix.put(num, current[at], group=int(groups[at]))
    for num in (22, 41, n + 21):
        matrix.remove(num)
        current[num - 1] = 0.0
    check(1)
    check(2)
    top = matrix.top(queries[0], 5, group=1)
    assert {num for num, _ in top} >= {1, 21, n + 1}
    # A group as large as the budget displaces the smaller blocks; a smaller one then
    # finds no room and is gathered, with the same answers.
    big = VectorMatrix(dims)
    owner = np.where(np.arange(n) % BLOCK_BUDGET == 0, 1, 2 + np.arange(n) % 2)
    owner = np.where(np.arange(n) % 20 == 1, 9, owner)
    for i in range(n):
        big.put(i + 1, vecs[i], group=int(owner[i]))
    big.top(queries[0], 10, group=9)
    assert set(big._blocks) == {9}
    big.top(queries[0], 10, group=1)
    assert set(big._blocks) == {1}
    members = np.flatnonzero(owner == 9)
    assert sorted(big.top(queries[1], 10, group=9)) == _reference(
        vecs[members], members + 1, queries[1], 10)
    assert set(big._blocks) == {1}


def test_a_large_owners_cells_are_its_exact_nearest_through_writes_and_a_restart(
        tmp_path: Path) -> None:
    """The cell store with an owner of a fifth of 26,000 cells (above the 5,000 ranked in
    SQL, so its vector step runs in the matrix, from the owner's block): its candidates
    are the owner's nearest cells with the cosines numpy gives over the stored vectors,
    after new cells, an edit (a new vector), an archive and a delete, an expiry, and a
    restart (the block is built again)."""
    import random

    import numpy as np

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    home = tmp_path / "home"

    def runtime() -> Any:
        return open_runtime(load_settings(home=str(home), embedding_provider="hash",
                                          search_ann_min_vectors=0))

    words = [f"w{i}" for i in range(300)]
    rng = random.Random(3)

    def create(rt: Any, owner: str, text: str | None = None) -> str:
        text = text or " ".join(rng.choice(words) for _ in range(6))
        body = {"type": "semantic", "content": {"text": text},
                "identity": {"owner_id": owner, "owner_type": "user"}}
        return str(rt.amp.create(AGENT, json.dumps(body).encode()).id)

    def check(rt: Any, text: str) -> dict[str, Any]:
        query = np.asarray(rt.embedder.embed([text])[0], dtype=np.float32)
        rows = rt.store._conn().execute(
            "SELECT seq, id, vec, status FROM cells WHERE owner_id = ?", (BIG,)).fetchall()
        vecs = np.vstack([np.frombuffer(r[2], dtype=np.float32) for r in rows])
        nearest = dict(_reference(vecs, np.asarray([r[0] for r in rows]), query, 200))
        want = {r[1]: nearest[r[0]] for r in rows if r[0] in nearest and r[3] == "active"}
        hits = rt.store.search_candidates(CellFilter(agent_id=AGENT, owner_id=BIG), [],
                                          [float(x) for x in query], 100)
        assert {h.cell_id: h.cosine for h in hits} == want
        assert rt.store.block_memory() >= len(rows) * len(query) * 4  # from the block
        memory = rt.store.vector_memory()
        assert memory["blocks"] == rt.store.block_memory()
        assert memory["matrix"] >= 26_000 * len(query) * 4
        return {h.cell_id: h for h in hits}

    rt = runtime()
    try:
        rt.store._conn().execute("PRAGMA synchronous=OFF")
        for i in range(26_000):
            create(rt, BIG if i % 5 == 0 else f"user_{i % 13}")
        query = "w1 w2 w3 w4 w5 w6"
        check(rt, query)
        fresh = create(rt, BIG, query)  # a new row, appended to the block
        assert fresh in check(rt, query)
        edited = next(iter(check(rt, "w7 w8 w9 w10 w11 w12")))
        rt.amp.patch(edited, AGENT, json.dumps({"content": {"text": query}}).encode())
        assert edited in check(rt, query)  # its row in the block took the new vector
        rt.amp.patch(fresh, AGENT, json.dumps({"lifecycle": {"status": "archived"}}).encode())
        rt.amp.delete(fresh, AGENT)
        assert fresh not in check(rt, query)
        past = "2020-01-01T00:00:00Z"
        rt.amp.patch(edited, AGENT,
                     json.dumps({"lifecycle": {"expires_at": past}}).encode())
        assert check(rt, query)[edited].decay.expires_at is not None  # scored 0 by decay
    finally:
        rt.close()
    rt = runtime()
    try:
        assert rt.store.block_memory() == 0
        found = check(rt, query)
        assert edited in found and fresh not in found
    finally:
        rt.close()


def test_hits_read_by_several_threads_are_the_hits_read_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search's 200 candidates' rows, read in shares by `HIT_READERS` threads (where
    its first rows read slowly, as from disk), are the rows one query reads: the same
    hits in the same order, the filters (status, owner, the access pushdown) applied to
    every share; closing the store ends the threads."""
    import threading

    from ampup_memory.amp.store import sqlite as store_module
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    rt = open_runtime(load_settings(home=str(tmp_path / "home"), embedding_provider="hash",
                                    search_ann_min_vectors=0))
    try:
        rt.store._conn().execute("PRAGMA synchronous=OFF")
        ids = []
        for i in range(600):
            body = {"type": "semantic", "content": {"text": f"note {i} on w{i % 17}"},
                    "identity": {"owner_id": f"user_{i % 3}", "owner_type": "user"},
                    "access_policy": {"public": i % 7 == 0}}
            ids.append(str(rt.amp.create(AGENT if i % 2 else "agent_other",
                                         json.dumps(body).encode()).id))
        for cell_id in ids[:600:9]:
            rt.amp.patch(cell_id, AGENT if ids.index(cell_id) % 2 else "agent_other",
                         json.dumps({"lifecycle": {"status": "archived"}}).encode())
        vector = rt.embedder.embed(["note on w3"])[0]
        filters = [CellFilter(agent_id=AGENT), CellFilter(agent_id=AGENT, owner_id="user_1")]
        # Read by this thread alone (no first rows read slowly)...
        monkeypatch.setattr(store_module, "HIT_SLOW_US", float("inf"))
        alone = [rt.store.search_candidates(f, ["w3"], vector, 100) for f in filters]
        assert not any(t.name.startswith("ampup-amp-hits") for t in threading.enumerate())
        # ... and in shares (every first rows read slowly).
        monkeypatch.setattr(store_module, "HIT_SLOW_US", -1.0)
        split = [rt.store.search_candidates(f, ["w3"], vector, 100) for f in filters]
        assert any(t.name.startswith("ampup-amp-hits") for t in threading.enumerate())
        assert len(split[0]) >= store_module.HIT_SPLIT + store_module.HIT_PROBE
        assert split == alone
        archived = set(ids[:600:9])
        for hits in split:
            assert not {h.cell_id for h in hits} & archived
            assert all(h.guard.public or h.guard.created_by == AGENT for h in hits)
    finally:
        rt.close()
    assert not any(t.name.startswith("ampup-amp-hits") for t in threading.enumerate())


def test_hits_are_read_from_the_narrow_index_alone_and_an_older_file_gets_it(
        tmp_path: Path) -> None:
    """The hits' rows are read from `cells_hits` alone (SQLite's plan says COVERING: no
    wide row is read), with every filter; a file made before the index gets it on open."""
    import sqlite3

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    home = tmp_path / "home"

    def runtime() -> Any:
        return open_runtime(load_settings(home=str(home), embedding_provider="hash",
                                          search_ann_min_vectors=0))

    rt = runtime()
    rt.close()
    with sqlite3.connect(home / "amp.db") as conn:  # the layout before the index
        conn.execute("DROP INDEX cells_hits")
    rt = runtime()
    try:
        for i in range(30):
            body = {"type": "semantic", "content": {"text": f"note {i} on w{i % 5}"},
                    "identity": {"owner_id": f"user_{i % 2}", "owner_type": "user"}}
            rt.amp.create(AGENT, json.dumps(body).encode())
        statements: list[str] = []
        conn = rt.store._conn()
        conn.set_trace_callback(statements.append)
        vector = rt.embedder.embed(["note on w3"])[0]
        for flt in (CellFilter(agent_id=AGENT), CellFilter(agent_id=AGENT, owner_id="user_1")):
            assert rt.store.search_candidates(flt, ["w3"], vector, 100)
        conn.set_trace_callback(None)
        reads = [s for s in statements if "INDEXED BY cells_hits" in s]
        assert len(reads) == 2, statements
        for sql in reads:
            plan = " ".join(str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert "COVERING INDEX cells_hits" in plan, plan
    finally:
        rt.close()
