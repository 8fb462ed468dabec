"""The LongMemEval_S subset among many other passages: does retrieval hold at scale?

The quality benchmarks (`retrieval_quality.py`, `locomo_retrieval.py`) rank a few
thousand passages per scope, where no query word reaches the postings budget
(`search/budget.py`: past `POSTINGS_BUDGET` matching rows a query's commonest words are
left to the meaning side) and the vector step is exact (below `ANN_MIN_VECTORS`). This
one puts the subset's 82 sessions in one scope with ``N`` distractor episodes of real
English text (`real_text.py`'s corpus, its conversation pieces left out: the subset's own
turns are among them), the sessions spread evenly through the ingest order so that the
evidence is neither all old nor all new, and asks the 16 questions through the engine
(`search_passages`, what ``POST /query`` runs, limit 100), ranking sessions by their first
passage as `retrieval_quality.py --via-api` does. Distractors are never gold.

Rows, on one kept index file:

- ``exact, budget B``: the passages' vector step exact, the postings budget set to ``B``
  (``none``: raised past the scope's size, every query word ranked whatever its
  postings), to measure the budget's effect on recall and on CPU;
- ``graph, budget B``: the passages' HNSW graph (the product's default above
  ``ANN_MIN_VECTORS``), with the shipped budget and with none.

    python -m benchmarks.real_text --out /tmp/rt/pieces.jsonl
    python -m benchmarks.lme_at_scale fill --db /tmp/lmes/index.db --pieces /tmp/rt/pieces.jsonl \
        --distractors 300000
    python -m benchmarks.lme_at_scale measure --db /tmp/lmes/index.db [--json FILE]

Each distractor episode holds 8 consecutive pieces as its units (about three passages of
the 300-byte cut), dated before the subset's sessions; ``--distractors`` counts pieces.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ampup_memory.search.engine import SearchEngine
from ampup_memory.search.index.ann import ANN_MIN_VECTORS
from ampup_memory.search.index.base import DocumentBatch, EpisodeDoc, Unit
from ampup_memory.search.index.registry import open_index
from ampup_memory.search.index.sqlite import SQLiteIndex
from ampup_memory.search.visibility import Principal
from benchmarks.retrieval_quality import SCOPE, embedder_for, episodes, load, metrics

PIECES_PER_EPISODE = 8
BATCH = 2000  # episodes per ingest call
POOL = 100
WHO = Principal("bench")


def distractor_pieces(path: Path, n: int) -> list[str]:
    out: list[str] = []
    if n == 0:
        return out
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            if row["s"] != "conversations":
                out.append(row["t"])
                if len(out) == n:
                    break
    if len(out) < n:
        raise SystemExit(f"{path} holds only {len(out)} pieces that are not conversations")
    return out


def fill(db: Path, pieces_file: Path, n: int, cache: Path) -> None:
    _, sessions = load(cache)
    lme, _ = episodes(sessions)
    pieces = distractor_pieces(pieces_file, n)
    start = datetime(2020, 1, 1, tzinfo=UTC)
    others = []
    for i in range(0, len(pieces), PIECES_PER_EPISODE):
        units = tuple(Unit(j + 1, "turn", t)
                      for j, t in enumerate(pieces[i:i + PIECES_PER_EPISODE]))
        others.append(EpisodeDoc(f"d{i:09d}", SCOPE, "main", "bench",
                                 start + timedelta(minutes=i), ("*",), units, f"doc:{i}"))
    # The subset's sessions spread evenly through the ingest order.
    step = max(1, len(others) // (len(lme) + 1))
    order: list[EpisodeDoc] = []
    rest = iter(lme)
    for k, doc in enumerate(others):
        order.append(doc)
        if (k + 1) % step == 0:
            order.extend(x for x in [next(rest, None)] if x is not None)
    order.extend(rest)
    db.parent.mkdir(parents=True, exist_ok=True)
    engine = SearchEngine(open_index(f"sqlite:///{db}", ANN_MIN_VECTORS), embedder_for("wordllama"))
    engine.ensure_model()
    wall, cpu = time.perf_counter(), time.process_time()
    passages = 0
    for i in range(0, len(order), BATCH):
        passages += engine.ingest(DocumentBatch(order[i:i + BATCH], [])).passages
        print(f"{i + BATCH} episodes, {passages} passages: wall {time.perf_counter() - wall:.0f}"
              f" s, cpu {time.process_time() - cpu:.0f} s, load {os.getloadavg()[0]:.1f}",
              flush=True)
    print("counts", engine.index.counts(SCOPE), flush=True)
    engine.index.close()


def _budget(value: int) -> None:
    # The budget is read as a module constant by the rule and by the SQLite index.
    from ampup_memory.search import budget
    from ampup_memory.search.index import sqlite

    budget.POSTINGS_BUDGET = value
    sqlite.POSTINGS_BUDGET = value  # type: ignore[attr-defined]


def _row(engine: SearchEngine, questions: list[dict[str, Any]], session_of: dict[str, str]
         ) -> dict[str, Any]:
    ranked, took, cpu = [], [], time.thread_time()
    for q in questions:
        t = time.perf_counter()
        found = engine.search_passages(SCOPE, "main", q["question"], WHO, limit=POOL)
        took.append((time.perf_counter() - t) * 1000)
        order: list[str] = []
        for p in found.passages:
            s = session_of.get(p.episode.id, p.episode.id)
            if s not in order:
                order.append(s)
        ranked.append(order)
    gold = [set(q["ground_truth"]["supporting_session_ids"]) for q in questions]
    out: dict[str, Any] = {k: round(v, 3) for k, v in metrics(ranked, gold).items()}
    out["gold_ranks"] = [[i + 1 for i, s in enumerate(r) if s in g]
                         for r, g in zip(ranked, gold, strict=True)]
    out["p50_ms"] = round(statistics.median(took), 1)
    out["cpu_ms_per_query"] = round((time.thread_time() - cpu) * 1000 / len(questions), 1)
    out["load1"] = os.getloadavg()[0]
    return out


BUDGETS = (2000, 4000, 8000, 16000, 32000, 64000, 10**9)


def measure(db: Path, cache: Path) -> dict[str, Any]:
    from ampup_memory.search import budget

    shipped = budget.POSTINGS_BUDGET
    questions, sessions = load(cache)
    _, session_of = episodes(sessions)
    engine = SearchEngine(open_index(f"sqlite:///{db}", ANN_MIN_VECTORS), embedder_for("wordllama"))
    assert isinstance(engine.index, SQLiteIndex)
    result: dict[str, Any] = {"counts": engine.index.counts(SCOPE), "rows": {}}
    vectors = engine.index._vectors["passages"]
    vectors.ann_min = 0  # exact for the first rows
    _row(engine, questions, session_of)  # reads the vectors and the counts: not timed

    def run(name: str) -> None:
        result["rows"][name] = _row(engine, questions, session_of)
        print(name, result["rows"][name], flush=True)

    for value in BUDGETS:
        _budget(value)
        run(f"exact, budget {value if value < 10**9 else 'none'}")
    _budget(shipped)
    vectors.ann_min = ANN_MIN_VECTORS
    for matrix in vectors.by_key.values():  # a matrix keeps the value it was made with
        matrix.ann_min = ANN_MIN_VECTORS
    engine.search_passages(SCOPE, "main", "start the graph", WHO, limit=1)
    t = time.perf_counter()
    engine.index.wait_graphs(7200)
    result["graph_wait_s"] = round(time.perf_counter() - t, 1)
    result["graphs"] = engine.index.graphs()
    _row(engine, questions, session_of)
    run(f"graph, budget {shipped}")
    _budget(10**9)
    run("graph, budget none")
    _budget(shipped)
    engine.index.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=("fill", "measure"))
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--pieces", type=Path)
    parser.add_argument("--distractors", type=int, default=300_000)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.step == "fill":
        if not args.pieces:
            raise SystemExit("fill needs --pieces (a real_text.py corpus)")
        fill(args.db, args.pieces, args.distractors, args.cache)
        return
    result = measure(args.db, args.cache)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
