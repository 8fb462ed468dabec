"""PostgreSQL: what one lifecycle move of an AMP cell costs the server, part by part.

`lifecycle_moves.py` times whole passes; this one takes a move apart. A store of
``--cells`` cells is made once as `lifecycle_moves.py` makes them (pieces of real English
text from the installed packages' docstrings, WordLlama vectors, seven owners, each cell
made by `AmpService.create`), but written in bulk: the rows `create` would insert are
sent in batches with the HNSW index, the GIN index and the keyword triggers left off,
then the store is opened again and its own DDL makes them (the postings and word counts
written in one pass). ``VACUUM ANALYZE`` and a checkpoint follow. Each variant in
``--variants`` is a copy of that database (``CREATE DATABASE … TEMPLATE``) with one
suspect removed:

- ``base``: the store as made;
- ``no_hnsw``: the whole-table HNSW index dropped;
- ``no_gin``: the GIN index on ``tsv`` dropped;
- ``no_postings``: the trigger that rewrites a cell's postings on an UPDATE dropped;
- ``no_status_btrees``: ``cells_status_id`` dropped and ``cells_owner_filter`` made
  without ``status`` (``(owner_id, id) INCLUDE (…)``), so no index of ``cells`` holds
  ``status`` and a move can be a heap-only (HOT) update;
- ``hot_no_postings``: both of the last two.

On each copy, ``--rounds`` rounds: ``--moves`` random cells (seeded) moved by the store's
own `PostgresStore.set_statuses` (each move its own transaction, no disk wait), first
active → stale, then the same cells stale → archived, and so on. Per round: the server's
CPU (every server process's utime + stime from /proc: backends, WAL writer, checkpointer;
autovacuum is off on the copy during the moves), the HOT updates among them
(``pg_stat_user_tables``), wall time; then a ``VACUUM`` of ``cells`` and
``cell_postings``, its server CPU apart (the dead entries each move leaves, cleaned up
later by autovacuum in service). After the rounds, ``--queries`` held-out pieces through
the store's candidate steps (`cases`: an owner's cells and every cell, by vector, words
and both; listing pages; lifecycle pages), once untimed, then timed: server CPU per
query, and a digest of the answers by the cells' texts, so that two loads (another code
version's, in a worktree) compare. ``--owner-indexes``: the owners over 5,000 cells get
their own HNSW index first, as a server's tending makes them.

    PYTHONPATH=src:. python -m benchmarks.pg_move_cost --cells 20000 --moves 2000 \\
        --out benchmarks/results/pg_move_cost_20k_s29.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from ampup_memory.amp.model import Status
from ampup_memory.amp.service import AmpService, ScoringLimit
from ampup_memory.amp.store import postgres as pg
from ampup_memory.amp.store.base import CellFilter, Hit, StatusMove
from ampup_memory.amp.store.registry import open_store
from ampup_memory.amp.store.rows import columns
from ampup_memory.search.embed import build_embedder
from ampup_memory.search.tokenize import query_terms
from ampup_memory.settings import load_settings
from benchmarks.lifecycle_moves import _data_dir, texts
from benchmarks.pg_cell_speed import server_ticks, spent_ms

VARIANTS: dict[str, tuple[str, ...]] = {
    "base": (),
    # Every HNSW index: the whole table's and the large owners' own.
    "no_hnsw": ("DO $$ DECLARE i text; BEGIN FOR i IN SELECT c.relname FROM pg_index x"
                " JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_am a ON a.oid = c.relam"
                " WHERE x.indrelid = 'cells'::regclass AND a.amname = 'hnsw' LOOP"
                " EXECUTE format('DROP INDEX %I', i); END LOOP; END $$",),
    "no_gin": ("DROP INDEX cells_tsv",),
    "no_postings": ("DROP TRIGGER cell_postings_rewritten ON cells",),
    "no_status_btrees": (
        "DROP INDEX cells_status_id",
        "DROP INDEX cells_owner_filter",
        "CREATE INDEX cells_owner_filter ON cells (owner_id, id)"
        " INCLUDE (type, public, has_readers, created_by)",
    ),
}
VARIANTS["hot_no_postings"] = VARIANTS["no_status_btrees"] + VARIANTS["no_postings"]


def bulk_fill(url: str, corpus: list[str], owner_indexes: bool) -> dict[str, float]:
    """The cells of ``corpus`` in the store at ``url``, as `lifecycle_moves.fill` makes
    them, written in bulk; the store's indexes and triggers made after, by its own DDL."""
    settings = load_settings()
    embedder = build_embedder(settings)
    store = open_store(url, embedder.dimensions, ann_params=settings.ann_params)
    assert isinstance(store, pg.PostgresStore)
    d = embedder.dimensions
    rows: list[tuple[Any, ...]] = []

    def create(stored: Any, vector: list[float] | None) -> None:
        c = columns(stored)
        rows.append(pg._params((c.id, c.access_count, c.last_accessed_at, *pg._written(c),
                                pg.vector_literal(vector) if vector is not None else None)))

    store.create = create  # type: ignore[method-assign]
    amp = AmpService(store=store, embedder=embedder, scoring_limit=ScoringLimit(0, 0))
    sql = (f"INSERT INTO cells (id, access_count, last_accessed_at, {pg._WRITE_COLS},"
           f" embedding) VALUES (%s, %s, %s, {pg._WRITE_MARKS}, %s::vector)")
    took: dict[str, float] = {}
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in (f"DROP INDEX cells_embedding_hnsw_{d}", "DROP INDEX cells_tsv",
                          "DROP TRIGGER cell_postings_written ON cells",
                          "DROP TRIGGER cell_postings_rewritten ON cells",
                          "DROP TRIGGER cell_words_written ON cells",
                          "DROP TRIGGER cell_words_rewritten ON cells"):
            conn.execute(statement)
        for i in range(0, len(corpus), 1000):
            chunk = corpus[i:i + 1000]
            for k, (text, vector) in enumerate(zip(chunk, embedder.embed(chunk), strict=True)):
                body = {"type": "semantic", "content": {"text": text},
                        "identity": {"owner_id": f"user_{(i + k) % 7}", "owner_type": "user"}}
                amp.create("bench", json.dumps(body).encode(), vector)
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(sql, rows)
            rows.clear()
    store.close()
    took["rows_s"] = time.perf_counter() - started
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET maintenance_work_mem = '1GB'")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)
    store = open_store(url, d, ann_params=settings.ann_params)  # indexes, triggers
    took["indexes_s"] = time.perf_counter() - started
    if owner_indexes:  # as a server's tending makes them for owners over 5,000 cells
        started = time.perf_counter()
        report = store.tend_owner_indexes()
        took["owner_indexes_s"] = time.perf_counter() - started
        print("owner indexes:", report, flush=True)
    store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
    return {k: round(v, 1) for k, v in took.items()}


def copy_of(admin: psycopg.Connection[Any], template: str, name: str) -> None:
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


def relation_sizes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
        " AND c.relkind IN ('r', 'i') ORDER BY 2 DESC").fetchall()}


def hot_counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                       " WHERE relname = 'cells'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _unprepared(url: str, d: int) -> pg.PostgresStore:
    """The store at ``url`` opened without its DDL (which would make again what a variant
    dropped)."""
    prepare = pg.PostgresStore._create_schema
    pg.PostgresStore._create_schema = lambda self: True  # type: ignore[method-assign]
    try:
        return pg.PostgresStore(url, d)
    finally:
        pg.PostgresStore._create_schema = prepare  # type: ignore[method-assign]


OWNER = "user_3"


def cases(queries: list[tuple[list[str], list[float]]]) -> dict[str, Any]:
    """What a search or a listing asks of the store, by name: each a function of the
    store and one query (its words, its vector)."""
    live, archived = (Status.active,), (Status.archived,)
    return {
        "owner_vector": lambda s, t, v: s.search_candidates(
            CellFilter("bench", live, OWNER), [], v, 100),
        "owner_words_vector": lambda s, t, v: s.search_candidates(
            CellFilter("bench", live, OWNER), t, v, 100),
        "all_vector": lambda s, t, v: s.search_candidates(CellFilter("bench", live), [], v, 100),
        "all_words": lambda s, t, v: s.search_candidates(CellFilter("bench", live), t, None, 100),
        "list_active": lambda s, t, v: s.list_candidates(CellFilter("bench", live), None, 51),
        "list_owner_active": lambda s, t, v: s.list_candidates(
            CellFilter("bench", live, OWNER), None, 51),
        "list_archived": lambda s, t, v: s.list_candidates(
            CellFilter("bench", archived), None, 51),
        "lifecycle_batch": lambda s, t, v: s.lifecycle_batch(None, 500),
    }


def searches(url: str, data_dir: str, d: int,
             queries: list[tuple[list[str], list[float]]]) -> dict[str, Any]:
    """Each of `cases` over ``queries``, once untimed, then timed: wall p50 and the
    server's CPU per query, and a digest of the answers (ids, scores rounded) to compare
    variants by."""
    store = _unprepared(url, d)
    with psycopg.connect(url) as conn:  # ids differ between loads; texts do not
        texts = {str(r[0]): str(r[1])[:12] for r in conn.execute(
            "SELECT id, md5(text) FROM cells").fetchall()}
    out: dict[str, Any] = {}
    try:
        for name, case in cases(queries).items():
            answers = [case(store, t, v) for t, v in queries]
            walls = []
            before = server_ticks(data_dir)
            for t, v in queries:
                started = time.perf_counter()
                case(store, t, v)
                walls.append((time.perf_counter() - started) * 1000)
            server = spent_ms(before, server_ticks(data_dir)) / len(queries)
            digest = hashlib.sha256(json.dumps([_digest(a, texts) for a in answers]).encode())
            out[name] = {"wall_p50_ms": round(statistics.median(walls), 2),
                         "server_cpu_ms": round(server, 2), "answers": digest.hexdigest()[:12]}
            print("  ", name, json.dumps(out[name]), flush=True)
    finally:
        store.close()
    return out


def _digest(answer: list[Any], texts: dict[str, str]) -> list[Any]:
    """An answer by its cells' texts (their ids are made anew by each load)."""
    if answer and isinstance(answer[0], Hit):
        return sorted((texts[h.cell_id], round(h.keyword, 6), round(h.cosine or 0, 6))
                      for h in answer)
    return [texts[getattr(a, "cell_id", None) or a.cell.id] for a in answer]


def measure(url: str, data_dir: str, variant: str, d: int, moves: int, rounds: int,
            seed: int, queries: list[tuple[list[str], list[float]]]) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in VARIANTS[variant]:
            conn.execute(statement.format(d=d))
        conn.execute("ALTER TABLE cells SET (autovacuum_enabled = false)")
        conn.execute("ALTER TABLE cell_postings SET (autovacuum_enabled = false)")
        conn.execute("VACUUM ANALYZE cells")
        conn.execute("CHECKPOINT")
        ids = [str(r[0]) for r in conn.execute("SELECT id FROM cells ORDER BY id").fetchall()]
        sizes = relation_sizes(conn)
    picked = random.Random(seed).sample(ids, moves)
    out: dict[str, Any] = {"variant": variant, "rounds": [],
                           "sizes_mb": {k: round(v / 2**20, 1) for k, v in sizes.items()}}
    with psycopg.connect(url, autocommit=True) as watch:
        for r in range(rounds):
            status, days = ((Status.stale, 60), (Status.archived, 100))[r % 2]
            now = datetime.now(UTC) + timedelta(days=days)
            # A store per round: its backends' statistics reach pg_stat_user_tables when
            # they end (their CPU is read before).
            store = _unprepared(url, d)
            try:
                batch = [StatusMove(c, status, now if status is Status.stale else None)
                         for c in store.get_many(picked)]
                upd0, hot0 = hot_counts(watch)
                before = server_ticks(data_dir)
                started = time.perf_counter()
                moved = store.set_statuses(batch)
                wall = time.perf_counter() - started
                server = spent_ms(before, server_ticks(data_dir))
            finally:
                store.close()
            time.sleep(1.0)
            upd1, hot1 = hot_counts(watch)
            before = server_ticks(data_dir)
            started = time.perf_counter()
            watch.execute("VACUUM cells")
            watch.execute("VACUUM cell_postings")
            if watch.execute("SELECT to_regclass('cell_filters')").fetchone() != (None,):
                watch.execute("VACUUM cell_filters")  # a version with `pg_filters`
            vac_wall = time.perf_counter() - started
            vac = spent_ms(before, server_ticks(data_dir))
            out["rounds"].append({
                "to": status.value, "moved": len(moved), "wall_s": round(wall, 2),
                "server_cpu_ms_per_move": round(server / len(moved), 3),
                "hot": hot1 - hot0, "updates": upd1 - upd0,
                "vacuum_wall_s": round(vac_wall, 2),
                "vacuum_cpu_ms_per_move": round(vac / len(moved), 3),
                "load": round(os.getloadavg()[0], 2)})
            print(variant, json.dumps(out["rounds"][-1]), flush=True)
    if queries:
        out["searches"] = searches(url, data_dir, d, queries)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, default=20_000)
    parser.add_argument("--moves", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the variants")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--queries", type=int, default=60,
                        help="held-out pieces searched on each copy after its moves (0: none)")
    parser.add_argument("--owner-indexes", action="store_true",
                        help="the owners over 5,000 cells get their own HNSW index first")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from tests.pg import postgres_factory

    # Stopped (kill -TERM), it stops its embedded server on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    corpus = texts(args.cells + args.queries)
    held = corpus[args.cells:]
    corpus = corpus[:args.cells]
    embedder = build_embedder(load_settings())
    queries = list(zip([query_terms(t) for t in held], embedder.embed(held), strict=True))
    results: dict[str, Any] = {"cells": args.cells, "moves": args.moves,
                               "load_at_start": os.getloadavg()[0], "runs": []}
    with postgres_factory() as factory:
        data_dir = _data_dir(factory.admin_url)
        base = factory.new_database("movebase")
        d = embedder.dimensions
        results["fill"] = bulk_fill(base, corpus, args.owner_indexes)
        with psycopg.connect(factory.admin_url, autocommit=True) as admin:
            results["server"] = {k: str(admin.execute(f"SHOW {k}").fetchone()[0])  # type: ignore[index]
                                 for k in ("server_version", "shared_buffers",
                                           "maintenance_work_mem")}
            print(json.dumps(results), flush=True)
            template = urlsplit(base).path.lstrip("/")
            for rep in range(args.repeat):
                for variant in args.variants.split(","):
                    name = f"move_{variant}"
                    copy_of(admin, template, name)
                    run = measure(factory.url_for(name), data_dir, variant, d, args.moves,
                                  args.rounds, seed=rep, queries=queries)
                    run["repeat"] = rep
                    results["runs"].append(run)
                    admin.execute(f'DROP DATABASE "{name}"')
                    if args.out:
                        args.out.write_text(json.dumps(results, indent=1) + "\n")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
