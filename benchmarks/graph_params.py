"""The HNSW graph's parameters (M, efConstruction) against recall@10, build cost and memory,
on a fixed matrix of unit vectors, with usearch directly, built as `ann.Ann` builds it.

The graph is built as the embedded store builds it (`ampup_memory.search.index.ann`): an
int8 copy, metric ``ip``, one thread, rows added in row order, sealed (saved and loaded
back) at every `ann.checkpoint_after` size. One build grows through the sizes asked
(``--sizes``): a graph of the first N rows is the same whether the build stops at N or
goes on, so each size is measured on the way up, with the build's wall and CPU time so
far. At each size: usearch's ``memory_usage``; recall@10 against exact (numpy over the
first N float32 vectors) at each efSearch of ``--ef``, with the candidates re-scored in
float32 as the store does: the store asks for 200 candidates for a 10-hit search and the
graph proposes twice that, so the graph's top 400 are re-scored and the exact best 10
kept; and the search's CPU time per query (p50 / p95, graph plus re-scoring).

Queries (``--queries``, default 200) are the ``wordllama-vocab`` generator of
`amp_ann_bench.py`: three words drawn uniformly from WordLlama's vocabulary, seed 11,
embedded by the project's embedder (cached beside the vectors file).

    python -m benchmarks.graph_params --vectors /tmp/graph12/vocab1m.npy \\
        --sizes 100000,300000,1000000 --params 32,128 16,64 --out /tmp/graph12/r.jsonl

One JSON line per (parameters, size) on stdout and in ``--out``; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ampup_memory.search.index.ann import checkpoint_after

CANDIDATES = 400  # 2 × the 200 the store asks for a 10-hit search
K = 10


def query_matrix(vectors: Path, n: int, seed: int) -> np.ndarray:
    cache = vectors.with_name(f"{vectors.stem}.queries-{n}-{seed}.npy")
    if cache.exists():
        return np.asarray(np.load(cache), dtype=np.float32)
    from ampup_memory.search.embed import WordLlamaEmbedder
    from benchmarks.amp_ann_bench import vocabulary

    embedder = WordLlamaEmbedder()
    words, rng = vocabulary(embedder), random.Random(seed)
    texts = [" ".join(rng.choices(words, k=3)) for _ in range(n)]
    qs = np.asarray(embedder.embed(texts), dtype=np.float32)
    np.save(cache, qs)
    return qs


def exact_top(matrix: np.ndarray, qs: np.ndarray, size: int) -> list[set[int]]:
    scores = qs @ matrix[:size].T
    out = []
    for row in scores:
        top = np.argpartition(-row, K)[:K]
        out.append({int(x) for x in top})
    return out


def _new(dims: int, m: int, efc: int) -> Any:
    from usearch.index import Index

    return Index(ndim=dims, metric="ip", dtype="i8", connectivity=m, expansion_add=efc,
                 expansion_search=512)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def measure(index: Any, matrix: np.ndarray, qs: np.ndarray, truth: list[set[int]],
            ef: int) -> dict[str, object]:
    index.expansion_search = max(ef, CANDIDATES)
    hits, raw_hits, cpu = 0, 0, []
    for q, want in zip(qs, truth, strict=True):
        c = time.thread_time()
        keys = np.asarray(index.search(q, CANDIDATES, threads=1).keys, dtype=np.int64)
        exact = matrix[keys] @ q
        best = keys[np.argsort(-exact, kind="stable")[:K]]
        cpu.append((time.thread_time() - c) * 1000)
        hits += len(want & {int(x) for x in best})
        raw_hits += len(want & {int(x) for x in keys[:K]})
    return {"ef": ef, "recall10": round(hits / (K * len(qs)), 4),
            "recall10_graph_order": round(raw_hits / (K * len(qs)), 4),
            "cpu_p50_ms": round(statistics.median(cpu), 3),
            "cpu_p95_ms": round(_pct(cpu, 0.95), 3)}


def run(matrix: np.ndarray, qs: np.ndarray, sizes: list[int], m: int, efc: int,
        efs: list[int], out: Path | None, save: Path | None,
        resume: Path | None = None) -> None:
    dims = matrix.shape[1]
    index = _new(dims, m, efc)
    if resume is not None:  # a graph saved by --save, grown from there (build time: the rest)
        index.load(str(resume))
    wall = cpu = 0.0
    for size in sizes:
        t, c = time.perf_counter(), time.process_time()
        while len(index) < size:
            have = len(index)
            take = min(size, checkpoint_after(have)) - have
            index.add(np.arange(have, have + take, dtype=np.uint64),
                      matrix[have:have + take], threads=1)
            if len(index) == checkpoint_after(have):
                data = bytes(index.save())
                index = _new(dims, m, efc)
                index.load(data)
            if len(index) % 100_000 < take:
                print(f"M{m}/efC{efc}: {len(index)} rows, "
                      f"{wall + time.perf_counter() - t:.0f} s, load "
                      f"{os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        wall += time.perf_counter() - t
        cpu += time.process_time() - c
        truth = exact_top(matrix, qs, size)
        row: dict[str, object] = {
            "M": m, "efC": efc, "size": size, "build_wall_s": round(wall, 1),
            "build_cpu_s": round(cpu, 1), "memory_mb": round(index.memory_usage / 2**20, 1),
            "load": round(os.getloadavg()[0], 2),
            "search": [measure(index, matrix, qs, truth, ef) for ef in efs]}
        if save is not None:
            index.save(str(save / f"m{m}-efc{efc}-{size}.usearch"))
        line = json.dumps(row)
        print(line, flush=True)
        if out is not None:
            with open(out, "a") as f:
                f.write(line + "\n")


def evaluate(matrix: np.ndarray, qs: np.ndarray, files: list[Path], efs: list[int],
             out: Path | None) -> None:
    """Graphs saved by ``--save`` (named m{M}-efc{E}-{size}.usearch), searched again at
    other efSearch values without building them again."""
    for path in files:
        m, efc, size = (int(x.lstrip("mefc")) for x in path.stem.split("-"))
        index = _new(matrix.shape[1], m, efc)
        index.load(str(path))
        assert len(index) == size, (path, len(index))
        truth = exact_top(matrix, qs, size)
        row: dict[str, object] = {
            "M": m, "efC": efc, "size": size, "loaded": path.name,
            "load": round(os.getloadavg()[0], 2),
            "search": [measure(index, matrix, qs, truth, ef) for ef in efs]}
        line = json.dumps(row)
        print(line, flush=True)
        if out is not None:
            with open(out, "a") as f:
                f.write(line + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vectors", type=Path, required=True, help="unit float32 .npy, rows in order")
    p.add_argument("--sizes", default="100000,300000,1000000")
    p.add_argument("--params", nargs="+", default=["16,64", "32,128"], help="M,efC pairs")
    p.add_argument("--ef", default="512,1024", help="efSearch values (floored at 400)")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--out", type=Path)
    p.add_argument("--save", type=Path, help="a folder to save each measured graph in")
    p.add_argument("--resume", type=Path,
                   help="a graph saved by --save (one --params pair) to grow to --sizes; its"
                   " level generator restarts there, as at one more seal")
    p.add_argument("--evaluate", type=Path, nargs="+",
                   help="graphs saved by --save: search them at --ef, build nothing")
    a = p.parse_args()
    matrix = np.load(a.vectors, mmap_mode="r")
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    qs = query_matrix(a.vectors, a.queries, 11)
    if a.evaluate:
        evaluate(matrix, qs, a.evaluate, [int(e) for e in a.ef.split(",")], a.out)
        return
    sizes = [int(s) for s in a.sizes.split(",")]
    for pair in a.params:
        m, efc = (int(x) for x in pair.split(","))
        run(matrix, qs, sizes, m, efc, [int(e) for e in a.ef.split(",")], a.out, a.save,
            a.resume)


if __name__ == "__main__":
    main()
