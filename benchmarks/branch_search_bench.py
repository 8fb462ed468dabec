"""Search on a branch against search on main, in one run on one index (SQLite, wordllama).

Main holds F facts over P episodes (one commit per episode, its facts in the same
commit), as in `search_bench.py`. A branch ``exp`` forks from main a little before main's
head (main's last commits are after the fork, so the branch must cut them) and makes
``--own`` commits of its own, each one episode and two facts, one of them a new version
of an (entity, predicate) main already holds. The ledger rows live in a real read index
(`memory/readindex.py`), so the branch's segments come from core's ``branch_segments``
and episode commits resolve through real SQL, as on a server.

Measured, same queries, same caller, interleaved (main, branch, main at a commit, branch at
a commit), after one warm-up each:
  * ``search_facts`` (what POST /search runs) and ``search_passages`` (POST /query);
  * main (one segment: the plain path), the branch's head, the branch at its 50th commit,
    main at the fork commit.

    python benchmarks/branch_search_bench.py [--facts 100000 --passages 30000 --own 100]
        [--db FILE] [--json FILE] [--main-only] [--cold-phrases]

``--main-only`` times main alone (runs on code from before branch search, to compare).
``--cold-phrases`` drops the phrase rows the keyword files' connections keep
(`keywords.SpaceConnection`) before every search, so no search reuses a word another
search collected: the cost for queries whose words were not asked just before.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.base import Cite, DocumentBatch, EpisodeDoc, FactDoc, Unit
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.visibility import Principal

SCOPE = "bench/branch"
WORDS = ("budget renewal pilot contract security review pricing discount onboarding "
         "integration migration outage roadmap churn expansion champion procurement "
         "legal invoice quota forecast launch training support escalation").split()
PREDICATES = ("budget owner renewal_date stage champion risk discount region plan "
              "headcount").split()
BATCH = 5000
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def company(i: int) -> str:
    return f"Company{i % 20000:05d}"


def commit_id(branch: str, seq: int) -> str:
    return f"{branch[:3]}{seq:023d}"


def episodes_and_facts(rng: random.Random, branch: str, first_seq: int, n_eps: int,
                       facts_per: float, offset: int) -> DocumentBatch:
    """Episode i is commit ``first_seq + i`` of ``branch``; its facts are in that commit."""
    batch = DocumentBatch()
    owed = 0.0
    for i in range(n_eps):
        n = offset + i
        seq = first_seq + i
        who = company(n)
        units = tuple(Unit(t + 1, "turn", f"Speaker{t}: {who} " + " ".join(
            rng.choices(WORDS, k=18))) for t in range(3))
        acl = ("*",) if n % 4 else ("group:sales",)
        ep = EpisodeDoc(f"{branch}-{n:060x}", SCOPE, branch, commit_id(branch, seq),
                        EPOCH + timedelta(hours=n), acl, units, "call:bench", seq)
        batch.episodes.append(ep)
        owed += facts_per
        for j in range(int(owed)):
            batch.facts.append(FactDoc(
                id=f"{branch}-f{n}-{j}", scope=SCOPE, branch=branch, commit=ep.commit,
                entity=company(n if j else rng.randrange(20000)),
                predicate=rng.choice(PREDICATES), value=" ".join(rng.choices(WORDS, k=2)),
                quote=units[0].text[:80], valid_from=ep.occurred_at, valid_to=None,
                cites=(Cite(ep.id, 1),), written_by="posted", commit_seq=seq, ord=j))
        owed -= int(owed)
    return batch


def ledger(index_uri: str, main_head: int, fork: int, own: int) -> Any:
    """A read index holding the ledger rows of main and of the branch (no data rows: the
    search index is filled directly)."""
    from ampup_memory.memory.ledger import BRANCH, LedgerEntry
    from ampup_memory.memory.readindex import ReadIndex

    index = ReadIndex(index_uri)
    now = datetime.now(UTC)

    def entry(branch: str, seq: int, parent: str | None, kind: str = "commit") -> LedgerEntry:
        return LedgerEntry(commit_id(branch, seq), parent, SCOPE, branch, seq, "bench", now,
                           "bench", kind=kind)

    rows = [entry("main", s, commit_id("main", s - 1) if s > 1 else None)
            for s in range(1, main_head + 1)]
    rows.append(entry("exp", 1, commit_id("main", fork), BRANCH))
    rows += [entry("exp", s, commit_id("exp", s - 1)) for s in range(2, own + 2)]
    for i in range(0, len(rows), 5000):
        index.add_ledger(rows[i:i + 5000], None)
    return index


def timings(run: Callable[[str], Any], qs: list[str]) -> tuple[float, float, float]:
    """p50 and p95 wall ms, and the median CPU ms of this thread (what the load of a
    shared machine inflates least)."""
    run(qs[0])
    took, cpu = [], []
    for q in qs:
        t, c = time.perf_counter(), time.thread_time()
        run(q)
        took.append((time.perf_counter() - t) * 1000)
        cpu.append((time.thread_time() - c) * 1000)
    took.sort()
    return (statistics.median(took), took[max(0, int(len(took) * 0.95) - 1)],
            statistics.median(cpu))


def _cold(engine: SearchEngine, run: Callable[[str], Any]) -> Callable[[str], Any]:
    from ampup_memory.search.index.keywords import SpaceConnection

    pool = getattr(engine.index, "_spaces")  # noqa: B009 (SQLite's private pool)

    def cold(q: str) -> Any:
        for conns in pool._idle.values():
            for conn in conns:
                if isinstance(conn, SpaceConnection):
                    conn.phrases.clear()
                    conn.phrase_rows = 0
        return run(q)

    return cold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--passages", type=int, default=30_000)
    parser.add_argument("--own", type=int, default=100)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--db", help="keep the index in this file; reuse it when present")
    parser.add_argument("--json")
    parser.add_argument("--main-only", action="store_true")
    parser.add_argument("--cold-phrases", action="store_true")
    args = parser.parse_args()
    embedder = WordLlamaEmbedder()
    who = Principal("ann", groups=("sales",))
    rng_q = random.Random(11)
    qs = [f"{company(rng_q.randrange(20000))} {' '.join(rng_q.choices(WORDS, k=2))}"
          for _ in range(args.queries)]
    fork = args.passages - args.passages // 20  # main's last 5% come after the fork
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "index.db"
        uri = f"sqlite:///{path}"
        engine = SearchEngine(open_index(uri), embedder)
        engine.ensure_model()
        built = None
        if engine.index.counts(SCOPE)["episodes"] == 0:
            rng = random.Random(7)
            started = time.perf_counter()
            for start in range(0, args.passages, BATCH):
                n = min(BATCH, args.passages - start)
                engine.ingest(episodes_and_facts(rng, "main", start + 1, n,
                                                 args.facts / args.passages, start))
            engine.ingest(episodes_and_facts(rng, "exp", 2, args.own, 2, args.passages),
                          lineage=["main"])
            built = time.perf_counter() - started
        counts = engine.index.counts(SCOPE)
        print("index", counts, "built in", built, flush=True)
        runs: dict[str, Callable[[str], Any]] = {
            "main facts": lambda q: engine.search_facts(SCOPE, "main", q, who),
            "main passages": lambda q: engine.search_passages(SCOPE, "main", q, who),
        }
        if not args.main_only:
            from functools import partial

            from ampup_memory.memory.branches import branch_segments
            from ampup_memory.memory.segments import Segment
            from ampup_memory.search.cutoff import Cutoff

            readindex = ledger(uri, args.passages, fork, args.own)
            seqs_of = partial(readindex.commit_places, SCOPE)

            def view(at: int | None) -> Cutoff:
                segs = branch_segments(readindex, SCOPE, "exp")  # per search, as a server
                if at is not None:
                    segs = (*segs[:-1], Segment("exp", segs[-1].after, at))
                return Cutoff(segs, seqs_of, "at" if at else None)

            half = 1 + args.own // 2
            main_at = Cutoff((Segment("main", 0, fork),), seqs_of, "at")
            runs.update({
                "branch facts": lambda q: engine.search_facts(SCOPE, "exp", q, who,
                                                              cutoff=view(None)),
                "branch passages": lambda q: engine.search_passages(SCOPE, "exp", q, who,
                                                                    cutoff=view(None)),
                "branch@50 facts": lambda q: engine.search_facts(SCOPE, "exp", q, who,
                                                                 cutoff=view(half)),
                "branch@50 passages": lambda q: engine.search_passages(
                    SCOPE, "exp", q, who, cutoff=view(half)),
                "main@fork facts": lambda q: engine.search_facts(SCOPE, "main", q, who,
                                                                 cutoff=main_at),
                "main@fork passages": lambda q: engine.search_passages(
                    SCOPE, "main", q, who, cutoff=main_at),
            })
        if args.cold_phrases:
            runs = {name: _cold(engine, run) for name, run in runs.items()}
        load = os.getloadavg()
        result: dict[str, Any] = {"counts": counts, "own_commits": args.own,
                                  "fork_seq": fork, "build_s": built}
        # Interleaved rounds, so a burst of load on the shared machine hits every row.
        rounds = 4
        per = [qs[i::rounds] for i in range(rounds)]
        took: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runs}
        for chunk in per:
            for name, run in runs.items():
                took[name].append(timings(run, chunk))
        for name, parts in took.items():
            p50 = statistics.median(p for p, _, _ in parts)
            p95 = max(p for _, p, _ in parts)
            cpu = statistics.median(c for _, _, c in parts)
            result[name] = {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1),
                            "cpu_p50_ms": round(cpu, 1)}
            print(f"{name:22s} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  cpu p50 {cpu:7.1f} ms",
                  flush=True)
        result["load"] = [load, os.getloadavg()]
        print(json.dumps(result, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        engine.index.close()


if __name__ == "__main__":
    main()
