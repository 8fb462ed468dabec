"""Search speed on the embedded default index (SQLite + in-memory vectors, wordllama).

Synthetic CRM-like data: each episode is three short turns (one passage) and facts cite
them. Measures
  * search p50/p95: `search_facts` (what POST /search runs) with F facts + P passages in
    one scope, and `search_passages` (POST /query);
  * rebuild throughput: documents ingested per second into an empty index (cutting,
    embedding, FTS and bitmaps included; reading the Iceberg tables is not);
  * growth: passage query p50 as the scope grows (10k → 100k → 1M passages), with the
    HNSW graph from --ann-min vectors on (the default setting, 50,000) and, with
    --exact-too, exact search timed on the same file at each size.

    python benchmarks/search_bench.py [--facts 100000 --passages 300000]
        [--growth 10000,100000,1000000] [--ann-min 50000] [--exact-too] [--db FILE]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.ann import ANN_MIN_VECTORS
from ampup_memory.search.index.base import (
    Cite,
    DocumentBatch,
    EpisodeDoc,
    FactDoc,
    Unit,
)
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.visibility import Principal

SCOPE = "bench/speed"
WORDS = ("budget renewal pilot contract security review pricing discount onboarding "
         "integration migration outage roadmap churn expansion champion procurement "
         "legal invoice quota forecast launch training support escalation").split()
PREDICATES = ("budget owner renewal_date stage champion risk discount region plan "
              "headcount").split()
BATCH = 5000
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def company(i: int) -> str:
    return f"Company{i % 20000:05d}"


def turn(rng: random.Random, i: int) -> str:
    """Episode ``i``'s one turn of ~450 bytes (also the text of `amp_ann_bench.py`'s cells
    with ``--vectors wordllama``)."""
    return f"Speaker0: {company(i)} " + " ".join(rng.choices(WORDS, k=54))


def make_batch(rng: random.Random, start: int, n_eps: int, n_facts: int) -> DocumentBatch:
    eps: list[EpisodeDoc] = []
    for i in range(start, start + n_eps):
        # One turn: one passage per episode (passages are about one turn,
        # `search/passages.py`), so --passages counts passages.
        units = (Unit(1, "turn", turn(rng, i)),)
        acl = ("*",) if i % 4 else ("group:sales",)
        # Commit c{i} is seq i + 1 (held searches read a prefix of commits).
        eps.append(EpisodeDoc(f"{i:064x}", SCOPE, "main", f"c{i}",
                              EPOCH + timedelta(hours=i), acl, units, "call:bench",
                              seq=i + 1))
    facts = []
    for j in range(n_facts):
        ep = eps[j % len(eps)]
        facts.append(FactDoc(
            id=f"f{start}-{j}", scope=SCOPE, branch="main", commit=ep.commit,
            entity=company(start + j % len(eps)), predicate=rng.choice(PREDICATES),
            value=" ".join(rng.choices(WORDS, k=2)), quote=ep.units[0].text[:80],
            valid_from=ep.occurred_at, valid_to=None, cites=(Cite(ep.id, 1),),
            written_by="posted", commit_seq=start + j,
        ))
    return DocumentBatch(eps, facts)


def fill(engine: SearchEngine, passages: int, facts: int, seed: int = 7, start: int = 0
         ) -> float:
    """Ingest episodes ``start``..``passages``; returns documents per second."""
    rng = random.Random(seed + start)
    started = time.perf_counter()
    done = start
    while done < passages:
        n = min(BATCH, passages - done)
        n_facts = round(facts * n / passages)
        engine.ingest(make_batch(rng, done, n, n_facts))
        done += n
    return (passages - start + facts) / (time.perf_counter() - started)


def timings(run: Any, queries: list[str]) -> tuple[float, float]:
    run(queries[0])  # warm the vector cache
    took = []
    for q in queries:
        t = time.perf_counter()
        run(q)
        took.append((time.perf_counter() - t) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.95) - 1]


def queries(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [f"{company(rng.randrange(20000))} {' '.join(rng.choices(WORDS, k=2))}"
            for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--passages", type=int, default=300_000)
    parser.add_argument("--growth", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ann-min", type=int, default=ANN_MIN_VECTORS,
                        help="AMPUP_MEMORY_SEARCH_ANN_MIN_VECTORS (0: exact search)")
    parser.add_argument("--exact-too", action="store_true",
                        help="growth: also time exact search on the same file")
    parser.add_argument("--json", help="also write the figures to this file (the"
                        " 'Search: speed' section of docs/performance.md quotes them)")
    parser.add_argument("--db", help="keep the main index in this file; reuse it when it"
                        " already holds the requested sizes (rebuild rate is then not re-measured)")
    args = parser.parse_args()
    embedder = WordLlamaEmbedder()
    who = Principal("ann", groups=("sales",))
    qs = queries(args.queries)
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "main.db"
        engine = SearchEngine(open_index(f"sqlite:///{path}", args.ann_min), embedder)
        engine.ensure_model()
        have = engine.index.counts(SCOPE)
        rate_file = path.with_suffix(".rate")
        # Facts are spread over batches with rounding, so allow one per batch.
        if have["passages"] == args.passages and (
                abs(have["facts"] - args.facts) <= args.passages // BATCH + 1):
            rate = float(rate_file.read_text())  # measured when the file was built
        else:
            engine.index.clear(SCOPE)
            rate = fill(engine, args.passages, args.facts)
            rate_file.write_text(str(rate))
        load_before = os.getloadavg()
        facts_p = timings(lambda q: engine.search_facts(SCOPE, "main", q, who), qs)
        pass_p = timings(lambda q: engine.search_passages(SCOPE, "main", q, who), qs)
        rows["main"] = {"facts": args.facts, "passages": args.passages,
                        "rebuild_docs_per_s": rate, "facts_ms": facts_p, "passages_ms": pass_p,
                        "load": (load_before, os.getloadavg())}
        print(rows["main"], flush=True)
        engine.index.close()
    growth = []
    with tempfile.TemporaryDirectory() as tmp:
        # One index grown in steps: each size is measured on the same file.
        engine = SearchEngine(open_index(f"sqlite:///{tmp}/g.db", args.ann_min), embedder)
        engine.ensure_model()
        done = 0
        for size in [int(s) for s in args.growth.split(",") if s]:
            started = time.perf_counter()
            fill(engine, size, 0, start=done)
            built = time.perf_counter() - started
            done = size
            t = time.perf_counter()
            engine.search_passages(SCOPE, "main", qs[0], who)  # loads vectors, builds graph
            first = time.perf_counter() - t
            p = timings(lambda q: engine.search_passages(SCOPE, "main", q, who), qs[:100])
            exact = None
            if args.exact_too:
                plain = SearchEngine(open_index(f"sqlite:///{tmp}/g.db", 0), embedder)
                exact = timings(lambda q, e=plain: e.search_passages(SCOPE, "main", q, who),
                                qs[:100])
                plain.index.close()
            growth.append((size, p, built, os.getloadavg()[0], first, exact))
            print(size, p, built, first, exact, flush=True)
        engine.index.close()
    result = {"main": rows.get("main"), "growth": [
        {"passages": size, "p50_ms": p50, "p95_ms": p95, "build_s": built, "load1": load,
         "first_query_s": first, "exact_p50_p95_ms": exact}
        for size, (p50, p95), built, load, first, exact in growth]}
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
