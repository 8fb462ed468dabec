"""The vector step of search with and without the HNSW graph (`search/index/ann.py`).

Vectors are the bundled WordLlama's (256-d) embeddings of synthetic passages written like
`search_bench.py`'s (a company name and 54 of 24 CRM words), fed straight into one
`VectorMatrix`, the per-(scope, branch) structure the SQLite index keeps, without the
SQLite rows and keyword side (so sizes the full ingest path is too slow for on this
machine can be measured). Measures, per size:

  * exact and ANN top-k (k = 50, the candidate count of a 10-hit search) p50 / p95;
  * recall@10 of the ANN answer against the exact one (both re-scored exactly, so this
    is whether the graph proposed the exact ten best among its 50);
  * graph build time, wall and CPU, through the product's path (the first query starts
    the background thread; the benchmark waits for it) and the time to add 1,000 more
    (the incremental cost a commit pays on the next query);
  * the saved file's size, a save's time, and a restart's: a fresh matrix of the same
    rows loads the saved graph (checked, counted) and must propose the same candidates;
  * the graph's memory (usearch's own count; the float32 matrix is extra, as before);
  * that a graph built in other batches (200 at a time, as a live index is fed, against
    all at once, as a reopened or rebuilt one is) proposes the same candidates.

    python -m benchmarks.ann_bench [--sizes 50000,200000] [--queries 200] [--json FILE]
    python -m benchmarks.ann_bench --random --exact-only --sizes 1000000   # exact at 1M
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ampup_memory.search.embed import WordLlamaEmbedder
from ampup_memory.search.index.ann import GraphFile, GraphStats
from ampup_memory.search.index.common import VectorMatrix
from benchmarks.search_bench import WORDS, company, queries

K = 50


def vectors(embedder: WordLlamaEmbedder, n: int, seed: int = 7) -> np.ndarray:
    rng = random.Random(seed)
    out = np.zeros((n, 256), dtype=np.float32)
    for start in range(0, n, 2048):
        texts = [f"Speaker0: {company(i)} " + " ".join(rng.choices(WORDS, k=54))
                 for i in range(start, min(n, start + 2048))]
        out[start:start + len(texts)] = np.asarray(embedder.embed(texts), dtype=np.float32)
    return out


def matrix(vecs: np.ndarray, ann_min: int, step: int | None = None,
           file: GraphFile | None = None) -> VectorMatrix:
    m = VectorMatrix(vecs.shape[1], ann_min, file=file,
                     stats=file.stats if file is not None else None)
    for i, v in enumerate(vecs):
        m.put(i + 1, v)
        if step and (i + 1) % step == 0:
            m.top(vecs[0], K)  # a query between writes: the graph grows in steps
            m.wait(3600)
    return m


def timed(m: VectorMatrix, qs: np.ndarray
          ) -> tuple[list[list[tuple[int, float]]], float, float, float]:
    """Answers, wall p50 / p95 ms, and CPU ms per query (this thread's)."""
    answers, took = [], []
    cpu = time.thread_time()
    for q in qs:
        t = time.perf_counter()
        answers.append(m.top(q, K))
        took.append((time.perf_counter() - t) * 1000)
    cpu = (time.thread_time() - cpu) * 1000 / len(qs)
    took.sort()
    return answers, statistics.median(took), took[int(len(took) * 0.95) - 1], cpu


def top10(hits: list[tuple[int, float]]) -> set[int]:
    return {n for n, _ in sorted(hits, key=lambda h: (-h[1], h[0]))[:10]}


def unit_vectors(n: int, dims: int = 256, seed: int = 7) -> np.ndarray:
    """Random unit vectors (for sizes too big to embed here): no clusters, the hardest
    case for a graph and the same cost as any for exact search."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, dims), dtype=np.float32)
    for start in range(0, n, 100_000):
        block = rng.standard_normal((min(n, start + 100_000) - start, dims), dtype=np.float32)
        out[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def run(embedder: WordLlamaEmbedder | None, size: int, n_queries: int, check_steps: bool,
        exact_only: bool = False) -> dict[str, Any]:
    load = os.getloadavg()[0]
    if embedder is None:
        all_vecs = unit_vectors(size + 1000)
        qs = unit_vectors(n_queries, seed=8)
    else:
        all_vecs = vectors(embedder, size + 1000)
        qs = np.asarray(embedder.embed(queries(n_queries)), dtype=np.float32)
    vecs, extra = all_vecs[:size], all_vecs[size:]
    exact = matrix(vecs, 0)
    exact_answers, e50, e95, ecpu = timed(exact, qs)
    row: dict[str, Any] = {"vectors": size, "exact_ms": (e50, e95), "exact_cpu_ms": ecpu,
                           "matrix_mb": vecs.nbytes / 1e6}
    if exact_only:
        row["load1"] = (load, os.getloadavg()[0])
        print(json.dumps(row), flush=True)
        return row
    folder = Path(tempfile.mkdtemp(prefix="ann-bench-"))
    stats = GraphStats()
    ann = matrix(vecs, 1, file=GraphFile(folder / "graph.ann", stats))
    t, cpu = time.perf_counter(), time.process_time()
    ann.top(qs[0], K)  # exact: starts the background build
    ann.wait(24 * 3600)
    build, build_cpu = time.perf_counter() - t, time.process_time() - cpu
    ann_answers, a50, a95, acpu = timed(ann, qs)
    recall = statistics.mean(len(top10(a) & top10(e)) / 10
                             for a, e in zip(ann_answers, exact_answers, strict=True))
    same_scores = all(dict(a).get(n) in (None, s) for a, e in
                      zip(ann_answers, exact_answers, strict=True) for n, s in e)
    assert ann.ann is not None
    memory = ann.ann.memory_bytes
    saved = stats.wire()
    # save: the sealed bytes of the graph as it is, written as the saver thread writes
    data = bytes(ann.ann._index.save())
    t = time.perf_counter()
    GraphFile(folder / "probe.ann", GraphStats()).write(
        data, vecs.shape[1], len(ann.ann), ann.ann.last, "probe")
    save_s = time.perf_counter() - t
    file_mb = (folder / "graph.ann").stat().st_size / 1e6
    # load: a fresh matrix of the same rows finds the saved graph (a restart)
    restarted = matrix(vecs, 1, file=GraphFile(folder / "graph.ann", GraphStats()))
    t, cpu = time.perf_counter(), time.process_time()
    restarted.top(qs[0], K)
    restarted.wait(24 * 3600)
    load_s, load_cpu = time.perf_counter() - t, time.process_time() - cpu
    loaded = restarted.stats.wire()
    alike_after_load = all(restarted.top(q, K) == ann.top(q, K) for q in qs)
    for i, v in enumerate(extra):
        ann.put(size + i + 1, v)
    t = time.perf_counter()
    ann.top(qs[0], K)
    add = time.perf_counter() - t
    alike = None
    if check_steps:
        stepped = matrix(all_vecs, 1, step=200)
        again = matrix(all_vecs, 1)
        again.top(qs[0], K)
        again.wait(3600)
        alike = all(stepped.top(q, K) == again.top(q, K) for q in qs)
    shutil.rmtree(folder, ignore_errors=True)
    row.update({"ann_ms": (a50, a95), "ann_cpu_ms": acpu,
                "recall_at_10": recall, "scores_equal_exact": same_scores,
                "build_s": build, "build_cpu_s": build_cpu,
                "build_cpu_ms_per_vector": build_cpu / size * 1000,
                "add_1000_s": add, "graph_mb": memory / 1e6, "file_mb": file_mb,
                "saves_during_build": saved["saved"], "save_s": save_s,
                "load_s": load_s, "load_cpu_s": load_cpu, "load_counters": loaded,
                "alike_after_load": alike_after_load, "stepped_build_alike": alike,
                "load1": (load, os.getloadavg()[0])})
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="50000,200000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--check-steps", type=int, default=20_000,
                        help="compare a stepped and a one-go build up to this size")
    parser.add_argument("--random", action="store_true",
                        help="random unit vectors instead of WordLlama embeddings")
    parser.add_argument("--exact-only", action="store_true",
                        help="time exact search only (no graph)")
    parser.add_argument("--json")
    args = parser.parse_args()
    embedder = None if args.random else WordLlamaEmbedder()
    rows = [run(embedder, int(s), args.queries, int(s) <= args.check_steps, args.exact_only)
            for s in args.sizes.split(",") if s]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
