"""PostgreSQL, over HTTP: a search filtered to an owner whose cells are too many to rank
exactly (the HNSW path) agrees with the exact ranking of that owner's cells."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from ampup_memory.amp.model import SearchRequest
from ampup_memory.amp.store import pg_owner_indexes, pg_postings, pg_words
from ampup_memory.amp.store import postgres as pg
from ampup_memory.amp.store.rows import columns
from ampup_memory.runtime import open_runtime
from ampup_memory.settings import load_settings
from tests.pg import PostgresFactory
from tests.server_process import ServerProcess

pytestmark = pytest.mark.postgres

AGENT = "agent_reader"
OWNER = "user_big"
OWNED = pg.OWNER_EXACT_LIMIT + 3000  # 25,200 readable: above the exact-ranking limit (HNSW path)
OTHERS = 300
WORDS = ("customer contact preference email invoice refund renewal discount call weekly"
         " status deploy checklist outage review slack thread survey office move planning"
         " backend python dashboard login onboarding guide billing finance").split()
# The hash embedder at 64 dimensions: the HNSW index over 25,000+ vectors builds in seconds.
DIMS = 64
QUERIES = ["customer contact preference email", "refund for the invoice",
           "deploy checklist after the outage"]


def body(rng: random.Random, n: int, owner: str, readable: bool) -> dict[str, object]:
    text = " ".join(rng.choice(WORDS) for _ in range(6)) + f" ticket {n} {rng.randrange(10**9)}"
    policy = {"readable_by": [AGENT]} if readable else {}
    return {"type": "semantic", "content": {"text": text},
            "identity": {"owner_id": owner, "owner_type": "user"}, "access_policy": policy}


def bulk_load(home: Path, uri: str) -> None:
    """Cells built by `AmpService.create` as usual, written by one ``COPY`` with the HNSW
    index dropped (the server builds it when it opens the store) and the keyword triggers
    off, their tables then filled by the store's own `pg_words.recount` and
    `pg_postings.refill` (what the triggers make: tests/test_amp_pg_words.py), as
    `pg_words` says to load in bulk: one cell at a time would take minutes for the 25,000+
    cells this needs, and an INSERT per row firing the triggers took 30 s."""
    rt = open_runtime(load_settings(home=str(home), store_uri=uri, embedding_provider="hash",
                                    embedding_dimensions=DIMS))
    rows: list[tuple[object, ...]] = []

    def create(stored: object, vector: list[float] | None) -> None:
        c = columns(stored)  # type: ignore[arg-type]
        rows.append(pg._params((c.id, c.access_count, c.last_accessed_at, *pg._written(c),
                                pg.vector_literal(vector) if vector is not None else None)))

    rt.store.create = create  # type: ignore[method-assign]
    rng = random.Random(11)
    # Most of the owner's cells are readable by AGENT; every 10th is not (filtered out on
    # the HNSW path as on the exact one), and 300 cells belong to other owners.
    specs = [(OWNER, i % 10 != 0) for i in range(OWNED)] + [
        (f"user_{i % 7}", True) for i in range(OTHERS)]
    rng.shuffle(specs)
    bodies = [body(rng, n, owner, readable) for n, (owner, readable) in enumerate(specs)]
    vectors = rt.embedder.embed([str(b["content"]["text"]) for b in bodies])  # type: ignore[index]
    for b, v in zip(bodies, vectors, strict=True):
        rt.amp.create("agent_loader", json.dumps(b).encode(), list(v))
    d = rt.embedder.dimensions
    rt.close()
    # The store's own triggers, so none is named here.
    triggers = [pg_words.trigger_name(s) for s in (*pg_words.TRIGGERS, *pg_postings.TRIGGERS)]
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"DROP INDEX cells_embedding_hnsw_{d}")
        with conn.transaction():
            for name in triggers:
                conn.execute(f"ALTER TABLE cells DISABLE TRIGGER {name}")  # ours, constant
            with conn.cursor() as cur, cur.copy(
                    f"COPY cells (id, access_count, last_accessed_at, {pg._WRITE_COLS},"
                    " embedding) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            for name in triggers:
                conn.execute(f"ALTER TABLE cells ENABLE TRIGGER {name}")
            pg_words.recount(conn)
            pg_postings.refill(conn)
        conn.execute("ANALYZE cells")


@pytest.fixture(scope="module")
def loaded(postgres: PostgresFactory, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, Path, str]]:
    uri = postgres.new_database("ownerhnsw")
    home = tmp_path_factory.mktemp("ownerhnsw")
    bulk_load(home, uri)
    srv = ServerProcess(home, env={"AMP_STORE_URI": uri, "AMP_LIFECYCLE_ENABLED": "0",
                                     "AMP_EMBEDDING_PROVIDER": "hash",
                                     "AMP_EMBEDDING_DIMENSIONS": str(DIMS)})
    srv.start(timeout=180)
    try:
        yield srv.url + "/amp/v1", home, uri
    finally:
        srv.stop()


def test_owner_search_on_the_hnsw_path_agrees_with_the_exact_ranking(
    loaded: tuple[str, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, home, uri = loaded
    with psycopg.connect(uri, autocommit=True) as conn:
        readable = {r[0] for r in conn.execute(
            "SELECT id FROM cells WHERE owner_id = %s AND (public OR has_readers)",
            (OWNER,)).fetchall()}
    assert len(readable) > pg.OWNER_EXACT_LIMIT, "the owner's cells must take the HNSW path"

    # The exact ranking of the same requests: the same service, in this process, with
    # every filtered set ranked exactly.
    monkeypatch.setattr(pg, "OWNER_EXACT_LIMIT", 10**9)
    rt = open_runtime(load_settings(home=str(home), store_uri=uri, embedding_provider="hash",
                                    embedding_dimensions=DIMS))
    try:
        with httpx.Client(base_url=base, headers={"X-AMP-Agent-ID": AGENT}, timeout=60) as c:
            for query in QUERIES:
                for limit in (10, 25):
                    ask = {"query": query, "limit": limit, "owner_id": OWNER}
                    r = c.post("/memories/search", json=ask)
                    assert r.status_code == 200, r.text
                    got = [cell["id"] for cell in r.json()["results"]]
                    exact = rt.amp.search(AGENT, SearchRequest.model_validate(ask))
                    want = [cell["id"] for cell in exact["results"]]
                    assert len(want) == len(got) == limit
                    # The filter holds on the graph's path exactly: only the owner's cells
                    # the agent may read. The ranking is approximate there (pgvector's
                    # graph is built at random), so it agrees with the exact one at 0.88 or
                    # more (measured 0.92 to 1.0 at this size).
                    assert set(got) <= readable, (query, limit)
                    assert len(set(got) & set(want)) >= 0.88 * limit, (query, limit, got, want)
    finally:
        rt.close()


def _index_state(conn: psycopg.Connection[tuple[object, ...]], name: str
                 ) -> tuple[bool, str, int] | None:
    """(valid, access method, scans so far) of the index ``name``; None if there is none."""
    row = conn.execute(
        "SELECT i.indisvalid, a.amname, coalesce(s.idx_scan, 0) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
        " LEFT JOIN pg_stat_user_indexes s ON s.indexrelid = i.indexrelid"
        " WHERE i.indexrelid = to_regclass(%s)", (name,)).fetchone()
    return None if row is None else (bool(row[0]), str(row[1]), int(row[2]))  # type: ignore[call-overload]


def test_the_owner_gets_a_vector_index_of_its_own_and_its_searches_use_it(
    loaded: tuple[str, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: `serve`'s timer gives the owner over the limit a partial HNSW index,
    first dropping the invalid one a build cut short left under its name; searches naming
    the owner are planned with its value (never prepared), so they scan that index; the
    answers keep the filter and agree with the exact ranking; `ampup-memory owner-indexes`
    reports it kept."""
    base, home, uri = loaded
    name = pg_owner_indexes.index_name(OWNER, DIMS)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("INSERT INTO cell_owner_indexes (name, owner_id, dimensions)"
                     " VALUES (%s, %s, %s)", (name, OWNER, DIMS))
        with pytest.raises(psycopg.errors.UniqueViolation):  # leaves an invalid index
            conn.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {name} ON cells (owner_id)"
                         f" WHERE owner_id = '{OWNER}'")
        assert _index_state(conn, name) == (False, "btree", 0)
        readable = {r[0] for r in conn.execute(
            "SELECT id FROM cells WHERE owner_id = %s AND (public OR has_readers)",
            (OWNER,)).fetchall()}
    env = {"AMP_STORE_URI": uri, "AMP_LIFECYCLE_ENABLED": "0",
           "AMP_EMBEDDING_PROVIDER": "hash", "AMP_EMBEDDING_DIMENSIONS": str(DIMS)}
    srv = ServerProcess(tmp_path / "second", env={**env, "AMP_OWNER_INDEX_INTERVAL_SECONDS": "1"})
    srv.start(timeout=180)
    try:
        deadline = time.monotonic() + 240
        with psycopg.connect(uri, autocommit=True) as conn:
            while (state := _index_state(conn, name)) is None or state[:2] != (True, "hnsw"):
                assert time.monotonic() < deadline, state
                time.sleep(0.5)
            scans_before = state[2]
        with httpx.Client(base_url=srv.url + "/amp/v1", headers={"X-AMP-Agent-ID": AGENT},
                          timeout=60) as c:
            got = {}
            for n in range(12):  # past psycopg's 5 runs of a statement, after which it prepares
                ask = {"query": QUERIES[n % 3], "limit": 10, "owner_id": OWNER}
                r = c.post("/memories/search", json=ask)
                assert r.status_code == 200, r.text
                got[QUERIES[n % 3]] = [cell["id"] for cell in r.json()["results"]]
        # Statistics reach the view when a backend has been idle a moment.
        with psycopg.connect(uri, autocommit=True) as conn:
            while (state := _index_state(conn, name)) is not None and state[2] < scans_before + 12:
                assert time.monotonic() < deadline + 60, state
                time.sleep(0.5)
    finally:
        srv.stop()

    monkeypatch.setattr(pg, "OWNER_EXACT_LIMIT", 10**9)  # the exact ranking, in this process
    rt = open_runtime(load_settings(home=str(home), store_uri=uri, embedding_provider="hash",
                                    embedding_dimensions=DIMS))
    try:
        for query, ids in got.items():
            exact = rt.amp.search(AGENT, SearchRequest.model_validate(
                {"query": query, "limit": 10, "owner_id": OWNER}))
            want = [cell["id"] for cell in exact["results"]]
            assert set(ids) <= readable and len(ids) == 10, query
            assert len(set(ids) & set(want)) >= 8, (query, ids, want)  # approximate: a graph
    finally:
        rt.close()
    monkeypatch.undo()

    # The statement the store sends, as it sends it: planned with the owner's value, the
    # owner's index; another owner's statement is left to psycopg to prepare.
    sent: list[tuple[str, tuple[object, ...], bool | None]] = []
    plain = pg.PostgresStore._execute

    def capture(conn: pg.Conn, sql: str, params: object = (),
                prepare: bool | None = None) -> psycopg.Cursor[object]:
        if "AS small" in sql:
            sent.append((sql, pg._params(params), prepare))  # type: ignore[arg-type]
        return plain(conn, sql, params, prepare)  # type: ignore[arg-type]

    monkeypatch.setattr(pg.PostgresStore, "_execute", staticmethod(capture))
    rt = open_runtime(load_settings(home=str(home), store_uri=uri, embedding_provider="hash",
                                    embedding_dimensions=DIMS))
    try:
        for owner in (OWNER, "user_1"):
            rt.amp.search(AGENT, SearchRequest.model_validate(
                {"query": QUERIES[0], "limit": 10, "owner_id": owner}))
    finally:
        rt.close()
    assert [p for _, _, p in sent] == [False, None]
    # The owner's graph holds only its cells: it is searched as the whole-table graph is
    # without an owner, exactly only up to the shared limit; another owner up to its own.
    assert [params[0] for _, params, _ in sent] == [pg.EXACT_LIMIT, pg.OWNER_EXACT_LIMIT]
    with psycopg.connect(uri, autocommit=True) as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + sent[0][0], sent[0][1], prepare=False).fetchall())
    assert f"Index Scan using {name}" in plan, plan

    done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "owner-indexes"],
                          env={**os.environ, "AMPUP_MEMORY_HOME": str(tmp_path / "cli"), **env},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"built": [], "dropped": [], "kept": [OWNER],
                                       "failed": [], "skipped": False}


def test_a_build_cut_short_is_dropped_and_made_again(loaded: tuple[str, Path, str]) -> None:
    """A build cancelled midway (an operator's `pg_cancel_backend`, a failover) leaves an
    invalid index that every write would still keep up to date: the pass drops it,
    reports the owner `failed`, and the next pass builds it."""
    _, _, uri = loaded
    name = pg_owner_indexes.index_name(OWNER, DIMS)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP INDEX IF EXISTS "{name}"')
        conn.execute("DELETE FROM cell_owner_indexes")
    store = pg.PostgresStore(uri, DIMS)
    cancelled = threading.Event()

    def cancel() -> None:
        with psycopg.connect(uri, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                    " AND query LIKE 'CREATE INDEX CONCURRENTLY%%'").fetchone()
                if row is not None:
                    time.sleep(0.2)  # into the build
                    conn.execute("SELECT pg_cancel_backend(%s)", row)
                    cancelled.set()
                    return
                time.sleep(0.02)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        first = store.tend_owner_indexes()
        canceller.join()
        assert cancelled.is_set()
        assert first is not None and first.failed == [OWNER] and first.built == [], first
        with psycopg.connect(uri, autocommit=True) as conn:
            assert _index_state(conn, name) is None  # dropped, not left invalid
        second = store.tend_owner_indexes()
        assert second is not None and second.built == [OWNER], second
        with psycopg.connect(uri, autocommit=True) as conn:
            state = _index_state(conn, name)
            assert state is not None and state[:2] == (True, "hnsw")
    finally:
        canceller.join()
        store.close()
