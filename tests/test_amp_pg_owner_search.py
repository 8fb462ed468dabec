"""PostgreSQL, over HTTP: a search filtered to an owner whose cells are too many to rank
exactly (the HNSW path) agrees with the exact ranking of that owner's cells."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from ampup_memory.amp.model import SearchRequest
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
    """Cells built by `AmpService.create` as usual, written in batches with the HNSW index
    dropped (the server builds it when it opens the store): one at a time would take
    minutes for the 25,000+ cells this needs."""
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
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"DROP INDEX cells_embedding_hnsw_{d}")
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO cells (id, access_count, last_accessed_at, {pg._WRITE_COLS},"
                f" embedding) VALUES (%s, %s, %s, {pg._WRITE_MARKS}, %s::vector)", rows)
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
