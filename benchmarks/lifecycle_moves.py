"""What a lifecycle pass costs when it moves many cells at once.

`lifecycle_pass.py` times a pass that reads and judges; this one times the writes. A store
whose cells were written together (a bulk load, a migration from the reference server)
ages together: with the default scoring (importance 0.5, confidence 1.0, rate 0.01 a
day) every cell not read for 51 days goes stale in the same hourly pass, and 30 days
later is archived in the same pass again.

On a fresh store of ``--cells`` cells (pieces of real English text from the installed
packages' docstrings, embedded with the configured embedder, written through
`AmpService.create`), per backend in ``--backends``:

- ``stale``: one pass (`AmpService.run_lifecycle`) at a what-if ``now`` 60 days on, which
  moves every cell active → stale;
- ``archive``: one pass 100 days on, which moves every cell stale → archived.

``--reads``: a second thread reads (`touch`, as a ``GET`` counts an access) random cells
one after the other during each pass, and for 10 s before them: p50 / p95 / max per read,
idle and during the pass (the cells it reads are left alone by the pass: a read refreshes
their clock). Each pass reports wall seconds, this process's CPU seconds, the database
server's CPU seconds (PostgreSQL: the ticks of its processes, as `pg_cell_speed.py` reads
them) and the cost per moved cell. PostgreSQL is a throwaway embedded server
(``--pg-url`` to use one of yours: a new database is made in it and dropped).

    PYTHONPATH=src:. python -m benchmarks.lifecycle_moves --cells 20000 \\
        --out benchmarks/results/lifecycle_moves_s28.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ampup_memory.amp.model import LifecycleRunRequest
from ampup_memory.amp.service import AmpService, ScoringLimit
from ampup_memory.amp.store.registry import open_store
from ampup_memory.search.embed import build_embedder
from ampup_memory.settings import load_settings
from benchmarks.pg_cell_speed import server_ticks, spent_ms
from benchmarks.real_text import docstrings_and_comments, pieces, python_files


def texts(n: int) -> list[str]:
    """``n`` distinct pieces of docstring text, in a fixed order."""
    out: list[str] = []
    seen: set[str] = set()
    for path in python_files():
        for block in docstrings_and_comments(path)[0]:
            for piece in pieces(block):
                if piece not in seen:
                    seen.add(piece)
                    out.append(piece)
                    if len(out) == n:
                        return out
    raise SystemExit(f"only {len(out)} pieces of text found, {n} asked")


@contextmanager
def postgres(url: str | None) -> Iterator[tuple[str, str | None]]:
    """A new database's URL and the server's data folder (None when it is not ours)."""
    from tests.pg import postgres_factory

    if url:
        os.environ["TEST_POSTGRES_URL"] = url
    with postgres_factory() as factory:
        yield factory.new_database("moves"), None if url else _data_dir(factory.admin_url)


def _data_dir(admin_url: str) -> str:
    import psycopg

    with psycopg.connect(admin_url) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return str(row[0])


def fill(amp: AmpService, corpus: list[str], batch: int = 256) -> float:
    started = time.perf_counter()
    for i in range(0, len(corpus), batch):
        chunk = corpus[i:i + batch]
        vectors = amp.embedder.embed(chunk)
        for k, (text, vector) in enumerate(zip(chunk, vectors, strict=True)):
            body = {"type": "semantic", "content": {"text": text},
                    "identity": {"owner_id": f"user_{(i + k) % 7}", "owner_type": "user"}}
            amp.create("bench", json.dumps(body).encode(), vector)
    return time.perf_counter() - started


def reads(amp: AmpService, ids: list[str], stop: threading.Event,
          ms: list[float]) -> None:
    """Reads (`AmpService` `touch`, as `GET /memories/{id}` counts one) of random cells,
    one after the other until ``stop``, each timed into ``ms``."""
    rng = random.Random(7)
    while not stop.is_set():
        started = time.perf_counter()
        amp.store.touch(rng.choice(ids), datetime.now(UTC))
        ms.append((time.perf_counter() - started) * 1000)


def read_times(ms: list[float]) -> dict[str, Any]:
    ms = sorted(ms)
    return {"reads": len(ms), "p50_ms": round(statistics.median(ms), 2),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2), "max_ms": round(ms[-1], 2)}


def timed_pass(amp: AmpService, now: datetime, data_dir: str | None,
               ids: list[str] | None = None) -> dict[str, Any]:
    """One pass; with ``ids``, a second thread reads random ones of them meanwhile."""
    stop, ms = threading.Event(), list[float]()
    reader = threading.Thread(target=reads, args=(amp, ids, stop, ms)) if ids else None
    before = server_ticks(data_dir) if data_dir else {}
    updates = _updates(amp) if data_dir else (0, 0)
    started, cpu = time.perf_counter(), time.process_time()
    if reader:
        reader.start()
    try:
        report = amp.run_lifecycle(LifecycleRunRequest(now=now), wait_seconds=5)
    finally:
        stop.set()
        if reader:
            reader.join()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    moved = sum(report.transitions.values())
    out: dict[str, Any] = {"wall_s": round(wall, 2), "client_cpu_s": round(cpu, 2),
                           "evaluated": report.evaluated, "moved": moved,
                           "transitions": {k: v for k, v in report.transitions.items() if v},
                           "load": round(os.getloadavg()[0], 2)}
    if data_dir:
        server = spent_ms(before, server_ticks(data_dir)) / 1000
        out["server_cpu_s"] = round(server, 2)
        time.sleep(1.5)  # the pass's backend reports its counts within a second idle
        after = _updates(amp)
        out["hot_updates"] = f"{after[1] - updates[1]} of {after[0] - updates[0]}"
    if moved:
        out["ms_per_move"] = round(1000 * wall / moved, 3)
    if ms:
        out["reads_meanwhile"] = read_times(ms)
    return out


def _updates(amp: AmpService) -> tuple[int, int]:
    """``cells``' updates and heap-only (HOT) updates so far (PostgreSQL)."""
    import psycopg

    from ampup_memory.amp.store.postgres import PostgresStore

    assert isinstance(amp.store, PostgresStore)
    with psycopg.connect(amp.store.conninfo) as conn:
        row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                           " WHERE relname = 'cells'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def idle_reads(amp: AmpService, ids: list[str], seconds: float) -> dict[str, Any]:
    """The same reads with no pass running, for ``seconds``."""
    stop, ms = threading.Event(), list[float]()
    reader = threading.Thread(target=reads, args=(amp, ids, stop, ms))
    reader.start()
    time.sleep(seconds)
    stop.set()
    reader.join()
    return read_times(ms)


def run(uri: str, corpus: list[str], data_dir: str | None,
        with_reads: bool = False) -> dict[str, Any]:
    settings = load_settings()
    embedder = build_embedder(settings)
    store = open_store(uri, embedder.dimensions, ann_params=settings.ann_params)
    amp = AmpService(store=store, embedder=embedder, scoring_limit=ScoringLimit(0, 0))
    try:
        fill_s = fill(amp, corpus)
        start = datetime.now(UTC)
        out: dict[str, Any] = {"cells": len(corpus), "fill_s": round(fill_s, 1)}
        ids = None
        if with_reads:
            # A read refreshes a cell's clock, so the pass leaves the cells read meanwhile
            # alone (judged again before the write), as it would in service.
            ids = [c.cell_id for c in amp.store.lifecycle_batch(None, len(corpus))]
            out["idle_reads"] = idle_reads(amp, ids, 10)
        out["stale"] = timed_pass(amp, start + timedelta(days=60), data_dir, ids)
        out["archive"] = timed_pass(amp, start + timedelta(days=100), data_dir, ids)
        return out
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, default=20_000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", help="a PostgreSQL server of yours (admin URL)")
    parser.add_argument("--reads", action="store_true",
                        help="a second thread reads random cells during each pass")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    corpus = texts(args.cells)
    results: dict[str, Any] = {"machine_load_at_start": os.getloadavg()[0]}
    for backend in args.backends.split(","):
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                results[backend] = run(f"sqlite:///{tmp}/cells.db", corpus, None, args.reads)
        elif backend == "postgres":
            with postgres(args.pg_url) as (url, data_dir):
                results[backend] = run(url, corpus, data_dir, args.reads)
        else:
            raise SystemExit(f"unknown backend {backend!r}")
        print(backend, json.dumps(results[backend]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
