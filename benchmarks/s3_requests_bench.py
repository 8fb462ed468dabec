"""S3 requests per operation, and what they cost with a store far away.

A server with its warehouse on moto's S3 server (tests/s3.py) through a counting proxy
(``S3Proxy``) that can hold each request ``--delay`` seconds; the catalog and index are
SQLite in the home. Each operation runs ``--repeat`` times in a row against one scope
after a warm-up write; for each it prints the S3 requests the server made (median per
operation, by method and key kind) and the median wall time. Maintenance is the
`ampup-memory maintenance` command (its own process: its start is counted too).

    PYTHONPATH=src:. python benchmarks/s3_requests_bench.py --repeat 3 [--delay 0.1]
        [--no-maintenance]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.memory_support import QUIET, Memory, run_cli  # noqa: E402
from tests.s3 import S3Proxy, S3Server  # noqa: E402
from tests.server_process import ServerProcess  # noqa: E402

SCOPE = "bench/team_s3"


def _op_table(mem: Memory, proc_home: Path, env: dict[str, str], proxy: S3Proxy,
              repeat: int, maintenance: bool) -> list[tuple[str, int, Counter[str], float]]:
    c = mem.http
    n = iter(range(10**6))
    first = mem.write(SCOPE, "Warm-up: Dana leads the Porto office. Budget is 40k.")
    assert first.status_code == 201, first.text
    ep = first.json()["id"]

    def episode() -> Any:
        return mem.write(SCOPE, f"Episode {next(n)}: the Porto office opened a new desk.")

    def batch() -> Any:
        k = next(n)
        return c.post("/episodes/batch", json={"scope": SCOPE, "episodes": [
            {"source": f"doc:b{k}-{i}", "body": f"Batch {k} item {i}: Lisbon sales.",
             "acl": ["*"]} for i in range(10)]})

    def fact() -> Any:
        return mem.fact(SCOPE, "porto-office", "lead", f"Dana {next(n)}", "Dana", [(ep, 1)])

    closing: list[str] = []

    def close_setup() -> None:
        closing.append(f"office-{next(n)}")
        made = mem.fact(SCOPE, closing[-1], "lead", "Dana", "Dana", [(ep, 1)])
        assert made.status_code in (200, 201), made.text

    def close() -> Any:
        return c.post("/close", json={"scope": SCOPE, "entity": closing[-1],
                                      "predicate": "lead", "reason": "left"})

    def query() -> Any:
        return c.post("/query", json={"scope": SCOPE, "find": "facts",
                                      "entity": "porto-office"})

    def search() -> Any:
        return c.post("/search", json={"scope": SCOPE, "query": "Porto office desk"})

    def read() -> Any:
        return mem.episode(SCOPE, ep)

    def branch() -> Any:
        return c.post("/branches", json={"scope": SCOPE, "name": f"b{next(n)}"})

    def snapshot() -> Any:
        return c.post("/snapshots", json={"scopes": [SCOPE]})

    def nothing() -> None:
        pass

    ops: list[tuple[str, Callable[[], Any], Callable[[], None]]] = [
        ("episode write", episode, nothing), ("episode read", read, nothing),
        ("batch write (10)", batch, nothing), ("fact write", fact, nothing),
        ("close", close, close_setup), ("query (facts)", query, nothing),
        ("search", search, nothing), ("branch create", branch, nothing),
        ("snapshot", snapshot, nothing)]
    rows = []
    for name, op, setup in ops:
        counts: list[int] = []
        kinds: list[Counter[str]] = []
        times: list[float] = []
        for _ in range(repeat):
            setup()
            proxy.take()
            t0 = time.perf_counter()
            r = op()
            times.append(time.perf_counter() - t0)
            assert r.status_code in (200, 201), (name, r.status_code, r.text)
            seen = proxy.take()
            counts.append(len(seen))
            kinds.append(Counter(f"{m} {k}" for m, k in seen))
        mid = sorted(range(repeat), key=lambda i: counts[i])[repeat // 2]
        rows.append((name, counts[mid], kinds[mid], statistics.median(times)))
    if not maintenance:
        return rows
    proxy.take()
    t0 = time.perf_counter()
    done = run_cli(proc_home, env, "maintenance")
    took = time.perf_counter() - t0
    assert done.returncode == 0, done.stdout + done.stderr
    seen = proxy.take()
    rows.append(("maintenance (CLI)", len(seen), Counter(f"{m} {k}" for m, k in seen), took))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds held per S3 request")
    ap.add_argument("--no-maintenance", action="store_true", help="skip the maintenance run")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="s3bench-"))
    s3 = S3Server(tmp).start()
    proxy = S3Proxy(s3).up()
    proc = None
    try:
        env = {**QUIET, **proxy.env(s3.new_bucket("bench")),
               "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "0",
               **{k: v for k, v in os.environ.items() if k.startswith("AMPUP_MEMORY_S3_")}}
        proc = ServerProcess(tmp / "home", env=env).start(timeout=300)
        proxy.delay = args.delay
        mem = Memory(proc.url)
        rows = _op_table(mem, tmp / "home", env, proxy, args.repeat, not args.no_maintenance)
        print(f"delay {args.delay * 1000:.0f} ms per S3 request, median of {args.repeat}; "
              f"load {os.getloadavg()[0]:.1f}")
        print("| operation | S3 requests | by kind | ms |")
        print("|---|---:|---|---:|")
        for name, count, kinds, took in rows:
            by = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            print(f"| {name} | {count} | {by} | {took * 1000:,.0f} |")
    finally:
        if proc is not None:
            proc.stop()
        proxy.down()
        s3.stop()


if __name__ == "__main__":
    main()
