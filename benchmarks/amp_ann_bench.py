"""AMP cell search at a million cells (embedded SQLite store): the vector step with and
without an owner filter, exact and through the HNSW graph.

The store is filled directly (one validated template cell, then rows written in batches of
10,000 with ``executemany``, no per-row fsync). By default with RANDOM UNIT VECTORS: they
measure the speed of the vector step, not the quality of an embedder (the graph's recall
on them is about 0.1). With ``--vectors wordllama`` the cells hold the synthetic CRM turns
of `search_bench.py` (``turn``), embedded by the project's WordLlama embedder in batches of
1,000, as the server would, and queries are `search_bench.queries` texts embedded the same
way (other seeds, so none is a cell's text): the graph's recall then means something.
With ``--vectors text --text-file PATH`` the cells hold real English pieces (the corpus of
`real_text.py`, in its shuffled order) and queries are 3 to 8 word spans of held-out pieces
(the file's last ``HELD_OUT``, never stored).
Owners follow `amp_bench.py`:
``user_big`` holds 8 % of the cells, 50 other owners about 1.8 % each (all above the 5,000
cells of exact owner ranking). The home folder is kept (``--home``), so a second run
measures without filling again.

    python benchmarks/amp_ann_bench.py --home /tmp/amp1m/home --cells 1000000
    python benchmarks/amp_ann_bench.py --home /tmp/ampreal/home --vectors wordllama --fresh 200

Measured in-process on the store (``search_candidates`` with a vector and no keywords, what
the service calls): p50 / p95 of wall and CPU time, with and without an owner filter, once
exact (no graph) and once with the graph; the graph's build (or load) time and memory; the
recall@10 of the graph's candidates against exact ones; the 1-minute load average.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import BIG_OWNER, cell_body, owner_of, sentence  # noqa: E402

EMBED_BATCH = 1000
HELD_OUT = 10_000  # the text corpus' last pieces: queries are drawn from them, never stored


def text_queries(path: Path, n: int, seed: int) -> list[str]:
    """``n`` queries from the held-out pieces of a `real_text.py` corpus: a span of 3 to 8
    consecutive words of a held-out piece (what a user might ask with), seeded."""
    from benchmarks.real_text import load_pieces

    held = load_pieces(path)[-HELD_OUT:]
    rng = random.Random(seed)
    out = []
    for piece in rng.sample(held, n):
        words = piece.split()
        size = rng.randint(3, min(8, len(words)))
        start = rng.randint(0, len(words) - size)
        out.append(" ".join(words[start:start + size]))
    return out


def vocabulary(embedder: Any) -> list[str]:
    """``--vectors wordllama-vocab``: the whole words of WordLlama's tokenizer (ASCII
    letters, four or more), sorted; a stress case of text spread over ~9,000 words instead of
    `search_bench`'s 24 (whose vectors hold 99 % of their variance in 24 dimensions)."""
    vocab = embedder._model.tokenizer.get_vocab()
    return sorted(t[1:] for t in vocab
                  if t.startswith("\u2581") and t[1:].isascii() and t[1:].isalpha()
                  and len(t) > 4)


def query_vectors(home: Path, n: int, seed: int) -> Any:
    """``n`` unit query vectors: random, or `search_bench.queries` texts embedded by
    WordLlama when the cells were filled with ``--vectors wordllama``."""
    import numpy as np

    info = json.loads((home / "bench.json").read_text())
    if info.get("vectors", "random") == "wordllama":
        from ampup_memory.search.embed import WordLlamaEmbedder
        from benchmarks.search_bench import queries

        return np.asarray(WordLlamaEmbedder().embed(queries(n, seed)), dtype=np.float32)
    if info.get("vectors") == "wordllama-vocab":
        from ampup_memory.search.embed import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
        words, rng = vocabulary(embedder), random.Random(seed)
        texts = [" ".join(rng.choices(words, k=3)) for _ in range(n)]
        return np.asarray(embedder.embed(texts), dtype=np.float32)
    if info.get("vectors") == "text":
        from ampup_memory.search.embed import WordLlamaEmbedder

        texts = text_queries(Path(info["text_file"]), n, seed)
        return np.asarray(WordLlamaEmbedder().embed(texts), dtype=np.float32)
    gen = np.random.default_rng(seed)
    qs = gen.standard_normal((n, int(info["dims"]))).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    return qs


def fill(home: Path, cells: int, vectors: str, text_file: Path | None = None) -> None:
    import numpy as np
    from ulid import ULID

    from ampup_memory.runtime import open_runtime
    from ampup_memory.settings import load_settings
    from benchmarks.search_bench import turn

    provider = "hash" if vectors == "random" else "wordllama"
    rt = open_runtime(load_settings(home=str(home), embedding_provider=provider))
    dims = rt.embedder.dimensions
    template = rt.amp.create("agent_bench_1", json.dumps(
        cell_body("template cell", "user_template")).encode())
    conn = rt.store._conn()  # type: ignore[attr-defined]
    conn.execute("PRAGMA synchronous=OFF")  # loading only
    row = conn.execute(
        "SELECT type, created_by, status, public, has_readers, access_count,"
        " last_accessed_at, doc, guard, importance, confidence, decay_rate,"
        " last_updated_at FROM cells WHERE id = ?", (template.id,)).fetchone()
    (typ, created_by, status, public, has_readers, access_count, accessed, doc, guard,
     importance, confidence, decay_rate, updated) = row
    rng = random.Random(7)
    gen = np.random.default_rng(7)
    seq = int(conn.execute("SELECT max(vec_seq) FROM cells").fetchone()[0])
    done = conn.execute("SELECT count(*) FROM cells").fetchone()[0] - 1
    started, embed_s = time.perf_counter(), 0.0
    words = vocabulary(rt.embedder) if vectors == "wordllama-vocab" else []
    corpus: list[str] = []
    if vectors == "text":
        from benchmarks.real_text import load_pieces

        assert text_file is not None, "--vectors text needs --text-file"
        corpus = load_pieces(text_file)
        if len(corpus) - HELD_OUT < cells:
            raise SystemExit(f"{text_file}: {len(corpus)} pieces, {HELD_OUT} held out:"
                             f" fewer than {cells} cells")
    while done < cells:
        n = min(10_000, cells - done)
        if vectors != "random":
            texts = (corpus[done:done + n] if corpus else
                     [turn(rng, done + i) for i in range(n)] if not words else
                     [" ".join(rng.choices(words, k=30)) for _ in range(n)])
            t = time.perf_counter()
            vecs = np.concatenate([
                np.asarray(rt.embedder.embed(texts[j:j + EMBED_BATCH]), dtype=np.float32)
                for j in range(0, n, EMBED_BATCH)])
            embed_s += time.perf_counter() - t
        else:
            texts = [sentence(rng) for _ in range(n)]
            vecs = gen.standard_normal((n, dims)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        batch = []
        for i in range(n):
            owner = owner_of(done + i)
            cid = f"mem_{ULID()}"
            text = texts[i]
            d = doc.replace(template.id, cid).replace("user_template", owner).replace(
                "template cell", text)
            g = guard.replace("user_template", owner)
            seq += 1
            batch.append((cid, typ, owner, created_by, status, public, has_readers,
                          access_count, accessed, text, d, vecs[i].tobytes(), seq, g,
                          importance, confidence, decay_rate, updated))
        with conn:
            conn.executemany(
                "INSERT INTO cells (id, type, owner_id, created_by, status, public,"
                " has_readers, access_count, last_accessed_at, text, doc, vec, vec_seq,"
                " guard, importance, confidence, decay_rate, last_updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", batch)
        done += n
        print(f"{done} cells, {time.perf_counter() - started:.0f}s"
              f" (embedding {embed_s:.0f}s)", file=sys.stderr, flush=True)
    rt.close()
    (home / "bench.json").write_text(json.dumps({
        "dims": dims, "cells": cells, "vectors": vectors,
        "text_file": str(text_file) if text_file else None,
        "fill_s": round(time.perf_counter() - started, 1), "embed_s": round(embed_s, 1)}))
    (home / "filled").write_text(str(cells))


def _times(fn: object, repeat: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.thread_time()
        fn()  # type: ignore[operator]
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return wall, cpu


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def measure(home: Path, repeat: int, queries: int, wait: float) -> dict[str, object]:
    """One store, threshold 50,000: timed while the graph builds (exact), then, once it is
    swapped in, through the graph; recall@10 of the graph's candidates against the exact
    top 10 computed with numpy from the same matrix."""

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.sqlite import SQLiteStore

    dims = int(json.loads((home / "bench.json").read_text())["dims"])
    qs = query_vectors(home, queries, 11)
    out: dict[str, object] = {"load_at_start": os.getloadavg()[0]}
    t, c = time.perf_counter(), time.process_time()
    store = SQLiteStore(f"sqlite:///{home / 'amp.db'}", dims, ann_min_vectors=50_000)
    filters = {"none": CellFilter(agent_id="agent_bench_1"),
               "owner_8pct": CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER),
               "owner_1.8pct": CellFilter(agent_id="agent_bench_1", owner_id="user_3")}
    store.search_candidates(filters["none"], [], [float(x) for x in qs[0]], 100)
    out["open_and_first_search_s"] = time.perf_counter() - t

    def timings(phase: str) -> dict[str, object]:
        res: dict[str, object] = {"load": os.getloadavg()[0]}
        for name, f in filters.items():
            i = 0

            def one(f: CellFilter = f) -> None:
                nonlocal i
                # k = 100: what a 10-hit search asks (AmpService.search), 200 vectors.
                store.search_candidates(f, [], [float(x) for x in qs[i % queries]], 100)
                i += 1

            wall, cpu = _times(one, repeat)
            res[name] = {"p50_ms": round(statistics.median(wall), 2),
                         "p95_ms": round(_pct(wall, 0.95), 2),
                         "cpu_p50_ms": round(statistics.median(cpu), 2),
                         "cpu_p95_ms": round(_pct(cpu, 0.95), 2)}
        print(phase, json.dumps(res), file=sys.stderr, flush=True)
        return res

    out["exact_while_building"] = timings("exact_while_building")
    store.wait_graphs(wait)
    out["graph_ready_s"] = time.perf_counter() - t
    out["process_cpu_s"] = time.process_time() - c
    out["graphs"] = store.graphs()
    out["graph_bytes"] = store.graph_memory()
    print("graph", json.dumps({k: out[k] for k in ("graph_ready_s", "process_cpu_s", "graphs",
                                                   "graph_bytes")}), file=sys.stderr,
          flush=True)
    if not out["graph_bytes"]:
        return out
    out["graph"] = timings("graph")
    out["recall_at_10"] = {name: recall_at_10(store, f, qs) for name, f in filters.items()}
    out["load_at_end"] = os.getloadavg()[0]
    store.close()
    return out


def recall_at_10(store: Any, f: Any, qs: Any) -> float:
    """Recall@10 of ``search_candidates`` (k = 100, its 10 best cosines) against the exact
    top 10 of the filter's rows, computed with numpy from the store's own matrix."""
    import numpy as np

    from ampup_memory.search.index.common import dots

    vectors = store._vectors
    assert vectors is not None
    matrix = vectors.matrix
    pick = None
    if f.owner_id is not None:
        pick = np.flatnonzero(matrix.groups == vectors.owners[f.owner_id])
    rows = matrix.matrix[:len(matrix.nums)] if pick is None else matrix.matrix[pick]
    hits = 0
    for q in qs:
        got = store.search_candidates(f, [], [float(x) for x in q], 100)
        top = {h.cell_id for h in sorted(got, key=lambda h: -(h.cosine or 0))[:10]}
        best = np.argsort(-dots(rows, q))[:10]
        if pick is not None:
            best = pick[best]
        want = {r[0] for r in store._conn().execute(
            f"SELECT id FROM cells WHERE seq IN ({','.join('?' * 10)})",
            [int(n) for n in matrix.nums[best]]).fetchall()}
        hits += len(top & want)
    return hits / (10 * len(qs))


def ef_sweep(store: Any, f: Any, qs: Any, values: list[int]) -> dict[str, object]:
    """The unfiltered search at other efSearch floors (`ann.EXPANSION_SEARCH`, read at
    each search; the vector step is asked for 2 × k = 200, the graph returns 400 and
    searches with at least that, whatever the floor): recall@10
    against exact and p50 wall / process CPU of the same queries, rows cached."""
    from ampup_memory.search.index import ann

    keep, out = ann.EXPANSION_SEARCH, {}
    try:
        for ef in values:
            ann.EXPANSION_SEARCH = ef
            wall, cpu = [], []
            for q in qs:
                vec = [float(x) for x in q]
                c, w = time.process_time(), time.perf_counter()
                store.search_candidates(f, [], vec, 100)
                wall.append((time.perf_counter() - w) * 1000)
                cpu.append((time.process_time() - c) * 1000)
            out[str(ef)] = {"recall_at_10": recall_at_10(store, f, qs),
                            "p50_ms": round(statistics.median(wall), 2),
                            "cpu_p50_ms": round(statistics.median(cpu), 2),
                            "load": os.getloadavg()[0]}
            print("efSearch", ef, json.dumps(out[str(ef)]), file=sys.stderr, flush=True)
    finally:
        ann.EXPANSION_SEARCH = keep
    return out


def fresh(home: Path, queries: int, cold: bool, wait: float, ef: list[int] | None = None
          ) -> dict[str, object]:
    """Fresh queries only (none repeated, so each reads its own hits' rows), the saved
    graph loaded first: per filter, p50 / p95 of wall and CPU time, the bytes read from
    disk per search (``/proc/self/io``), and the memory of the graph and of the owners'
    blocks. ``cold``: the file's pages are dropped from the page cache (``posix_fadvise``
    DONTNEED, this file only) before each filter's series; otherwise the whole file is
    read once first, so every page is cached."""

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.sqlite import SQLiteStore

    dims = int(json.loads((home / "bench.json").read_text())["dims"])
    qs = query_vectors(home, queries * 4, 23)
    store = SQLiteStore(f"sqlite:///{home / 'amp.db'}", dims, ann_min_vectors=50_000)
    filters = {"none": CellFilter(agent_id="agent_bench_1"),
               "owner_8pct": CellFilter(agent_id="agent_bench_1", owner_id=BIG_OWNER),
               "owner_1.8pct": CellFilter(agent_id="agent_bench_1", owner_id="user_3")}
    t = time.perf_counter()
    store.search_candidates(filters["none"], [], [float(x) for x in qs[-1]], 100)
    store.wait_graphs(wait)
    out: dict[str, object] = {"graph_ready_s": round(time.perf_counter() - t, 1),
                              "graphs": store.graphs(), "graph_bytes": store.graph_memory(),
                              "cold": cold, "load_at_start": os.getloadavg()[0]}
    # One search per owner first: what is built once (an owner's block) is not timed.
    for f in filters.values():
        store.search_candidates(f, [], [float(x) for x in qs[-2]], 100)
    block = getattr(store, "block_memory", None)
    out["block_bytes"] = block() if block is not None else 0

    def read_bytes() -> int:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
        return 0

    path = home / "amp.db"
    if not cold:
        with path.open("rb") as fh:
            while fh.read(1 << 24):
                pass
    for n, (name, f) in enumerate(filters.items()):
        if cold:
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        wall, cpu, io = [], [], []
        for q in qs[n * queries:(n + 1) * queries]:
            vec = [float(x) for x in q]
            # Process CPU: the hits' readers are other threads (no graph work is left).
            r, c, w = read_bytes(), time.process_time(), time.perf_counter()
            store.search_candidates(f, [], vec, 100)
            wall.append((time.perf_counter() - w) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            io.append((read_bytes() - r) / 1024)
        out[name] = {"p50_ms": round(statistics.median(wall), 2),
                     "p95_ms": round(_pct(wall, 0.95), 2),
                     "cpu_p50_ms": round(statistics.median(cpu), 2),
                     "cpu_p95_ms": round(_pct(cpu, 0.95), 2),
                     "read_kb_p50": round(statistics.median(io), 1),
                     "load": os.getloadavg()[0]}
        print(name, json.dumps(out[name]), file=sys.stderr, flush=True)
    # After the timings (a search repeated here reads cached rows): the same queries.
    out["recall_at_10"] = {
        name: recall_at_10(store, f, qs[n * queries:(n + 1) * queries])
        for n, (name, f) in enumerate(filters.items())}
    print("recall_at_10", json.dumps(out["recall_at_10"]), file=sys.stderr, flush=True)
    if ef:
        out["ef_sweep"] = ef_sweep(store, filters["none"], qs[:queries], ef)
    out["load_at_end"] = os.getloadavg()[0]
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--home", type=Path, default=Path("/tmp/amp1m/home"))
    parser.add_argument("--cells", type=int, default=1_000_000)
    parser.add_argument("--fill-only", action="store_true")
    parser.add_argument("--vectors", choices=("random", "wordllama", "wordllama-vocab",
                                              "text"),
                        default="random",
                        help="the cells' vectors when filling: random unit vectors, or"
                        " WordLlama's of synthetic CRM turns, or of 30 words drawn from"
                        " WordLlama's vocabulary, or of the real pieces of --text-file"
                        " (queries follow the file)")
    parser.add_argument("--text-file", type=Path, default=None,
                        help="with --vectors text: a corpus written by real_text.py")
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--wait", type=float, default=3600.0,
                        help="seconds to wait for the graph before giving up")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--fresh", type=int, default=0,
                        help="instead: this many fresh queries per filter, graph loaded")
    parser.add_argument("--cold", action="store_true",
                        help="with --fresh: the file's pages dropped before each filter")
    parser.add_argument("--ef", default="",
                        help="with --fresh: also these efSearch floors, unfiltered"
                        " (comma-separated), recall@10 and time each")
    parser.add_argument("--group-cost", type=int, default=None,
                        help="override common.GROUP_COST (the cost rule's graph candidate"
                        " price; 0 sends every owner filter to the graph): to measure the"
                        " graph's recall with an owner filter")
    parser.add_argument("--out", default="amp_ann_sqlite.json")
    args = parser.parse_args()
    args.home.mkdir(parents=True, exist_ok=True)
    if not (args.home / "filled").exists():
        fill(args.home, args.cells, args.vectors, args.text_file)
    if args.fill_only:
        return
    if args.group_cost is not None:
        from ampup_memory.search.index import common

        common.GROUP_COST = args.group_cost
    if args.fresh:
        result = {"cells": args.cells, **fresh(args.home, args.fresh, args.cold, args.wait,
                                                 [int(v) for v in args.ef.split(",") if v])}
    else:
        result = {"cells": args.cells,
                  **measure(args.home, args.repeat, args.queries, args.wait)}
    out = ROOT / "benchmarks" / "results" / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
