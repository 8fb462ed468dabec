"""PostgreSQL: what keeping the AMP cell store's keyword statistics in the database
(`amp/store/pg_words.py`: row triggers counting each cell's words as it is written) costs
a write.

On a database `pg_cell_keyword.py load` made (``--rows`` real-text cells, the first
pieces of a `real_text.py` corpus), opened once by this version so it has its counts,
new cells (the corpus' next pieces, each a copy of one cell made by `AmpService.create`
with its own id, text and owner, as `load` makes them, and a loaded piece's WordLlama
vector) are written by the product's `PostgresStore.create`, in series that alternate
the counting triggers off ("before": the write as a version without them makes it,
``ALTER TABLE cells DISABLE TRIGGER``) and on ("after"):

- ``status changes`` (session 23): as many cells made untimed, then each made stale
  (`PostgresStore.set_statuses`, one cell each) one after the other, timed as ``one writer``;
- ``one writer``: ``--creates`` creates one after the other; per create: wall p50 / p95,
  client CPU p50, and the server's CPU (utime + stime of every server process from
  /proc, over the series, divided by the creates);
- ``N writers``: ``--threads`` threads at once, half on each of two store instances (two
  servers), ``--creates`` creates in all; creates per second, server CPU per create,
  wall p50 / p95, every error (a deadlock would be one), and how often a writer waited
  on another's lock (``pg_stat_activity`` sampled every 5 ms: the share of the writers'
  samples waiting on a lock, ``Lock`` waits, against the ones running or waiting on
  anything else, such as the WAL flush of a commit).

``--layout`` (session 23): the series run on that layout lever's copy of the database
(`pg_cell_layouts`, made by ``pg_cell_keyword.py layouts``), alternating the lever's
own triggers off and on instead (the counting triggers stay on).

``--postings``: the store's postings triggers (`pg_postings`) off and on instead.

``--shards``: the counts spread over this many shards instead of `pg_words.SHARDS` (a
lever: the trigger's function is made again with it).

Last, the counts are taken again (`pg_words.recount`: the "before" series wrote cells
they did not count), one more "after" series of writers at once runs, and the counts
are checked against a recount. No HNSW index unless the database has one (``load
--hnsw``): the vector is stored, not indexed.

    nice -n 10 env PYTHONPATH=src:. python -m benchmarks.pg_cell_writes \\
        --text-file /tmp/pgwords21/pieces.jsonl --rows 100000 --work /tmp/pgwords21/w
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import owner_of  # noqa: E402
from benchmarks.pg_ann_recall import _pct  # noqa: E402
from benchmarks.pg_cell_speed import restart, server_ticks, spent_ms  # noqa: E402

_COUNTING = ("cell_words_written", "cell_words_rewritten")
_POSTINGS = ("cell_postings_written", "cell_postings_rewritten")  # pg_postings (session 23)


def counting(uri: str, on: bool, names: tuple[str, ...] = _COUNTING) -> None:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        for name in names:  # ours, constant
            conn.execute(f"ALTER TABLE cells {'ENABLE' if on else 'DISABLE'} TRIGGER {name}")


class Cells:
    """The cells to write, one per piece after the loaded ones, in order."""

    def __init__(self, uri: str, texts: list[str], vecs: Any) -> None:
        import psycopg

        from ampup_memory.amp.store.rows import stored_from_row

        with psycopg.connect(uri, autocommit=True) as conn:
            row = conn.execute("SELECT doc, access_count, last_accessed_at, stale_since,"
                               " deleted_at FROM cells LIMIT 1").fetchone()
        assert row is not None
        self.template = stored_from_row(*row).cell
        self.texts, self.vecs = texts, vecs
        self.next = 0
        self.lock = threading.Lock()

    def take(self) -> tuple[Any, list[float]]:
        from ulid import ULID

        from ampup_memory.amp.model import Content, Identity, StoredCell

        with self.lock:
            i = self.next
            self.next += 1
        cell = self.template.model_copy(update={
            "id": f"mem_{ULID()}", "content": Content(text=self.texts[i], metadata={}),
            "identity": Identity(owner_id=owner_of(i), owner_type=self.template.identity
                                 .owner_type, created_by="writer")})
        return StoredCell(cell=cell), [float(x) for x in self.vecs[i % len(self.vecs)]]


def one_writer(store: Any, cells: Cells, n: int, data: str,
               stale: bool = False) -> dict[str, Any]:
    """``n`` creates one after the other, timed; ``stale``: the creates untimed, then each
    cell's status change to stale (`PostgresStore.set_statuses` with one move, as a
    lifecycle pass made each before session 28) timed instead."""
    from ampup_memory.amp.model import Status
    from ampup_memory.amp.store.base import StatusMove

    prepared = [cells.take() for _ in range(n)]
    if stale:
        for stored, vec in prepared:
            store.create(stored, vec)
    wall, cpu = [], []
    t0 = server_ticks(data)
    for stored, vec in prepared:
        t, c = time.perf_counter(), time.process_time()
        if stale:
            assert store.set_statuses([StatusMove(
                stored, Status.stale, stored.cell.lifecycle.created_at)])
        else:
            store.create(stored, vec)
        cpu.append((time.process_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return {"writes": n, "p50_ms": round(statistics.median(wall), 3),
            "p95_ms": round(_pct(wall, 0.95), 3),
            "client_cpu_p50_ms": round(statistics.median(cpu), 3),
            "server_cpu_ms_per_create": round(spent_ms(t0, server_ticks(data)) / n, 3),
            "load": round(os.getloadavg()[0], 2)}


class Waits:
    """The writers' backends sampled in ``pg_stat_activity`` while they write."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.samples: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample)

    def sample(self) -> None:
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            while not self.stop.wait(0.005):
                for kind, event in conn.execute(
                        "SELECT wait_event_type, wait_event FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        " AND state = 'active' AND query LIKE 'INSERT INTO cells%'"):
                    key = f"{kind}:{event}" if kind else "running"
                    self.samples[key] = self.samples.get(key, 0) + 1

    def __enter__(self) -> Waits:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def summary(self) -> dict[str, Any]:
        total = sum(self.samples.values()) or 1
        locked = sum(v for k, v in self.samples.items() if k.startswith("Lock:"))
        return {"lock_wait_share": round(locked / total, 3),
                "samples": dict(sorted(self.samples.items(), key=lambda kv: -kv[1])[:6])}


def writers(stores: list[Any], cells: Cells, n: int, threads: int, data: str
            ) -> dict[str, Any]:
    prepared = [cells.take() for _ in range(n)]
    wall: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def write(w: int) -> None:
        store = stores[w % len(stores)]
        for stored, vec in prepared[w::threads]:
            t = time.perf_counter()
            try:
                store.create(stored, vec)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                wall.append((time.perf_counter() - t) * 1000)

    t0, t = server_ticks(data), time.perf_counter()
    with Waits(stores[0].conninfo) as waits, ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(threads)))
    secs = time.perf_counter() - t
    return {"creates": n, "threads": threads, "creates_per_s": round(n / secs, 1),
            **waits.summary(),
            "p50_ms": round(statistics.median(wall), 3),
            "p95_ms": round(_pct(wall, 0.95), 3),
            "server_cpu_ms_per_create": round(spent_ms(t0, server_ticks(data)) / n, 3),
            "errors": errors[:5], "error_count": len(errors),
            "load": round(os.getloadavg()[0], 2)}


def exact(uri: str) -> bool:
    """The counts the triggers kept equal those a recount makes."""
    import psycopg

    from ampup_memory.amp.store import pg_words

    kept = "SELECT word, sum(n) FROM cell_words GROUP BY 1 HAVING sum(n) <> 0 ORDER BY 1"
    sizes = "SELECT sum(cells), sum(lengths) FROM cell_totals"
    with psycopg.connect(uri, autocommit=True) as conn, \
            conn.transaction(force_rollback=True):
        conn.execute("LOCK TABLE cells IN SHARE MODE")
        before = (conn.execute(kept).fetchall(), conn.execute(sizes).fetchone())
        pg_words.recount(conn)
        return before == (conn.execute(kept).fetchall(), conn.execute(sizes).fetchone())


def main() -> None:
    import psycopg
    from tests.pg import _embedded

    from ampup_memory.amp.store import pg_words
    from ampup_memory.amp.store.postgres import PostgresStore
    from benchmarks.pg_ann_recall import embedded
    from benchmarks.real_text import load_pieces

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--creates", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="before/after pairs")
    parser.add_argument("--shared-buffers", default="2GB")
    parser.add_argument("--shards", type=int, help="lever: counts in this many shards")
    parser.add_argument("--layout", help="lever: a pg_cell_layouts copy, its triggers")
    parser.add_argument("--postings", action="store_true",
                        help="the store's postings triggers off and on, not the counts'")
    parser.add_argument("--out", default="pg_cell_writes_100k.json")
    args = parser.parse_args()

    os.environ.setdefault("AMPUP_TEST_PGDATA", str(args.work / "pg"))
    saved = json.loads((args.work / f"urls_{args.rows}.json").read_text())
    uri, data = saved["cells"], args.work / "pg" / "main" / "pgdata"
    toggled = _POSTINGS if args.postings else _COUNTING
    if args.layout:
        from benchmarks.pg_cell_layouts import TRIGGERS

        uri, toggled = saved["layouts"][args.layout]["uri"], TRIGGERS[args.layout]
    needed = args.rows + 3 * args.rounds * 2 * args.creates + 2 * args.creates
    texts = load_pieces(args.text_file, needed)[args.rows:]
    vecs = embedded(args.text_file, args.rows, args.work)
    if args.shards:  # a power of two, as `pg_words._shard` masks the hash
        assert args.shards & (args.shards - 1) == 0
        pg_words._COUNT = pg_words._COUNT.replace(  # type: ignore[misc]
            f"& {pg_words.SHARDS - 1})", f"& {args.shards - 1})")
        out_shards = args.shards
    else:
        out_shards = pg_words.SHARDS
    out: dict[str, Any] = {"rows": args.rows, "shards": out_shards, "layout": args.layout,
                           "toggled": list(toggled),
                           "load_at_start": os.getloadavg()[0], "runs": []}
    with _embedded() as admin_url:
        restart(admin_url, data, {"shared_buffers": args.shared_buffers})
        with psycopg.connect(uri, autocommit=True) as conn:
            out["settings"] = dict(conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('fsync',"
                " 'synchronous_commit', 'shared_buffers', 'wal_sync_method')").fetchall())
        stores = [PostgresStore(uri, None), PostgresStore(uri, None)]
        cells = Cells(uri, texts, vecs)
        try:
            one_writer(stores[0], cells, 100, str(data))  # untimed: connections, plans
            for _ in range(args.rounds):
                for on in (False, True):
                    counting(uri, on, toggled)
                    for kind, run in (
                            ("one writer", lambda: one_writer(stores[0], cells,
                                                              args.creates, str(data))),
                            ("status changes", lambda: one_writer(
                                stores[0], cells, args.creates, str(data), stale=True)),
                            (f"{args.threads} writers", lambda: writers(
                                stores, cells, args.creates, args.threads, str(data)))):
                        row = {"triggers": "on (after)" if on else "off (before)",
                               "kind": kind, **run()}
                        print(json.dumps(row), file=sys.stderr, flush=True)
                        out["runs"].append(row)
            counting(uri, True, toggled)
            with psycopg.connect(uri, autocommit=True) as conn, conn.transaction():
                t = time.perf_counter()
                pg_words.recount(conn)
            out["recount_s"] = round(time.perf_counter() - t, 1)
            row = {"triggers": "on (after)", "kind": "check", **writers(
                stores, cells, args.creates, args.threads, str(data))}
            row["counts_exact"] = exact(uri)
            print(json.dumps(row), file=sys.stderr, flush=True)
            out["runs"].append(row)
        finally:
            for s in stores:
                s.close()
    out["load_at_end"] = os.getloadavg()[0]
    path = ROOT / "benchmarks" / "results" / args.out
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
