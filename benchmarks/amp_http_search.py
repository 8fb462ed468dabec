"""AMP cell search as a client sees it: ``POST /amp/v1/memories/search`` over HTTP against
a real ``ampup-memory serve`` on a store already loaded, unfiltered and for one owner.

    PYTHONPATH=src:. python -m benchmarks.amp_http_search --store-uri URI \\
        --text-file pieces.jsonl --owner user_big --agent agent_bench_1 \\
        --queries 100 --out amp_http_search.json

The server is started here (its own home in a temporary folder, the default embedder,
no timers) and stopped at the end. Queries: `amp_ann_bench.text_queries` (spans of
held-out pieces, seed 11, as `pg_cell_speed.py`), each series after ``--warm`` untimed
requests on one keep-alive connection, 10 hits. Reports min, p50 and p95 of the wall time
per request (client to client), and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.amp_ann_bench import text_queries


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """``ampup-memory serve`` on the store, no timers, in its own temporary home, started
    here and answering its health check; `close` stops it."""

    def __init__(self, uri: str) -> None:
        self.home = tempfile.TemporaryDirectory()
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "AMPUP_MEMORY_HOME": self.home.name, "AMP_STORE_URI": uri,
               "AMP_LIFECYCLE_ENABLED": "0", "AMP_OWNER_INDEX_INTERVAL_SECONDS": "0"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ampup_memory.cli", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(self.base + "/amp/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise SystemExit("the server did not start")
            time.sleep(0.5)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.home.cleanup()


def ask(query: str, owner: str | None) -> dict[str, Any]:
    """The search body: 10 hits, filtered to ``owner`` when one is given."""
    body: dict[str, Any] = {"query": query, "limit": 10}
    if owner is not None:
        body["owner_id"] = owner
    return body


def series(client: httpx.Client, queries: list[str], owner: str | None,
           warm: int) -> dict[str, Any]:
    times: list[float] = []
    for n, query in enumerate(queries[:warm] + queries):
        t = time.perf_counter()
        r = client.post("/amp/v1/memories/search", json=ask(query, owner))
        spent = (time.perf_counter() - t) * 1000
        r.raise_for_status()
        if n >= warm:
            times.append(spent)
    times.sort()
    return {"requests": len(times), "min_ms": round(times[0], 2),
            "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
            "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store-uri", required=True)
    parser.add_argument("--text-file", type=Path, required=True)
    parser.add_argument("--owner", default=None)
    parser.add_argument("--agent", default="agent_bench_1")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="amp_http_search.json")
    args = parser.parse_args()
    queries = text_queries(args.text_file, args.queries, 11)
    serve = Serve(args.store_uri)
    try:
        out: dict[str, Any] = {"store": "postgresql" if "postgres" in args.store_uri
                               else "sqlite", "load_at_start": os.getloadavg()[0],
                               "rounds": []}
        with httpx.Client(base_url=serve.base, headers={"X-AMP-Agent-ID": args.agent},
                          timeout=60) as client:
            for _ in range(args.rounds):
                row = {"unfiltered": series(client, queries, None, args.warm)}
                if args.owner:
                    row["owner"] = series(client, queries, args.owner, args.warm)
                print(json.dumps(row), file=sys.stderr, flush=True)
                out["rounds"].append(row)
    finally:
        serve.close()
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
