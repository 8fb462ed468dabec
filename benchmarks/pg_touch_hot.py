"""PostgreSQL: what a read's `touch` costs, with and without room on the page.

A read (`GET /amp/v1/memories/{id}`) counts an access: `PostgresStore.touch` updates
``access_count`` and ``last_accessed_at``, columns no index holds. With room on the page
PostgreSQL writes that as a heap-only (HOT) update; on a full page it is a whole new row
version, with an entry in every index: a search into the HNSW graph among them.
`postgres.CELLS_FILLFACTOR` leaves that room (session 27).

On a database with a loaded ``cells`` table (the 960k one of `pg_cell_keyword.py` /
`pg_owner_indexes_scale.py`), per fillfactor in ``--fillfactors``:

- ``copy``: a table ``bench_touch_ff<N>`` like ``cells`` (its columns, generated
  ``tsv``, storage) with that fillfactor, the first ``--rows`` cells of 256 dimensions,
  and the store's own indexes on ``cells`` except the owners' (the whole-table HNSW
  graph, GIN, b-trees), made from their definitions; its size and build time;
- ``touch``: ``--rounds`` rounds of ``--touches`` committed touches (the store's
  statement) on random rows of each copy, one after the other: wall min / p50 / p95 per
  touch, and how many were HOT (``pg_stat_user_tables``, after the counts arrive).

``--on-cells``: the same statement on ``cells`` itself, each in a transaction rolled
back (the work, index entries included, is done before the rollback): what a read costs
on the table as it is. ``--drop``: remove the copies.

    PYTHONPATH=src:. python -m benchmarks.pg_touch_hot --url-file /tmp/w960url \\
        --rows 100000 --out benchmarks/results/pg_touch_hot_s27.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.pg_ann_recall import _pct

TOUCH = ("UPDATE {table} SET access_count = access_count + 1, last_accessed_at = %s"
         " WHERE id = %s AND status <> 'deleted'")
COLUMNS = ("id, type, owner_id, created_by, status, public, has_readers, access_count,"
           " last_accessed_at, text, doc, stale_since, deleted_at, guard, importance,"
           " confidence, decay_rate, created_at, last_updated_at, expires_at, embedding")


def _series(ms: list[float]) -> dict[str, float]:
    return {"min": round(min(ms), 3), "p50": round(statistics.median(ms), 3),
            "p95": round(_pct(ms, 0.95), 3)}


def copy(conn: psycopg.Connection[Any], ff: int, rows: int) -> dict[str, Any]:
    """A copy of ``cells`` with fillfactor ``ff`` and the store's non-owner indexes."""
    table = f"bench_touch_ff{int(ff)}"
    started = time.monotonic()
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (LIKE cells INCLUDING DEFAULTS INCLUDING GENERATED"
                 f" INCLUDING STORAGE) WITH (fillfactor = {int(ff)})")
    conn.execute(f"INSERT INTO {table} ({COLUMNS}) SELECT {COLUMNS} FROM cells"
                 " WHERE vector_dims(embedding) = 256 LIMIT %s", (rows,))
    made = [str(r[0]) for r in conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'cells'"
        " AND indexname NOT LIKE 'cells_hnsw_%_owner_%'").fetchall()]
    for n, definition in enumerate(made):
        head, _, tail = definition.partition(" ON ")
        target = tail.split(" ", 1)[1]  # after the table's name
        unique = "UNIQUE " if head.startswith("CREATE UNIQUE") else ""
        conn.execute(f"CREATE {unique}INDEX {table}_{n} ON {table} {target}")
    conn.execute(f"VACUUM ANALYZE {table}")
    size = conn.execute(f"SELECT pg_relation_size('{table}')").fetchone()
    return {"table": table, "fillfactor": ff, "rows": rows, "indexes": len(made),
            "seconds": round(time.monotonic() - started, 1),
            "table_mb": round((size[0] if size else 0) / 2**20, 1)}


def _counts(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                       " WHERE relname = %s", (table,)).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def touches(url: str, table: str, n: int, rollback: bool) -> dict[str, Any]:
    """``n`` touches of random rows of ``table``, one after the other, on a connection of
    their own (which ends after, so its counts reach the statistics)."""
    with psycopg.connect(url, autocommit=True) as watch:
        ids = [str(r[0]) for r in watch.execute(
            f"SELECT id FROM {table} TABLESAMPLE SYSTEM (1) LIMIT %s", (n * 4,)).fetchall()]
        before = _counts(watch, table)
        picked = random.Random(n).sample(ids, min(n, len(ids)))
        ms: list[float] = []
        with psycopg.connect(url, autocommit=not rollback) as conn:
            statement = TOUCH.format(table=table)
            for cell_id in picked:
                started = time.perf_counter()
                conn.execute(statement, (datetime.now(UTC), cell_id))
                if rollback:
                    conn.rollback()
                ms.append((time.perf_counter() - started) * 1000)
        deadline = time.monotonic() + 30
        after = _counts(watch, table)
        while not rollback and after[0] - before[0] < len(picked) and time.monotonic() < deadline:
            time.sleep(0.5)
            after = _counts(watch, table)
    return {"table": table, "touches": len(picked), "ms": _series(ms),
            "updates": after[0] - before[0], "hot": after[1] - before[1],
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--fillfactors", default="100,70")
    parser.add_argument("--touches", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--phases", default="copy,touch")
    parser.add_argument("--on-cells", action="store_true")
    parser.add_argument("--drop", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    url = args.url_file.read_text().strip()
    factors = [int(f) for f in args.fillfactors.split(",")]
    phases = args.phases.split(",")
    result: dict[str, Any] = {"copies": [], "touches": []}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        if "copy" in phases:
            for ff in factors:
                made = copy(conn, ff, args.rows)
                print(made, flush=True)
                result["copies"].append(made)
    if "touch" in phases:
        for round_ in range(args.rounds):
            tables = [f"bench_touch_ff{ff}" for ff in factors]
            tables += ["cells"] if args.on_cells else []
            for table in tables:
                got = touches(url, table, args.touches, rollback=table == "cells")
                got["round"] = round_
                print(got, flush=True)
                result["touches"].append(got)
    if args.drop:
        with psycopg.connect(url, autocommit=True) as conn:
            for ff in factors:
                conn.execute(f"DROP TABLE IF EXISTS bench_touch_ff{ff}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
