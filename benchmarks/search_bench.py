"""Search speed on the embedded default index (SQLite + in-memory vectors, wordllama).

Synthetic CRM-like data: each episode is three short turns (one passage) and facts cite
them. Measures
  * search p50/p95: `search_facts` (what POST /search runs) with F facts + P passages in
    one scope, and `search_passages` (POST /query);
  * rebuild throughput: documents ingested per second into an empty index (cutting,
    embedding, FTS and bitmaps included; reading the Iceberg tables is not);
  * growth: passage query p50 as the scope grows (10k → 100k → 1M passages).

    python benchmarks/search_bench.py [--facts 100000 --passages 300000]
        [--growth 10000,100000,1000000] [--write-docs]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import (
    Cite,
    DocumentBatch,
    EpisodeDoc,
    FactDoc,
    Unit,
    open_index,
)
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


def make_batch(rng: random.Random, start: int, n_eps: int, n_facts: int) -> DocumentBatch:
    eps: list[EpisodeDoc] = []
    for i in range(start, start + n_eps):
        who = company(i)
        units = tuple(
            Unit(t + 1, "turn", f"Speaker{t}: {who} " + " ".join(rng.choices(WORDS, k=18)))
            for t in range(3)
        )
        acl = ("*",) if i % 4 else ("group:sales",)
        eps.append(EpisodeDoc(f"{i:064x}", SCOPE, "main", f"c{i}",
                              EPOCH + timedelta(hours=i), acl, units, "call:bench"))
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


def fill(engine: SearchEngine, passages: int, facts: int, seed: int = 7) -> float:
    """Ingest; returns documents per second."""
    rng = random.Random(seed)
    started = time.perf_counter()
    done = 0
    while done < passages:
        n = min(BATCH, passages - done)
        n_facts = round(facts * n / passages)
        engine.ingest(make_batch(rng, done, n, n_facts))
        done += n
    return (passages + facts) / (time.perf_counter() - started)


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
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--db", help="keep the main index in this file; reuse it when it"
                        " already holds the requested sizes (rebuild rate is then not re-measured)")
    args = parser.parse_args()
    embedder = WordLlamaEmbedder()
    who = Principal("ann", groups=("sales",))
    qs = queries(args.queries)
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "main.db"
        engine = SearchEngine(open_index(f"sqlite:///{path}"), embedder)
        engine.ensure_model()
        have = engine.index.counts(SCOPE)
        if have["passages"] == args.passages and have["facts"] == args.facts:
            rate = float("nan")  # reused: the rate was measured when the file was built
        else:
            engine.index.clear(SCOPE)
            rate = fill(engine, args.passages, args.facts)
        facts_p = timings(lambda q: engine.search_facts(SCOPE, "main", q, who), qs)
        pass_p = timings(lambda q: engine.search_passages(SCOPE, "main", q, who), qs)
        rows["main"] = {"facts": args.facts, "passages": args.passages,
                        "rebuild_docs_per_s": rate, "facts_ms": facts_p, "passages_ms": pass_p}
        print(rows["main"], flush=True)
        engine.index.close()
    growth = []
    for size in [int(s) for s in args.growth.split(",") if s]:
        with tempfile.TemporaryDirectory() as tmp:
            engine = SearchEngine(open_index(f"sqlite:///{tmp}/g.db"), embedder)
            engine.ensure_model()
            started = time.perf_counter()
            fill(engine, size, 0)
            built = time.perf_counter() - started
            p = timings(lambda q, e=engine: e.search_passages(SCOPE, "main", q, who), qs[:100])
            growth.append((size, p, built))
            print(size, p, built, flush=True)
            engine.index.close()
    if args.write_docs:
        from benchmarks.retrieval_quality import write_section

        m = rows["main"]
        lines = [
            "## Search: speed (embedded index)",
            "",
            "`python benchmarks/search_bench.py` on this 2-core machine: SQLite FTS5 with "
            "column weights for keywords, numpy brute force over 256-d wordllama vectors, "
            "one scope, synthetic CRM-like turns (one passage per three-turn episode, about "
            "400 bytes; a quarter of the episodes readable only by `group:sales`), queries of "
            "a company name plus two topic words, caller in `group:sales`.",
            "",
            "| data | search (POST /search work) p50 / p95 | passages (POST /query) p50 / p95 "
            "| rebuild |",
            "|---|---|---|---|",
            f"| {m['facts']:,} facts + {m['passages']:,} passages | {m['facts_ms'][0]:.1f} / "
            f"{m['facts_ms'][1]:.1f} ms | {m['passages_ms'][0]:.1f} / {m['passages_ms'][1]:.1f}"
            f" ms | {m['rebuild_docs_per_s']:,.0f} documents/s |",
            "",
            "Times are the engine's (ranking, visibility, newest-wins), without HTTP. Rebuild "
            "is ingest from documents (cut, embed, FTS, bitmaps); reading the Iceberg tables "
            "is extra.",
            "",
            "Growth of passage query time with passages in the scope:",
            "",
            "| passages | p50 | p95 | build time |",
            "|---|---|---|---|",
        ]
        for size, (p50, p95), built in growth:
            lines.append(f"| {size:,} | {p50:.1f} ms | {p95:.1f} ms | {built:.0f} s |")
        write_section(Path(__file__).resolve().parent.parent / "docs" / "performance.md",
                      "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
