"""PostgreSQL: the vector step of an owner-filtered AMP search, plan by plan.

Loads N cells (default 100,000) shaped like `amp_bench.py` (one owner, ``user_big``, holds
8 % of them) into a PostgreSQL database, fast: rows are built by `AmpService.create` as
usual but written in batches with the HNSW index dropped, which is then built once. Then,
in process, it times each way of finding the owner's 100 nearest cells (the candidate
count a 10-hit search asks for) and checks each against the exact ranking:

- ``hnsw_relaxed``: the HNSW index with the owner filter, iterative scan, relaxed order;
- ``hnsw_strict``: the same, strict order;
- ``exact``: the owner's rows from the btree (``cells_owner_filter``), every distance
  computed, sorted (what the store does for a small filtered set), in the form used
  before (a MATERIALIZED CTE) and now (ORDER BY the uncast distance);
- ``unfiltered``: the HNSW index without a filter, for comparison;

and the whole candidate step (`PostgresStore.search_candidates`), filtered and not.

    AMPUP_TEST_PGDATA=/tmp/pgkeep python benchmarks/pg_owner_search.py --keep /tmp/pgbench

With ``--keep`` the database is reused by the next run (its URL is kept in that folder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import BIG_OWNER, QUERY, cell_body, owner_of, sentence  # noqa: E402


def bulk_load(uri: str, home: Path, count: int, rng: random.Random) -> None:
    import psycopg

    from ampup_memory.amp.store import postgres as pg
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    rt = open_runtime(load_settings(home=str(home), store_uri=uri))
    store = rt.store
    assert isinstance(store, pg.PostgresStore)
    d = store.dimensions
    buffered: list[tuple[Any, ...]] = []

    def create(stored: Any, vector: list[float] | None) -> None:
        c = columns(stored)
        buffered.append((c.id, c.access_count, c.last_accessed_at, *pg._written(c),
                         pg.vector_literal(vector) if vector is not None else None))

    store.create = create  # type: ignore[method-assign]
    sql = (f"INSERT INTO cells (id, access_count, last_accessed_at, {pg._WRITE_COLS},"
           f" embedding) VALUES (%s, %s, %s, {pg._WRITE_MARKS}, %s::vector)")
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"DROP INDEX IF EXISTS cells_embedding_hnsw_{d}")
        done = 0
        t = time.perf_counter()
        while done < count:
            texts = [sentence(rng) for _ in range(min(2000, count - done))]
            for i, (text, vector) in enumerate(zip(texts, rt.embedder.embed(texts), strict=True)):
                rt.amp.create("loader", json.dumps(cell_body(text, owner_of(done + i))).encode(),
                              vector)
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(sql, [pg._params(row) for row in buffered])
            buffered.clear()
            done += len(texts)
            print(f"  {done} rows, {time.perf_counter() - t:.0f}s", file=sys.stderr)
        conn.execute("SET maintenance_work_mem = '1GB'")
        t = time.perf_counter()
        conn.execute(f"CREATE INDEX cells_embedding_hnsw_{d} ON cells"
                     f" USING hnsw ((embedding::vector({d})) vector_cosine_ops)"
                     f" WHERE vector_dims(embedding) = {d}")
        print(f"  HNSW built in {time.perf_counter() - t:.0f}s", file=sys.stderr)
        conn.execute("VACUUM ANALYZE cells")
    rt.close()


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """min and p50 of wall ms, p50 of CPU ms of this process (the client side)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.thread_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.thread_time() - c) * 1000)
    return min(wall), statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()

    import psycopg
    from tests.pg import PostgresFactory, _embedded

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.postgres import vector_literal
    from ampup_memory.amp.store.rows import where_clause
    from ampup_memory.runtime import open_runtime
    from ampup_memory.search.tokenize import query_terms
    from ampup_memory.settings import load_settings

    server = contextlib.ExitStack()  # an embedded server when no URL is given, stopped at the end
    admin = PostgresFactory(os.environ.get("TEST_POSTGRES_URL")
                            or server.enter_context(_embedded()))
    home = args.keep or Path(__import__("tempfile").mkdtemp(prefix="pgowner-"))
    home.mkdir(parents=True, exist_ok=True)
    if (home / "store_uri").exists():
        uri = (home / "store_uri").read_text()
    else:
        uri = admin.new_database("ownerbench")
        t = time.perf_counter()
        bulk_load(uri, home, args.cells, random.Random(7))
        (home / "store_uri").write_text(uri)
        print(f"loaded {args.cells} cells in {time.perf_counter() - t:.0f}s", file=sys.stderr)

    rt = open_runtime(load_settings(home=str(home), store_uri=uri))
    store: Any = rt.store
    d = store.dimensions
    vector = rt.embedder.embed([QUERY["query"]])[0]
    qvec = vector_literal(vector)
    terms = query_terms(str(QUERY["query"]))
    k = 100
    flt = CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER)
    where, params = where_clause(flt, "%s", "c.")
    dist = f"c.embedding::vector({d}) <=> %s::vector({d})"
    has = f"vector_dims(c.embedding) = {d}"

    conn = psycopg.connect(uri, autocommit=True)
    owned = conn.execute("SELECT count(*) FROM cells WHERE owner_id = %s", (BIG_OWNER,)).fetchone()
    total = conn.execute("SELECT count(*) FROM cells").fetchone()
    print(f"cells {total[0] if total else 0}, owned by {BIG_OWNER}: {owned[0] if owned else 0}")
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")

    def hnsw(order: str | None, cond: str, cond_params: list[Any],
             ef: int = 100) -> Callable[[], list[str]]:
        def run() -> list[str]:
            with conn.transaction():
                conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
                conn.execute("SELECT set_config('hnsw.iterative_scan', %s, true)",
                             (order or "off",))
                rows = conn.execute(
                    f"SELECT c.id FROM cells c WHERE {cond} ORDER BY {dist} LIMIT %s",
                    (*cond_params, qvec, k)).fetchall()
            return [r[0] for r in rows]
        return run

    def exact(owner: str = BIG_OWNER) -> list[str]:  # the store's exact ranking before
        w, p = where_clause(CellFilter(agent_id="agent_bench_1", owner_id=owner), "%s", "c.")
        rows = conn.execute(
            f"WITH f AS MATERIALIZED (SELECT c.id, {dist} AS dist FROM cells c"
            f" WHERE {w} AND {has}) SELECT id FROM f ORDER BY dist LIMIT %s",
            (qvec, *p, k)).fetchall()
        return [r[0] for r in rows]

    def exact_uncast(owner: str = BIG_OWNER) -> list[str]:  # the store's exact ranking now
        w, p = where_clause(CellFilter(agent_id="agent_bench_1", owner_id=owner), "%s", "c.")
        rows = conn.execute(
            f"SELECT c.id FROM cells c WHERE {w} AND {has}"
            " ORDER BY c.embedding <=> %s::vector LIMIT %s", (*p, qvec, k)).fetchall()
        return [r[0] for r in rows]

    small = "user_3"  # about 1,840 cells: below the store's EXACT_LIMIT, so ranked exactly
    small_flt = CellFilter(agent_id="agent_bench_1", owner_id=small)

    def probe() -> object:
        return conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM cells c WHERE {where} LIMIT %s) s",
            (*params, 5001)).fetchone()

    plans: dict[str, Callable[[], object]] = {
        "probe (count to 5,001)": probe,
        "exact (materialized CTE, before)": exact,
        "exact (uncast ORDER BY, after)": exact_uncast,
        "hnsw_relaxed": hnsw("relaxed_order", f"{where} AND {has}", params),
        "hnsw_strict": hnsw("strict_order", f"{where} AND {has}", params),
        "hnsw_relaxed ef40": hnsw("relaxed_order", f"{where} AND {has}", params, 40),
        "unfiltered hnsw": hnsw(None, has, []),
        "search_candidates owner": lambda: store.search_candidates(flt, terms, vector, k),
        "search_candidates all": lambda: store.search_candidates(
            CellFilter(agent_id="agent_bench_1"), terms, vector, k),
        f"{small}: exact (materialized CTE, before)": lambda: exact(small),
        f"{small}: exact (uncast ORDER BY, after)": lambda: exact_uncast(small),
        f"{small}: search_candidates": lambda: store.search_candidates(
            small_flt, terms, vector, k),
    }
    truth = set(exact())
    small_truth = set(exact(small))
    assert set(exact_uncast(small)) == small_truth
    for _ in range(5):
        for fn in plans.values():
            fn()
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in plans}
    for _ in range(3):  # rounds, so load from other work hits every plan alike
        for name, fn in plans.items():
            results[name].append(timed(fn, args.repeat // 3))
    print("| plan | wall min / p50 (ms) | recall@100 vs exact |")
    print("|---|---|---|")
    for name, fn in plans.items():
        got = fn()
        recall = ""
        if isinstance(got, list) and got and isinstance(got[0], str):
            want = small_truth if name.startswith(small) else truth
            recall = f"{len(want & set(got))}/{len(want)} ({len(got)} rows)"
        lo = min(r[0] for r in results[name])
        med = statistics.median(r[1] for r in results[name])
        print(f"| {name} | {lo:.2f} / {med:.2f} | {recall} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    conn.close()
    rt.close()
    server.close()


if __name__ == "__main__":
    main()
