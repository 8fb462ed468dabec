"""Planning cost of statements on ``cells`` beside N large owners' own HNSW indexes
(`pg_owner_indexes`): each statement the store sends unprepared is planned against every
partial index's predicate.

    PYTHONPATH=src python benchmarks/pg_owner_index_planning.py --url URL \
        [--owners 201 --per-owner 100 --at 10,40,100,200]

``URL``: any database on a PostgreSQL server with pgvector; the benchmark makes and drops
a database ``plan40`` there: ``--per-owner`` cells of random unit vectors (default 500)
for each of ``--owners`` owners (default 41), then partial HNSW indexes of the store's
form, recorded as the store records them, for 10 and for 40 of them (``--at``). At 0
and each count of indexes: the median planning time (30 runs) of an unprepared join on
``cells`` (the form of the keyword step's statement), and the median of 50 timed
`search_candidates` calls (after 10 untimed), unfiltered, for an owner with no index and
for one with its own (sent unprepared, as the store sends it); then the same with the
indexes dropped again ("0 again": what the order alone moved). Prints one JSON line
(docs/performance.md, sessions 25 and 26).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from typing import Any

import numpy as np
import psycopg
import ulid

from ampup_memory.amp.store import pg_owner_indexes
from ampup_memory.amp.store import postgres as pg
from ampup_memory.amp.store.base import CellFilter
from ampup_memory.search.index.ann import GraphParams

D = 256
WORDS = "tea train boat map rain paint music bread chess kite lamp road".split()
GUARD = json.dumps({"created_by": "a", "owner_id": "x", "public": True, "readable_by": []})
INSERT = (
    "INSERT INTO cells (id, type, owner_id, created_by, status, public, has_readers,"
    " access_count, last_accessed_at, text, doc, guard, importance, confidence, decay_rate,"
    " created_at, last_updated_at, embedding) VALUES (%s, 'semantic', %s, 'a', 'active',"
    " true, false, 0, now(), %s, '{}', %s, 0.5, 0.5, 0.01, now(), now(), %s::vector)")
JOIN = ("EXPLAIN (SUMMARY ON, FORMAT JSON) SELECT c.id FROM (SELECT id FROM cells"
        " WHERE owner_id = %s LIMIT 10) k JOIN cells c ON c.id = k.id")


def unit(rng: np.random.Generator) -> list[float]:
    v = rng.standard_normal(D).astype(np.float32)
    return [float(x) for x in v / np.linalg.norm(v)]


def measured(store: pg.PostgresStore, uri: str, rng: np.random.Generator) -> dict[str, Any]:
    q = unit(rng)
    out: dict[str, Any] = {}
    for name, flt in (("unfiltered_ms", CellFilter(agent_id="a")),
                      ("owner_without_index_ms", CellFilter(agent_id="a", owner_id="user_0")),
                      ("owner_with_index_ms", CellFilter(agent_id="a", owner_id="user_1"))):
        store._owner_indexes = (float("-inf"), frozenset())  # read which have one now
        times = []
        for _ in range(60):
            t = time.perf_counter()
            store.search_candidates(flt, ["tea", "train"], q, 100)
            times.append((time.perf_counter() - t) * 1000)
        out[name] = round(statistics.median(times[10:]), 3)
    with psycopg.connect(uri, autocommit=True) as conn:
        plans = [conn.execute(JOIN, ("user_0",), prepare=False).fetchone()[0][0]  # type: ignore[index]
                 ["Planning Time"] for _ in range(30)]
    out["join_planning_ms"] = round(statistics.median(plans), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--owners", type=int, default=41)
    parser.add_argument("--per-owner", type=int, default=500)
    parser.add_argument("--at", default="10,40")
    args = parser.parse_args()
    owners_n, at = args.owners, {int(n) for n in args.at.split(",")}

    def database(name: str) -> str:
        return re.sub(r"(@[^/?]*/)[^?]*", rf"\g<1>{name}", args.url, count=1)

    with psycopg.connect(database("postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS plan40")
        conn.execute("CREATE DATABASE plan40")
    uri = database("plan40")
    store = pg.PostgresStore(uri, D, ann_params=GraphParams(32, 128))
    rng, pick = np.random.default_rng(1), random.Random(1)
    owners = [f"user_{i}" for i in range(owners_n)]
    rows = [(f"mem_{ulid.ULID()}", owners[i % owners_n],
             " ".join(pick.choice(WORDS) for _ in range(6)), GUARD, pg.vector_literal(unit(rng)))
            for i in range(args.per_owner * owners_n)]
    try:
        with psycopg.connect(uri, autocommit=True) as conn:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(INSERT, rows)
            conn.execute("ANALYZE cells")
        result = {"0": measured(store, uri, rng)}
        with psycopg.connect(uri, autocommit=True) as conn:
            for n in range(1, owners_n):
                name = pg_owner_indexes.index_name(owners[n], D)
                conn.execute("INSERT INTO cell_owner_indexes (name, owner_id, dimensions)"
                             " VALUES (%s, %s, %s)", (name, owners[n], D))
                conn.execute(psycopg.sql.SQL(
                    "CREATE INDEX {} ON cells USING hnsw ((embedding::vector(256))"
                    " vector_cosine_ops) WITH (m = 32, ef_construction = 128)"
                    " WHERE vector_dims(embedding) = 256 AND owner_id = {}").format(
                        psycopg.sql.Identifier(name), psycopg.sql.Literal(owners[n])))
                if n in at:
                    conn.execute("ANALYZE cells")
                    result[str(n)] = measured(store, uri, rng)
            for n in range(1, owners_n):  # and without them again: what time alone moved
                conn.execute(psycopg.sql.SQL("DROP INDEX {}").format(psycopg.sql.Identifier(
                    pg_owner_indexes.index_name(owners[n], D))))
            conn.execute("DELETE FROM cell_owner_indexes")
            conn.execute("ANALYZE cells")
            result["0 again"] = measured(store, uri, rng)
        print(json.dumps(result))
    finally:
        store.close()
        with psycopg.connect(database("postgres"), autocommit=True) as conn:
            conn.execute("DROP DATABASE plan40 WITH (FORCE)")


if __name__ == "__main__":
    main()
